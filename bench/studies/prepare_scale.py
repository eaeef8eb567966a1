"""Corpora larger than memory: `heed prepare` throughput and peak memory at N pairs, optionally
fairseq-preprocess on the same files, then 300 training steps on the prepared corpus.

A synthetic parallel corpus of N pairs is streamed into a temporary directory (never held whole):
"source" sentences of 4-30 words drawn from a Zipf-distributed vocabulary of `--words` invented
words, "target" sentences the word-by-word image of the source under a fixed mapping, reversed in
pairs. Nothing is committed; the directory is removed at the end unless `--keep DIR` is given.

Every tool runs as a child process, one after another; its peak resident memory is the child's
own `ru_maxrss` (os.wait4), its time the wall clock around it.

    python bench/studies/prepare_scale.py --pairs 100000
    python bench/studies/prepare_scale.py --pairs 1000000 --fairseq-bin /work/peers/fairseq/bin
    python bench/studies/prepare_scale.py --pairs 20000000 --fairseq-bin /work/peers/fairseq/bin   # a quiet machine

Reported (one line each, then a Markdown table row): corpus generation; `heed prepare` wall time,
sentences/s, peak RSS and size on disk; `fairseq-preprocess` likewise (with `--fairseq-bin`);
training on the prepared corpus for `--steps` steps: wall time, steps/s and peak RSS; with
`--raw-too`, the same training on the raw text files (which loads every pair into memory) for
comparison.
"""
from __future__ import annotations

import argparse
import bisect
import itertools
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONSONANTS, VOWELS = "bdfgklmnprstvz", "aeiou"


def invented_words(n: int, rng: random.Random) -> list[str]:
    """`n` distinct pronounceable words of 2-4 syllables."""
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choice(CONSONANTS) + rng.choice(VOWELS) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def write_corpus(directory: Path, pairs: int, *, words: int, seed: int) -> tuple[Path, Path]:
    """Stream `pairs` line-aligned pairs into DIR/train.src and DIR/train.tgt (plus 200-pair dev)."""
    rng = random.Random(seed)
    src_words = invented_words(words, rng)
    tgt_words = invented_words(words, random.Random(seed + 1))
    rng.shuffle(tgt_words)
    cum = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(words)))  # Zipf, s = 1
    total = cum[-1]

    def sentence_ids(length: int) -> list[int]:
        return [bisect.bisect_left(cum, rng.random() * total) for _ in range(length)]

    def write(prefix: str, n: int) -> None:
        with open(directory / f"{prefix}.src", "w", encoding="utf-8") as fs, \
                open(directory / f"{prefix}.tgt", "w", encoding="utf-8") as ft:
            for _ in range(n):
                ids = sentence_ids(rng.randint(4, 30))
                fs.write(" ".join(src_words[i] for i in ids) + "\n")
                swapped = [ids[j ^ 1] if (j ^ 1) < len(ids) else ids[j] for j in range(len(ids))]
                ft.write(" ".join(tgt_words[i] for i in swapped) + "\n")

    write("train", pairs)
    write("dev", 200)
    return directory / "train.src", directory / "train.tgt"


def corpus_in(directory: Path, *, pairs: int, words: int, seed: int) -> None:
    """Generate the corpus into `directory` unless a finished one with the same settings is there.

    The marker `corpus.json` is written last, so an interrupted generation is never reused."""
    marker = directory / "corpus.json"
    wanted = {"pairs": pairs, "words": words, "seed": seed}
    if marker.exists() and json.loads(marker.read_text()) == wanted:
        print(f"reusing the {pairs:,}-pair corpus in {directory} ({disk_mb(directory):,.0f} MB of text)")
        return
    marker.unlink(missing_ok=True)
    started = time.perf_counter()
    write_corpus(directory, pairs, words=words, seed=seed)
    marker.write_text(json.dumps(wanted))
    print(f"generated {pairs:,} pairs ({disk_mb(directory):,.0f} MB of text) in {time.perf_counter() - started:.1f} s")


