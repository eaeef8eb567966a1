import json
import math
from pathlib import Path

import pytest
import torch

from heed.config import ScheduleConfig, config_from_dict
from heed.data.codec import Codec, split_corpus
from heed.data.corpus import Pair
from heed.errors import ConfigError, HeedError
from heed.plumbing.runtime import resolve_device
from heed.train import LRSchedule, Trainer, train


def records(output_dir, kind):
    lines = (output_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def losses(output_dir):
    return [(r["step"], r["loss"]) for r in records(output_dir, "train")]


def without_timing(entries):
    return [{k: v for k, v in e.items() if k not in ("tok_per_s", "time")} for e in entries]


# ------------------------------------------------------------------------------------ resume


def test_resume_after_max_steps_continues_the_identical_loss_sequence(tmp_path, make_config):
    common = {"epochs": 2, "log_every": 1, "eval_every": 7}
    straight = train(make_config(tmp_path / "a", **common))
    train(make_config(tmp_path / "b", **common, max_steps=5))  # stops mid-epoch
    resumed = train(make_config(tmp_path / "b", **common), resume=True)
    assert resumed.steps == straight.steps > 5
    assert losses(tmp_path / "b") == losses(tmp_path / "a")
    assert [s for s, _ in losses(tmp_path / "a")] == list(range(1, straight.steps + 1))


def test_the_first_speed_after_a_resume_counts_only_this_runs_tokens(tmp_path, make_config):
    """The checkpoint saves the log window's tokens (for the loss), not its clock: the first line after
    a resume used to divide 9 saved steps' tokens by 1 step's time, 10x the real speed."""
    common = {"epochs": 2, "log_every": 10, "eval_every": 1000}
    train(make_config(tmp_path / "a", **common, max_steps=19))  # the window holds steps 11-19 when it stops
    train(make_config(tmp_path / "a", **common), resume=True)
    speeds = {r["step"]: r["tok_per_s"] for r in records(tmp_path / "a", "train")}
    assert sorted(speeds) == [10, 20]
    assert speeds[20] < 4 * speeds[10], speeds


def test_a_time_budget_stops_training_and_still_leaves_an_evaluated_model(tmp_path, make_config):
    # A budget far below one step's time: the run stops after its first update, evaluates, saves.
    result = train(make_config(tmp_path / "a", epochs=5, log_every=1, max_minutes=1e-9))
    assert (result.steps, result.stop_reason) == (1, "max_minutes")
    assert result.model_dir is not None and (result.model_dir / "model.safetensors").is_file()
    assert [s for s, _ in losses(tmp_path / "a")] == [1]


def test_resuming_with_no_steps_left_trains_nothing(tmp_path, make_config):
    train(make_config(tmp_path / "a", max_steps=3, log_every=1))
    again = train(make_config(tmp_path / "a", max_steps=3, log_every=1), resume=True)
    assert (again.steps, again.stop_reason) == (3, "max_steps")
    assert [s for s, _ in losses(tmp_path / "a")] == [1, 2, 3]


def test_resume_after_an_interrupt_continues_the_identical_sequence(tmp_path, monkeypatch, make_config):
    """Ctrl-C path: stop between two evaluations, in the middle of a log window, with a plateau
    schedule that has already lowered the rate (its state must survive too)."""
    common = {"epochs": 3, "log_every": 2, "eval_every": 3, "lr": 0.02,
              "schedule": {"name": "plateau", "patience": 0, "factor": 0.5}}
    straight = train(make_config(tmp_path / "a", **common))

    real_step = Trainer._step

    def step_then_interrupt(self, batch, window):
        real_step(self, batch, window)
        if self.state.step + 1 == 8:  # this is update 8: as if Ctrl-C came during it
            self.request_stop()

    monkeypatch.setattr(Trainer, "_step", step_then_interrupt)
    stopped = train(make_config(tmp_path / "b", **common))
    monkeypatch.undo()
    assert (stopped.stop_reason, stopped.steps) == ("interrupted", 8)
    resumed = train(make_config(tmp_path / "b", **common), resume=True)
    assert resumed.steps == straight.steps
    assert losses(tmp_path / "b") == losses(tmp_path / "a")
    assert without_timing(records(tmp_path / "b", "dev")) == without_timing(records(tmp_path / "a", "dev"))
    assert len({r["lr"] for r in records(tmp_path / "a", "train")}) > 1  # the plateau did act


def test_resume_needs_a_checkpoint_and_a_fresh_run_needs_an_unused_directory(tmp_path, trained_run, make_config):
    with pytest.raises(HeedError, match="no checkpoint to resume from"):
        train(make_config(tmp_path / "empty"), resume=True)
    with pytest.raises(HeedError, match="holds a training run already; resume it with --resume"):
        train(make_config(trained_run))


def test_resume_with_another_model_is_refused(tmp_path, make_config, tiny_config):
    train(make_config(tmp_path / "a", max_steps=2))
    changed = config_from_dict(tiny_config(tmp_path / "a"), overrides=["model.hidden_size=32"])
    with pytest.raises(ConfigError, match="field 'model.hidden_size': is 16 in the checkpoint .* but 32 now"):
        train(changed, resume=True)


# ------------------------------------------------------------------------------- the run


def test_training_leaves_the_global_rng_as_it_was(tmp_path, make_config):
    before = torch.get_rng_state()
    threads = torch.get_num_threads()
    train(make_config(tmp_path / "a", max_steps=2))
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.get_num_threads() == threads


def test_same_seed_same_losses_other_seed_other_losses(tmp_path, make_config):
    train(make_config(tmp_path / "a", max_steps=3, log_every=1))
    train(make_config(tmp_path / "b", max_steps=3, log_every=1))
    train(make_config(tmp_path / "c", max_steps=3, log_every=1, seed=2))
    assert losses(tmp_path / "a") == losses(tmp_path / "b") != losses(tmp_path / "c")


def test_metrics_jsonl_has_train_dev_and_test_records(trained_run):
    train_records = records(trained_run, "train")
    assert train_records and set(train_records[0]) >= {"step", "epoch", "loss", "lr", "tok_per_s", "time"}
    dev = records(trained_run, "dev")
    assert len(dev) == 2  # once per epoch by default
    assert set(dev[0]) >= {"step", "epoch", "loss", "bleu", "chrf", "exact_match", "best"}
    assert dev[-1]["epoch"] == 2.0
    assert records(trained_run, "test")
    assert (trained_run / "model" / "metrics.jsonl").read_text() == (trained_run / "metrics.jsonl").read_text()


def test_loss_goes_down(trained_run):
    train_records, dev = records(trained_run, "train"), records(trained_run, "dev")
    assert train_records[-1]["loss"] < train_records[0]["loss"]
    assert dev[-1]["loss"] < dev[0]["loss"]


def test_early_stopping_target_stops_at_the_first_evaluation_reaching_it(tmp_path, make_config):
    result = train(make_config(tmp_path / "a", epochs=5, eval_every=2,
                          early_stopping={"metric": "loss", "patience": None, "target": 1e9}))
    assert (result.stop_reason, result.steps) == ("target", 2)
    # a resumed finished run has nothing left to do
    again = train(make_config(tmp_path / "a", epochs=5, eval_every=2,
                         early_stopping={"metric": "loss", "patience": None, "target": 1e9}), resume=True)
    assert (again.stop_reason, again.steps) == ("target", 2)


def test_patience_stops_after_that_many_evaluations_without_improvement(tmp_path, make_config):
    result = train(make_config(tmp_path / "a", epochs=50, eval_every=1, lr=1e-9,
                          early_stopping={"metric": "exact_match", "patience": 2}))
    assert result.stop_reason == "early_stopping"
    assert result.steps == result.best_step + 2


def test_progress_lines_when_not_a_terminal(tmp_path, make_config):
    from rich.console import Console

    console = Console(record=True, force_terminal=False, width=200)
    train(make_config(tmp_path / "a", max_steps=4, log_every=2), console=console)
    text = console.export_text()
    assert "step 2/4 | epoch" in text and "tok/s" in text and "step 4/4" in text
    assert "dev @ step 4" in text and "model:" in text


def test_tensorboard_gets_the_same_scalars_when_installed(tmp_path, monkeypatch, make_config):
    import heed.train.log

    class FakeWriter:
        def __init__(self):
            self.scalars, self.closed = [], False

        def add_scalar(self, tag, value, step):
            self.scalars.append((tag, step))

        def close(self):
            self.closed = True

    writer = FakeWriter()
    monkeypatch.setattr(heed.train.log, "_tensorboard_writer", lambda directory: writer)
    train(make_config(tmp_path / "a", max_steps=2, log_every=1))
    assert {("train/loss", 1), ("train/loss", 2), ("train/lr", 1), ("dev/bleu", 2), ("test/exact_match", 2)} <= set(
        writer.scalars)
    assert writer.closed


@pytest.mark.cpu_bf16
def test_bf16_on_the_cpu_runs_the_model_under_autocast(tmp_path, make_config, monkeypatch):
    from rich.console import Console

    seen = []
    original = Trainer._step

    def spy(self, batch, window):
        seen.append((torch.is_autocast_enabled("cpu"), self.model.encoder.embedding.weight.dtype))
        with self._autocast():
            seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        return original(self, batch, window)

    monkeypatch.setattr(Trainer, "_step", spy)
    console = Console(record=True, force_terminal=False, width=200)
    result = train(make_config(tmp_path / "a", max_steps=3, log_every=1, bf16=True, device="cpu"), console=console)
    assert result.steps == 3
    assert seen[:2] == [(False, torch.float32), (True, torch.bfloat16)]  # float32 weights, bf16 inside
    assert "(bf16 autocast)" in console.export_text()
    assert all(math.isfinite(loss) for _, loss in losses(tmp_path / "a"))
    plain = train(make_config(tmp_path / "b", max_steps=3, log_every=1, device="cpu"))
    assert plain.steps == 3 and losses(tmp_path / "b") != losses(tmp_path / "a")


def test_cuda_requested_without_cuda_is_a_config_error():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ConfigError, match="field 'train.device': CUDA is not available"):
        resolve_device("cuda")


