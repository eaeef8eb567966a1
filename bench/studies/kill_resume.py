"""kill -9 a tiny training run at seeded random points, resume it, and check that the resumed run
ends exactly where an uninterrupted one does: the same metrics.jsonl (less wall-clock fields) and
bit-identical weights in model/ and checkpoints/last.

Kill points are drawn from three kinds, so that some land inside checkpoint writes:
    time     SIGKILL from outside after a random fraction of the reference run's wall time
    fsync    the child kills itself at its N-th os.fsync: a checkpoint or model file is on disk in
             its temp directory, the rest of that directory is not
    replace  the child kills itself at its N-th os.replace: between the two renames of a directory
             swap, or just before a file's temp copy takes its place

After the kill, `heed train CONFIG --output-dir DIR --resume` runs the rest (a plain restart where
the kill came before the first checkpoint was complete). The child's hooks live in this script
(`--child`), not in heed.

    python bench/studies/kill_resume.py --points 20 --seed 0      # the figure in bench/RESULTS.md
    python bench/studies/kill_resume.py --points 3                # what tests/train/test_kill_resume.py runs
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WALL_CLOCK_FIELDS = ("time", "tok_per_s")
KINDS = ("time", "fsync", "replace")


def write_task(directory: Path, steps: int) -> Path:
    """A tiny dates corpus and a config that evaluates (and so checkpoints) every 4 steps."""
    import yaml

    from heed.data.dates import generate_dates, write_splits

    splits = generate_dates(n_train=240, n_dev=16, n_test=16, seed=3, languages=("en", "fr"), verbose_forms=False)
    paths = write_splits(splits, directory / "data")
    config = {
        "data": {"train": {"tsv": str(paths["train"])}, "dev": {"tsv": str(paths["dev"])},
                 "test": {"tsv": str(paths["test"])}, "batch_tokens": 300},
        "model": {"embed_size": 8, "hidden_size": 16, "input_feeding": True, "dropout": 0.1},
        "train": {"epochs": 100, "max_steps": steps, "lr": 0.01, "log_every": 3, "eval_every": 4, "threads": 1,
                  "seed": 5, "early_stopping": {"metric": "exact_match", "patience": None}},
        "decode": {"max_len_b": 12, "max_len_a": 0.0},
    }
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def child_command(config: Path, output: Path, *, resume: bool, kill: str | None = None) -> list[str]:
    args = ["train", str(config), "--output-dir", str(output), "--no-progress"] + (["--resume"] if resume else [])
    if kill is None:
        return [sys.executable, "-m", "heed", *args]
    return [sys.executable, __file__, "--child", kill, "--", *args]


def run_child(kill: str, args: list[str]) -> None:
    """In the child: count calls to os.fsync / os.replace (written to $KILL_RESUME_COUNTS at exit),
    SIGKILL this process at the chosen call, then run the heed CLI."""
    kind, _, nth = kill.partition(":")
    counts = {"fsync": 0, "replace": 0}

    def hook(name: str, original):
        def wrapped(*a, **k):
            counts[name] += 1
            if name == kind and counts[name] == int(nth):
                os.kill(os.getpid(), signal.SIGKILL)
            return original(*a, **k)
        return wrapped

    os.fsync = hook("fsync", os.fsync)
    os.replace = hook("replace", os.replace)
    sys.argv = ["heed", *args]
    from heed.cli import main

    try:
        main()
    finally:
        report = os.environ.get("KILL_RESUME_COUNTS")
        if report:
            Path(report).write_text(json.dumps(counts), encoding="utf-8")


def metrics(run: Path) -> list[dict]:
    rows = []
    for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(f"non-JSON {c}")))
        rows.append({k: v for k, v in row.items() if k not in WALL_CLOCK_FIELDS})
    return rows


def weights(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


def same_weights(a: Path, b: Path) -> bool:
    wa, wb = weights(a), weights(b)
    return wa.keys() == wb.keys() and all(wa[k].dtype == wb[k].dtype and wa[k].equal(wb[k]) for k in wa)


def compare(reference: Path, run: Path) -> list[str]:
    """What differs between two finished runs (empty: identical)."""
    problems = []
    if metrics(reference) != metrics(run):
        problems.append("metrics.jsonl differs")
    for rel in ("model/model.safetensors", "checkpoints/last/model.safetensors", "checkpoints/best/model.safetensors"):
        if not (run / rel).is_file():
            problems.append(f"{rel} missing")
        elif not same_weights(reference / rel, run / rel):
            problems.append(f"{rel} differs")
    return problems


def has_checkpoint(run: Path) -> bool:
    return any((run / "checkpoints" / name / "heed.json").is_file() for name in ("last", "last.old"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=20, help="kill points (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill points")
    parser.add_argument("--steps", type=int, default=24, help="training steps of the tiny run")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the runs here (default: a temp dir)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.child is not None:
        run_child(args.child, [a for a in rest if a != "--"])
        return 0
    if args.points < 1 or args.steps < 8:
        parser.error("--points must be >= 1 and --steps >= 8")

    work = args.workdir or Path(tempfile.mkdtemp(prefix="heed-kill-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "KILL_RESUME_COUNTS": str(work / "counts.json")}
    config = write_task(work, args.steps)

    reference = work / "reference"
    shutil.rmtree(reference, ignore_errors=True)
    started = time.perf_counter()
    subprocess.run(child_command(config, reference, resume=False, kill="none:0"), env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    calls = json.loads((work / "counts.json").read_text(encoding="utf-8"))
    print(f"reference: {args.steps} steps in {wall:.1f} s; {calls['fsync']} fsyncs, {calls['replace']} replaces")

    rng = random.Random(args.seed)
    identical = 0
    for point in range(1, args.points + 1):
        kind = KINDS[(point - 1) % len(KINDS)]
        run = work / f"run{point:02d}"
        shutil.rmtree(run, ignore_errors=True)
        if kind == "time":
            at = rng.uniform(0.25, 0.95) * wall
            child = subprocess.Popen(child_command(config, run, resume=False, kill="none:0"), env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                child.wait(timeout=at)
            except subprocess.TimeoutExpired:
                child.send_signal(signal.SIGKILL)
                child.wait()
            where = f"after {at:.2f} s"
        else:
            nth = rng.randint(1, calls[kind])
            child = subprocess.run(child_command(config, run, resume=False, kill=f"{kind}:{nth}"), env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            where = f"at {kind} {nth}/{calls[kind]}"
        killed = child.returncode == -signal.SIGKILL
        resumed = has_checkpoint(run)
        finish = subprocess.run(child_command(config, run, resume=resumed), env=env, capture_output=True, text=True,
                                timeout=600)
        if finish.returncode != 0:
            problems = [(f"the {'resume' if resumed else 'restart'} failed ({finish.returncode}): "
                        f"{finish.stderr.strip().splitlines()[-1:]}")]
        else:
            problems = compare(reference, run)
        identical += not problems
        print(f"point {point:2d}: {kind:7s} {where:22s} {'killed' if killed else 'finished first'}, "
              f"{'--resume' if resumed else 'restart'}: {'identical' if not problems else '; '.join(problems)}")
    print(f"{identical}/{args.points} identical to the uninterrupted run")
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if identical == args.points else 1


if __name__ == "__main__":
    sys.exit(main())
