"""Data-parallel scaling on the CPU: the dates demo (configs/demo.yaml) trained by one process with
one thread, then by two torchrun processes (gloo) with one thread each, over the same number of
batches; training tokens/s of each, from their metrics.jsonl.

    .venv/bin/python bench/studies/ddp_scaling.py [--batches 200] [--workdir DIR]

One process makes `--batches` updates of one batch; the two processes make half as many updates
of two batches (one each), so both train the same batches. tokens/s is what the trainer logs
(target tokens of every process / wall time, per `log_every` window): the median over the windows
after the first (which holds start-up), and the whole run's tokens over its training time. Each
run evaluates once, at its end, outside the windows measured.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "demo.yaml"
LOG_EVERY = 10


def run(label: str, command: list[str], output_dir: Path) -> dict[str, float]:
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{label} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    records = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    windows = [r["tok_per_s"] for r in train[1:]]
    return {"steps": train[-1]["step"], "median_tok_per_s": statistics.median(windows),
            "train_seconds": train[-1]["time"] - train[0]["time"], "wall_seconds": wall,
            "loss": train[-1]["loss"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=200, help="batches each setting trains (even)")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="heed-ddp-"))
    common = ["--no-progress", "--set", "train.threads=1", "--set", f"train.log_every={LOG_EVERY}",
              "--set", "train.eval_every=100000", "--set", "decode.beam_size=1"]
    python = sys.executable
    with socket.socket() as s:  # a free loopback port for the process group
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torchrun = [python, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                "--master-port", str(port)]
    settings = [
        ("1 process x 1 thread", [python, "-m", "heed", "train", str(CONFIG), *common,
                                  "--set", f"train.max_steps={args.batches}"], 1),
        ("2 processes x 1 thread (gloo)", [*torchrun, "-m", "heed", "train", str(CONFIG), *common,
                                           "--set", f"train.max_steps={args.batches // 2}"], 2),
    ]
    print(f"load average before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPUs; {args.batches} batches each")
    rows = []
    for i, (label, command, processes) in enumerate(settings):
        out = work / f"run{i}"
        shutil.rmtree(out, ignore_errors=True)
        result = run(label, [*command, "--output-dir", str(out)], out)
        rows.append((label, processes, result))
        print(f"{label}: {result['steps']} updates, median {result['median_tok_per_s']:,.0f} tok/s, "
              f"training {result['train_seconds']:.1f} s, wall {result['wall_seconds']:.1f} s, "
              f"last window loss {result['loss']:.4f}; load average {os.getloadavg()[0]:.2f}", flush=True)
    base = rows[0][2]["median_tok_per_s"]
    for label, processes, result in rows[1:]:
        speedup = result["median_tok_per_s"] / base
        print(f"{label}: {speedup:.2f}x the tokens/s of one process ({speedup / processes:.0%} scaling efficiency)")


if __name__ == "__main__":
    main()