# ----------------------------------------------------------------------------- schedules


def test_warmup_rises_linearly_then_decays_as_inverse_sqrt():
    s = LRSchedule(ScheduleConfig(name="warmup", warmup_steps=4), base_lr=1.0, higher_is_better=True)
    assert [s.lr_at(k) for k in (1, 2, 4)] == [0.25, 0.5, 1.0]
    assert s.lr_at(16) == pytest.approx(0.5)  # sqrt(4 / 16)
    flat = LRSchedule(ScheduleConfig(name="warmup", warmup_steps=4, decay="none"), base_lr=1.0, higher_is_better=True)
    assert flat.lr_at(100) == 1.0


def test_plateau_lowers_the_rate_after_patience_evaluations_without_improvement():
    s = LRSchedule(ScheduleConfig(name="plateau", factor=0.5, patience=1, min_lr=0.2), base_lr=1.0,
                   higher_is_better=True)
    lowered = [s.after_eval(v) for v in (10, 11, 11, 11, 12, 5, 5, 5, 5)]
    assert lowered == [False, False, False, True, False, False, True, False, True]
    assert s.lr_at(1) == 0.2  # 1 -> 0.5 -> 0.25 -> floored at min_lr
    restored = LRSchedule(s.cfg, base_lr=1.0, higher_is_better=True)
    restored.load_state_dict(json.loads(json.dumps(s.state_dict())))
    assert restored.state_dict() == s.state_dict()


