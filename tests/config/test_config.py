import os
from pathlib import Path

import pytest
import yaml

from heed.config import Config, config_from_dict, load_config, parse_override, save_config
from heed.errors import ConfigError

DATES = {"data": {"task": "dates"}}


def write_yaml(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_defaults_fill_everything_but_data():
    cfg = config_from_dict(DATES)
    assert cfg.model.hidden_size == 256 and cfg.train.lr == 1e-3 and cfg.decode.beam_size == 1


def test_typo_names_the_file_and_dotted_field_with_a_suggestion(tmp_path):
    path = write_yaml(tmp_path / "x.yaml", {**DATES, "model": {"hiden_size": 64}})
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == f"{path}: field 'model.hiden_size': unknown field (did you mean 'hidden_size'?)"


def test_typo_in_a_section_name_is_reported_before_the_missing_section(tmp_path):
    path = write_yaml(tmp_path / "x.yaml", {"dat": {"task": "dates"}})
    with pytest.raises(ConfigError, match=r"field 'dat': unknown field \(did you mean 'data'\?\)"):
        load_config(path)


@pytest.mark.parametrize("section, field", [("train", "lr_rate"), ("decode", "beam"), ("data", "batch_token")])
def test_every_section_rejects_unknown_keys(section, field):
    with pytest.raises(ConfigError, match=rf"field '{section}.{field}': unknown field"):
        config_from_dict({**DATES, section: {**DATES.get(section, {}), field: 1}} if section != "data"
                         else {"data": {"task": "dates", field: 1}})


def test_bad_value_names_the_field_and_the_value():
    with pytest.raises(ConfigError, match=r"field 'model.hidden_size': input should be greater than 0 \(got -3\)"):
        config_from_dict({**DATES, "model": {"hidden_size": -3}})


def test_set_overrides_parse_yaml_scalars():
    cfg = config_from_dict(DATES, overrides=["model.hidden_size=64", "train.clip=null", "model.bidirectional=false",
                                             "train.lr=3e-3", "data.dates.languages=[en, ko]"])
    assert cfg.model.hidden_size == 64 and cfg.train.clip is None and cfg.model.bidirectional is False
    assert cfg.train.lr == 3e-3 and cfg.data.dates.languages == ["en", "ko"]


def test_unknown_set_key_is_an_error_naming_the_field():
    with pytest.raises(ConfigError) as e:
        config_from_dict(DATES, overrides=["model.hiden_size=64"])
    assert str(e.value) == "--set: field 'model.hiden_size': unknown field (did you mean 'hidden_size'?)"
    with pytest.raises(ConfigError, match="expected FIELD=VALUE"):
        parse_override("model.hidden_size")


def test_bad_set_value_is_attributed_to_set():
    with pytest.raises(ConfigError, match=r"^--set: field 'train.epochs'"):
        config_from_dict(DATES, source="x.yaml", overrides=["train.epochs=many"])


def test_corpus_paths_resolve_against_the_config_file(tmp_path):
    path = write_yaml(tmp_path / "configs" / "x.yaml", {"data": {"train": {"tsv": "../data/train.tsv"}}})
    cfg = load_config(path)
    assert cfg.data.train.tsv == tmp_path / "data" / "train.tsv"


def test_a_config_from_a_pipe_or_a_fifo_is_read_and_its_paths_are_the_current_directorys(tmp_path, monkeypatch):
    """`heed train <(sed ... base.yaml)` and a named pipe whose writer comes later, as cat reads them."""
    import threading
    import time

    monkeypatch.chdir(tmp_path)
    text = "data: {train: {tsv: data/train.tsv}}\noutput_dir: runs/x\n"
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)

    def write() -> None:
        time.sleep(0.5)
        fifo.write_text(text, encoding="utf-8")

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    cfg = load_config(fifo)
    writer.join(timeout=10)
    assert cfg.data.train.tsv == tmp_path / "data" / "train.tsv" and Path(cfg.output_dir) == tmp_path / "runs" / "x"
    read, write_end = os.pipe()  # process substitution: /dev/fd/N of a pipe whose writer has finished
    os.write(write_end, text.encode())
    os.close(write_end)
    try:
        assert load_config(f"/dev/fd/{read}").data.train.tsv == tmp_path / "data" / "train.tsv"
    finally:
        os.close(read)


