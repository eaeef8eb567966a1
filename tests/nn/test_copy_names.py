"""Copying works (issue 18's must-show): a copy model trained on the generated names task copies
names it never saw in training, and every way of translating shows the copied word, not <unk>.
The side-by-side with the same model without copy (which writes <unk>) is bench/studies/copy_names.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from heed import load
from heed.config import config_from_dict
from heed.data.names import copied_names, generate_names
from heed.errors import ConfigError
from heed.train import train

NAMES = {"n_train": 1000, "n_dev": 20, "n_test": 100, "train_names": 200, "heldout_names": 100, "seed": 0}


def names_config(out: Path, **model) -> dict:
    """The names task's config: word tokens, every name rarer than the vocabulary's min_freq, 60
    updates (about 5 s on one core)."""
    return {
        "data": {"task": "names", "names": NAMES, "tokenizer": {"src": {"kind": "word"}, "tgt": {"kind": "word"}},
                 "vocab": {"min_freq": 10}, "batch_tokens": 800},
        "model": {"embed_size": 16, "hidden_size": 32, "dropout": 0.0, "copy": True, **model},
        "train": {"epochs": 1000, "max_steps": 60, "lr": 0.03, "threads": 1, "seed": 1, "label_smoothing": 0.0,
                  "early_stopping": {"metric": "loss", "patience": None}},
        "decode": {"max_len_b": 12, "max_len_a": 0.0},
        "output_dir": str(out),
    }


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy model on the names task (names_config)."""
    out = tmp_path_factory.mktemp("copy") / "run"
    raw = names_config(out)
    train(config_from_dict(raw))
    return out


def test_a_copy_model_copies_names_it_never_saw_in_training(copy_run: Path) -> None:
    translator = load(copy_run)
    test = generate_names(**NAMES).test
    train_names = {n for e in generate_names(**NAMES).train for n in e.names}
    assert not train_names & {n for e in test for n in e.names}
    assert all(n not in translator.codec.tgt_vocab for e in test for n in e.names)
    outputs = [t.text for t in translator.translate([e.pair.src for e in test])]
    copied, total = copied_names(test, outputs)
    assert copied >= 0.95 * total, (copied, total, outputs[:5])
    assert not any("<unk>" in o.split() for o in outputs)


def test_beam_search_n_best_tree_and_alternatives_show_the_copied_name(copy_run: Path) -> None:
    translator = load(copy_run)
    [exploration] = translator.explore(["my name is Zokabimu ."], beam=3, n_best=2)
    best = exploration.hypotheses[0]
    assert best.text == "je m'appelle Zokabimu ."
    assert "Zokabimu" in {node.token for node in exploration.beam}
    name_step = best.tokens.index("Zokabimu")
    assert exploration.steps[name_step][0][0] == "Zokabimu"
    assert all(t.text for t in exploration.hypotheses)


def test_a_forced_prefix_may_name_a_source_word(copy_run: Path) -> None:
    translator = load(copy_run)
    [out] = translator.translate(["Bikodu is here ."], prefix=[["Bikodu"]])
    assert out.tokens[0] == "Bikodu"
    with pytest.raises(Exception, match="nor of its source"):
        translator.translate(["Bikodu is here ."], prefix=[["Nowhere"]])


def test_the_cli_translates_and_evaluates_with_copied_names(copy_run: Path, heed_cli, tmp_path: Path) -> None:
    result = heed_cli("translate", copy_run, input="where is Mipafe ?\nMipafe and Tukore are friends .\n")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == ["où est Mipafe ?", "Mipafe et Tukore sont amis ."]
    src = tmp_path / "test.src"
    ref = tmp_path / "test.ref"
    src.write_text("my name is Rovu .\ntomorrow Gazile will visit Notu .\n", encoding="utf-8")
    ref.write_text("je m'appelle Rovu .\ndemain Gazile rendra visite à Notu .\n", encoding="utf-8")
    result = heed_cli("evaluate", copy_run, "--src", src, "--ref", ref, "--beam", 2)
    assert result.exit_code == 0, result.stderr
    assert "100.0" in result.stdout, result.stdout  # BLEU and exact match: every name copied


def test_export_refuses_a_copy_model_naming_model_copy(copy_run: Path, tmp_path: Path) -> None:
    from heed.export.onnx import export_model

    with pytest.raises(ConfigError) as e:
        export_model(copy_run, tmp_path / "onnx")
    assert e.value.field == "model.copy" and "cannot be exported" in str(e.value)
    assert not (tmp_path / "onnx").exists()


def test_serve_returns_the_copied_name_in_the_text_tokens_and_beam_tree(copy_run: Path) -> None:
    from fastapi.testclient import TestClient

    from heed.api import Translator
    from heed.serve.app import create_app

    with TestClient(create_app({"names": Translator.load(copy_run, device="cpu")})) as client:
        response = client.post("/v1/translate", json={"sentences": ["where is Mipafe ?"], "beam_size": 2, "trace": True,
                                                      "prefix": [["où", "est", "Mipafe"]]})
    assert response.status_code == 200, response.text
    [result] = response.json()["results"]
    assert result["hypotheses"][0]["text"] == "où est Mipafe ?"
    assert "Mipafe" in result["hypotheses"][0]["tokens"]
    assert "Mipafe" in {node["token"] for node in result["beam"]["nodes"]}


def test_a_copy_model_with_coverage_and_its_loss_still_copies_unseen_names(tmp_path: Path) -> None:
    # See et al. 2017's full model (pointer-generator + coverage, eqs. 8-13) on the same task and budget
    raw = names_config(tmp_path / "run", attention="additive", coverage=True, coverage_loss=1.0)
    train(config_from_dict(raw))
    translator = load(tmp_path / "run")
    assert translator.model.decoder.coverage and translator.model.coverage_loss == 1.0
    test = generate_names(**NAMES).test
    outputs = [t.text for t in translator.translate([e.pair.src for e in test], beam=2)]
    copied, total = copied_names(test, outputs)
    # 132 of 136 (97.1%) on an Intel Xeon 6/85: 90% keeps a margin over CPUs (the same model without
    # copy attention copies none)
    assert copied >= 0.90 * total, (copied, total, outputs[:5])
    assert not any("<unk>" in o.split() for o in outputs)


def test_forbid_unk_makes_a_copy_model_copy_instead_of_writing_unk(tmp_path: Path, heed_cli) -> None:
    """With a target vocabulary of 9 tokens (min_freq 150) most target words are <unk> in training, so
    the copy model writes <unk> even where it could copy the name; with forbid_unk it writes no
    <unk>, and copies more of the names, from Python and from the CLI alike."""
    out = tmp_path / "small-vocab"
    raw = names_config(out)
    raw["data"]["vocab"]["min_freq"] = 150
    train(config_from_dict(raw))
    translator = load(out)
    test = generate_names(**NAMES).test
    sources = [e.pair.src for e in test]
    allowed = translator.translate(sources)
    assert sum("<unk>" in t.tokens for t in allowed) > len(sources) // 2  # the case to fix
    forbidden = translator.translate(sources, forbid_unk=True)
    assert not any("<unk>" in t.tokens for t in forbidden)
    copied_before, total = copied_names(test, [t.text for t in allowed])
    copied_after, _ = copied_names(test, [t.text for t in forbidden])
    assert copied_after > copied_before + total // 10, (copied_before, copied_after, total)
    cli = heed_cli("translate", out, "--forbid-unk", input="".join(s + "\n" for s in sources[:5]))
    assert cli.exit_code == 0 and cli.stdout.splitlines() == [t.text for t in forbidden[:5]]
