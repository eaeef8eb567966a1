import json
import shutil

import numpy as np
import pytest
import torch
from model_files import rehash

import heed
import heed.checkpoint as ckpt
from heed.api import Translator
from heed.checkpoint import (
    TrainerState,
    find_model_dir,
    load_checkpoint,
    load_model_dir,
    replace_dir,
    resolve_dir,
    save_checkpoint,
)
from heed.errors import ConfigError, ModelDirError


def _files(directory):
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())


# ------------------------------------------------------------------------------ directory swap


def test_replace_dir_swaps_in_a_complete_directory(tmp_path):
    target = tmp_path / "last"
    replace_dir(target, lambda d: (d / "a").write_text("1"))
    replace_dir(target, lambda d: (d / "a").write_text("2"))
    assert (target / "a").read_text() == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last"]  # no temp or .old left


def test_a_write_that_dies_midway_leaves_the_old_directory(tmp_path):
    target = tmp_path / "last"
    replace_dir(target, lambda d: (d / "a").write_text("old"))

    def dies(d):
        (d / "a").write_text("new, half written")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        replace_dir(target, dies)
    assert (target / "a").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last"]


def _state(step):
    return TrainerState(step=step, epoch=0, batch_in_epoch=step)


@pytest.fixture(scope="module")
def loaded(trained_run):
    return load_model_dir(trained_run)


def _save(target, loaded, optimizer, step):
    save_checkpoint(target, model=loaded.model, optimizer=optimizer, trainer=_state(step), config=loaded.config,
                    codec=loaded.codec)


def test_checkpoint_killed_while_writing_keeps_the_previous_one_loadable(tmp_path, loaded, monkeypatch):
    optimizer = torch.optim.Adam(loaded.model.parameters())
    target = tmp_path / "checkpoints" / "last"
    _save(target, loaded, optimizer, step=3)

    real_save_tensors = ckpt._save_tensors
    written = []

    def killed_after_first_file(tensors, path):
        real_save_tensors(tensors, path)
        written.append(path.name)
        raise KeyboardInterrupt  # as if the process were stopped halfway through the new checkpoint

    monkeypatch.setattr(ckpt, "_save_tensors", killed_after_first_file)
    with pytest.raises(KeyboardInterrupt):
        _save(target, loaded, optimizer, step=4)
    monkeypatch.undo()
    assert written == [ckpt.OPTIMIZER_FILE]
    assert load_checkpoint(target).trainer.step == 3
    _save(target, loaded, optimizer, step=5)  # the next save sweeps up and succeeds
    assert load_checkpoint(target).trainer.step == 5
    assert sorted(p.name for p in target.parent.iterdir()) == ["last"]


def test_checkpoint_killed_between_the_two_renames_falls_back_to_old(tmp_path, loaded, monkeypatch):
    """Where the file system cannot exchange two names in one step, the swap takes two renames."""
    import heed.plumbing.files

    optimizer = torch.optim.Adam(loaded.model.parameters())
    target = tmp_path / "last"
    _save(target, loaded, optimizer, step=3)
    real_replace = heed.plumbing.files.os.replace

    def replace(src, dst):
        if dst == target:  # last -> last.old is done; the new directory -> last is not
            raise KeyboardInterrupt
        return real_replace(src, dst)

    monkeypatch.setattr(heed.plumbing.files, "_exchange", lambda a, b: False)
    monkeypatch.setattr(heed.plumbing.files.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        _save(target, loaded, optimizer, step=4)
    monkeypatch.undo()
    assert not target.exists()
    assert resolve_dir(target) == tmp_path / "last.old"
    assert load_checkpoint(target).trainer.step == 3
    _save(target, loaded, optimizer, step=5)
    assert load_checkpoint(target).trainer.step == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last"]


def test_optimizer_state_round_trips_exactly(tmp_path, loaded):
    torch.manual_seed(0)
    model = loaded.model
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, betas=(0.8, 0.99))
    for _ in range(2):
        optimizer.zero_grad()
        sum((p ** 2).sum() for p in model.parameters()).backward()
        optimizer.step()
    _save(tmp_path / "c", loaded, optimizer, step=2)
    restored = torch.optim.Adam(model.parameters(), lr=0.5)
    checkpoint = load_checkpoint(tmp_path / "c")
    checkpoint.restore(model, restored)
    before, after = optimizer.state_dict(), restored.state_dict()
    assert before["param_groups"] == after["param_groups"]
    for k, state in before["state"].items():
        for name, value in state.items():
            assert torch.equal(value, after["state"][k][name]), name


def test_checkpoint_files_are_pickle_free(trained_run):
    files = _files(trained_run / "checkpoints" / "last")
    assert {"model.safetensors", "optimizer.safetensors", "rng.safetensors", "trainer.json", "heed.json",
            "config.yaml", "src.vocab.json", "tgt.vocab.json", "tokenizers.json"} <= set(files)
    assert not [f for f in files if f.endswith((".pt", ".pth", ".pkl", ".bin"))]


# ------------------------------------------------------------------------------- model directory


def test_model_directory_layout(trained_run):
    model_dir = trained_run / "model"
    assert {"model.safetensors", "config.yaml", "src.vocab.json", "tgt.vocab.json", "tokenizers.json",
            "metrics.jsonl", "heed.json"} <= set(_files(model_dir))
    meta = json.loads((model_dir / "heed.json").read_text())
    assert meta["format"] == ckpt.FORMAT_VERSION and meta["heed_version"] == heed.__version__


