"""Nothing a user does crashes training, hangs it or corrupts its output: divergence, SIGTERM, two runs
in one directory, a file where the directory should be, changed data on resume, resuming from the
printed command."""
import hashlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
import yaml
from rich.console import Console
from safetensors.torch import load_file
from typer.testing import CliRunner

import heed.train.log
from heed.checkpoint import load_checkpoint, read_meta
from heed.cli import app
from heed.config import config_from_dict
from heed.errors import HeedError
from heed.nn.rnn.seq2seq import Seq2Seq
from heed.plumbing.lock import LOCK_FILE, RunLock
from heed.train import Trainer, data_fingerprint, train

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def strict_records(path):
    """metrics.jsonl read as strict JSON: a bare NaN or Infinity fails the test."""
    def reject(name):
        raise AssertionError(f"{path}: non-standard JSON constant {name}")

    return [json.loads(line, parse_constant=reject) for line in path.read_text(encoding="utf-8").splitlines()]


def losses(output_dir):
    return [(r["step"], r["loss"]) for r in strict_records(output_dir / "metrics.jsonl") if r["kind"] == "train"]


def saved_step(directory):
    return read_meta(directory)["step"]


def all_weights_finite(output_dir):
    files = list(output_dir.rglob("*.safetensors"))
    return all(torch.isfinite(t).all() for f in files for t in load_file(str(f)).values() if t.is_floating_point())


def write_config(path, data):
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.fixture
def nan_loss_at(monkeypatch):
    """`nan_loss_at(k)`: the k-th training step's loss is NaN (as if it overflowed); dev losses are not touched."""
    def install(bad_step):
        real = Seq2Seq.loss
        calls = []

        def loss(self, batch, **kwargs):
            value = real(self, batch, **kwargs)
            if torch.is_grad_enabled():  # a training step, not the dev loss (inference mode)
                calls.append(1)
                if len(calls) == bad_step:
                    return value._replace(total=value.total * float("nan"))
            return value

        monkeypatch.setattr(Seq2Seq, "loss", loss)
    return install


# ------------------------------------------------------------------------------ divergence


def test_a_nan_loss_stops_the_run_at_that_step_and_keeps_the_last_good_checkpoint(tmp_path, make_config,
                                                                                    nan_loss_at):
    nan_loss_at(4)
    out = tmp_path / "a"
    with pytest.raises(HeedError) as caught:
        train(make_config(out, eval_every=3, log_every=10, max_steps=20))
    assert str(caught.value) == (f"training diverged at step 4: the loss is nan; lower train.lr or train.clip "
                                 f"(now 1); the last good checkpoint is {out / 'checkpoints' / 'last'} (step 3)")
    for name in ("checkpoints/last", "checkpoints/best", "model"):
        assert saved_step(out / name) == 3, name
    assert all_weights_finite(out)
    assert not (out / LOCK_FILE).exists()
    load_checkpoint(out / "checkpoints" / "last")  # resumable as it is


def test_on_a_gpu_the_loss_is_checked_before_a_save_and_still_names_the_first_bad_step(tmp_path, make_config,
                                                                                       nan_loss_at):
    """No wait on the device every step: the flag is read at the next log line or save (step 6 here)."""
    nan_loss_at(5)
    out = tmp_path / "a"
    with Trainer(make_config(out, eval_every=3, log_every=10, max_steps=20)) as trainer:
        trainer._check_loss_every_step = False  # as on CUDA
        with pytest.raises(HeedError, match=r"^training diverged at step 5: the loss is nan; .* \(step 3\)$"):
            trainer.run()
    assert trainer.state.step == 6
    assert saved_step(out / "checkpoints" / "last") == 3 and all_weights_finite(out)


def test_a_huge_learning_rate_exits_2_in_one_line_and_writes_nothing_non_finite(tmp_path, tiny_config):
    """The issue's case: lr 1e38 and eval_every < log_every used to save an all-NaN best model, exit 0."""
    out = tmp_path / "out"
    path = write_config(tmp_path / "c.yaml", tiny_config(out, lr=1e38, eval_every=1, log_every=5))
    result = invoke("train", path)
    assert result.exit_code == 2, result.output
    message = result.stderr.strip().splitlines()[-1]  # after the run's own report
    assert message.startswith("error: training diverged at step ") and "Traceback" not in result.stderr, message
    assert "lower train.lr" in message and "Traceback" not in result.output
    assert all_weights_finite(out)
    if (out / "metrics.jsonl").exists():
        strict_records(out / "metrics.jsonl")