def test_plateau_on_loss_wants_lower_values():
    s = LRSchedule(ScheduleConfig(name="plateau", factor=0.5, patience=0), base_lr=1.0, higher_is_better=False)
    assert [s.after_eval(v) for v in (3.0, 2.0, 2.5)] == [False, False, True]


# ------------------------------------------------------------------------------ pipeline


def test_split_holds_out_exact_counts_and_no_source_leaks_into_training():
    pairs = [Pair(f"s{i % 40}", f"t{i}") for i in range(100)]  # every source appears 2 or 3 times
    corpora = split_corpus(pairs, dev=7, test=5, seed=3)
    assert (len(corpora.dev), len(corpora.test)) == (7, 5)
    held = {p.src for p in corpora.dev + corpora.test}
    assert not held & {p.src for p in corpora.train}
    assert split_corpus(pairs, dev=7, test=5, seed=3) == corpora
    assert split_corpus(pairs, dev=7, test=5, seed=4) != corpora
    with pytest.raises(ConfigError, match="only 40 distinct source sentences"):
        split_corpus(pairs, dev=30, test=10, seed=0)


def test_codec_round_trip_and_unknown_characters(tmp_path, make_config):
    cfg = make_config(tmp_path / "x")
    codec = Codec.build([Pair("ab c", "1-2"), Pair("ca", "2")], cfg.data)
    src_ids, tgt_ids = codec.encode_pairs([Pair("ab c", "1-2")])[0]
    assert len(src_ids) == 4 and codec.decode_tgt(tgt_ids) == (["1", "-", "2"], "1-2")
    assert 3 in codec.encode_src("z")  # UNK
    codec.save(tmp_path / "codec")
    loaded = Codec.load(tmp_path / "codec")
    assert (loaded.src_vocab, loaded.tgt_vocab) == (codec.src_vocab, codec.tgt_vocab)
    assert loaded.src_tokenizer.to_spec() == codec.src_tokenizer.to_spec()


