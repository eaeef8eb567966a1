"""Decode a file with a CTranslate2 model, timing only the translate call (loading the model and
reading the file are outside the timer, as in heed_decode.py and the peers' own timers). It runs in
the OpenNMT-py venv, where ctranslate2 is installed beside the converter's input.

    python bench/compare/ct2_decode.py CT2_MODEL INPUT OUTPUT --beam 5 --batch-size 64
        [--max-len 60] [--threads 1] [--compute-type float32|int8]

INPUT holds space-separated tokens (the bench's SentencePiece pieces), one sentence a line; OUTPUT
gets the best hypothesis of each, tokens joined by spaces. No length penalty (heed_decode.py's and
the peers' setting), at most --max-len output tokens. Prints `ct2 decode: model loaded in L s` and
`ct2 decode: N sentences in S s (R sentences/s)`.
"""
from __future__ import annotations

import time

import ctranslate2
from decode_cli import decode_parser


def main() -> None:
    p = decode_parser(__doc__.split("\n\n")[0])
    p.add_argument("--compute-type", default="float32", choices=["float32", "int8", "int8_float32", "bfloat16"])
    args = p.parse_args()

    loading = time.perf_counter()
    translator = ctranslate2.Translator(str(args.model), device="cpu", compute_type=args.compute_type,
                                        inter_threads=1, intra_threads=args.threads)
    print(f"ct2 decode: model loaded in {time.perf_counter() - loading:.4f} s")
    sources = [line.split() for line in args.input.read_text(encoding="utf-8").splitlines()]
    start = time.perf_counter()
    results = translator.translate_batch(sources, max_batch_size=args.batch_size, batch_type="examples",
                                         beam_size=args.beam, length_penalty=0.0, max_decoding_length=args.max_len,
                                         return_scores=False)
    seconds = time.perf_counter() - start
    args.output.write_text("".join(" ".join(r.hypotheses[0]) + "\n" for r in results), encoding="utf-8")
    print(f"ct2 decode: {len(sources)} sentences in {seconds:.4f} s ({len(sources) / seconds:.1f} sentences/s); "
          f"beam {args.beam}, batch {args.batch_size}, {args.threads} thread(s), {args.compute_type}")


if __name__ == "__main__":
    main()
