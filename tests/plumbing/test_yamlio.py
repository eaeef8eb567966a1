"""heed.plumbing.yamlio: YAML that cannot hang heed (alias bombs, deep nesting, huge files) and cannot silently
drop a key written twice; and the model directory's config.yaml read through it."""
from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from heed.checkpoint import CONFIG_FILE, FORMAT_VERSION, META_FILE, load_model_dir
from heed.errors import ModelDirError
from heed.plumbing import yamlio


def test_the_bomb_is_what_it_claims(alias_bomb):
    assert alias_bomb.count("*") == 8 * 9 and len(alias_bomb) < 1000


def test_alias_bomb_is_refused_at_its_first_anchor_quickly(deadline, alias_bomb):
    start = time.perf_counter()
    with deadline(5), pytest.raises(yamlio.YamlError) as e:
        yamlio.parse(alias_bomb)
    assert time.perf_counter() - start < 1.0
    assert (e.value.line, e.value.column) == (1, 4)
    assert str(e.value).startswith("invalid YAML: line 1, column 4: anchors and aliases")


@pytest.mark.parametrize("text, line, column", [("x: *undefined\n", 1, 4), ("a: 1\nb: &anchor 2\n", 2, 4),
                                                ("a: [1, &x {b: 1}]\n", 1, 8)])
def test_any_anchor_or_alias_is_an_error_with_its_position(text, line, column):
    with pytest.raises(yamlio.YamlError, match="anchors and aliases") as e:
        yamlio.parse(text)
    assert (e.value.line, e.value.column) == (line, column)


def test_duplicate_key_names_the_key_and_both_lines():
    text = "train:\n  lr: 0.1\n  epochs: 3\n  lr: 0.5\n"
    with pytest.raises(yamlio.YamlError) as e:
        yamlio.parse(text)
    assert str(e.value) == "invalid YAML: line 4, column 3: duplicate key 'lr' (first on line 2); keep one of the two"


def test_duplicate_key_in_a_flow_mapping_and_at_the_top_level():
    with pytest.raises(yamlio.YamlError, match=r"line 1, column 19: duplicate key 'a' \(first on line 1\)"):
        yamlio.parse("{a: 1, b: {a: 2}, a: 3}")
    with pytest.raises(yamlio.YamlError, match=r"line 3, column 1: duplicate key 'model' \(first on line 1\)"):
        yamlio.parse("model: {}\ntrain: {}\nmodel: {}\n")


def test_same_key_in_different_mappings_is_fine():
    assert yamlio.parse("a: {x: 1}\nb: {x: 2}\n") == {"a": {"x": 1}, "b": {"x": 2}}


@pytest.mark.parametrize("opening, closing", [("[", "]"), ("{a: ", "}")])
def test_deep_nesting_is_a_message_not_a_recursion_error(opening, closing, deadline):
    text = opening * 100_000 + "1" + closing * 100_000
    with deadline(20), pytest.raises(yamlio.YamlError, match=f"nested more than {yamlio.MAX_DEPTH} levels deep"):
        yamlio.parse(text)


def test_nesting_within_the_limit_loads():
    depth = yamlio.MAX_DEPTH - 1
    value = yamlio.parse("[" * depth + "]" * depth)
    for _ in range(depth - 1):
        assert isinstance(value, list) and len(value) == 1
        value = value[0]
    assert value == []


@pytest.mark.parametrize("text, problem", [("x: 2001-13-01\n", "cannot read this value: month must be in 1..12"),
                                           ("x: " + "9" * 5000 + "\n", "cannot read this value: Exceeds the limit")])
def test_python_errors_while_building_a_value_become_yaml_errors_with_a_line(text, problem):
    with pytest.raises(yamlio.YamlError) as e:
        yamlio.parse(text)
    assert str(e.value).startswith(f"invalid YAML: line 1, column 4: {problem}")


def test_syntax_errors_keep_the_line_and_column_form():
    with pytest.raises(yamlio.YamlError) as e:
        yamlio.parse("a:\n\tb: 1\n")
    assert str(e.value) == "invalid YAML: line 2, column 1: found character '\\t' that cannot start any token"


def test_read_capped_stops_at_the_limit_and_says_it():
    assert yamlio.read_capped(io.BytesIO(b"x" * yamlio.MAX_BYTES)) == b"x" * yamlio.MAX_BYTES
    with pytest.raises(yamlio.TooLargeError, match=r"at most 1 MiB"):
        yamlio.read_capped(io.BytesIO(b"x" * (yamlio.MAX_BYTES + 1)))


def test_read_capped_from_an_endless_device_reads_only_up_to_the_limit(deadline):
    with deadline(10), open("/dev/zero", "rb") as f, pytest.raises(yamlio.TooLargeError):
        yamlio.read_capped(f)


def test_dump_never_writes_an_alias_and_parses_back():
    shared = [1, 2]
    data = {"a": shared, "b": shared, "c": {"d": "é"}}
    text = yamlio.dump(data)
    assert "&" not in text and "*" not in text
    assert yamlio.parse(text) == data


# ----------------------------------------------------------------- a model directory's config.yaml


def _fake_model_dir(directory: Path, config_text: str) -> Path:
    """Just enough of a model directory for load_model_dir(verify=False) to reach config.yaml."""
    directory.mkdir()
    (directory / META_FILE).write_text(json.dumps({"format": FORMAT_VERSION}), encoding="utf-8")
    (directory / CONFIG_FILE).write_text(config_text, encoding="utf-8")
    return directory


def test_alias_bomb_in_a_model_directory_config_is_a_model_dir_error(tmp_path, deadline, alias_bomb):
    model = _fake_model_dir(tmp_path / "model", "data: {task: dates}\n" + alias_bomb)
    with deadline(10), pytest.raises(ModelDirError) as e:
        load_model_dir(model, verify=False)
    assert str(e.value).startswith(f"{model / CONFIG_FILE}: invalid YAML: line 2, column 4: anchors and aliases")


def test_duplicate_key_in_a_model_directory_config_names_file_and_line(tmp_path):
    model = _fake_model_dir(tmp_path / "model", "data: {task: dates}\nmodel: {hidden_size: 16}\nmodel: {}\n")
    with pytest.raises(ModelDirError) as e:
        load_model_dir(model, verify=False)
    assert str(e.value).startswith(f"{model / CONFIG_FILE}: invalid YAML: line 3, column 1: duplicate key 'model'")
