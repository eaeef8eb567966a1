"""Shared fixtures: a tiny generated dates corpus on disk, a tiny-model config for it, and one tiny
model trained once per session (tests that change it copy it first)."""
from __future__ import annotations

import contextlib
import functools
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from heed.data.dates import generate_dates, write_splits
from heed.plumbing.runtime import cpu_bf16_supported


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (`make test` runs a worker a core), each worker computes on one thread: two
    workers of two threads each on two cores would fight over them. Tests that set a thread count
    (train.threads, --threads) still get it, and give it back."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`@pytest.mark.cpu_bf16` tests run where oneDNN computes bf16 on this CPU (AVX-512 or AMX) and
    are skipped, with the reason, elsewhere (an AVX2-only CPU fails a bf16 LSTM inside oneDNN)."""
    if cpu_bf16_supported():
        return
    import torch

    skip = pytest.mark.skip(reason=f"this CPU has no bf16 support in oneDNN "
                                   f"(capability {torch.backends.cpu.get_cpu_capability()})")
    for item in items:
        if "cpu_bf16" in item.keywords:
            item.add_marker(skip)


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """train/dev/test.tsv (200/20/20 English and French dates), plus test.src and test.ref."""
    directory = tmp_path_factory.mktemp("corpus")
    splits = generate_dates(n_train=200, n_dev=20, n_test=20, seed=7, languages=("en", "fr"), verbose_forms=False)
    paths = write_splits(splits, directory)
    paths["test_src"] = _write_lines(directory / "test.src", [p.src for p in splits.test])
    paths["test_ref"] = _write_lines(directory / "test.ref", [p.tgt for p in splits.test])
    return paths


def _tiny_config(corpus: dict[str, Path], output_dir: Path, **train: Any) -> dict[str, Any]:
    """A config mapping for a model small enough to train in a second or two."""
    return {
        "data": {
            "train": {"tsv": str(corpus["train"])},
            "dev": {"tsv": str(corpus["dev"])},
            "test": {"tsv": str(corpus["test"])},
            "batch_tokens": 300,
        },
        "model": {"embed_size": 8, "hidden_size": 16, "input_feeding": False, "dropout": 0.1},
        "train": {"epochs": 2, "lr": 0.01, "log_every": 5, "threads": 1,
                  "early_stopping": {"metric": "exact_match", "patience": None}, **train},
        "decode": {"max_len_b": 12, "max_len_a": 0.0},
        "output_dir": str(output_dir),
    }


@pytest.fixture(scope="session")
def tiny_config(tiny_corpus: dict[str, Path]) -> Callable[..., dict[str, Any]]:
    """`tiny_config(output_dir, **train_options)` -> a config mapping for the tiny corpus."""
    return functools.partial(_tiny_config, tiny_corpus)


@pytest.fixture(scope="session")
def make_config(tiny_config: Callable[..., dict[str, Any]]) -> Callable[..., Any]:
    """`make_config(output_dir, **train_options)` -> a validated Config for the tiny corpus."""
    from heed.config import config_from_dict

    return lambda output_dir, **train: config_from_dict(tiny_config(output_dir, **train))


@pytest.fixture
def write_lines() -> Callable[[Path, list[str]], Path]:
    """`write_lines(path, lines)` -> path, one line each, UTF-8."""
    return _write_lines


@pytest.fixture(scope="session")
def gold_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny models' own task (English and French dates) with gold by construction: test.src,
    test.tgt and test.align (Pharaoh, target positions in characters)."""
    from heed.data.dates import generate_dates_aligned
    from heed.data.pharaoh import gold_pharaoh

    directory = tmp_path_factory.mktemp("gold")
    splits, golds = generate_dates_aligned(n_train=200, n_dev=20, n_test=20, seed=7, languages=("en", "fr"),
                                           verbose_forms=False)
    (directory / "test.src").write_text("".join(p.src + "\n" for p in splits.test), encoding="utf-8")
    (directory / "test.tgt").write_text("".join(p.tgt + "\n" for p in splits.test), encoding="utf-8")
    (directory / "test.align").write_text("".join(gold_pharaoh(*g) + "\n" for g in golds.test), encoding="utf-8")
    return directory


@pytest.fixture(scope="session")
def trained_run(make_config: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A training output directory (model/, checkpoints/, metrics.jsonl) of a tiny model.
    Shared: copy it before changing anything inside."""
    from heed.train import train

    output = tmp_path_factory.mktemp("run") / "out"
    train(make_config(output))
    return output


@pytest.fixture(scope="session")
def trained_pair(tiny_config: Callable[..., dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny model trained both ways by `heed train --both-directions`: (forward, reverse) run dirs.
    Shared: copy them before changing anything inside."""
    import yaml
    from cli_helpers import invoke

    directory = tmp_path_factory.mktemp("pair")
    config = directory / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_config(directory / "dates")), encoding="utf-8")
    result = invoke("train", config, "--both-directions")
    assert result.exit_code == 0, result.output
    return directory / "dates", directory / "dates-reverse"


