"""data.root and HEED_DATA_ROOT: one setting points a config's relative corpus paths at data kept
elsewhere (first given: --set data.root, $HEED_DATA_ROOT, the file's data.root, the file's folder);
saved configs do not depend on them; a missing corpus says how to use them."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from heed.checkpoint import load_model_dir
from heed.config import DATA_ROOT_ENV, load_config, save_config

REPO = Path(__file__).resolve().parents[2]
RECIPES = [p for p in sorted((REPO / "configs").glob("*.yaml")) if load_config(p).data.task is None]


@pytest.fixture(autouse=True)
def no_data_root_env(monkeypatch):
    """Each test starts without HEED_DATA_ROOT, whatever the shell running the suite has."""
    monkeypatch.delenv(DATA_ROOT_ENV, raising=False)


def write_config(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def corpus_config(tmp_path: Path, **data) -> Path:
    """configs/x.yaml in tmp_path, training on the relative `train.tsv`."""
    return write_config(tmp_path / "configs" / "x.yaml",
                        {"data": {"train": {"tsv": "train.tsv"}, **data}, "output_dir": "../runs/x"})


def test_data_root_in_the_file_resolves_against_the_file_and_is_then_spent(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(corpus_config(tmp_path, root="../data"))
    assert cfg.data.train.tsv == tmp_path / "data" / "train.tsv"
    assert cfg.data.root is None  # the paths are absolute now
    assert cfg.output_dir == tmp_path / "runs" / "x"  # output_dir stays beside the config file


def test_set_data_root_resolves_against_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(corpus_config(tmp_path), ["data.root=corpora"])
    assert cfg.data.train.tsv == tmp_path / "corpora" / "train.tsv"


def test_heed_data_root_resolves_a_config_without_data_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(DATA_ROOT_ENV, "shared")
    cfg = load_config(corpus_config(tmp_path, dev={"src": "dev.de", "tgt": "/abs/dev.en"}))
    assert cfg.data.train.tsv == tmp_path / "shared" / "train.tsv"
    assert (cfg.data.dev.src, cfg.data.dev.tgt) == (tmp_path / "shared" / "dev.de", Path("/abs/dev.en"))
    assert cfg.output_dir == tmp_path / "runs" / "x"


@pytest.mark.parametrize("in_file, env, set_, expected", [
    (None, None, None, "configs"),  # today's rule: the file's folder
    (None, "env", None, "env"),
    ("file", None, None, "configs/file"),
    ("file", "env", None, "env"),  # the shell's setting overrides the file's default
    ("file", "env", "set", "set"),
    ("file", None, "null", "configs"),  # --set data.root=null: the file's root is skipped
])
def test_data_root_precedence_set_then_environment_then_file_then_the_file_folder(
        tmp_path, monkeypatch, in_file, env, set_, expected):
    monkeypatch.chdir(tmp_path)
    if env is not None:
        monkeypatch.setenv(DATA_ROOT_ENV, str(tmp_path / env))
    path = corpus_config(tmp_path, **({} if in_file is None else {"root": in_file}))
    cfg = load_config(path, [] if set_ is None else [f"data.root={set_}"])
    assert cfg.data.train.tsv == tmp_path / expected / "train.tsv"


def test_a_saved_config_keeps_its_paths_whatever_heed_data_root_says(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_ROOT_ENV, str(tmp_path / "data"))
    cfg = load_config(corpus_config(tmp_path))
    assert cfg.data.train.tsv == tmp_path / "data" / "train.tsv"
    saved = tmp_path / "run" / "model" / "config.yaml"
    save_config(cfg, saved)
    text = saved.read_text(encoding="utf-8")
    assert str(tmp_path) not in text and "root: ." in text and "tsv: ../../data/train.tsv" in text
    for env in (str(tmp_path / "elsewhere"), None):
        if env is None:
            monkeypatch.delenv(DATA_ROOT_ENV)
        else:
            monkeypatch.setenv(DATA_ROOT_ENV, env)
        assert load_config(saved, environment=False) == cfg


def test_a_model_directory_loads_the_same_under_any_heed_data_root(trained_run, tmp_path, monkeypatch):
    before = load_model_dir(trained_run / "model").config
    assert before.data.train is not None
    monkeypatch.setenv(DATA_ROOT_ENV, str(tmp_path / "nowhere"))
    assert load_model_dir(trained_run / "model").config == before


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_one_setting_points_a_recipe_at_data_elsewhere(path, tmp_path, monkeypatch):
    def files(cfg):
        return [f for c in (cfg.data.train, cfg.data.dev, cfg.data.test) if c is not None
                for f in (c.tsv, c.src, c.tgt) if f is not None]

    shipped = files(load_config(path))
    assert shipped  # a recipe with corpora
    moved = files(load_config(path, [f"data.root={tmp_path}"]))
    assert all(f.is_relative_to(tmp_path) for f in moved), moved
    assert [f.name for f in moved] == [f.name for f in shipped]
    monkeypatch.setenv(DATA_ROOT_ENV, str(tmp_path))
    assert files(load_config(path)) == moved  # the environment alone moves every recipe


def test_a_missing_corpus_says_how_to_point_the_config_at_its_data(tmp_path, heed_cli, assert_user_error):
    config = corpus_config(tmp_path, root="../nowhere")
    result = heed_cli("train", config)
    assert_user_error(result, f"{tmp_path / 'nowhere' / 'train.tsv'}: no such file (data.train.tsv)",
                      "data.root", DATA_ROOT_ENV, "--set data.root=DIR")
    assert not (tmp_path / "runs").exists()  # nothing written for a run that never started
