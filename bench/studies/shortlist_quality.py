"""What a vocabulary shortlist costs in quality: a trained model's test set translated with and
without its shortlist (counted from its own training corpus, `heed data shortlist`), BLEU
(sacrebleu), outputs equal to the reference, how many outputs the shortlist changes, the batches'
candidate counts, and the time of each.

    .venv/bin/python bench/studies/shortlist_quality.py MODEL_DIR --train-src F --train-tgt F \
        --test-src F --test-ref F [--settings 50:500 100:500] [--beam 5] [--count 1000] [--show 5]
    .venv/bin/python bench/studies/shortlist_quality.py MODEL_DIR --from-config [...]

`--from-config` reads the training and test pairs as the model's training read them (its
config.yaml's corpora and split), instead of the four files. Each setting K:COMMON is a shortlist
of the K likeliest target pieces per source piece plus the COMMON most frequent ones, recorded in a
copy of the model directory. The systems decode in turn (without, then each setting), twice; the
figures are the faster round's, wall-clock and this process's CPU time. 1 thread.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _setting(text: str) -> tuple[int, int]:
    k, _, common = text.partition(":")
    return int(k), int(common or 500)


def _pairs(args: argparse.Namespace, scratch: Path) -> tuple[Path, Path, list[str], list[str]]:
    """The training corpus's two files, and the test sources and references."""
    if not args.from_config:
        sources = args.test_src.read_text(encoding="utf-8").splitlines()
        refs = args.test_ref.read_text(encoding="utf-8").splitlines()
        return args.train_src, args.train_tgt, sources, refs
    from heed.config import load_config
    from heed.data.codec import load_corpora

    corpora = load_corpora(load_config(args.model / "config.yaml", environment=False, streams=False).data)
    src, tgt = scratch / "train.src", scratch / "train.tgt"
    src.write_text("".join(p.src + "\n" for p in corpora.train), encoding="utf-8")
    tgt.write_text("".join(p.tgt + "\n" for p in corpora.train), encoding="utf-8")
    print(f"training pairs from {args.model / 'config.yaml'}: {len(corpora.train):,}; test pairs {len(corpora.test):,}")
    return src, tgt, [p.src for p in corpora.test], [p.tgt for p in corpora.test]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path)
    for name in ("--train-src", "--train-tgt", "--test-src", "--test-ref"):
        parser.add_argument(name, type=Path)
    parser.add_argument("--from-config", action="store_true", help="the model's own corpora and split")
    parser.add_argument("--settings", nargs="+", type=_setting, default=[(50, 500)], help="K:COMMON each")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--show", type=int, default=5, help="changed outputs printed per setting")
    args = parser.parse_args()
    if not args.from_config and None in (args.train_src, args.train_tgt, args.test_src, args.test_ref):
        parser.error("give --train-src, --train-tgt, --test-src and --test-ref, or --from-config")
    import sacrebleu
    import torch

    import heed
    from heed.api import Translator

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as scratch:
        train_src, train_tgt, sources, refs = _pairs(args, Path(scratch))
        sources, refs = sources[: args.count], refs[: args.count]
        systems: dict[str, tuple[Translator, bool]] = {"without": (heed.load(args.model, device="cpu"), False)}
        for k, common in args.settings:
            model = Path(scratch) / f"model-{k}-{common}"
            shutil.copytree(args.model, model)
            subprocess.run([sys.executable, "-m", "heed", "data", "shortlist", str(model), "--src", str(train_src),
                            "--tgt", str(train_tgt), "--k", str(k), "--common", str(common)], check=True)
            systems[f"k {k}, common {common}"] = (heed.load(model, device="cpu"), True)
        outs: dict[str, list[str]] = {}
        best: dict[str, tuple[float, float]] = {}
        for _ in range(2):  # interleaved rounds; the faster of the two kept
            for name, (translator, listed) in systems.items():
                wall, cpu = time.perf_counter(), time.process_time()
                outs[name] = [t.text for t in translator.translate(sources, beam=args.beam, shortlist=listed)]
                took = (time.perf_counter() - wall, time.process_time() - cpu)
                best[name] = min(best.get(name, took), took)
    full = outs["without"]
    codec = systems["without"][0].codec
    vocab = len(codec.tgt_vocab)
    ids = [codec.src_ids(codec.src_tokens(s)) for s in sources]
    print(f"model {args.model}: target vocabulary {vocab:,}, source {len(codec.src_vocab):,}; {len(sources)} test "
          f"sentences, beam {args.beam}, 1 thread")
    for name, (translator, listed) in systems.items():
        out = outs[name]
        line = (f"{name}: BLEU {sacrebleu.corpus_bleu(out, [refs]).score:.2f}, chrF "
                f"{sacrebleu.corpus_chrf(out, [refs]).score:.2f}, = reference {sum(o == r for o, r in zip(out, refs))}"
                f"/{len(refs)}; seconds {best[name][0]:.1f} wall, {best[name][1]:.1f} CPU")
        if listed:
            shortlist = translator.shortlist
            assert shortlist is not None
            sizes = [len(shortlist.candidates(ids[k:k + 64])) for k in range(0, len(ids), 64)]
            mean = sum(sizes) / len(sizes)
            changed = [i for i, (a, b) in enumerate(zip(full, out)) if a != b]
            line += (f" ({best['without'][1] / best[name][1]:.2f}x CPU); {len(shortlist.table):,} source pieces listed; "
                     f"candidates per 64 test sentences: mean {mean:,.0f} ({mean / vocab:.1%} of the vocabulary), "
                     f"max {max(sizes):,}; outputs changed {len(changed)}/{len(out)}")
            for i in changed[: args.show]:
                line += f"\n    {sources[i]!r}\n      without: {full[i]!r}\n      with:    {out[i]!r}\n      ref:     {refs[i]!r}"
        print(line)


if __name__ == "__main__":
    main()