def test_a_split_writes_the_held_out_sentences_for_evaluate(tmp_path, tiny_config):
    from heed.config import config_from_dict

    data = tiny_config(tmp_path / "run", max_steps=2)
    del data["data"]["dev"], data["data"]["test"]
    data["data"]["split"] = {"dev": 10, "test": 12}
    train(config_from_dict(data))
    held = tmp_path / "run" / "data"
    counts = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in sorted(held.iterdir())}
    assert counts == {"dev.src": 10, "dev.tgt": 10, "test.src": 12, "test.tgt": 12}
    train_sources = {line.split("\t")[0] for line in Path(data["data"]["train"]["tsv"]).read_text(
        encoding="utf-8").splitlines()}
    assert set((held / "test.src").read_text(encoding="utf-8").splitlines()) <= train_sources


def test_a_vocabulary_smaller_than_asked_is_reported(tmp_path, tiny_config):
    from rich.console import Console

    from heed.config import config_from_dict

    data = tiny_config(tmp_path / "run", max_steps=1)
    data["data"]["tokenizer"] = {"src": {"kind": "bpe", "vocab_size": 8000}, "tgt": {"kind": "char"}}
    console = Console(record=True, force_terminal=False, width=300)
    train(config_from_dict(data), console=console)
    text = console.export_text()
    assert "warning: data.tokenizer.src.vocab_size is 8000, but the training corpus supports only" in text


# ------------------------------------------------------------------------------ accumulation


def one_update(config, batches):
    """The gradients of one update made of `batches` to a fresh model (seeded as a run seeds it),
    and the update's (loss sum, target tokens) as the log window saw them. Gradients, not weights:
    Adam's first step is about lr * sign(gradient), which turns rounding in a near-zero gradient
    into a whole step."""
    from heed.plumbing.distributed import RankShare
    from heed.train.log import Window

    with Trainer(config) as trainer:  # built from the run's seed, as a run builds it
        window = Window(torch.zeros((), dtype=torch.float64))
        if batches:
            trainer._step(RankShare(batches, consumed=len(batches)), window)
    grads = {name: p.grad for name, p in trainer.model.named_parameters()}
    return grads, (float(window.loss_sum), window.tokens), trainer.data.train