def head_pairs(data: Path, pairs: int, out: Path) -> None:
    """The first `pairs` lines of data/train.{src,tgt} (and the dev files) into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    for side in ("src", "tgt"):
        with open(data / f"train.{side}", "rb") as f, open(out / f"train.{side}", "wb") as g:
            g.writelines(itertools.islice(f, pairs))
        shutil.copyfile(data / f"dev.{side}", out / f"dev.{side}")


EPOCH_START = """
import sys, time
from heed.config import DataConfig
from heed.data.prepared import PreparedCorpus
data = DataConfig.model_fields
started = time.perf_counter()
corpus = PreparedCorpus(sys.argv[1], max_src_len=data["max_src_len"].default, max_tgt_len=data["max_tgt_len"].default,
                        verify_hashes=True)
opened = time.perf_counter()
epoch = corpus.batches(batch_tokens=2000, max_sentences=None, seed=0, epoch=0,
                       pool_sentences=data["pool_sentences"].default)
print(f"epoch start: opening with sha256 of {sum(f.stat().st_size for f in corpus.directory.iterdir()) / 1e6:,.0f} MB "
      f"{opened - started:.1f} s; planning {len(epoch):,} batches of {len(corpus):,} pairs "
      f"{time.perf_counter() - opened:.1f} s")