def test_corpus_paths_given_with_set_resolve_against_the_current_directory(tmp_path, monkeypatch):
    path = write_yaml(tmp_path / "configs" / "x.yaml", {"data": {"train": {"tsv": "a.tsv"}}})
    monkeypatch.chdir(tmp_path)
    cfg = load_config(path, ["data.train.tsv=other.tsv"])
    assert cfg.data.train.tsv == tmp_path / "other.tsv"
    cfg = load_config(path, ["data.train={src: s.txt, tgt: t.txt}"])
    assert (cfg.data.train.src, cfg.data.train.tgt) == (tmp_path / "s.txt", tmp_path / "t.txt")


def test_output_dir_resolves_against_the_config_file_unless_given_on_the_command_line(tmp_path, monkeypatch):
    path = write_yaml(tmp_path / "configs" / "x.yaml", {**DATES, "output_dir": "../runs/x"})
    monkeypatch.chdir(tmp_path / "configs")
    assert load_config(path).output_dir == tmp_path / "runs" / "x"
    assert load_config(path, ["output_dir=here"]).output_dir == tmp_path / "configs" / "here"


def test_saved_config_has_relative_paths_and_loads_back_equal(tmp_path):
    cfg = load_config(write_yaml(tmp_path / "configs" / "x.yaml",
                                 {"data": {"train": {"src": "../d/a.de", "tgt": "../d/a.en"}, "split": {"dev": 5}},
                                  "output_dir": "../runs/x",
                                  "train": {"schedule": {"name": "warmup", "warmup_steps": 10}}}))
    saved = tmp_path / "run" / "model" / "config.yaml"
    save_config(cfg, saved)
    text = saved.read_text(encoding="utf-8")
    assert str(tmp_path) not in text  # nothing machine-specific
    assert "../../d/a.de" in text and "output_dir: ../../runs/x" in text
    assert load_config(saved) == cfg


def test_invalid_yaml_names_the_line(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("data:\n  task: dates\nmodel: [oops\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"{path}: invalid YAML: line \d+, column \d+"):
        load_config(path)


def test_missing_config_file_and_non_mapping(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "nope.yaml")
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(path)


def test_data_needs_exactly_one_source():
    with pytest.raises(ConfigError, match="no data"):
        config_from_dict({"data": {}})
    with pytest.raises(ConfigError, match="generates its data"):
        config_from_dict({"data": {"task": "dates", "train": {"tsv": "a"}}})
    with pytest.raises(ConfigError, match=r"field 'data.train': give either 'tsv'"):
        config_from_dict({"data": {"train": {"tsv": "a", "src": "b"}}})
    with pytest.raises(ConfigError, match="'split' holds dev and test out of 'train'"):
        config_from_dict({"data": {"train": {"tsv": "a"}, "dev": {"tsv": "b"}, "split": {"dev": 1}}})


def test_schedule_settings_must_belong_to_the_chosen_schedule():
    with pytest.raises(ConfigError, match="'warmup_steps' belongs to schedule 'warmup', not 'plateau'"):
        config_from_dict({**DATES, "train": {"schedule": {"name": "plateau", "warmup_steps": 5}}})


def test_model_validator_messages_come_through():
    with pytest.raises(ConfigError, match="field 'model': hidden_size must be even"):
        config_from_dict({**DATES, "model": {"hidden_size": 33}})


def test_config_file_is_not_changed_by_loading(tmp_path):
    path = write_yaml(tmp_path / "x.yaml", DATES)
    before = path.read_bytes()
    load_config(path, ["model.hidden_size=64"])
    assert path.read_bytes() == before
    assert isinstance(load_config(path), Config)
    assert not os.path.isabs(str(load_config(path).output_dir))


REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "configs").glob("*.yaml"))


