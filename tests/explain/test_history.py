"""Attention over training (heed.explain.history, `heed attention --checkpoints` / `--entropy`): each kept
checkpoint reads the same pair and gives the attention that checkpoint gives alone; the entropy
curve is the log's."""
from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from heed.api import Translator
from heed.errors import HeedError
from heed.explain.history import attention_over_training, entropy_history, evenly, kept_checkpoints

SENTENCE = "3 march 1998"


@pytest.fixture(scope="module")
def history_run(make_config: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny RNN run that keeps a model directory at each of its evaluations (every 3 updates)."""
    from heed.train import train

    output = tmp_path_factory.mktemp("history") / "run"
    train(make_config(output, epochs=3, eval_every=3, keep_checkpoints=40))
    return output


def _dev_steps(run: Path) -> list[int]:
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [e["step"] for e in lines if e["kind"] == "dev"]


def test_kept_checkpoints_by_step_skipping_what_is_not_one(history_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(history_run, run)
    found = kept_checkpoints(run)
    steps = [s for s, _ in found]
    assert steps == sorted(steps) and len(steps) >= 4
    assert steps == [s for s in _dev_steps(run) if s in steps]
    (run / "checkpoints" / "step-0000001.old").mkdir()  # a directory mid-swap
    (run / "checkpoints" / "step-0000002").write_text("not a directory")
    assert kept_checkpoints(run) == found
    assert kept_checkpoints(run / "checkpoints") == found  # the checkpoints folder names its run
    assert kept_checkpoints(run / "model") == found


def test_evenly_keeps_the_ends() -> None:
    items = list(range(10))
    assert evenly(items, 4) == [0, 3, 6, 9]
    assert evenly(items, 2) == [0, 9]
    assert evenly(items, 1) == [9]
    assert evenly(items, 20) == items
    with pytest.raises(ValueError):
        evenly(items, 0)


def test_each_snapshot_is_that_checkpoints_own_attention(history_run: Path) -> None:
    history = attention_over_training(history_run, SENTENCE, most=3)
    assert history.kept == len(kept_checkpoints(history_run)) and len(history.snapshots) == 3
    steps = [s.step for s in history.snapshots]
    everything = [s for s, _ in kept_checkpoints(history_run)]
    assert steps[0] == everything[0] and steps[-1] == everything[-1]
    final = Translator.load(history_run)
    assert history.tgt_tokens == final.translate([SENTENCE])[0].tokens  # the run's model's output, by default
    for snapshot in history.snapshots:
        alone = Translator.load(snapshot.path).attention_layers([SENTENCE], [history.tgt_tokens])[0]
        assert snapshot.weights.shape == (len(history.tgt_tokens) + 1, len(history.src_tokens) + 1)
        np.testing.assert_allclose(snapshot.weights, alone.cross[0, 0], atol=1e-6)
        np.testing.assert_allclose(snapshot.weights.sum(axis=1), 1.0, atol=1e-5)
        assert snapshot.dev is not None and snapshot.title() == (f"step {snapshot.step:,} · dev BLEU "
                                                                 f"{snapshot.dev['bleu']:.1f}")
    assert not np.allclose(history.snapshots[0].weights, history.snapshots[-1].weights, atol=1e-3)  # training moved it


def test_a_given_output_is_read_by_every_checkpoint(history_run: Path) -> None:
    history = attention_over_training(history_run, SENTENCE, "1998-03-03", most=2)
    assert history.tgt_tokens == Translator.load(history_run).codec.tgt_tokens("1998-03-03")
    assert all(s.weights.shape[0] == len(history.tgt_tokens) + 1 for s in history.snapshots)


def test_a_transformer_shows_its_last_layers_head_mean(transformer_run: Path) -> None:
    history = attention_over_training(transformer_run, SENTENCE)
    snapshot = history.snapshots[-1]
    alone = Translator.load(snapshot.path).attention_layers([SENTENCE], [history.tgt_tokens])[0]
    assert alone.cross.shape[0] >= 1 and alone.cross.shape[1] > 1
    np.testing.assert_allclose(snapshot.weights, alone.cross[-1].mean(axis=0), atol=1e-6)


def test_entropy_history_is_the_logs(transformer_run: Path) -> None:
    steps, values = entropy_history(transformer_run)
    lines = [json.loads(line) for line in (transformer_run / "metrics.jsonl").read_text().splitlines()]
    logged = [(e["step"], e["attention_entropy"]) for e in lines if e["kind"] == "dev"]
    assert steps == [s for s, _ in logged]
    np.testing.assert_allclose(values, np.array([v for _, v in logged]))
    assert values.ndim == 3 and values.shape[2] > 1 and (values > 0).all()


def test_a_checkpoint_from_another_run_is_named(history_run: Path, word_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(history_run, run)
    stranger = run / "checkpoints" / "step-9999999"
    shutil.copytree(word_run / "model", stranger)
    with pytest.raises(HeedError, match="step-9999999.*differs from the run's model's"):
        attention_over_training(run, SENTENCE, most=40)


# ------------------------------------------------------------------------------ the command


def test_cli_draws_the_checkpoints_and_the_entropy(history_run: Path, tmp_path: Path, heed_cli: Any) -> None:
    figure = tmp_path / "over.png"
    result = heed_cli("attention", history_run, SENTENCE, "--checkpoints", "--most", "4", "--beam", "2", "-o", figure)
    assert result.exit_code == 0, result.output
    final = Translator.load(history_run / "model", device="cpu")
    text = final.translate([SENTENCE], beam=2)[0].text  # the output as text, not its tokens spaced out
    assert result.stdout.splitlines()[0] == f"{SENTENCE}\t{text}" and " " not in text
    kept = len(kept_checkpoints(history_run))
    assert f"attention at 4 of {kept} checkpoints (evenly spaced, steps" in result.stdout
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    curves = tmp_path / "entropy.svg"
    result = heed_cli("attention", history_run, "--entropy", "-o", curves)
    assert result.exit_code == 0, result.output
    assert f"attention entropy at {len(_dev_steps(history_run))} evaluations" in result.stdout
    assert curves.read_text().lstrip().startswith("<?xml")


@pytest.mark.parametrize("args, fragments", [
    (["--checkpoints"], ["one sentence", "got 0"]),
    (["a", "b", "--checkpoints"], ["one sentence", "got 2"]),
    (["a", "--entropy"], ["leave out the sentences"]),
    (["--checkpoints", "--entropy", "a"], ["give one of them"]),
    (["a", "--tgt", "x"], ["--tgt", "--checkpoints"]),
    (["a", "--checkpoints", "--tgt", "19x8"], ["--tgt", "'x' is not a token of the model's target vocabulary"]),
    (["a", "--checkpoints", "-o", "over.gif"], ["over.gif", ".png, .svg or .pdf"]),
    (["   ", "--checkpoints"], ["empty"]),
])
def test_cli_mistakes(history_run: Path, tmp_path: Path, heed_cli: Any, assert_user_error: Any,
                      args: list[str], fragments: list[str]) -> None:
    args = [str(tmp_path / a) if a.endswith(".gif") else a for a in args]
    assert_user_error(heed_cli("attention", history_run, *args), *fragments)


def test_cli_a_run_without_kept_checkpoints(trained_run: Path, heed_cli: Any, assert_user_error: Any,
                                            tmp_path: Path) -> None:
    result = heed_cli("attention", trained_run, SENTENCE, "--checkpoints", "-o", tmp_path / "x.png")
    assert_user_error(result, "checkpoints/step-NNNNNNN", "train.keep_checkpoints")
    assert not (tmp_path / "x.png").exists()
