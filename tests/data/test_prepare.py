import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from heed.cli import app
from heed.config import config_from_dict
from heed.data.codec import Codec, load_corpora, open_prepared
from heed.data.corpus import Pair
from heed.data.prepare import build_codec, prepare
from heed.data.prepared import MANIFEST_FILE, read_manifest
from heed.errors import ConfigError, DataError
from heed.train import train


def records(output_dir: Path, kind: str) -> list[dict]:
    lines = (output_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [{k: v for k, v in r.items() if k not in ("time", "tok_per_s")}
            for r in map(json.loads, lines) if r["kind"] == kind]


def prepared_config(raw: dict, directory: Path, **data) -> dict:
    """`raw` with its train corpus replaced by the prepared corpus in `directory`."""
    section = {k: v for k, v in raw["data"].items() if k != "train"}
    return {**raw, "data": {**section, "prepared": str(directory), **data}}


def without(raw: dict, *splits: str) -> dict:
    """`raw` without the `splits` corpora (no test set: no beam search at the end; faster)."""
    return {**raw, "data": {k: v for k, v in raw["data"].items() if k not in splits}}


@pytest.fixture(scope="module")
def prepared(tiny_config, tmp_path_factory) -> tuple[dict, Path]:
    """(the tiny raw config mapping, its train corpus prepared into several shards)."""
    raw = tiny_config(tmp_path_factory.mktemp("unused") / "out")
    directory = tmp_path_factory.mktemp("prep") / "corpus"
    result = prepare(config_from_dict(raw), directory, shard_tokens=1500)
    assert result.shards > 2
    return raw, directory


@pytest.mark.parametrize("tokenizer", [{"kind": "char"}, {"kind": "word"}, {"kind": "bpe", "vocab_size": 80}])
def test_prepare_builds_the_tokenizers_and_vocabularies_that_raw_training_builds(tiny_config, tmp_path, tokenizer):
    raw = tiny_config(tmp_path / "out")
    raw["data"]["tokenizer"] = {"src": tokenizer, "tgt": tokenizer}
    raw["data"]["vocab"] = {"min_freq": 2}
    config = config_from_dict(raw)
    prepare(config, tmp_path / "p")
    built = Codec.build(load_corpora(config.data).train, config.data)
    corpus, codec = open_prepared(config_from_dict(prepared_config(raw, tmp_path / "p")).data, verify_hashes=True)
    assert codec.src_vocab == built.src_vocab and codec.tgt_vocab == built.tgt_vocab
    assert codec.src_tokenizer.to_spec() == built.src_tokenizer.to_spec()
    assert list(corpus.examples()) == built.encode_pairs(load_corpora(config.data).train)


def test_training_on_a_prepared_corpus_repeats_raw_training_loss_for_loss(prepared, tmp_path):
    raw, directory = prepared
    raw = without(raw, "test")
    common = {"epochs": 1, "log_every": 1, "eval_every": 9}
    from_text = train(config_from_dict({**raw, "train": {**raw["train"], **common}, "output_dir": str(tmp_path / "a")}))
    from_shards = train(config_from_dict({**prepared_config(raw, directory, pool_sentences=10_000),
                                          "train": {**raw["train"], **common}, "output_dir": str(tmp_path / "b")}))
    assert from_shards.steps == from_text.steps > 9
    assert records(tmp_path / "b", "train") == records(tmp_path / "a", "train")
    assert records(tmp_path / "b", "dev") == records(tmp_path / "a", "dev")


def test_resume_in_the_middle_of_a_prepared_epoch_continues_the_identical_loss_sequence(prepared, tmp_path):
    raw, directory = prepared
    raw = without(raw, "dev", "test")
    common = {"epochs": 2, "log_every": 1, "eval_every": 15}

    def config(out: str, **train_options):
        return config_from_dict({**prepared_config(raw, directory, pool_sentences=48),  # 5 windows
                                 "train": {**raw["train"], **common, **train_options},
                                 "output_dir": str(tmp_path / out)})

    straight = train(config("a"))
    train(config("b", max_steps=5))  # stops inside the first epoch, in its second window or later
    resumed = train(config("b"), resume=True)
    assert resumed.steps == straight.steps > 5
    assert records(tmp_path / "b", "train") == records(tmp_path / "a", "train")


def test_resume_onto_a_prepared_corpus_that_changed_is_refused(prepared, tmp_path, tiny_config):
    raw, _directory = prepared
    copy = tmp_path / "copy"
    prepare(config_from_dict(raw), copy, shard_tokens=1500)
    options = {"train": {**raw["train"], "max_steps": 2}, "output_dir": str(tmp_path / "run")}
    train(config_from_dict({**prepared_config(raw, copy), **options}))
    manifest = json.loads((copy / MANIFEST_FILE).read_text())
    (copy / MANIFEST_FILE).write_text(json.dumps({**manifest, "created": "another day"}))
    with pytest.raises(Exception, match=r"data\.prepared changed since the checkpoint"):
        train(config_from_dict({**prepared_config(raw, copy), **options, "train": raw["train"]}), resume=True)


def test_the_same_corpus_prepares_into_identical_shards(prepared, tmp_path):
    raw, directory = prepared
    prepare(config_from_dict(raw), tmp_path / "again", shard_tokens=1500)
    first, second = read_manifest(directory), read_manifest(tmp_path / "again")
    assert first["shards"] == second["shards"] and first["codec_files"] == second["codec_files"]


def test_a_small_sample_bounds_sentencepiece_training_and_still_encodes_every_pair(tiny_config, tmp_path):
    raw = tiny_config(tmp_path / "out")
    raw["data"]["tokenizer"] = {"src": {"kind": "bpe", "vocab_size": 80}, "tgt": {"kind": "char"}}
    prepare(config_from_dict(raw), tmp_path / "p", sample_pairs=30)
    corpus, _codec = open_prepared(config_from_dict(prepared_config(raw, tmp_path / "p")).data, verify_hashes=False)
    assert len(corpus) == 200
    assert "sample of at most 30 pairs" in read_manifest(tmp_path / "p")["tokenizers"]


def test_prepare_warns_of_a_smaller_sentencepiece_vocabulary_in_the_words_raw_training_uses(tiny_config, tmp_path):
    raw = tiny_config(tmp_path / "out")
    raw["data"]["tokenizer"] = {"src": {"kind": "bpe", "vocab_size": 8000}, "tgt": {"kind": "char"}}
    config = config_from_dict(raw)
    pairs = [Pair("the cat sleeps", "1"), Pair("a dog eats", "2")]
    from_raw: list[str] = []
    from_prepare: list[str] = []
    codec = Codec.build(pairs, config.data, warn=from_raw.append)
    build_codec(iter(pairs), config, sample_pairs=10, warn=from_prepare.append)
    pieces = codec.src_tokenizer.num_pieces
    assert from_prepare == from_raw == [
        (f"data.tokenizer.src.vocab_size is 8000, but the training corpus supports only {pieces} bpe pieces: "
        f"the src tokenizer has {pieces} (set vocab_size to {pieces} or less to silence this)")]


def test_prepare_reuses_the_tokenizers_of_a_model_directory(tiny_config, trained_run, tmp_path):
    raw = tiny_config(tmp_path / "out")
    prepare(config_from_dict(raw), tmp_path / "p", tokenizers_from=trained_run / "model")
    model_codec = Codec.load(trained_run / "model")
    _, codec = open_prepared(config_from_dict(prepared_config(raw, tmp_path / "p")).data, verify_hashes=True)
    assert codec.src_vocab == model_codec.src_vocab and codec.tgt_vocab == model_codec.tgt_vocab
    assert read_manifest(tmp_path / "p")["tokenizers"].startswith("reused from ")


def test_a_failed_prepare_leaves_no_directory_behind(tiny_config, tmp_path, write_lines):
    raw = tiny_config(tmp_path / "out")
    raw["data"]["train"] = {"tsv": str(write_lines(tmp_path / "bad.tsv", ["a\tb"] * 50 + ["no tab"]))}
    with pytest.raises(DataError, match=r"bad\.tsv:51"):
        prepare(config_from_dict(raw), tmp_path / "p")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.tsv"]


def test_a_config_that_trains_differently_from_the_preparation_is_refused(prepared):
    raw, directory = prepared
    changed = prepared_config(raw, directory)
    changed["data"]["tokenizer"] = {"tgt": {"kind": "word"}}
    with pytest.raises(ConfigError, match=r"data\.tokenizer\.tgt\.kind': is 'word' but the prepared corpus .* 'char'"):
        open_prepared(config_from_dict(changed).data, verify_hashes=False)


def test_prepare_command_prints_one_summary_line_and_verify_checks_the_result(tiny_config, tmp_path):
    import yaml

    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tiny_config(tmp_path / "run")))
    made = CliRunner().invoke(app, ["prepare", str(config), "--shard-tokens", "2000"])
    assert made.exit_code == 0, made.output
    lines = made.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("prepared 200 sentence pairs (") and "sentences/s" in lines[0]
    assert str(tmp_path / "run" / "prepared") in lines[0]
    checked = CliRunner().invoke(app, ["prepare", "--verify", str(tmp_path / "run" / "prepared")])
    assert checked.exit_code == 0 and "200 sentence pairs in" in checked.stdout and "sha256" in checked.stdout


