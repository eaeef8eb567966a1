"""heed.train.average / `heed average`: the elementwise mean of checkpoints, in float64, stored in their
dtype, written as a model directory that loads and translates like any other; inputs that do not
share architecture, tokenizers and vocabularies are refused naming the input."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from model_files import rehash
from safetensors.torch import load_file

import heed
from heed.checkpoint import LoadedModel, load_model_dir, save_model_dir
from heed.errors import HeedError
from heed.nn.build import build_model
from heed.train.average import average_checkpoints, average_state_dicts


def test_the_mean_of_two_state_dicts_is_elementwise():
    a = {"w": torch.tensor([[1.0, 2.0], [-3.0, 0.5]]), "b": torch.tensor([0.25])}
    b = {"w": torch.tensor([[2.0, 4.0], [1.0, 0.0]]), "b": torch.tensor([0.75])}
    mean = average_state_dicts([a, b])
    assert mean["w"].tolist() == [[1.5, 3.0], [-1.0, 0.25]] and mean["b"].tolist() == [0.5]
    assert mean["w"].dtype == torch.float32
    assert a["w"].tolist() == [[1.0, 2.0], [-3.0, 0.5]]  # inputs untouched


def test_the_sum_is_taken_in_float64():
    # 2^24 + 1 is not a float32: a float32 running sum gives (2^24 + 1 + 1) -> 2^24, mean 5592405.33;
    # the float64 sum is 2^24 + 2 and its mean 5592406, a float32 exactly.
    states = [{"w": torch.tensor([2.0**24])}, {"w": torch.tensor([1.0])}, {"w": torch.tensor([1.0])}]
    assert average_state_dicts(states)["w"].item() == 5592406.0


def test_the_mean_keeps_each_tensors_dtype_and_equal_integer_tensors():
    a = {"w": torch.tensor([1.0, 3.0], dtype=torch.bfloat16), "steps": torch.tensor([7])}
    b = {"w": torch.tensor([2.0, 4.0], dtype=torch.bfloat16), "steps": torch.tensor([7])}
    mean = average_state_dicts([a, b])
    assert mean["w"].dtype == torch.bfloat16 and mean["w"].tolist() == [1.5, 3.5]
    assert mean["steps"].tolist() == [7] and mean["steps"].dtype == torch.int64


def test_integer_tensors_that_differ_are_refused_naming_the_input():
    a, b = {"steps": torch.tensor([7])}, {"steps": torch.tensor([8])}
    with pytest.raises(HeedError, match="second: integer tensor steps differs from first's"):
        average_state_dicts([a, b], names=["first", "second"])


def test_fewer_than_two_state_dicts_is_an_error():
    with pytest.raises(HeedError, match="at least two"):
        average_state_dicts([{"w": torch.zeros(1)}])


# ----------------------------------------------------------------------------- model directories


@pytest.fixture(scope="module")
def base(trained_run) -> LoadedModel:
    return load_model_dir(trained_run)


def _model_dir(base: LoadedModel, directory: Path, fill: float | None = None, seed: int = 0,
               run: Path | None = None, **model: object) -> Path:
    """A model directory of the trained run's codec and config (`model` fields changed; the
    output_dir `run` if given) holding a random model (of `seed`), or, with `fill`, every weight
    equal to `fill`."""
    config = base.config.model_copy(update={"model": base.config.model.model_copy(update=model),
                                            "output_dir": run or base.config.output_dir})
    torch.manual_seed(seed)
    net = build_model(config.model, src_vocab_size=len(base.codec.src_vocab), tgt_vocab_size=len(base.codec.tgt_vocab))
    if fill is not None:
        with torch.no_grad():
            for p in net.parameters():
                p.fill_(fill)
    return save_model_dir(directory, model=net, config=config, codec=base.codec, info={"step": seed})


def test_averaging_two_model_directories_writes_the_elementwise_mean(base, tmp_path):
    a, b = _model_dir(base, tmp_path / "a", fill=0.5), _model_dir(base, tmp_path / "b", fill=1.25)
    out = average_checkpoints([a, b], tmp_path / "avg")
    weights = load_file(str(out / "model.safetensors"))
    assert weights.keys() == load_file(str(a / "model.safetensors")).keys()
    assert all(t.dtype == torch.float32 and bool((t == 0.875).all()) for t in weights.values())


def test_averaging_random_models_matches_the_float64_mean_of_every_tensor(base, tmp_path):
    dirs = [_model_dir(base, tmp_path / f"m{k}", seed=k) for k in range(3)]
    out = average_checkpoints(dirs, tmp_path / "avg")
    got = load_file(str(out / "model.safetensors"))
    inputs = [load_file(str(d / "model.safetensors")) for d in dirs]
    for key, value in got.items():
        expected = (sum(s[key].double() for s in inputs) / 3).float()
        assert torch.equal(value, expected), key
    meta = json.loads((out / "heed.json").read_text())
    assert meta["kind"] == "model"
    assert [r["path"] for r in meta["averaged"]] == [str(d) for d in dirs]
    assert [r["step"] for r in meta["averaged"]] == [0, 1, 2]


def test_the_average_of_a_runs_checkpoints_loads_and_translates(trained_run, tmp_path, heed_cli):
    ckpts = trained_run / "checkpoints"
    result = heed_cli("average", ckpts / "last", ckpts / "best", trained_run / "model", "-o", tmp_path / "avg")
    assert result.exit_code == 0, result.output
    assert "averaged 3 checkpoints" in result.stdout and "warning" not in result.stderr  # one run
    meta = json.loads((tmp_path / "avg" / "heed.json").read_text())
    assert [r["kind"] for r in meta["averaged"]] == ["checkpoint", "checkpoint", "model"]
    assert not (tmp_path / "avg" / "optimizer.safetensors").exists()  # a model directory, no training state
    translator = heed.load(tmp_path / "avg", device="cpu")
    assert translator.config.model == load_model_dir(trained_run).config.model
    [out] = translator.translate(["3 March 1998"], beam=2)
    assert out.tokens and out.attention is not None
    translated = heed_cli("translate", tmp_path / "avg", input="3 March 1998\n")
    assert translated.exit_code == 0 and translated.stdout.strip() == out.text, translated.output


def test_checkpoints_of_different_runs_are_averaged_with_a_warning(base, tmp_path):
    a = _model_dir(base, tmp_path / "a", run=tmp_path / "run-a")
    b = _model_dir(base, tmp_path / "b", run=tmp_path / "run-b", seed=1)
    heard: list[str] = []
    average_checkpoints([a, b], tmp_path / "avg", warn=heard.append)
    assert len(heard) == 1 and "2 training runs" in heard[0] and "ensemble" in heard[0]
    assert str(tmp_path / "run-a") in heard[0] and str(tmp_path / "run-b") in heard[0]
    average_checkpoints([a, _model_dir(base, tmp_path / "a2", run=tmp_path / "run-a", seed=2)], tmp_path / "avg2",
                        warn=heard.append)
    assert len(heard) == 1  # one run: nothing to say


def test_averaging_a_checkpoint_with_itself_gives_its_weights(trained_run, tmp_path):
    last = trained_run / "checkpoints" / "last"
    out = average_checkpoints([last, last], tmp_path / "same")
    mine, theirs = load_file(str(out / "model.safetensors")), load_file(str(last / "model.safetensors"))
    assert all(torch.equal(mine[k], theirs[k]) for k in theirs)


def test_another_architecture_is_refused_naming_the_input_and_the_field(base, tmp_path):
    a, b = _model_dir(base, tmp_path / "a"), _model_dir(base, tmp_path / "narrow", hidden_size=8)
    with pytest.raises(HeedError, match=r"narrow: model.hidden_size is 8 here but 16 in .*a;"):
        average_checkpoints([a, b], tmp_path / "avg")
    assert not (tmp_path / "avg").exists()


def test_another_vocabulary_is_refused_naming_the_input(base, tmp_path):
    a = _model_dir(base, tmp_path / "a")
    b = shutil.copytree(_model_dir(base, tmp_path / "b0", seed=1), tmp_path / "swapped")
    vocab = json.loads((b / "tgt.vocab.json").read_text(encoding="utf-8"))
    vocab[4], vocab[5] = vocab[5], vocab[4]
    (b / "tgt.vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    rehash(b)  # a model of another vocabulary, not a damaged one
    with pytest.raises(HeedError, match="swapped: the target vocabulary"):
        average_checkpoints([a, b], tmp_path / "avg")


def test_the_output_replaces_an_earlier_model_directory_and_nothing_else(base, tmp_path):
    a, b = _model_dir(base, tmp_path / "a", fill=1.0), _model_dir(base, tmp_path / "b", fill=2.0)
    earlier = _model_dir(base, tmp_path / "earlier", fill=9.0)
    average_checkpoints([a, b], earlier)
    assert all(bool((t == 1.5).all()) for t in load_file(str(earlier / "model.safetensors")).values())
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "keep.txt").write_text("mine\n")
    with pytest.raises(HeedError, match="notes: exists and is not a model directory"):
        average_checkpoints([a, b], notes)
    assert [p.name for p in notes.iterdir()] == ["keep.txt"]
    with pytest.raises(HeedError, match="is one of the checkpoints being averaged"):
        average_checkpoints([a, b], b)
    assert all(bool((t == 2.0).all()) for t in load_file(str(b / "model.safetensors")).values())


def test_a_training_checkpoint_is_never_overwritten(trained_run, tmp_path):
    target = shutil.copytree(trained_run / "checkpoints" / "best", tmp_path / "best")
    with pytest.raises(HeedError, match="best: exists and is a training checkpoint"):
        average_checkpoints([trained_run / "checkpoints" / "last", trained_run / "model"], target)
    assert (target / "optimizer.safetensors").is_file()


def test_the_average_exports_like_any_model_directory(base, tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from heed.export.onnx import export_model

    out = average_checkpoints([_model_dir(base, tmp_path / "a"), _model_dir(base, tmp_path / "b", seed=1)],
                              tmp_path / "avg")
    exported = export_model(out, tmp_path / "onnx")
    want = heed.load(out, device="cpu").translate(["3 March 1998"], beam=2)[0]
    got = heed.load(exported).translate(["3 March 1998"], beam=2)[0]
    assert got.tokens == want.tokens and abs(got.score - want.score) < 1e-4
