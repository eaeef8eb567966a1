"""The configuration reference (docs/config.md, `heed config`) is generated from the config models:
it lists every field, each with a description, and the committed file is what heed generates."""
from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from heed.config import Config
from heed.config_reference import FieldDoc, fields, reference, type_name

DOC = Path(__file__).resolve().parents[2] / "docs" / "config.md"


def _leaves(model: type[BaseModel], prefix: str = "", section: str = "") -> set[tuple[str, str]]:
    """(section, dotted name) of every leaf; `model:` is a section per family."""
    from heed.config_reference import _sections_of

    out = set()
    for name, info in model.model_fields.items():
        opened = _sections_of(info.annotation, f"{prefix}{name}")
        out |= {(section, f"{prefix}{name}")} if not opened else set()
        for title, inner in opened:
            out |= _leaves(inner, f"{prefix}{name}.", title)
    return out


def test_the_committed_reference_is_what_heed_generates():
    assert DOC.read_text(encoding="utf-8") == reference(), "docs/config.md is stale: run `heed config > docs/config.md`"


def test_every_field_is_listed_once_with_a_description():
    docs = [item for item in fields() if isinstance(item, FieldDoc)]
    names = [(d.section, d.name) for d in docs]
    assert len(names) == len(set(names))
    assert set(names) == _leaves(Config)
    assert {("train", "train.eval_every"), ("model (family: rnn)", "model.hidden_size"),
            ("model (family: transformer)", "model.d_model"), ("decode", "decode.beam_size"),
            ("", "output_dir")} <= set(names)
    undocumented = [d.name for d in docs if not d.description]
    assert undocumented == [], undocumented


def test_types_defaults_and_limits_read_as_a_config_author_writes_them():
    by_name = {d.name: d for d in fields() if isinstance(d, FieldDoc) and "transformer" not in d.section}
    assert (by_name["model.hidden_size"].type, by_name["model.hidden_size"].default,
            by_name["model.hidden_size"].limits) == ("int", "256", "> 0")
    assert by_name["decode.beam_size"].limits == ">= 1, <= 256"
    assert by_name["train.betas"].type == "[float, float]" and by_name["train.betas"].limits == "each >= 0.0, < 1.0"
    assert by_name["train.eval_every"].type == "int or null" and by_name["train.eval_every"].default == "null"
    assert by_name["data.tokenizer.src.kind"].type == '"char" | "word" | "bpe" | "unigram" | "sentencepiece"'
    assert type_name(Path) == "path"


def test_heed_config_prints_the_reference(heed_cli):
    result = heed_cli("config")
    assert result.exit_code == 0 and result.stdout == reference()