def test_every_shipped_recipe_is_found():
    assert {p.name for p in SHIPPED} >= {"demo.yaml", "multi30k_de_en.yaml", "tatoeba_fra_eng.yaml"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_recipe_loads_and_reads_the_repositorys_data_folder(path, monkeypatch):
    """Where `heed data get NAME` writes by default (data/, ignored by git): a fresh clone needs
    nothing beside it."""
    monkeypatch.delenv("HEED_DATA_ROOT", raising=False)
    cfg = load_config(path)
    corpora = [c for c in (cfg.data.train, cfg.data.dev, cfg.data.test) if c is not None]
    files = [f for c in corpora for f in (c.tsv, c.src, c.tgt) if f is not None]
    assert cfg.data.task is not None or files  # a generated task reads no files
    for f in files:
        assert f.resolve().is_relative_to((REPO / "data").resolve()), f


# ------------------------------------------------------------------ YAML that cannot hang heed


def test_alias_bomb_in_a_config_file_is_refused_quickly_naming_the_file(tmp_path, deadline, alias_bomb):
    path = tmp_path / "bomb.yaml"
    path.write_text("data:\n  task: dates\nextra:\n  " + alias_bomb.replace("\n", "\n  "), encoding="utf-8")
    with deadline(10), pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value).startswith(f"{path}: invalid YAML: line 4, column 6: anchors and aliases")


def test_alias_in_a_set_value_is_refused():
    with pytest.raises(ConfigError, match=r"^--set: field 'data.dates.languages': cannot parse value .*anchors"):
        parse_override("data.dates.languages=&a [en]")