def test_metrics_jsonl_writes_non_finite_numbers_as_null(tmp_path):
    log = heed.train.log.TrainLog(tmp_path, None, total_steps=1, start_step=0, progress=False)
    log.record({"kind": "dev", "step": 1, "loss": float("nan"), "ppl": float("inf"), "bleu": 1.5})
    [entry] = strict_records(tmp_path / "metrics.jsonl")
    assert (entry["loss"], entry["ppl"], entry["bleu"]) == (None, None, 1.5)


def test_metrics_of_a_whole_run_are_strict_json(trained_run):
    assert {r["kind"] for r in strict_records(trained_run / "metrics.jsonl")} == {"train", "dev", "test"}


# ------------------------------------------------------------------------------ SIGTERM


def test_sigterm_saves_last_says_how_to_resume_and_exits_143(tmp_path, tiny_config):
    out = tmp_path / "out"
    path = write_config(tmp_path / "c.yaml", tiny_config(out, epochs=500, log_every=1))
    stderr = tmp_path / "stderr.txt"
    env = {**os.environ, "COLUMNS": "300"}
    with open(stderr, "w") as err:  # a file, not a pipe: a full pipe would block the run mid-step
        proc = subprocess.Popen([sys.executable, "-m", "heed", "train", str(path), "--no-progress"],
                                stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        deadline = time.monotonic() + 120
        while not ((out / "metrics.jsonl").exists() and (out / "metrics.jsonl").read_text()):
            assert proc.poll() is None, stderr.read_text()
            assert time.monotonic() < deadline, "no step logged in 120 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 143, stderr.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = stderr.read_text()
    assert "SIGTERM: stopping after this step" in text and "Traceback" not in text
    step = load_checkpoint(out / "checkpoints" / "last").trainer.step
    assert step >= 1 and f"interrupted at step {step}; saved the checkpoint" in text
    assert f"resume with: heed train {path} --no-progress --resume" in text
    assert not (out / LOCK_FILE).exists()


# ------------------------------------------------------------------------------ the lock


def hold_lock(directory):
    """Another process that holds `directory`'s run lock until killed."""
    code = ("import sys, time; from heed.plumbing.lock import RunLock; lock = RunLock(sys.argv[1]).__enter__(); "
            "print('locked', flush=True); time.sleep(300)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(directory)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_a_second_run_into_a_locked_directory_is_refused_naming_the_holder(tmp_path, make_config):
    out = tmp_path / "out"
    out.mkdir()
    holder = hold_lock(out)
    try:
        with pytest.raises(HeedError, match=f"^{out}: another heed training \\(pid {holder.pid} on "
                                            f"{socket.gethostname()}\\) is writing into this output directory"):
            train(make_config(out, max_steps=2))
        assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]  # nothing written beside the lock
    finally:
        holder.kill()
        holder.wait()
    # kill -9 left the file but no flock: the next run takes it over, says so, and removes it at the end
    console = Console(record=True, width=300)
    result = train(make_config(out, max_steps=2), console=console)
    assert result.steps == 2
    assert f"took over the lock left by pid {holder.pid}" in console.export_text()
    assert not (out / LOCK_FILE).exists()

    holder = hold_lock(out)
    try:
        with pytest.raises(HeedError, match=f"pid {holder.pid}"):
            train(make_config(out, max_steps=4), resume=True)
    finally:
        holder.kill()
        holder.wait()
    assert saved_step(out / "checkpoints" / "last") == 2


def test_the_lock_is_exclusive_and_released(tmp_path):
    with RunLock(tmp_path) as lock:
        assert lock.note is None
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()} {socket.gethostname()}\n"
        with pytest.raises(HeedError, match=f"pid {os.getpid()}"):
            RunLock(tmp_path).__enter__()
    assert not (tmp_path / LOCK_FILE).exists()
    with RunLock(tmp_path):
        pass


# ------------------------------------------------------------------------------ the directory


def test_an_output_dir_that_is_a_file_is_a_one_line_error(tmp_path, tiny_config):
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    path = write_config(tmp_path / "c.yaml", tiny_config(afile))
    result = invoke("train", path)
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: output_dir {afile} is a file; choose a directory"
    assert afile.read_text() == "keep me"
    inside = write_config(tmp_path / "d.yaml", tiny_config(afile / "run"))
    result = invoke("train", inside)
    assert result.exit_code == 2
    assert result.stderr.strip().startswith(f"error: output_dir {afile / 'run'}: cannot create it (")


def test_a_missing_corpus_leaves_no_output_directory(tmp_path, tiny_config):
    data = tiny_config(tmp_path / "out")
    data["data"]["train"] = {"tsv": str(tmp_path / "gone.tsv")}
    with pytest.raises(HeedError, match="gone.tsv"):
        train(config_from_dict(data))
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------ changed data


