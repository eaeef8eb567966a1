import json

import pytest
import sentencepiece

from heed.data.tokenize import (
    CharTokenizer,
    SentencePieceTokenizer,
    Tokenizer,
    WordTokenizer,
    load_tokenizer,
    spm_model_path,
    train_tokenizer,
)
from heed.errors import ModelDirError

TEXTS = [
    "the cat sat on the mat",
    "the dog sat on the log",
    "a cat and a dog",
    "Va ! Je t'aime.",
    "1998-03-03 est un mardi",
    "1998년 3월 3일 화요일",
] * 5


@pytest.mark.parametrize("kind", ["char", "word"])
def test_simple_tokenizers_round_trip(kind):
    tok = train_tokenizer(kind, TEXTS)
    for text in TEXTS:
        assert tok.detokenize(tok.tokenize(text)) == text


def test_char_tokenizer_marks_spaces():
    assert CharTokenizer().tokenize("a b") == ["a", "▁", "b"]
    assert WordTokenizer().tokenize("Va !") == ["Va", "!"]


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_sentencepiece_round_trips_seen_and_unseen_text(kind):
    tok = train_tokenizer(kind, TEXTS, vocab_size=60)
    assert isinstance(tok, Tokenizer) and tok.kind == kind
    for text in [*TEXTS, "zebra quiz"]:  # z, b, q, u never seen in training
        assert tok.detokenize(tok.tokenize(text)) == text


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_sentencepiece_training_is_deterministic(kind):
    a = train_tokenizer(kind, TEXTS, vocab_size=60)
    b = train_tokenizer(kind, iter(TEXTS), vocab_size=60)
    assert a.model == b.model


def test_tiny_corpus_with_large_vocab_size_still_trains():
    tok = train_tokenizer("unigram", ["ab ab", "ba"], vocab_size=8000)
    assert tok.num_pieces < 8000


def test_vocab_size_below_character_count_is_a_clear_error():
    with pytest.raises(ValueError, match="vocab_size=5.*required_chars"):
        train_tokenizer("bpe", TEXTS, vocab_size=5)


@pytest.mark.parametrize("kind", ["char", "word", "bpe", "unigram"])
def test_saved_tokenizer_loads_with_identical_pieces(tmp_path, kind):
    tok = train_tokenizer(kind, TEXTS, vocab_size=60)
    tok.save(tmp_path, "src")
    spec = json.loads(json.dumps(tok.to_spec()))  # survives JSON
    loaded = load_tokenizer(tmp_path, "src", spec)
    assert loaded.kind == kind and loaded.to_spec() == spec
    for text in [*TEXTS, "zebra quiz"]:
        assert loaded.tokenize(text) == tok.tokenize(text)


def test_loading_sentencepiece_reuses_the_file_and_never_retrains(tmp_path, monkeypatch):
    tok = train_tokenizer("bpe", TEXTS, vocab_size=60)
    tok.save(tmp_path, "tgt")
    path = spm_model_path(tmp_path, "tgt")
    assert path == tmp_path / "tgt.spm.model" and path.read_bytes() == tok.model

    def no_training(*args, **kwargs):
        raise AssertionError("load_tokenizer retrained SentencePiece")

    monkeypatch.setattr(sentencepiece.SentencePieceTrainer, "train", no_training)
    loaded = load_tokenizer(tmp_path, "tgt", tok.to_spec())
    assert isinstance(loaded, SentencePieceTokenizer) and loaded.model == path.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tgt.spm.model"]  # no temp files left


def test_loading_a_missing_or_different_model_is_an_error(tmp_path):
    tok = train_tokenizer("unigram", TEXTS, vocab_size=60)
    with pytest.raises(ModelDirError, match=r"src\.spm\.model: SentencePiece model missing"):
        load_tokenizer(tmp_path, "src", tok.to_spec())
    train_tokenizer("bpe", TEXTS, vocab_size=60).save(tmp_path, "src")
    with pytest.raises(ModelDirError, match="does not match"):
        load_tokenizer(tmp_path, "src", tok.to_spec())
    with pytest.raises(ModelDirError, match="unknown tokenizer kind"):
        load_tokenizer(tmp_path, "src", {"kind": "morfessor"})


def test_unknown_kind_is_rejected():
    with pytest.raises(ValueError, match="unknown tokenizer kind"):
        train_tokenizer("bytes", TEXTS)  # type: ignore[arg-type]


def test_word_ids_of_word_and_char_tokens():
    assert WordTokenizer().word_ids(["Va", "!"]) == [0, 1]
    chars = CharTokenizer()
    assert chars.word_ids(chars.tokenize("ab c")) == [0, 0, None, 1]  # "▁" belongs to no word
    assert chars.word_ids([]) == []


@pytest.mark.parametrize("kind", ["char", "word", "bpe", "unigram"])
def test_word_ids_group_each_whitespace_word_s_tokens(kind):
    tok = train_tokenizer(kind, TEXTS, vocab_size=60)
    for text in [*TEXTS, "zebra quiz , ok"]:
        tokens = tok.tokenize(text)
        ids = tok.word_ids(tokens)
        words = text.split()
        assert [i for i in ids if i is not None] == sorted(i for i in ids if i is not None)  # in order
        for w, word in enumerate(words):
            pieces = [t for t, i in zip(tokens, ids) if i == w]
            assert "".join(pieces).replace("▁", "") == word, (kind, text, tokens, ids)


