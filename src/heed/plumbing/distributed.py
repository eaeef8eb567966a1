"""Several processes, one training run: rank and world helpers over torch.distributed.

Started by `torchrun`, every process reads RANK, WORLD_SIZE and LOCAL_RANK (and MASTER_ADDR and
MASTER_PORT) from its environment; `World.from_env` turns them into a `World`, and
`process_group` joins the group (gloo on the CPU, nccl on CUDA GPUs) and leaves it at the end.

Who does what:
- every rank trains: the same global batch stream (same seed) on every rank, cut by `rank_shares`
  into updates of `world.size * accumulate` consecutive batches, of which rank r takes positions
  r, r + W, r + 2W, ...; DistributedDataParallel sums the gradients;
- only rank 0 (`world.is_main`) writes: checkpoints, the model directory, metrics.jsonl, the lock
  file, the console. What it decides (dev scores, best model, early stopping) reaches the others
  through `run_on_main`, which also carries rank 0's errors to them, so no rank waits forever for
  a rank 0 that has stopped.

The epoch's tail: when an epoch's batches do not fill the last update (N not divisible by W * k),
the last update takes the n < W * k batches left, dealt out by the same rule; a rank whose deal is
empty (n < W) runs the tail's first batch with weight 0, so the gradient all-reduce still meets
every rank and the update equals one process accumulating those n batches. No batch is dropped or
repeated.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import torch
import torch.distributed as dist

from heed.errors import ConfigError, HeedError

T = TypeVar("T")
ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
BACKENDS = ("auto", "gloo", "nccl")
# How long a collective waits for a rank that has gone silent (a node lost without closing its
# connections) before it fails. Rank 0's errors and stops reach the others at once (`run_on_main`);
# a rank that dies closes its sockets (the others fail within seconds), and torchrun stops the rest.
# This bounds what is left. Longer than torch's 30 minutes because the other ranks wait in a
# collective while rank 0 scores the dev set, which on a CPU with a large dev set can take that long.
TIMEOUT = datetime.timedelta(hours=2)
JOIN_TIMEOUT_ENV = "HEED_JOIN_TIMEOUT"
DEFAULT_JOIN_SECONDS = 600.0
SAY_WAITING_AFTER = 5.0  # seconds of waiting to join before a rank says so
LEFT_KEY = "heed/ranks_left"


class PeerFailed(HeedError):
    """Raised on the other ranks when rank 0 stopped with an error (rank 0 prints that error)."""


@dataclass(frozen=True)
class World:
    """This process's place among the processes of one run. `size` 1: a plain single process."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes files and prints."""
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.size > 1

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> World:
        """The world torchrun describes in RANK, WORLD_SIZE and LOCAL_RANK; a single process
        (`World()`) when none is set. A half-set or malformed environment is a HeedError."""
        env = os.environ if environ is None else environ
        given = {key: env.get(key) for key in ENV_KEYS}
        if all(value is None for value in given.values()):
            return cls()
        values: dict[str, int] = {}
        for key, value in given.items():
            if value is None:
                if key == "LOCAL_RANK":  # launchers other than torchrun may leave it out on one node
                    continue
                raise HeedError(f"{key} is not set but {', '.join(k for k, v in given.items() if v is not None)} "
                                "is: start several processes with torchrun (torchrun --nproc-per-node N -m heed train "
                                "CONFIG), or unset RANK, WORLD_SIZE and LOCAL_RANK for one process")
            try:
                values[key] = int(value)
            except ValueError:
                raise HeedError(f"{key}={value!r} is not a whole number; start heed with torchrun") from None
        size, rank = values["WORLD_SIZE"], values["RANK"]
        local_rank = values.get("LOCAL_RANK", rank)
        if size < 1 or not 0 <= rank < size or local_rank < 0:
            raise HeedError(f"RANK={rank}, WORLD_SIZE={size}, LOCAL_RANK={local_rank} do not describe a process "
                            "group (need 0 <= RANK < WORLD_SIZE); start heed with torchrun")
        if size > 1:
            for key in ("MASTER_ADDR", "MASTER_PORT"):
                if not env.get(key):
                    raise HeedError(f"WORLD_SIZE={size} but {key} is not set: start heed with torchrun, or set "
                                    "MASTER_ADDR and MASTER_PORT to rank 0's address and a free port")
        return cls(rank=rank, size=size, local_rank=local_rank)


