"""Decode a file with a trained heed model through the Python API, timing only the translate call
(loading the model and reading the file are outside the timer, as in the peers' own timers).

    python bench/compare/heed_decode.py MODEL_DIR INPUT OUTPUT --beam 5 --batch-size 64
        [--max-len 20] [--threads 1] [--bf16]

Prints two lines: `heed decode: model loaded in L s` (heed.load: a model directory, or an exported
one with its ONNX Runtime sessions) and `heed decode: N sentences in S s (R sentences/s)`.
"""
from __future__ import annotations

import time

import torch
from decode_cli import decode_parser

import heed


def main() -> None:
    p = decode_parser(__doc__.split("\n\n")[0])
    p.add_argument("--bf16", action="store_true", help="decode in bfloat16 (heed.load(..., bf16=True))")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    loading = time.perf_counter()
    translator = heed.load(str(args.model), bf16=args.bf16)
    print(f"heed decode: model loaded in {time.perf_counter() - loading:.4f} s")
    texts = args.input.read_text(encoding="utf-8").splitlines()
    start = time.perf_counter()
    with torch.inference_mode():
        out = translator.translate(texts, beam=args.beam, batch_size=args.batch_size, max_len_a=0.0,
                                   max_len_b=args.max_len, length_penalty=0.0)
    seconds = time.perf_counter() - start
    args.output.write_text("".join(t.text + "\n" for t in out), encoding="utf-8")
    print(f"heed decode: {len(texts)} sentences in {seconds:.4f} s ({len(texts) / seconds:.1f} sentences/s); "
          f"beam {args.beam}, batch {args.batch_size}, {torch.get_num_threads()} thread(s)"
          f"{', bf16' if args.bf16 else ''}")


if __name__ == "__main__":
    main()