def test_a_relative_prepared_path_resolves_against_the_config_file_and_is_saved_relative(tmp_path):
    from heed.config import config_to_dict, load_config

    (tmp_path / "recipes").mkdir()
    path = tmp_path / "recipes" / "c.yaml"
    path.write_text("data: {prepared: ../data/prepared}\n")
    config = load_config(path)
    assert config.data.prepared == tmp_path / "data" / "prepared"
    assert config.data.pool_sentences == 1_000_000
    saved = config_to_dict(config, relative_to=tmp_path / "runs" / "x")
    assert saved["data"]["prepared"] == "../../data/prepared" and saved["data"]["root"] == "."
    overridden = load_config(path, ["data.prepared=elsewhere"])
    assert overridden.data.prepared == Path.cwd() / "elsewhere"


def test_a_killed_prepares_hidden_work_is_swept_by_the_next(tmp_path, make_config):
    """`heed prepare` writes into a hidden `.NAME.<pid>.<hex>.partial` beside the output; one left by a
    killed run (its process gone) is removed by the next prepare there, a live one's is kept."""
    import os

    from heed.data.prepare import prepare

    dead = tmp_path / f".corpus.{2**22 + 12345}.0123abcd.partial"
    live = tmp_path / f".corpus.{os.getpid()}.0123abcd.partial"
    for folder in (dead, live):
        folder.mkdir()
        (folder / "shard-00000.src.npy").write_bytes(b"half")
    prepare(make_config(tmp_path / "out"), tmp_path / "corpus")
    assert not dead.exists() and live.exists()
    assert (tmp_path / "corpus" / "manifest.json").is_file()


