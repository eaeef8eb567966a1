"""Several processes: the torchrun environment, rank shares of the batch stream, and two real CPU
ranks (gloo, started here as `python -m heed train` with torchrun's variables on a free loopback
port) that train what one process accumulating two batches trains (on raw text and on a prepared
corpus), stop together on a Ctrl-C sent to rank 0 alone, and resume exactly after a kill -9 or that
Ctrl-C; rank 1 writes and prints nothing."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from tiny_models import TRANSFORMER

from heed.checkpoint import WEIGHTS_FILE, load_checkpoint, load_weights, rank_rng_states
from heed.config import config_from_dict
from heed.errors import ConfigError, HeedError
from heed.plumbing.distributed import World, choose_backend, rank_shares, updates_in
from heed.train import train

SRC = Path(__file__).resolve().parents[2] / "src"


# ------------------------------------------------------------------------------ the environment


def test_no_torchrun_variables_is_one_process():
    assert World.from_env({}) == World(rank=0, size=1, local_rank=0)


def test_torchrun_variables_give_the_rank_and_world():
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    world = World.from_env(env)
    assert (world.rank, world.size, world.local_rank, world.is_main, world.is_distributed) == (3, 4, 1, False, True)


@pytest.mark.parametrize("env, message", [
    ({"RANK": "0"}, "WORLD_SIZE is not set but RANK is"),
    ({"RANK": "x", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "RANK='x' is not a whole number"),
    ({"RANK": "2", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "need 0 <= RANK < WORLD_SIZE"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "MASTER_ADDR is not set"),
])
def test_a_broken_torchrun_environment_is_one_clear_error(env, message):
    with pytest.raises(HeedError, match=message):
        World.from_env(env)


def test_nccl_without_cuda_names_the_field():
    with pytest.raises(ConfigError, match="field 'train.backend': nccl runs on CUDA GPUs"):
        choose_backend("nccl", torch.device("cpu"))
    assert choose_backend("auto", torch.device("cpu")) == "gloo"
    assert choose_backend("auto", torch.device("cuda", 0)) == "nccl"


# ------------------------------------------------------------------------------- rank shares


def shares(n, size, accumulate):
    return [[(s.batches, s.consumed, s.idle) for s in rank_shares(range(n), world=World(rank, size, rank),
                                                                  accumulate=accumulate)]
            for rank in range(size)]


def test_rank_r_takes_batches_r_r_plus_w_of_each_update():
    rank0, rank1 = shares(8, 2, 2)
    assert rank0 == [([0, 2], 4, False), ([4, 6], 4, False)]
    assert rank1 == [([1, 3], 4, False), ([5, 7], 4, False)]


def test_the_epochs_tail_is_dealt_out_and_an_empty_deal_runs_with_weight_zero():
    # 7 batches, 2 ranks x 2: updates [0..3], [4, 5, 6]; then 5 batches: [0..3], [4]
    rank0, rank1 = shares(7, 2, 2)
    assert rank0[-1] == ([4, 6], 3, False) and rank1[-1] == ([5], 3, False)
    rank0, rank1 = shares(5, 2, 2)
    assert rank0[-1] == ([4], 1, False)
    assert rank1[-1] == ([4], 1, True)  # nothing left for rank 1: batch 4 again, with weight 0
    assert updates_in(5, world=World(0, 2, 0), accumulate=2) == 2


@pytest.mark.parametrize("n, size, accumulate", [(1, 3, 1), (10, 3, 1), (11, 2, 3), (12, 4, 1), (9, 1, 4)])
def test_every_batch_is_trained_exactly_once_per_epoch(n, size, accumulate):
    real = sorted(b for rank in shares(n, size, accumulate) for batches, _, idle in rank if not idle for b in batches)
    assert real == list(range(n))
    assert {len(rank) for rank in shares(n, size, accumulate)} == {updates_in(n, world=World(0, size, 0),
                                                                              accumulate=accumulate)}


# ---------------------------------------------------------------------------- per-rank RNG


def test_a_checkpoint_keeps_each_ranks_generator(tmp_path, make_config):
    train(make_config(tmp_path / "a", max_steps=1))
    saved = load_checkpoint(tmp_path / "a" / "checkpoints" / "last").rng
    rank1 = {"torch_cpu": torch.Generator().manual_seed(5).get_state()}
    mixed = {**saved, **{f"rank1.{k}": v for k, v in rank1.items()}}
    assert torch.equal(rank_rng_states(mixed, 0)["torch_cpu"], saved["torch_cpu"])
    assert torch.equal(rank_rng_states(mixed, 1)["torch_cpu"], rank1["torch_cpu"])
    assert set(rank_rng_states(mixed, 0)) == set(saved)


# --------------------------------------------------------------------------- two CPU ranks


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(config: Path, port: int, *extra: str, out: Path) -> list[subprocess.Popen]:
    """Two ranks of `heed train CONFIG`, with the variables torchrun would set; rank r's stdout and
    stderr go to out/r{r}.out and out/r{r}.err. Rank 1 is pointed at its own output directory
    (out/rank1-output), which must stay absent: only rank 0 writes."""
    procs = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1",
               "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
        own = ["--output-dir", str(out / "rank1-output")] if rank == 1 else []
        with open(out / f"r{rank}.out", "w") as stdout, open(out / f"r{rank}.err", "w") as stderr:
            procs.append(subprocess.Popen(  # the child keeps its own copies of the two files
                [sys.executable, "-m", "heed", "train", str(config), "--no-progress", *own, *extra], env=env,
                stdout=stdout, stderr=stderr))
    return procs


def wait_all(procs: list[subprocess.Popen], seconds: float) -> list[int]:
    """Exit codes; kills both and fails if either is still running after `seconds` (a hang)."""
    deadline = time.monotonic() + seconds
    try:
        return [p.wait(timeout=max(deadline - time.monotonic(), 0.1)) for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"a rank was still running after {seconds} s")


def train_losses(output_dir: Path) -> list[tuple[int, float]]:
    lines = (output_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [(r["step"], r["loss"]) for r in map(json.loads, lines) if r["kind"] == "train"]


def wait_for(path_ready, procs: list[subprocess.Popen], seconds: float = 120) -> None:
    """Poll until `path_ready()` is true; fail if a rank exits first or time runs out."""
    deadline = time.monotonic() + seconds
    while not path_ready():
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            for p in procs:
                p.kill()
            pytest.fail("the ranks ended, or took too long, before the point the test waits for")
        time.sleep(0.02)


def logged_past(output_dir: Path, step: int) -> bool:
    """Whether metrics.jsonl holds a training step after `step` (False while a line is half-written)."""
    try:
        return any(logged > step for logged, _ in train_losses(output_dir))
    except (FileNotFoundError, json.JSONDecodeError):
        return False


def two_ranks_equal_one_process(mapping: dict, tmp_path: Path, steps: int) -> None:
    """Train `mapping` (output_dir tmp_path/two) on two CPU ranks, and as one process accumulating
    two batches (tmp_path/one): the same loss at every step 1..steps, to 1e-5; rank 1 writes nothing."""
    config = tmp_path / "two.yaml"
    config.write_text(yaml.safe_dump(mapping), encoding="utf-8")
    one = {**mapping, "output_dir": str(tmp_path / "one"), "train": {**mapping["train"], "accumulate": 2}}
    assert train(config_from_dict(one)).steps == steps

    procs = launch(config, free_port(), out=tmp_path)
    assert wait_all(procs, 120) == [0, 0], (tmp_path / "r0.err").read_text(encoding="utf-8")
    two, single = train_losses(tmp_path / "two"), train_losses(tmp_path / "one")
    assert [s for s, _ in two] == [s for s, _ in single] == list(range(1, steps + 1))
    assert max(abs(a - b) for (_, a), (_, b) in zip(two, single)) < 1e-5
    assert not (tmp_path / "rank1-output").exists()


def test_two_cpu_ranks_equal_one_process_accumulating_two_and_resume_after_kill_and_ctrl_c(tmp_path, tiny_config):
    # batch_tokens 400: 9 batches an epoch, so each epoch's last update has one batch and rank 1 none.
    settings = {"epochs": 4, "log_every": 1, "eval_every": 8, "max_steps": 20}
    mapping = tiny_config(tmp_path / "two", **settings)
    mapping["data"]["batch_tokens"] = 400
    mapping["model"]["dropout"] = 0.0  # the ranks' dropout masks differ from one process's
    config = tmp_path / "two.yaml"
    config.write_text(yaml.safe_dump(mapping), encoding="utf-8")
    one = {**mapping, "output_dir": str(tmp_path / "one"), "train": {**mapping["train"], "accumulate": 2}}
    reference = train(config_from_dict(one))
    assert reference.steps == 20

    # kill -9 both ranks once the step-8 checkpoint is written: nothing saves, the checkpoint stands.
    last = tmp_path / "two" / "checkpoints" / "last"
    procs = launch(config, free_port(), out=tmp_path)
    wait_for(last.is_dir, procs)
    for p in procs:
        p.kill()
    assert wait_all(procs, 30) == [-signal.SIGKILL, -signal.SIGKILL]
    assert load_checkpoint(last).trainer.step == 8

    # Resumed, then Ctrl-C to rank 0 only, once it has logged a step past the checkpoint: both ranks
    # stop at the same step, rank 0 saves.
    procs = launch(config, free_port(), "--resume", out=tmp_path)
    wait_for(lambda: logged_past(tmp_path / "two", 8), procs)
    procs[0].send_signal(signal.SIGINT)
    codes = wait_all(procs, 120)
    errors = (tmp_path / "r0.err").read_text(encoding="utf-8")
    assert codes == [130, 130], (codes, errors, (tmp_path / "r1.err").read_text(encoding="utf-8"))
    stopped = load_checkpoint(last).trainer
    assert 9 <= stopped.step < 20 and stopped.world_size == 2
    assert f"interrupted at step {stopped.step}" in errors
    assert "resume with: torchrun --nproc-per-node 2 -m heed train" in errors  # a command that works as printed
    assert (tmp_path / "r1.out").read_text(encoding="utf-8") == (tmp_path / "r1.err").read_text(encoding="utf-8") == ""

    # One process may not resume a two-process run: one clear line.
    with pytest.raises(HeedError, match="was trained by 2 processes and this run has 1; resume with 2 processes"):
        train(config_from_dict(mapping), resume=True)

    codes = wait_all(launch(config, free_port(), "--resume", out=tmp_path), 120)
    assert codes == [0, 0], (tmp_path / "r0.err").read_text(encoding="utf-8")
    two, single = train_losses(tmp_path / "two"), train_losses(tmp_path / "one")
    assert [s for s, _ in two] == [s for s, _ in single] == list(range(1, 21))
    assert max(abs(a - b) for (_, a), (_, b) in zip(two, single)) < 1e-5

    # Rank 1 wrote nothing and said nothing; rank 0 wrote the run.
    assert not (tmp_path / "rank1-output").exists()
    assert (tmp_path / "r1.out").read_text(encoding="utf-8") == ""
    assert (tmp_path / "r1.err").read_text(encoding="utf-8") == ""
    assert "model written to" in (tmp_path / "r0.out").read_text(encoding="utf-8")
    assert {p.name for p in (tmp_path / "two").iterdir()} >= {"checkpoints", "model", "metrics.jsonl"}
    assert not (tmp_path / "two" / ".heed.lock").exists()


def test_a_failed_collective_is_one_line_naming_the_rank():
    from heed.plumbing.distributed import PeerFailed, collective_errors

    with (pytest.raises(PeerFailed, match=r"^rank 1: lost the other processes \(Connection closed by peer\)"),
          collective_errors(World(rank=1, size=2, local_rank=1))):
        raise RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer\nmore detail")
    # one process: nothing to blame on peers
    with pytest.raises(RuntimeError, match="a bug of one process"), collective_errors(World()):
        raise RuntimeError("a bug of one process")


def test_two_cpu_ranks_on_a_prepared_corpus_equal_one_process_accumulating_two(tmp_path, tiny_config):
    """The large-corpus path: each rank reads its own batches from the shards (several of them, and
    windows smaller than the corpus), and together they train what one process does."""
    from heed.data.prepare import prepare

    mapping = tiny_config(tmp_path / "two", epochs=2, log_every=1, max_steps=8)
    mapping["model"]["dropout"] = 0.0
    result = prepare(config_from_dict(mapping), tmp_path / "corpus", shard_tokens=1500)
    assert result.shards > 2 and result.sentences > 2 * 70  # several shards, several windows of 70 pairs
    section = {k: v for k, v in mapping["data"].items() if k not in ("train", "test")}
    mapping["data"] = {**section, "prepared": str(tmp_path / "corpus"), "pool_sentences": 70, "batch_tokens": 400}
    two_ranks_equal_one_process(mapping, tmp_path, steps=8)


def test_two_cpu_ranks_train_a_transformer_as_one_process_accumulating_two(tmp_path, tiny_config):
    """DDP over the other family: a Transformer with tied embeddings (one table, two uses, reduced
    once) under the warm-up schedule trains on two ranks what one process trains accumulating two
    batches, loss by loss and weight by weight."""
    mapping = tiny_config(tmp_path / "two", epochs=2, log_every=1, max_steps=8,
                          schedule={"name": "warmup", "warmup_steps": 4})
    mapping["model"] = {**TRANSFORMER, "dropout": 0.0, "attention_dropout": 0.0, "tie_embeddings": True}
    mapping["data"]["batch_tokens"] = 400
    two_ranks_equal_one_process(mapping, tmp_path, steps=8)
    weights_two = load_weights(tmp_path / "two" / "model" / WEIGHTS_FILE)
    weights_one = load_weights(tmp_path / "one" / "model" / WEIGHTS_FILE)
    assert weights_two.keys() == weights_one.keys() and any("self_attn" in k for k in weights_one)
    for name, tensor in weights_one.items():
        torch.testing.assert_close(weights_two[name], tensor, rtol=0, atol=1e-5, msg=name)


def test_processes_trains_two_ranks_and_a_ctrl_c_prints_hints_that_work(tmp_path, tiny_config):
    """`heed train --processes 2`, then a Ctrl-C at the terminal (SIGINT to the whole foreground
    process group): the ranks stop together, nothing prints a traceback, and both printed commands
    run as printed (the resume needs the same number of processes; the score command names
    train.max_steps once)."""
    import shlex

    mapping = tiny_config(tmp_path / "run", epochs=4, log_every=1, eval_every=8)
    mapping["data"]["batch_tokens"] = 400
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(mapping), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    argv = ["train", str(config), "--set", "train.max_steps=20", "--no-progress", "--processes", "2"]
    with open(tmp_path / "err", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "heed", *argv], env=env, stdout=subprocess.DEVNULL,
                                stderr=err, start_new_session=True)
    wait_for(lambda: logged_past(tmp_path / "run", 9), [proc])
    os.killpg(proc.pid, signal.SIGINT)
    code = wait_all([proc], 120)
    errors = (tmp_path / "err").read_text(encoding="utf-8")
    assert code == [130], errors
    assert "Traceback" not in errors
    lines = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in errors.splitlines() if ": " in line}
    resume = shlex.split(lines["resume with"])
    assert resume == ["heed", *argv, "--resume"]
    score = shlex.split(lines["score the best model on the test set with"])
    assert sum(arg.startswith("train.max_steps=") for arg in score) == 1
    assert load_checkpoint(tmp_path / "run" / "checkpoints" / "last").trainer.world_size == 2

    done = subprocess.run([sys.executable, "-m", "heed", *resume[1:]], env=env, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr
    assert [s for s, _ in train_losses(tmp_path / "run")] == list(range(1, 21))
    assert "Traceback" not in done.stderr


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_the_ranks_end_with_a_launcher_killed_outright(tmp_path, tiny_config):
    """kill -9 of `heed train --processes 2` (which it cannot pass on) ends both ranks at once: they
    do not train on to the end and dump C++ stacks."""
    mapping = tiny_config(tmp_path / "run", epochs=1000, log_every=1, eval_every=1000)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(mapping), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    with open(tmp_path / "err", "w") as err:
        launcher = subprocess.Popen([sys.executable, "-m", "heed", "train", str(config), "--no-progress",
                                     "--processes", "2"], env=env, stdout=subprocess.DEVNULL, stderr=err)
    ranks: list[int] = []
    try:
        wait_for(lambda: logged_past(tmp_path / "run", 3), [launcher])
        ranks = _children(launcher.pid)
        assert len(ranks) == 2, ranks
        launcher.kill()
        launcher.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(_alive(r) for r in ranks) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(r) for r in ranks), (tmp_path / "err").read_text(encoding="utf-8")
    finally:  # whatever happened, nothing is left running
        launcher.kill()
        for rank in ranks:
            with contextlib.suppress(ProcessLookupError):
                os.kill(rank, signal.SIGKILL)


def test_a_rank_whose_peers_never_come_says_it_waits_and_gives_up_in_one_line(tmp_path, tiny_config):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(tiny_config(tmp_path / "run")), encoding="utf-8")
    env = {**os.environ, "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port()), "HEED_JOIN_TIMEOUT": "7",
           "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "heed", "train", str(config), "--no-progress"], env=env,
                          capture_output=True, text=True, timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 2 and lines[0].startswith("rank 1 of 2: waiting for the other processes"), done.stderr
    assert lines[1].startswith("error: rank 1 of 2: the other processes did not join") and "within 7 s" in lines[1]
