"""Does CTranslate2's own ranking (the fast path) give heed's best hypothesis? A trained model's
1,000 sentences decoded at beam 5 with the power length penalty, by heed's exact search over the
model directory and by its CTranslate2 export (float32, so that only the search differs), once
where CTranslate2 finishes and ranks (heed.export.ct2_run.ranking: "ctranslate2") and once where it
searches on and heed ranks (the path every penalty took before: n-best 2, the best kept).

    .venv/bin/python bench/studies/ct2_fast_path.py MODEL_DIR [--sources FILE] [--count 1000]

Sources: a file of one sentence a line, or by default every 50th French sentence of
../shared/data/tatoeba-fra-eng/fra.txt (for a fr->en Tatoeba model). Prints how many best
hypotheses are identical, and each path's seconds (1 thread, interleaved twice).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TATOEBA = ROOT.parent / "shared" / "data" / "tatoeba-fra-eng" / "fra.txt"


def tatoeba_french(count: int) -> list[str]:
    out = []
    with open(TATOEBA, encoding="utf-8") as lines:
        for k, line in enumerate(lines):
            if k % 50 == 0:
                out.append(line.rstrip("\n").split("\t")[1].replace("\u00a0", " ").replace("\u202f", " "))
    return out[-count:]  # the longer end of the file


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path)
    parser.add_argument("--sources", type=Path)
    parser.add_argument("--count", type=int, default=1000)
    args = parser.parse_args()
    import torch

    import heed
    from heed.export.ct2_run import ranking
    from heed.export.onnx import export_model

    torch.set_num_threads(1)
    sources = (args.sources.read_text(encoding="utf-8").splitlines()[: args.count] if args.sources
               else tatoeba_french(args.count))
    options = dict(beam=5, length_penalty=1.0, length_norm="power", min_len=1)
    with tempfile.TemporaryDirectory() as scratch:
        exported = export_model(args.model, Path(scratch) / "ct2", kind="ctranslate2")
        pytorch, ct2 = heed.load(args.model, device="cpu"), heed.load(str(exported))
        fast_cfg = ct2.resolve_decode({k: v for k, v in options.items() if k != "beam"} | {"beam_size": 5})
        slow_cfg = fast_cfg.model_copy(update={"n_best": 2})
        assert ranking(fast_cfg, prefixed=False) == "ctranslate2" and ranking(slow_cfg, prefixed=False) == "heed"
        seconds = {"heed": 0.0, "fast": 0.0, "slow": 0.0}
        for _ in range(2):
            start = time.perf_counter()
            exact = pytorch.translate(sources, **options)
            seconds["heed"] += time.perf_counter() - start
            start = time.perf_counter()
            fast = [n[0] for n in ct2.translate_nbest(sources, decode=fast_cfg, attention=False)]
            seconds["fast"] += time.perf_counter() - start
            start = time.perf_counter()
            slow = [n[0] for n in ct2.translate_nbest(sources, decode=slow_cfg, attention=False)]
            seconds["slow"] += time.perf_counter() - start
    same_fast = sum(a.tokens == b.tokens for a, b in zip(exact, fast))
    same_slow = sum(a.tokens == b.tokens for a, b in zip(exact, slow))
    print(f"{len(sources)} sentences, beam 5, power length penalty 1.0, model {args.model}")
    print(f"CTranslate2 ranks (fast path):   {same_fast}/{len(sources)} best hypotheses = heed's exact search; "
          f"{seconds['fast'] / 2:.2f} s")
    print(f"heed ranks (beam x {4} finished): {same_slow}/{len(sources)}; {seconds['slow'] / 2:.2f} s")
    print(f"heed's own search (PyTorch):     {seconds['heed'] / 2:.2f} s")
    differ = [k for k, (a, b) in enumerate(zip(exact, fast)) if a.tokens != b.tokens][:5]
    for k in differ:
        print(f"  differs: {sources[k]!r}: heed {exact[k].text!r} ({exact[k].score:.4f}) / "
              f"CTranslate2 {fast[k].text!r} ({fast[k].score:.4f})", file=sys.stderr)


if __name__ == "__main__":
    main()
