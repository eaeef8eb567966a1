"""`heed train CONFIG --processes N`: data-parallel training on one machine without torchrun.

The launcher starts N copies of `python -m heed train ... --processes N`, each with the variables
torchrun would set (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR 127.0.0.1, a free
MASTER_PORT), waits for them, and exits with rank 0's code. heed.plumbing.distributed does the rest, as under
torchrun.

Why not torchrun: a Ctrl-C at the terminal reaches torchrun too, and torchrun answers it with a
25-line traceback of its own after heed's clean message. Here the ranks share the launcher's
process group, so a Ctrl-C reaches each rank directly (each finishes its step, rank 0 saves); the
launcher only waits. A SIGTERM to the launcher (what Slurm sends) is passed on to the ranks. A rank
that fails takes the others down after a grace period, so none waits for a peer that is gone. A
launcher that is killed outright (kill -9, which it cannot pass on) takes the ranks with it: each
asks Linux for SIGKILL when its parent dies (`die_with_launcher`), as the store they need lived in
the launcher; their last checkpoint is whole (saves are atomic) and `--resume` continues from it.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from types import FrameType

GRACE_SECONDS = 30.0  # after one rank fails, how long the others have to notice before they are stopped
LAUNCHER_ENV = "HEED_LAUNCHER_PID"  # set in each rank's environment: the launcher it must not outlive
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_launcher(environ: Mapping[str, str] | None = None) -> bool:
    """In a rank that heed's launcher started: have Linux send SIGKILL to this process when its
    parent dies, and exit now if the launcher is already gone (it died before this call). Returns
    whether the death signal is set (False: not a launched rank, or not Linux)."""
    launcher = (os.environ if environ is None else environ).get(LAUNCHER_ENV)
    if not launcher or not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return False
    if os.getppid() != int(launcher):  # the launcher died before prctl: the signal will never come
        os._exit(128 + signal.SIGKILL)
    return True


def free_port() -> int:
    """A TCP port free on loopback now (rank 0's store listens there)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_environment(rank: int, processes: int, port: int, base: dict[str, str]) -> dict[str, str]:
    """What torchrun sets for local rank `rank` of `processes` on one machine, the launcher hosting
    the store as torchrun's agent does. OMP_NUM_THREADS defaults to 1, as torchrun's does with
    several processes (each rank's intra-op threads would otherwise fight for the same cores);
    train.threads or the caller's own value wins."""
    env = {**base, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(processes),
           "LOCAL_WORLD_SIZE": str(processes), "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port), "TORCHELASTIC_USE_AGENT_STORE": "True", LAUNCHER_ENV: str(os.getpid())}
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def launch(argv: Sequence[str], processes: int) -> int:
    """Run `heed ARGV` (a `train` command line, with --processes) as `processes` ranks on this
    machine; returns the exit code for the launcher: rank 0's, or the first failure's."""
    import datetime

    import torch.distributed as dist

    port = free_port()
    # The store lives here, as in torchrun's agent: it outlives every rank, so none loses it while
    # it tears down its connections.
    store = dist.TCPStore("127.0.0.1", port, processes, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(hours=2))
    ranks = [subprocess.Popen([sys.executable, "-m", "heed", *argv],
                              env=rank_environment(r, processes, port, dict(os.environ)))
             for r in range(processes)]

    def pass_on(signum: int, frame: FrameType | None) -> None:
        for p in ranks:
            if p.poll() is None:
                p.send_signal(signum)

    # Ctrl-C already reaches every rank (one process group): the launcher just waits for them. A
    # Python handler, not SIG_IGN: the ranks must not inherit an ignored SIGINT.
    previous = {signal.SIGINT: signal.signal(signal.SIGINT, lambda signum, frame: None),
                signal.SIGTERM: signal.signal(signal.SIGTERM, pass_on)}
    try:
        return _wait(ranks)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        del store


def _wait(ranks: list[subprocess.Popen]) -> int:
    """Wait for every rank; once one fails, give the others GRACE_SECONDS, then stop them."""
    failed_at: float | None = None
    while True:
        codes = [p.poll() for p in ranks]
        if all(c is not None for c in codes):
            # A rank a signal ended reports -N; a shell says 128 + N.
            done = [128 - c if c < 0 else c for c in codes if c is not None]  # every one is, here
            return done[0] if done[0] != 0 else next((c for c in done if c != 0), 0)
        if failed_at is None and any(c not in (None, 0) for c in codes):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > GRACE_SECONDS:
            for p in ranks:
                if p.poll() is None:
                    p.terminate()
        time.sleep(0.05)


__all__ = ["free_port", "launch", "rank_environment"]