def rank_device(device: torch.device, world: World) -> torch.device:
    """The device of this rank: on CUDA, GPU number LOCAL_RANK of this machine (one GPU per
    process); the CPU stays the CPU. A LOCAL_RANK past this machine's GPUs is a HeedError."""
    if device.type != "cuda" or not world.is_distributed:
        return device
    count = torch.cuda.device_count()
    if world.local_rank >= count:
        raise HeedError(f"LOCAL_RANK={world.local_rank} but this machine has {count} CUDA device(s): start at "
                        f"most {count} process(es) per machine (torchrun --nproc-per-node {count}), or set "
                        "train.device: cpu")
    return torch.device("cuda", world.local_rank)


def choose_backend(name: str, device: torch.device) -> str:
    """`train.backend`: "auto" is nccl for CUDA devices and gloo for the CPU. nccl without CUDA
    (or without an nccl build of torch) is a ConfigError naming the field."""
    if name == "auto":
        return "nccl" if device.type == "cuda" else "gloo"
    if name == "nccl":
        if device.type != "cuda":
            raise ConfigError(f"nccl runs on CUDA GPUs, and this run trains on the {device.type}; "
                              "use backend: gloo (or auto)", field="train.backend")
        if not dist.is_nccl_available():
            raise ConfigError("this torch build has no nccl; use backend: gloo (or auto)", field="train.backend")
    return name


@contextlib.contextmanager
def process_group(world: World, device: torch.device, backend: str) -> Iterator[None]:
    """Join the process group described by the environment for the block (nothing for one
    process), and leave it afterwards. A group the caller set up already is used and left alone."""
    if not world.is_distributed or dist.is_initialized():
        yield
        return
    if device.type == "cuda":
        torch.cuda.set_device(device)  # nccl's object collectives use the current device
    store = _join(world)
    try:
        dist.init_process_group(backend=backend, store=store, rank=world.rank, world_size=world.size,
                                timeout=TIMEOUT)
    except (RuntimeError, ValueError) as e:  # e.g. MASTER_ADDR unreachable, port taken
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise HeedError(f"cannot join the process group (rank {world.rank} of {world.size}, {backend} at "
                        f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}): {first}") from None
    try:
        yield
    finally:
        dist.destroy_process_group()
        _leave(store, world)
        del store  # now, not at interpreter exit, where its server thread's teardown aborts the process


def _leave(store: dist.Store, world: World, seconds: float = 30.0) -> None:
    """Say this rank is done; a rank hosting the store waits (up to `seconds`) until every rank has
    said so, so that no peer loses the store while it still tears its connections down (that
    aborted a peer with "terminate called without an active exception")."""
    try:
        left = store.add(LEFT_KEY, 1)
        if not _hosts_store(world):
            return
        deadline = time.monotonic() + seconds
        while left < world.size and time.monotonic() < deadline:
            time.sleep(0.02)
            left = store.add(LEFT_KEY, 0)
    except RuntimeError:  # a peer or the store is gone already: nothing left to wait for
        pass


def _hosts_store(world: World) -> bool:
    """Whether this rank runs the TCP store: rank 0, unless a launcher (torchrun's agent, heed's
    `--processes`) hosts it and says so with TORCHELASTIC_USE_AGENT_STORE."""
    return world.rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"


def join_timeout() -> float:
    """Seconds the processes wait for each other to join (HEED_JOIN_TIMEOUT, default 600)."""
    text = os.environ.get(JOIN_TIMEOUT_ENV, "")
    try:
        seconds = float(text) if text else DEFAULT_JOIN_SECONDS
    except ValueError:
        raise HeedError(f"{JOIN_TIMEOUT_ENV}={text!r} is not a number of seconds") from None
    if not 0 < seconds < float("inf"):
        raise HeedError(f"{JOIN_TIMEOUT_ENV}={text!r} must be a positive number of seconds")
    return seconds


def _join(world: World) -> dist.Store:
    """Rank 0's TCP store at MASTER_ADDR:MASTER_PORT, joined by every rank within `join_timeout()`:
    a rank still waiting after a few seconds says so on stderr, and one that waits in vain stops
    with one line (a RANK=1 started without its rank 0 used to wait silently for ever)."""
    addr, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    seconds = join_timeout()
    where = f"rank {world.rank} of {world.size}"
    sys.stderr.flush()
    # c10d's C++ logs each failed connection try with a stack of frames on file descriptor 2; the
    # waiting note and the error below say what matters, so those go to /dev/null meanwhile.
    stderr = os.dup(2)
    note = threading.Timer(min(SAY_WAITING_AFTER, seconds / 4), lambda: os.write(stderr, (
        f"{where}: waiting for the other processes at {addr}:{port} (for up to {seconds:.0f} s; "
        f"{JOIN_TIMEOUT_ENV} sets how long)\n").encode()))
    note.daemon = True
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        note.start()
        # The client tries twice within `timeout`, so each try gets half of it.
        store = dist.TCPStore(addr, int(port), world.size, is_master=_hosts_store(world),
                              timeout=datetime.timedelta(seconds=seconds / 2), wait_for_workers=True)
    except (RuntimeError, ValueError):
        raise HeedError(f"{where}: the other processes did not join at {addr}:{port} within {seconds:.0f} s; "
                        "start every rank (torchrun --nproc-per-node N, or heed train --processes N, starts them "
                        "all) with the same MASTER_ADDR and MASTER_PORT") from None
    finally:
        note.cancel()
        os.dup2(stderr, 2)
        os.close(stderr)
    store.set_timeout(TIMEOUT)
    return store


