"""Running one measured command: wall time, peak RSS (`/usr/bin/time -v`), the load before it, and
its whole output kept in a log file. Standard library only (the harness runs in any Python)."""
from __future__ import annotations

import contextlib
import os
import platform
import re
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

TIME = "/usr/bin/time"


class StepFailed(RuntimeError):
    """A measured command failed; the message names the command and ends with its last lines."""


@dataclass(frozen=True)
class Measured:
    seconds: float  # wall clock, process start to exit
    max_rss_mb: float | None  # "Maximum resident set size" / 1024; None without /usr/bin/time
    cpu_seconds: float | None  # user + system time of the whole process: less sensitive to other load
    loadavg: str  # /proc/loadavg's 1/5/15-minute averages just before the command
    log: Path  # stdout + stderr

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def bench_env(threads: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for every system: the same thread count for OpenMP/MKL (torch reads them at
    start), pickle loads allowed (OpenNMT-py and fairseq checkpoints), no GPU, no tokenizer threads."""
    env = dict(os.environ)
    env.update({
        "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads),
        "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1", "CUDA_VISIBLE_DEVICES": "", "TOKENIZERS_PARALLELISM": "false",
        "PYTHONWARNINGS": "ignore", "PYTHONUNBUFFERED": "1",
    })
    env.pop("PYTHONPATH", None)  # each venv sees only its own packages
    env.pop("VIRTUAL_ENV", None)
    if extra:
        env.update(extra)
    return env


def run_measured(cmd: list[str], *, log: Path, env: dict[str, str], cwd: Path | None = None,
                 stdout: Path | None = None, timeout: float | None = None) -> Measured:
    """Run `cmd` under /usr/bin/time -v, its output to `log` (stdout to `stdout` if given, e.g. for
    fairseq-generate's hypotheses). Raises StepFailed on a non-zero exit."""
    log.parent.mkdir(parents=True, exist_ok=True)
    time_file = log.with_suffix(log.suffix + ".time")
    wrapped = [TIME, "-v", "-o", str(time_file), *cmd] if Path(TIME).exists() else list(cmd)
    load = loadavg()
    with open(log, "w", encoding="utf-8") as out, \
            (open(stdout, "w", encoding="utf-8") if stdout is not None else contextlib.nullcontext(out)) as hyp:
        out.write(f"$ {shlex.join(cmd)}\n# load before: {load}\n")
        out.flush()
        start = time.perf_counter()
        try:
            rc = subprocess.run(wrapped, stdout=hyp, stderr=out, stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            raise StepFailed(f"timed out after {timeout:.0f} s: {shlex.join(cmd[:3])} ... (log: {log})") from None
        except OSError as e:
            raise StepFailed(f"cannot run {cmd[0]}: {e.strerror or e}") from None
        seconds = time.perf_counter() - start
    rss = cpu = None
    if time_file.exists():
        report = time_file.read_text()
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", report)
        rss = int(m.group(1)) / 1024 if m else None
        times = re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", report)
        cpu = sum(map(float, times)) if len(times) == 2 else None
    if rc != 0:
        last = tail(log, 8)
        final = last.splitlines()[-1].strip() if last else ""
        raise StepFailed(f"exit {rc}: {shlex.join(cmd[:4])} ... (log {log}): {final}\n{last}")
    return Measured(seconds, rss, cpu, load, log)


def tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    keep = [line for line in text if line.strip() and "Warning" not in line][-lines:]
    return "\n".join("    " + line[:300] for line in keep)


def machine(threads: int, heed_python: Path) -> dict[str, str]:
    """What the figures were measured on."""
    model = "?"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        model = next((line.split(":", 1)[1].strip() for line in out.splitlines()
                      if line.startswith("Model name")), "?")
    except (OSError, subprocess.CalledProcessError):
        pass
    torch_version = subprocess.run([str(heed_python), "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True).stdout.strip() or "?"
    return {"cpu": model, "cores": str(os.cpu_count()), "torch": torch_version, "threads": str(threads),
            "python": platform.python_version(), "kernel": platform.release()}
