"""Does a CTranslate2 export give heed's hypotheses on each of its paths (heed.export.ct2_run.ranking)?
A trained model's 1,000 sentences decoded at beam 5 by heed's exact search over the model directory
and by its CTranslate2 export (float32, so that only the search differs):
- the power length penalty 1.0 (the "heed" path: CTranslate2 searches each source to its limit,
  heed ranks), the best hypothesis and, at n-best 2, the whole list;
- CTranslate2's own stop and ranking with that penalty (patience 1, `beam` finished: what the fast
  path was), called directly, for comparison;
- no penalty (the "ctranslate2" fast path: CTranslate2 stops and ranks);
- stopping "beam" with the power penalty 1.0 (the "ctranslate2" path: CTranslate2's own stop,
  `beam` finished, is heed's stop "beam"), against heed's search with the same stop;
- stopping "beam" with the GNMT penalty 0.6, and with the power penalty and min_len 3 (the "heed"
  path with the beam stop: CTranslate2 searches with no early stop, first only as far as the model's
  earlier searches stopped, BeamStops), against heed's search with the same stop.

    .venv/bin/python bench/studies/ct2_fast_path.py MODEL_DIR [--sources FILE] [--count 1000]

Sources: a file of one sentence a line, or by default every 50th French sentence of
../shared/data/tatoeba-fra-eng/fra.txt (for a fr->en Tatoeba model). Prints how many hypotheses
are identical, and each run's seconds (1 thread, once each, no attention asked).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TATOEBA = ROOT.parent / "shared" / "data" / "tatoeba-fra-eng" / "fra.txt"


def tatoeba_french(count: int) -> list[str]:
    out = []
    with open(TATOEBA, encoding="utf-8") as lines:
        for k, line in enumerate(lines):
            if k % 50 == 0:
                out.append(line.rstrip("\n").split("\t")[1].replace("\u00a0", " ").replace("\u202f", " "))
    return out[-count:]  # the longer end of the file


def timed(run: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = run(*args, **kwargs)
    return out, time.perf_counter() - start


def own_stop(translator: Any, sources: list[str]) -> tuple[list[list[str]], float]:
    """CTranslate2's own search and ranking with the power penalty 1.0 (patience 1), called directly
    on the export's CTranslate2 model: per source, its best hypothesis' pieces."""
    model, codec = translator.subject[0], translator.codec
    ids = [codec.src_ids(codec.src_tokens(t)[: translator.max_src_len]) for t in sources]
    src = [[model.src_tokens[i] for i in s] + [model.src_tokens[model.eos_id]] for s in ids]
    limits = [int(2.0 * (len(s) + 1) + 10) for s in ids]
    ct2 = model._translator()

    def run() -> list[list[str]]:
        best = []
        for k in range(0, len(src), 64):
            out = ct2.translate_batch(src[k:k + 64], beam_size=5, patience=1, length_penalty=1.0,
                                      max_decoding_length=max(limits[k:k + 64]), min_decoding_length=1,
                                      max_input_length=0, return_end_token=True)
            best += [[t for t in r.hypotheses[0] if t != model.tgt_tokens[model.eos_id]] for r in out]
        return best
    return timed(run)


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
    n = len(sources)
    power = dict(beam_size=5, length_penalty=1.0, length_norm="power", min_len=1)
    plain = dict(beam_size=5, length_penalty=0.0, min_len=1)
    with tempfile.TemporaryDirectory() as scratch:
        exported = export_model(args.model, Path(scratch) / "ct2", kind="ctranslate2")
        pytorch, ct2 = heed.load(args.model, device="cpu"), heed.load(str(exported))
        model, searched = ct2.model, []
        search_here = model._searched  # counted: the sources the search to the limit left unsettled
        model._searched = lambda *a: searched.append(a[1]) or search_here(*a)  # type: ignore[method-assign]
        calls, batch_here = [], model._translate_batch  # (ranks, sources) of every translate_batch call
        model._translate_batch = lambda *a, **k: (  # type: ignore[method-assign]
            calls.append((k["ranks"], len(a[1]), k.get("whole", False)))) or batch_here(*a, **k)
        runs: dict[str, tuple[Any, ...]] = {}
        stop_s = float("inf")
        for _ in range(2):  # twice, interleaved: the faster of each
            for name, options in (("power", power), ("power n-best 2", power | {"n_best": 2}), ("no penalty", plain),
                                  ("power stop beam", power | {"stopping": "beam"}),
                                  ("gnmt stop beam", plain | {"length_penalty": 0.6, "length_norm": "gnmt",
                                                              "stopping": "beam"}),
                                  ("power min 3 stop beam", power | {"min_len": 3, "stopping": "beam"})):
                cfg = ct2.resolve_decode(options)
                exact, heed_s = timed(pytorch.translate_nbest, sources, decode=cfg, attention=False)
                ours, ct2_s = timed(ct2.translate_nbest, sources, decode=cfg, attention=False)
                if name in runs:
                    heed_s, ct2_s = min(heed_s, runs[name][3]), min(ct2_s, runs[name][4])
                # searched again to their limit where heed ranks: where CTranslate2 ranks, every source of a
                # call where heed ranks; where heed ranks, a source decoded again alone, or not stopped
                # by the first search's reach (BeamStops)
                path = ranking(cfg)
                again = sum(n for ranks, n, whole in calls if ranks == "heed" and (path == "ctranslate2" or n == 1 or whole))
                runs[name] = (path, exact, ours, heed_s, ct2_s, len(searched), again)
                searched.clear()
                calls.clear()
            stopped, seconds = own_stop(ct2, sources)
            stop_s = min(seconds, stop_s)
    print(f"{n} sentences, beam 5, min_len 1, model {args.model}")
    for name, (path, exact, ours, heed_s, ct2_s, unsettled, again) in runs.items():
        best = sum(a[0].tokens == b[0].tokens for a, b in zip(exact, ours))
        lists = sum([h.tokens for h in a] == [h.tokens for h in b] for a, b in zip(exact, ours))
        print(f"{name:21s} path {path!r:14s}: best {best}/{n}, n-best lists {lists}/{n} equal heed's search; "
              f"CTranslate2 export {ct2_s:.2f} s, heed's own search {heed_s:.2f} s; "
              f"{unsettled} searched by heed's rule over CTranslate2's steps, {again} searched again to their limit")
        for a, b in [(a, b) for a, b in zip(exact, ours) if a[0].tokens != b[0].tokens][:5]:
            print(f"  differs: heed {a[0].text!r} ({a[0].score:.6f}) / CTranslate2 {b[0].text!r} ({b[0].score:.6f})",
                  file=sys.stderr)
    exact = runs["power"][1]
    same = sum(a[0].tokens == b for a, b in zip(exact, stopped))
    beam_stop = sum(a[0].tokens == b for a, b in zip(runs["power stop beam"][1], stopped))
    print(f"CTranslate2's own stop and ranking (patience 1, power 1.0, called directly): best {same}/{n} heed's "
          f"exact stop's, {beam_stop}/{n} heed's stop beam's; {stop_s:.2f} s")


if __name__ == "__main__":
    main()