GREETINGS = [("hello", "bonjour"), ("goodbye", "au revoir"), ("thanks", "merci")]
VERBS = [("sleeps", "dort"), ("eats", "mange"), ("runs", "court"), ("sings", "chante")]
NAMES = ["anna", "paul", "marie", "jean", "luc", "eva"]


@pytest.fixture(scope="session")
def transformer_run(tiny_config: Callable[..., dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny trained Transformer on the tiny dates corpus (the vocabularies of `trained_run`).
    Shared: copy it before changing anything inside."""
    from tiny_models import TRANSFORMER

    from heed.config import config_from_dict
    from heed.train import train

    output = tmp_path_factory.mktemp("transformer") / "out"
    train(config_from_dict({**tiny_config(output, epochs=3, keep_checkpoints=2, eval_every=4),
                            "model": dict(TRANSFORMER)}))
    return output


@pytest.fixture(scope="session")
def converged_transformer(tiny_config: Callable[..., dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Transformer trained until its outputs end with EOS well inside max_len and its choices are
    not near-ties (`transformer_run`'s 3 epochs write 12 tokens of noise): 120 epochs of the tiny
    corpus, ~8 s on one core. A warm-up of 100 updates: at a flat 0.01 from the first update one
    seed in two collapsed to writing "20-0-0-0-0-0" for every date (BLEU 0.1 against 21 on 300
    unseen dates); with it, both seeds tried give 34-37. Shared: copy it before changing anything inside."""
    from heed.config import config_from_dict
    from heed.train import train

    output = tmp_path_factory.mktemp("transformer-converged") / "out"
    model = {"family": "transformer", "layers": 1, "d_model": 32, "heads": 4, "ff_size": 64, "dropout": 0.0,
             "attention_dropout": 0.0}
    schedule = {"name": "warmup", "warmup_steps": 100, "decay": "none"}
    train(config_from_dict({**tiny_config(output, epochs=120, lr=0.01, log_every=1000, schedule=schedule),
                            "model": model}))
    return output


@pytest.fixture(scope="session")
def word_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A training output directory of a tiny word-level model that has learnt to pass `<unk>`
    through: "hello NAME sleeps" -> "bonjour NAME dort", where half the names occur once and so
    (vocab.min_freq 2) are `<unk>` on both sides. Shared: copy it before changing anything inside."""
    import random

    from heed.config import config_from_dict
    from heed.train import train

    directory = tmp_path_factory.mktemp("words")
    rng = random.Random(0)

    def pairs(n: int, prefix: str) -> list[str]:
        lines = []
        for i in range(n):
            (greet, greet_fr), (verb, verb_fr) = rng.choice(GREETINGS), rng.choice(VERBS)
            name = rng.choice(NAMES) if rng.random() < 0.5 else f"{prefix}{i}"
            lines.append(f"{greet} {name} {verb}\t{greet_fr} {name} {verb_fr}")
        return lines

    train_tsv = _write_lines(directory / "train.tsv", pairs(300, "x"))
    dev_tsv = _write_lines(directory / "dev.tsv", pairs(20, "y"))
    config = {
        "data": {"train": {"tsv": str(train_tsv)}, "dev": {"tsv": str(dev_tsv)}, "batch_tokens": 300,
                 "tokenizer": {"src": {"kind": "word"}, "tgt": {"kind": "word"}}, "vocab": {"min_freq": 2}},
        "model": {"embed_size": 16, "hidden_size": 32, "input_feeding": False, "dropout": 0.0},
        "train": {"epochs": 6, "lr": 0.02, "log_every": 50, "threads": 1,
                  "early_stopping": {"metric": "loss", "patience": None}},
        "decode": {"max_len_b": 8, "max_len_a": 0.0, "beam_size": 1},
        "output_dir": str(directory / "out"),
    }
    train(config_from_dict(config))
    return directory / "out"


# "Billion laughs": 9 levels of 9 aliases each, 9^9 (~387 million) strings once expanded, from a few
# hundred bytes of text; anything that walks the loaded value (a deep copy, pydantic) never ends.
ALIAS_BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))


@pytest.fixture
def alias_bomb() -> str:
    """A YAML alias bomb (see ALIAS_BOMB)."""
    return ALIAS_BOMB


@contextlib.contextmanager
def _deadline(seconds: int) -> Iterator[None]:
    """Fail (not hang) if the block runs longer than `seconds`."""
    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def deadline() -> Callable[[int], contextlib.AbstractContextManager[None]]:
    """`with deadline(seconds):` fails the test, instead of hanging it, past `seconds`."""
    return _deadline


# ------------------------------------------------------------------------------- the command line


@pytest.fixture
def heed_cli() -> Callable[..., Any]:
    """`heed_cli(*args, input=None, env=None)`: `heed ARGS` run in-process (typer's CliRunner), its
    Result (exit_code, stdout, stderr); `env` entries are set for the run (None values unset)."""
    from cli_helpers import invoke

    return invoke


@pytest.fixture
def assert_user_error() -> Callable[..., None]:
    """`assert_user_error(result, *fragments)`: exit code 2, a message of one or two lines starting
    "error:" and naming every fragment, no traceback (the house rule for a user's mistake)."""
    from cli_helpers import assert_user_error as check

    return check