def test_accumulating_two_batches_equals_one_batch_twice_the_size(tmp_path, make_config):
    """Padding never reaches the loss, so the batch of A's and B's sentences together has the
    summed loss of A and B: the update accumulating A then B (normalised by the update's tokens)
    must have the gradient of the update from that one batch."""
    from heed.data.batching import collate

    config = make_config(tmp_path / "a", accumulate=2, label_smoothing=0.1, clip=None)
    config = config.model_copy(update={"model": config.model.model_copy(update={"dropout": 0.0})})
    _, _, examples = one_update(config, [])  # just the encoded corpus
    by_length = sorted(range(len(examples)), key=lambda i: len(examples[i][0]))
    short, long = by_length[:5], by_length[-7:]  # A's sentences are padded wider in the one batch
    a, b = collate([examples[i] for i in short], short), collate([examples[i] for i in long], long)
    both = collate([examples[i] for i in short + long], short + long)
    assert both.src.shape[1] > min(a.src.shape[1], b.src.shape[1])  # one batch padded wider than A or B
    accumulated, (loss_ab, tokens_ab), _ = one_update(config, [a, b])
    single, (loss_both, tokens_both), _ = one_update(config, [both])
    assert tokens_ab == tokens_both == a.num_tgt_tokens + b.num_tgt_tokens
    assert loss_ab == pytest.approx(loss_both, rel=1e-6)
    assert set(accumulated) == set(single)
    for name, grad in single.items():
        assert grad.abs().max() > 0, name
        assert torch.allclose(accumulated[name], grad, rtol=1e-4, atol=1e-7), name
    # Not normalised per batch: the mean of A's and B's per-token gradients would differ.
    only_a, _, _ = one_update(config, [a])
    only_b, _, _ = one_update(config, [b])
    name = "decoder.rnn.weight_hh_l0"
    mean = (only_a[name] + only_b[name]) / 2
    assert not torch.allclose(mean, single[name], rtol=1e-3, atol=1e-6)
    weighted = (only_a[name] * a.num_tgt_tokens + only_b[name] * b.num_tgt_tokens) / tokens_both
    assert torch.allclose(weighted, single[name], rtol=1e-4, atol=1e-7)


def test_keep_checkpoints_keeps_the_last_n_evaluations_for_averaging(tmp_path, make_config, heed_cli):
    result = train(make_config(tmp_path / "a", eval_every=4, max_steps=20, keep_checkpoints=2))
    assert result.steps == 20
    kept = sorted(p.name for p in (tmp_path / "a" / "checkpoints").iterdir())
    assert kept == ["best", "last", "step-0000016", "step-0000020"]
    meta = json.loads((tmp_path / "a" / "checkpoints" / "step-0000016" / "heed.json").read_text())
    assert (meta["kind"], meta["step"]) == ("model", 16)
    recent = sorted(str(p) for p in (tmp_path / "a" / "checkpoints").glob("step-*"))
    done = heed_cli("average", *recent, "-o", tmp_path / "avg")
    assert done.exit_code == 0, done.output
    averaged = json.loads((tmp_path / "avg" / "heed.json").read_text())["averaged"]
    assert [a["step"] for a in averaged] == [16, 20]


def test_a_trainer_holds_its_whole_run_from_construction_and_gives_it_back_on_exit(tmp_path, make_config):
    """Construction opens the run (data, model, optimizer, state, log, the directory's lock and
    torch's thread count); leaving the `with` gives back what it held; run() trains once."""
    from heed.plumbing.lock import RunLock

    out = tmp_path / "run"
    threads = torch.get_num_threads()
    with Trainer(make_config(out, max_steps=2, threads=1)) as trainer:
        assert len(trainer.data.train) > 0 and trainer.state.step == 0 and trainer.log is not None
        assert sum(p.numel() for p in trainer.model.parameters()) > 0
        assert trainer.optimizer.param_groups[0]["params"][0] is next(trainer.model.parameters())
        assert torch.get_num_threads() == 1
        with pytest.raises(HeedError, match="another heed training"):  # the directory is locked from construction on
            RunLock(out).__enter__()
        assert trainer.run().steps == 2
        with pytest.raises(RuntimeError, match="trains once"):
            trainer.run()
    assert torch.get_num_threads() == threads
    with RunLock(out):  # given back
        pass


def test_a_trainer_that_cannot_open_gives_back_what_it_took(tmp_path, make_config):
    """A directory that holds a run is refused by the constructor, which leaves no lock behind."""
    from heed.plumbing.lock import RunLock

    out = tmp_path / "run"
    with Trainer(make_config(out, max_steps=1)) as trainer:
        trainer.run()
    threads = torch.get_num_threads()
    with pytest.raises(HeedError, match="holds a training run already"):
        Trainer(make_config(out, max_steps=1, threads=1))
    assert torch.get_num_threads() == threads
    with RunLock(out):
        pass