"""


def run_child(argv: list[str], *, env: dict[str, str] | None = None, log: Path) -> tuple[float, float, str]:
    """Run `argv` to completion: (wall seconds, peak RSS in MB, stdout + stderr)."""
    started = time.perf_counter()
    with open(log, "w") as out:
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    text = log.read_text(errors="replace")
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"{argv[0]} ... failed with exit code {code}:\n{text[-3000:]}")
    return seconds, usage.ru_maxrss / 1024, text  # ru_maxrss: KiB on Linux


def disk_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def heed(*args: str) -> list[str]:
    return [sys.executable, "-m", "heed", *args]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=100_000, help="sentence pairs to generate (default 100,000)")
    parser.add_argument("--words", type=int, default=5000, help="vocabulary of each side (default 5,000)")
    parser.add_argument("--steps", type=int, default=300, help="training steps on the prepared corpus (0 = none)")
    parser.add_argument("--fairseq-bin", type=Path, help="folder holding fairseq-preprocess (a fairseq venv's bin)")
    parser.add_argument("--fairseq-pairs", type=int, metavar="N",
                        help="run fairseq-preprocess on the first N pairs only (its rate is flat in corpus size, "
                             "and at one worker 20M pairs take hours)")
    parser.add_argument("--no-prepare", action="store_true",
                        help="reuse the prepared corpus an earlier run left in --keep DIR (train only)")
    parser.add_argument("--raw-too", action="store_true", help="also train --steps steps on the raw text files")
    parser.add_argument("--threads", type=int, default=1, help="threads for every tool (default 1)")
    parser.add_argument("--keep", type=Path, help="work here and keep the files (default: a temp dir, removed)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    if args.no_prepare and args.keep is None:
        parser.error("--no-prepare needs --keep DIR (where an earlier run prepared the corpus)")
    work = args.keep or Path(tempfile.mkdtemp(prefix="heed_prepare_scale_"))
    work.mkdir(parents=True, exist_ok=True)
    threads = {"OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads),
               "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    rows: dict[str, str] = {}
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), platform.processor())
        print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} cores of {cpu}; "
              f"load {os.getloadavg()[0]:.1f}; {args.pairs:,} pairs; {args.threads} thread(s); work {work}")
        data = work / "data"
        data.mkdir(exist_ok=True)
        corpus_in(data, pairs=args.pairs, words=args.words, seed=args.seed)

        config = work / "prepare.yaml"
        config.write_text(
            "data:\n"
            f"  train: {{src: {data / 'train.src'}, tgt: {data / 'train.tgt'}}}\n"
            f"  dev: {{src: {data / 'dev.src'}, tgt: {data / 'dev.tgt'}}}\n"
            "  tokenizer: {src: {kind: word}, tgt: {kind: word}}\n"
            "  batch_tokens: 2000\n"
            "model: {embed_size: 32, hidden_size: 64, input_feeding: false}\n"
            f"train: {{max_steps: {max(args.steps, 1)}, log_every: 50, threads: {args.threads}, epochs: 1000}}\n"
            f"output_dir: {work / 'run'}\n", encoding="utf-8")
        prepared = work / "prepared"
        if args.no_prepare:
            if not (prepared / "manifest.json").exists():
                sys.exit(f"--no-prepare: {prepared} holds no prepared corpus; run once without it")
            print(f"reusing the prepared corpus in {prepared}")
        else:
            shutil.rmtree(prepared, ignore_errors=True)
            seconds, rss, text = run_child(heed("prepare", str(config), "-o", str(prepared), "--no-progress"),
                                           env=threads, log=work / "prepare.log")
            summary = text.strip().splitlines()[-1]
            rate = args.pairs / seconds
            print(f"heed prepare: {seconds:.1f} s wall, {rate:,.0f} sentences/s, peak RSS {rss:,.0f} MB, "
                  f"{disk_mb(prepared):,.0f} MB on disk\n  {summary}")
            rows["heed prepare"] = (f"| heed prepare | {seconds:,.1f} | {rate:,.0f} | {rss:,.0f} "
                                    f"| {disk_mb(prepared):,.0f} |")

        if args.fairseq_bin is not None:
            tool = args.fairseq_bin / "fairseq-preprocess"
            if not tool.exists():
                sys.exit(f"{tool}: not found (install the peers: /work/shared/bench/peers/README.md)")
            destdir = work / "fairseq-bin"
            shutil.rmtree(destdir, ignore_errors=True)
            fairseq_pairs, fairseq_data = args.pairs, data
            if args.fairseq_pairs is not None and args.fairseq_pairs < args.pairs:
                fairseq_pairs, fairseq_data = args.fairseq_pairs, work / "fairseq-data"
                head_pairs(data, fairseq_pairs, fairseq_data)
            seconds, rss, _ = run_child([str(tool), "--source-lang", "src", "--target-lang", "tgt",
                                         "--trainpref", str(fairseq_data / "train"),
                                         "--validpref", str(fairseq_data / "dev"),
                                         "--destdir", str(destdir), "--workers", str(args.threads)],
                                        env={"OMP_NUM_THREADS": str(args.threads)}, log=work / "fairseq.log")
            rate = fairseq_pairs / seconds
            on = "" if fairseq_pairs == args.pairs else f" on the first {fairseq_pairs:,} pairs"
            print(f"fairseq-preprocess{on}: {seconds:.1f} s wall, {rate:,.0f} sentences/s, peak RSS {rss:,.0f} MB, "
                  f"{disk_mb(destdir):,.0f} MB on disk")
            rows["fairseq-preprocess"] = (f"| fairseq-preprocess --workers {args.threads}{on} | {seconds:,.1f} "
                                          f"| {rate:,.0f} | {rss:,.0f} | {disk_mb(destdir):,.0f} |")
            shutil.rmtree(work / "fairseq-data", ignore_errors=True)

        if args.steps > 0:
            # What a training start costs before the first step: sha256 of every shard, then the
            # epoch's batch plan (every window's, to know the epoch's length).
            _, _, text = run_child([sys.executable, "-c", EPOCH_START, str(prepared)], env=threads,
                                   log=work / "epoch-start.log")
            print(text.strip())
            runs = [("prepared", ["--set", "data.train=null", "--set", f"data.prepared={prepared}"])]
            if args.raw_too:
                runs.append(("raw text", []))
            for name, extra in runs:
                out = work / f"run-{name.replace(' ', '-')}"
                shutil.rmtree(out, ignore_errors=True)
                seconds, rss, text = run_child(heed("train", str(config), *extra, "--output-dir", str(out),
                                                    "--no-progress"), env=threads, log=work / f"train-{out.name}.log")
                print(f"train {args.steps} steps on {name}: {seconds:.1f} s wall (start-up, data loading and the "
                      f"final evaluation included), {args.steps / seconds:.2f} steps/s, peak RSS {rss:,.0f} MB")
                assert "stopped: max steps" in text, text[-2000:]
                rows[f"train {name}"] = f"| train {args.steps} steps, {name} | {seconds:,.1f} | | {rss:,.0f} | |"
        print(f"\n| N = {args.pairs:,} pairs | wall s | sentences/s | peak RSS MB | on disk MB |\n|---|---:|---:|---:|---:|"
              )
        print("\n".join(rows.values()))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