def test_sentencepiece_detokenizes_pieces_it_does_not_know():
    # Unknown-word replacement puts source pieces, unknown to the target model, into the output.
    tok = train_tokenizer("bpe", TEXTS, vocab_size=60)
    assert tok.detokenize(["▁Zoltan", *tok.tokenize("sat on the mat")]) == "Zoltan sat on the mat"
    assert tok.detokenize([*tok.tokenize("the cat"), "▁Zoltan", *tok.tokenize("sat")]) == "the cat Zoltan sat"
    assert tok.detokenize([*tok.tokenize("the"), "Zol"]) == "theZol"  # a mid-word piece joins its word


# ------------------------------------------------------------ kinds in a model directory


def _codec_dir(tmp_path, make_config, src_kind: str, tgt_kind: str = "char", **extra):
    from heed.config import config_from_dict
    from heed.data.codec import Codec
    from heed.data.corpus import Pair

    cfg = make_config(tmp_path / "run")
    raw = cfg.model_dump(mode="json")
    raw["data"]["tokenizer"] = {"src": {"kind": src_kind, **extra}, "tgt": {"kind": tgt_kind}}
    data = config_from_dict(raw).data
    pairs = [Pair(f"the cat number {i} sleeps", f"{i}") for i in range(30)]
    codec = Codec.build(pairs, data)
    codec.save(tmp_path / "codec")
    return tmp_path / "codec", data


def _edit_kind(directory, side: str, kind: str) -> None:
    path = directory / "tokenizers.json"
    specs = json.loads(path.read_text(encoding="utf-8"))
    specs[side]["kind"] = kind
    path.write_text(json.dumps(specs), encoding="utf-8")


@pytest.mark.parametrize(("trained", "edited", "says"), [
    ("word", "char", "holds multi-character tokens"),
    ("bpe", "char", "src.spm.model beside it is a SentencePiece model"),
    ("unigram", "word", "src.spm.model beside it is a SentencePiece model"),
    ("char", "bpe", "SentencePiece model missing"),
])
def test_an_edited_tokenizer_kind_is_caught_by_the_files_beside_it(tmp_path, make_config, trained, edited, says):
    from heed.data.codec import Codec

    sentencepiece_options = {"vocab_size": 40} if trained in ("bpe", "unigram") else {}
    directory, _ = _codec_dir(tmp_path, make_config, trained, **sentencepiece_options)
    _edit_kind(directory, "src", edited)
    with pytest.raises(ModelDirError, match=says):
        Codec.load(directory)


@pytest.mark.parametrize(("trained", "edited"), [("char", "word"), ("bpe", "unigram")])
def test_an_edited_tokenizer_kind_is_caught_by_the_model_s_config(tmp_path, make_config, trained, edited):
    from heed.data.codec import Codec

    directory, data = _codec_dir(tmp_path, make_config, trained, **({"vocab_size": 40} if trained == "bpe" else {}))
    assert Codec.load(directory, data=data).src_tokenizer.kind == trained
    _edit_kind(directory, "src", edited)
    with pytest.raises(ModelDirError, match=rf"tokenizers\.json: the src tokenizer's kind is '{edited}', but the model "
                                            rf"was trained with '{trained}'"):
        Codec.load(directory, data=data)


def test_a_tokenizers_json_without_both_sides_is_a_model_dir_error(tmp_path, make_config):
    from heed.data.codec import Codec

    directory, _ = _codec_dir(tmp_path, make_config, "char")
    (directory / "tokenizers.json").write_text('{"src": {"kind": "char"}}', encoding="utf-8")
    with pytest.raises(ModelDirError, match=r"tokenizers\.json: expected"):
        Codec.load(directory)


def test_a_corrupt_sentencepiece_model_without_checksum_is_a_model_dir_error(tmp_path):
    train_tokenizer("bpe", TEXTS, vocab_size=60).save(tmp_path, "src")
    (tmp_path / "src.spm.model").write_bytes(b"not a model")
    with pytest.raises(ModelDirError, match=r"src\.spm\.model: cannot load the SentencePiece model"):
        load_tokenizer(tmp_path, "src", {"kind": "bpe"})


def test_a_vocabulary_smaller_than_asked_is_reported(tmp_path, make_config):
    from heed.config import config_from_dict
    from heed.data.codec import Codec
    from heed.data.corpus import Pair

    raw = make_config(tmp_path / "run").model_dump(mode="json")
    raw["data"]["tokenizer"] = {"src": {"kind": "bpe", "vocab_size": 8000}, "tgt": {"kind": "char"}}
    heard: list[str] = []
    codec = Codec.build([Pair("the cat sleeps", "1"), Pair("a dog eats", "2")], config_from_dict(raw).data,
                        warn=heard.append)
    pieces = codec.src_tokenizer.num_pieces
    assert pieces < 8000
    assert heard == [(f"data.tokenizer.src.vocab_size is 8000, but the training corpus supports only {pieces} bpe "
                     f"pieces: the src tokenizer has {pieces} (set vocab_size to {pieces} or less to silence this)")]