@pytest.fixture
def own_corpus(tmp_path, tiny_corpus, tiny_config):
    """A config whose train/dev/test files are copies this test may change."""
    def make(output_dir, **train_options):
        data = tiny_config(output_dir, **train_options)
        for split in ("train", "dev", "test"):
            copy = tmp_path / "corpus" / f"{split}.tsv"
            if not copy.exists():
                copy.parent.mkdir(exist_ok=True)
                shutil.copyfile(tiny_corpus[split], copy)
            data["data"][split] = {"tsv": str(copy)}
        return data
    return make


def test_resume_onto_a_changed_corpus_is_refused_unless_allowed(tmp_path, own_corpus):
    out = tmp_path / "out"
    train(config_from_dict(own_corpus(out, max_steps=2)))
    tsv = tmp_path / "corpus" / "train.tsv"
    before = tsv.stat().st_size
    lines = tsv.read_text(encoding="utf-8").splitlines(keepends=True)
    tsv.write_text("".join(lines[:150]), encoding="utf-8")
    after = tsv.stat().st_size
    more = config_from_dict(own_corpus(out, max_steps=4))
    with pytest.raises(HeedError) as caught:
        train(more, resume=True)
    assert str(caught.value) == (f"data.train.tsv {tsv} changed since the checkpoint ({before:,} -> {after:,} bytes); "
                                 "resume with --allow-data-change to continue anyway")
    assert saved_step(out / "checkpoints" / "last") == 2
    assert train(more, resume=True, allow_data_change=True).steps == 4
    # the checkpoint now records the data it went on with: the next resume needs no permission
    assert train(config_from_dict(own_corpus(out, max_steps=5)), resume=True).steps == 5


def test_same_size_other_content_is_a_change_too_and_the_cli_names_the_option(tmp_path, own_corpus):
    out = tmp_path / "out"
    path = write_config(tmp_path / "c.yaml", own_corpus(out, max_steps=2))
    assert invoke("train", path).exit_code == 0
    dev = tmp_path / "corpus" / "dev.tsv"
    text = dev.read_text(encoding="utf-8")
    dev.write_text(text.replace("1", "2", 1), encoding="utf-8")
    result = invoke("train", path, "--set", "train.max_steps=3", "--resume")
    assert result.exit_code == 2
    assert f"data.dev.tsv {dev} changed since the checkpoint (same size, " in result.stderr
    assert invoke("train", path, "--set", "train.max_steps=3", "--resume", "--allow-data-change").exit_code == 0


def test_a_checkpoint_without_a_fingerprint_resumes_unchecked(tmp_path, own_corpus):
    out = tmp_path / "out"
    train(config_from_dict(own_corpus(out, max_steps=2)))
    trainer_json = out / "checkpoints" / "last" / "trainer.json"
    state = json.loads(trainer_json.read_text())
    assert set(state["trainer"]["data"]) == {"data.train.tsv", "data.dev.tsv", "data.test.tsv"}
    del state["trainer"]["data"]  # as written by heed before fingerprints
    trainer_json.write_text(json.dumps(state))
    from model_files import rehash

    rehash(trainer_json.parent)
    tsv = tmp_path / "corpus" / "train.tsv"
    tsv.write_text("".join(tsv.read_text(encoding="utf-8").splitlines(keepends=True)[:150]), encoding="utf-8")
    assert train(config_from_dict(own_corpus(out, max_steps=3)), resume=True).steps == 3


def test_fingerprint_is_size_and_sha256_of_each_file_or_the_task_settings(tmp_path, make_config):
    big = tmp_path / "big.tsv"
    big.write_bytes(b"a\tb\n" * 700_000)  # several read chunks
    data = make_config(tmp_path / "o").data.model_copy(update={"train": make_config(tmp_path).data.train.model_copy(
        update={"tsv": big}), "dev": None, "test": None})
    assert data_fingerprint(data) == {"data.train.tsv": {"bytes": 2_800_000,
                                                         "sha256": hashlib.sha256(big.read_bytes()).hexdigest()}}
    dates = config_from_dict({"data": {"task": "dates", "dates": {"n_train": 50}}}).data
    assert data_fingerprint(dates)["data.dates"]["n_train"] == 50


# ------------------------------------------------------------------------------ the resume hint


def interrupt_at(monkeypatch, step):
    real_step = Trainer._step

    def step_then_interrupt(self, batch, window):
        real_step(self, batch, window)
        if self.state.step + 1 == step:  # as if Ctrl-C came during this update
            self.request_stop()

    monkeypatch.setattr(Trainer, "_step", step_then_interrupt)


def printed(stderr, prefix):
    [line] = [line for line in stderr.splitlines() if line.startswith(prefix)]
    return shlex.split(line[len(prefix):])