def test_training_from_text_says_what_it_reads_and_sends_a_corpus_too_large_for_memory_to_prepare(
        tiny_config, tmp_path, monkeypatch, heed_cli):
    import gzip

    import heed.data.codec as pipeline

    corpus = tmp_path / "many.tsv.gz"
    with gzip.open(corpus, "wt", encoding="utf-8") as f:
        f.writelines(f"{k % 10}\t{k % 7}\n" for k in range(2500))
    raw = tiny_config(tmp_path / "run", max_steps=1)
    raw["data"]["train"] = {"tsv": str(corpus)}
    config = tmp_path / "many.yaml"
    config.write_text(json.dumps(raw), encoding="utf-8")
    monkeypatch.setattr(pipeline, "READ_CLOCK_EVERY", 1000)
    monkeypatch.setattr(pipeline, "READ_REPORT_SECONDS", 0.0)  # say it at every look at the clock
    monkeypatch.setattr(pipeline, "MAX_TEXT_PAIRS", 2000)
    result = heed_cli("train", str(config))
    assert result.exit_code == 2 and "Traceback" not in result.output
    said = result.stderr.strip().splitlines()  # what it read, as it read it, then the one-line error
    assert said[:2] == [f"reading data.train ({corpus}): 1,000 pairs", f"reading data.train ({corpus}): 2,000 pairs"]
    assert said[2].startswith(f"error: data.train ({corpus}): more than 2,000 pairs") and len(said) == 3
    assert "`heed prepare CONFIG -o SHARDS`" in said[2] and "data.prepared" in said[2]
    assert not (tmp_path / "run" / "model").exists()
    monkeypatch.setattr(pipeline, "MAX_TEXT_PAIRS", 3000)  # within the bound it trains, and said what it read
    result = heed_cli("train", str(config))
    assert result.exit_code == 0, result.output
    assert load_corpora(config_from_dict(raw).data).train[2499] == Pair("9", str(2499 % 7))