def test_duplicate_key_in_a_config_file_names_the_key_and_the_second_line(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("data:\n  task: dates\ntrain:\n  lr: 0.1\n  epochs: 2\n  lr: 0.5\n", encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == (f"{path}: invalid YAML: line 6, column 3: duplicate key 'lr' (first on line 4); "
                            "keep one of the two")


def test_a_huge_config_file_is_refused_by_size_without_reading_it_all(tmp_path, deadline):
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as f:
        f.write(b"data: {task: dates}\n")
        f.write(b"# padding\n" * (5 << 20))  # 50 MiB of comments: valid YAML, just far too big
    with deadline(10), pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == (f"{path}: too large for a YAML config (50.0 MiB; at most 1 MiB); "
                            "is this the right file?")


def test_a_deeply_nested_config_is_a_config_error(tmp_path, deadline):
    path = tmp_path / "deep.yaml"
    path.write_text("data: {task: dates}\nx: " + "[" * 100_000 + "]" * 100_000 + "\n", encoding="utf-8")
    with deadline(20), pytest.raises(ConfigError, match=rf"^{path}: invalid YAML: line 2, column \d+: nested more"):
        load_config(path)


def test_a_config_read_from_an_endless_device_is_refused_by_size(deadline):
    with deadline(10), pytest.raises(ConfigError, match=r"^/dev/zero: cannot read: is a character device, which may "
                                                        "never end"):
        load_config("/dev/zero")


# --------------------------------------------------------------------------- decode length limit


@pytest.mark.parametrize("decode", [{"max_len_a": 0, "max_len_b": 0}, {"max_len_a": 0.0, "max_len_b": 0}])
def test_a_length_limit_that_allows_no_token_names_the_field(tmp_path, decode):
    path = write_yaml(tmp_path / "x.yaml", {**DATES, "decode": decode})
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value).startswith(f"{path}: field 'decode.max_len_b': max_len_b 0 with max_len_a 0 allows no "
                                   "output token")


def test_a_length_limit_set_to_nothing_on_the_command_line_is_blamed_on_set(tmp_path):
    path = write_yaml(tmp_path / "x.yaml", {**DATES, "decode": {"max_len_a": 0}})
    with pytest.raises(ConfigError, match=r"^--set: field 'decode.max_len_b': max_len_b 0 with max_len_a 0"):
        load_config(path, ["decode.max_len_b=0"])


@pytest.mark.parametrize("decode", [{"max_len_a": 0, "max_len_b": 1}, {"max_len_a": 0.5, "max_len_b": 0}])
def test_a_length_limit_that_allows_some_token_is_fine(decode):
    cfg = config_from_dict({**DATES, "decode": decode})
    assert (cfg.decode.max_len_a, cfg.decode.max_len_b) == (decode["max_len_a"], decode["max_len_b"])


# ------------------------------------------------------------------------ plain decoder, attention


def test_plain_decoder_ignores_an_attention_setting_and_saves_null(tmp_path):
    path = write_yaml(tmp_path / "x.yaml", {**DATES, "model": {"decoder": "luong", "attention": "dot"},
                                            "output_dir": "runs/x"})
    cfg = load_config(path, ["model.decoder=plain"])
    assert cfg.model.decoder == "plain" and cfg.model.attention is None and cfg.model.score is None
    saved = tmp_path / "model" / "config.yaml"
    save_config(cfg, saved)
    assert yaml.safe_load(saved.read_text(encoding="utf-8"))["model"]["attention"] is None
    assert load_config(saved) == cfg


def test_plain_decoder_with_attention_in_the_file_builds_a_model_without_attention():
    from heed.nn.build import build_model

    cfg = config_from_dict({**DATES, "model": {"decoder": "plain", "attention": "general", "hidden_size": 8,
                                               "embed_size": 4}})
    model = build_model(cfg.model, src_vocab_size=5, tgt_vocab_size=5)
    assert cfg.model.attention is None and not model.has_attention


# ------------------------------------------------------------------ a field in the wrong section


@pytest.mark.parametrize("raw, field", [
    ({"data": {"train": {"tsv": "a.tsv"}}, "train": {"reverse": True}}, "train.reverse"),
    ({"data": {"train": {"tsv": "a.tsv", "reverse": True}}}, "data.train.reverse"),
    ({"data": {"train": {"tsv": "a.tsv"}}, "reverse": True}, "reverse"),
])
def test_misplaced_reverse_says_where_it_belongs(raw, field):
    with pytest.raises(ConfigError) as e:
        config_from_dict(raw, source="x.yaml")
    assert str(e.value) == f"x.yaml: field '{field}': unknown field here; 'reverse' belongs under 'data' (data.reverse)"


def test_misplaced_reverse_given_with_set_says_where_it_belongs():
    with pytest.raises(ConfigError) as e:
        config_from_dict({"data": {"train": {"tsv": "a.tsv"}}}, overrides=["train.reverse=true"])
    assert str(e.value) == ("--set: field 'train.reverse': unknown field here; "
                            "'reverse' belongs under 'data' (data.reverse)")


def test_a_field_with_several_homes_lists_them():
    with pytest.raises(ConfigError) as e:
        config_from_dict({**DATES, "model": {"seed": 3}})
    assert str(e.value) == ("field 'model.seed': unknown field here; "
                            "'seed' belongs under 'data.dates', 'data.names', 'data.split', 'train' or 'decode'")


def test_reading_a_config_opens_no_other_model_directory(tmp_path):
    """train.init names a model directory; heed.config reads the path alone (no I/O of it), and
    training's reader (heed.train.setup.load_run_config) is what opens it, refusing one that is not
    a model directory in one message naming train.init, the file, or --set where it was set."""
    from heed.train.setup import load_run_config

    path = tmp_path / "fine.yaml"
    path.write_text(yaml.safe_dump({"data": {"task": "dates"}, "train": {"init": "nowhere"}}), encoding="utf-8")
    assert load_config(path).train.init == tmp_path / "nowhere"
    with pytest.raises(ConfigError) as e:
        load_run_config(path)
    assert e.value.field == "train.init" and "not a model directory to start from" in str(e.value)
    assert str(path) in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_run_config(path, [f"train.init={tmp_path / 'elsewhere'}"])
    assert e.value.field == "train.init" and "--set" in str(e.value)