def test_the_printed_resume_command_continues_this_run_exactly(tmp_path, monkeypatch, tiny_config):
    config = write_config(tmp_path / "my config.yaml", tiny_config(tmp_path / "ignored", epochs=2))
    overrides = ["--set", "train.log_every=1", "--set", "train.eval_every=4", "--set", "train.lr=0.02"]
    straight = invoke("train", config, *overrides, "--output-dir", tmp_path / "straight")
    assert straight.exit_code == 0, straight.output

    out = tmp_path / "my runs" / "x"
    interrupt_at(monkeypatch, 6)
    stopped = invoke("train", config, *overrides, "--output-dir", out)
    monkeypatch.undo()
    assert stopped.exit_code == 130, stopped.output
    command = printed(stopped.stderr, "resume with: ")
    assert command == ["heed", "train", str(config), *overrides, "--output-dir", str(out), "--resume"]
    resumed = invoke(*command[1:])
    assert resumed.exit_code == 0, resumed.output
    assert losses(out) == losses(tmp_path / "straight") and len(losses(out)) > 6
    assert not (tmp_path / "ignored").exists()


def test_an_interrupted_run_says_how_to_score_the_test_set(tmp_path, monkeypatch, tiny_config):
    """A TSV test set: resuming with no steps left scores it and leaves `last` for a later resume."""
    out = tmp_path / "out"
    config = write_config(tmp_path / "c.yaml", tiny_config(out, eval_every=2, log_every=1))
    interrupt_at(monkeypatch, 3)
    stopped = invoke("train", config)
    monkeypatch.undo()
    assert stopped.exit_code == 130
    assert "the test set was not scored" in stopped.stderr
    command = printed(stopped.stderr, "score the best model on the test set with: ")
    assert command == ["heed", "train", str(config), "--set", "train.max_steps=3", "--resume"]
    assert invoke(*command[1:]).exit_code == 0
    tests = [r for r in strict_records(out / "metrics.jsonl") if r["kind"] == "test"]
    assert [r["step"] for r in tests] == [2]  # the best model, evaluated at step 2
    assert saved_step(out / "checkpoints" / "last") == 3
    assert invoke("train", config, "--set", "train.max_steps=5", "--resume").exit_code == 0


def test_with_test_files_the_score_hint_is_heed_evaluate(tmp_path, monkeypatch, tiny_corpus, tiny_config):
    data = tiny_config(tmp_path / "out", eval_every=2)
    data["data"]["test"] = {"src": str(tiny_corpus["test_src"]), "tgt": str(tiny_corpus["test_ref"])}
    config = write_config(tmp_path / "c.yaml", data)
    interrupt_at(monkeypatch, 3)
    stopped = invoke("train", config)
    monkeypatch.undo()
    command = printed(stopped.stderr, "score the best model on the test set with: ")
    assert command == ["heed", "evaluate", str(tmp_path / "out" / "model"), "--src", str(tiny_corpus["test_src"]),
                       "--ref", str(tiny_corpus["test_ref"])]
    scored = invoke(*command[1:])
    assert scored.exit_code == 0 and "BLEU = " in scored.stdout


def test_a_run_killed_between_saving_last_and_best_resumes_to_the_same_best(tmp_path, make_config, monkeypatch):
    """An improving evaluation saves last, then best, then model/. Killed after last (found by
    bench/studies/kill_resume.py: --resume then never wrote best, and model/ ended with other weights)."""
    options = dict(max_steps=8, eval_every=4, log_every=2)
    train(make_config(tmp_path / "ref", **options))
    original = Trainer._save

    def dies_before_best(self, target, window):
        if target.name == "best":
            raise KeyboardInterrupt  # the process ends here
        return original(self, target, window)

    monkeypatch.setattr(Trainer, "_save", dies_before_best)
    with pytest.raises(KeyboardInterrupt):
        train(make_config(tmp_path / "run", **options))
    monkeypatch.setattr(Trainer, "_save", original)
    assert (tmp_path / "run" / "checkpoints" / "last").is_dir()
    assert not (tmp_path / "run" / "checkpoints" / "best").exists() and not (tmp_path / "run" / "model").exists()

    train(make_config(tmp_path / "run", **options), resume=True)

    def rows(run):
        return [{k: v for k, v in json.loads(line).items() if k not in ("time", "tok_per_s")}
                for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]

    assert rows(tmp_path / "run") == rows(tmp_path / "ref")
    for rel in ("model/model.safetensors", "checkpoints/best/model.safetensors"):
        want, got = load_file(str(tmp_path / "ref" / rel)), load_file(str(tmp_path / "run" / rel))
        assert want.keys() == got.keys() and all(want[k].equal(got[k]) for k in want), rel