# ----------------------------------------------------------------------------------- batches


@dataclass(frozen=True)
class RankShare(Generic[T]):
    """This rank's part of one update: its micro-batches in order, and how many batches of the
    global stream the whole update (all ranks) took. `idle`: this rank got none of the epoch's
    last few batches and runs `batches[0]` with weight 0 (see the module doc)."""

    batches: list[T]
    consumed: int
    idle: bool = False


def rank_shares(stream: Iterable[T], *, world: World, accumulate: int) -> Iterator[RankShare[T]]:
    """Cut the global batch `stream` (the same on every rank) into updates of `world.size *
    accumulate` consecutive batches and yield this rank's share of each: positions rank,
    rank + W, ... of the update. The last update of a stream whose length is no multiple takes
    what is left (see the module doc). Works on any iterable, so any batch source is sharded alike."""
    if accumulate < 1:
        raise ValueError(f"accumulate must be >= 1, got {accumulate}")
    group = world.size * accumulate
    update: list[T] = []
    for batch in stream:
        update.append(batch)
        if len(update) == group:
            yield _share(update, world)
            update = []
    if update:
        yield _share(update, world)


def _share(update: list[T], world: World) -> RankShare[T]:
    mine = update[world.rank::world.size]
    if not mine:
        return RankShare([update[0]], consumed=len(update), idle=True)
    return RankShare(mine, consumed=len(update))


def updates_in(batches: int, *, world: World, accumulate: int) -> int:
    """Updates an epoch of `batches` global batches makes."""
    group = world.size * accumulate
    return -(-batches // group)


# ------------------------------------------------------------------------------- collectives


@contextlib.contextmanager
def collective_errors(world: World) -> Iterator[None]:
    """A collective inside the block that fails (gloo and nccl raise RuntimeError: another rank
    crashed, was killed or stopped on an error of its own; a node was lost past TIMEOUT) becomes
    one line, PeerFailed, instead of a traceback from deep inside torch."""
    try:
        yield
    except RuntimeError as e:
        if not world.is_distributed:
            raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        first = re.sub(r"^\[[^\]]*\]\s*", "", first)  # gloo's "[.../pair.cc:553] " source location
        raise PeerFailed(f"rank {world.rank}: lost the other processes ({first}); the first process "
                         "that stopped says why") from None


def all_reduce_sum(values: torch.Tensor, world: World) -> torch.Tensor:
    """Element-wise sum over ranks (in place; a no-op for one process). Returns `values`."""
    if world.is_distributed:
        with collective_errors(world):
            dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def gather_to_main(obj: T, world: World) -> list[T] | None:
    """Every rank's `obj` (picklable), in rank order, on rank 0; None on the others."""
    if not world.is_distributed:
        return [obj]
    out: list[Any] | None = [None] * world.size if world.is_main else None
    with collective_errors(world):
        dist.gather_object(obj, out, dst=0)
    return out


def broadcast_from_main(obj: T | None, world: World) -> T:
    """Rank 0's `obj` (picklable) on every rank."""
    if not world.is_distributed:
        assert obj is not None or world.is_main
        return obj  # type: ignore[return-value]
    box = [obj]
    with collective_errors(world):
        dist.broadcast_object_list(box, src=0)
    return box[0]  # type: ignore[return-value]


@dataclass(frozen=True)
class _Failed:
    message: str


def run_on_main(work: Callable[[], T], world: World) -> T:
    """Every rank calls this at the same point: rank 0 runs `work()` and every rank gets its
    result. If `work` raises on rank 0, rank 0 re-raises it and every other rank raises
    PeerFailed, so none waits at the next collective for a rank 0 that has stopped."""
    if not world.is_distributed:
        return work()
    if world.is_main:
        try:
            result = work()
        except BaseException as e:
            broadcast_from_main(_Failed(f"{type(e).__name__}: {e}" if not isinstance(e, HeedError) else str(e)), world)
            raise
        broadcast_from_main(result, world)
        return result
    result = broadcast_from_main(None, world)
    if isinstance(result, _Failed):
        raise PeerFailed(f"rank {world.rank}: stopping because rank 0 stopped ({result.message})")
    return result