def test_model_directory_holds_no_absolute_paths(trained_run):
    for path in (trained_run / "model").iterdir():
        if path.suffix in (".yaml", ".json", ".jsonl"):
            assert str(trained_run.parent) not in path.read_text(encoding="utf-8"), path.name


def test_a_copied_model_directory_translates_the_same(trained_run, tmp_path):
    texts = ["3 March 1998", "le 14 juillet 1789"]
    original = heed.load(trained_run / "model").translate(texts)
    copy = tmp_path / "elsewhere" / "my-model"
    shutil.copytree(trained_run / "model", copy)
    moved = heed.load(copy).translate(texts)
    assert [t.text for t in moved] == [t.text for t in original]


def test_heed_load_returns_texts_and_attention_of_the_right_shapes(trained_run):
    texts = ["3 March 1998", "", "le 14 juillet 1789"]
    out = heed.load(trained_run).translate(texts, beam=2)
    assert len(out) == 3 and all(isinstance(t.text, str) for t in out)
    assert out[1].text == "" and out[1].tokens == []
    for t, text in zip(out, texts):
        assert isinstance(t.attention, np.ndarray)
        src_labels, out_labels = t.labels()
        assert t.attention.shape == (len(t.tokens) + 1, len(t.src_tokens) + 1) == (len(out_labels), len(src_labels))
        if text:
            assert "".join(t.src_tokens).replace("▁", " ") == text
            np.testing.assert_allclose(t.attention.sum(axis=1), 1.0, atol=1e-5)  # each row is a distribution


def test_translate_restores_input_order_across_batches(trained_run):
    translator = heed.load(trained_run)
    texts = ["1 May 2001", "Saturday, 12 October 1901", "3/4/05", "12 mars 2020", "5 June 1950"]
    one_by_one = [translator(t) for t in texts]
    assert [t.text for t in translator.translate(texts, batch_size=2)] == one_by_one


def test_translator_loads_on_cpu_by_name(trained_run):
    translator = Translator.load(trained_run, device="cpu")
    assert next(translator.model.parameters()).device.type == "cpu"
    assert not translator.model.training


def test_loading_something_that_is_not_a_model_is_a_user_error(tmp_path):
    with pytest.raises(ModelDirError, match="no such model directory"):
        find_model_dir(tmp_path / "missing")
    with pytest.raises(ModelDirError, match="not a heed model directory"):
        find_model_dir(tmp_path)


def test_weights_that_do_not_fit_the_config_are_a_user_error(trained_run, tmp_path):
    copy = tmp_path / "m"
    shutil.copytree(trained_run / "model", copy)
    text = (copy / "config.yaml").read_text(encoding="utf-8").replace("hidden_size: 16", "hidden_size: 24")
    (copy / "config.yaml").write_text(text, encoding="utf-8")
    rehash(copy)  # a consistent directory whose config and weights disagree
    with pytest.raises(ModelDirError, match="weights do not fit the model in config.yaml"):
        load_model_dir(copy)


def test_the_data_fingerprint_round_trips_and_old_checkpoints_have_none(tmp_path, loaded):
    optimizer = torch.optim.Adam(loaded.model.parameters())
    fingerprint = {"data.train.tsv": {"bytes": 12, "sha256": "ab" * 32}}
    save_checkpoint(tmp_path / "c", model=loaded.model, optimizer=optimizer,
                    trainer=TrainerState(step=1, data=fingerprint), config=loaded.config, codec=loaded.codec)
    assert load_checkpoint(tmp_path / "c").trainer.data == fingerprint
    written_before_fingerprints = {"step": 1, "epoch": 0, "batch_in_epoch": 1}
    assert TrainerState.from_json(written_before_fingerprints).data is None


@pytest.mark.parametrize("run", ["trained_run", "transformer_run"])
def test_loading_draws_no_random_weights_and_imports_no_compiler(run, request):
    """heed.load fills every parameter from the file (torch.nn.init skipped, heed.nn.build.SkipInit)
    and counts the memory from the file's header, not a meta-device build, whose Python references
    import torch._dynamo (1.5-2 s of every `heed translate`)."""
    import subprocess
    import sys

    model = request.getfixturevalue(run) / "model"
    script = ("import sys, torch, heed\n"
              "from safetensors.torch import load_file\n"
              f"t = heed.load({str(model)!r})\n"
              "assert 'torch._dynamo' not in sys.modules, 'loading imported torch._dynamo'\n"
              f"saved = load_file({str(model / 'model.safetensors')!r})\n"
              "own = t.model.state_dict()\n"
              "assert set(own) == set(saved)\n"
              "assert all(torch.equal(own[k], saved[k]) for k in saved)\n"
              "print('ok', len(saved))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("ok"), done.stderr[-2000:]


def test_an_edited_config_past_this_machines_memory_is_refused_at_load_before_building(trained_run, tmp_path,
                                                                                       monkeypatch):
    copy = tmp_path / "m"
    shutil.copytree(trained_run / "model", copy)
    monkeypatch.setattr("heed.nn.build.physical_memory", lambda: 1000)  # the file's weights alone exceed it
    with pytest.raises(ConfigError, match="too large: .* parameters need"):
        load_model_dir(copy)
