import pytest

from heed.data.vocab import BOS, EOS, PAD, SPECIALS, UNK, Specials, Vocab
from heed.errors import DataError

DATA = [["b", "a", "c"], ["a", "b"], ["a", "d"]]  # a: 3, b: 2, c: 1, d: 1


def test_specials_have_fixed_ids():
    v = Vocab.build(DATA)
    assert (PAD, BOS, EOS, UNK) == (0, 1, 2, 3)
    assert (v.pad_id, v.bos_id, v.eos_id, v.unk_id) == (0, 1, 2, 3)
    assert [v.lookup(i) for i in range(4)] == ["<pad>", "<s>", "</s>", "<unk>"]


def test_order_is_frequency_then_token():
    assert Vocab.build(DATA).tokens == [*SPECIALS, "a", "b", "c", "d"]


def test_min_freq_and_max_size():
    assert Vocab.build(DATA, min_freq=2).tokens[4:] == ["a", "b"]
    assert Vocab.build(DATA, max_size=3).tokens[4:] == ["a", "b", "c"]
    assert len(Vocab.build(DATA, max_size=0)) == 4


def test_unknown_tokens_and_special_lookalikes_encode_as_unk():
    v = Vocab.build(DATA)
    assert v.encode(["a", "zebra", "<s>", "</s>"]) == [4, UNK, UNK, UNK]
    assert "a" in v and "zebra" not in v and "<pad>" in v
    assert v.encode(["b"], add_bos=True, add_eos=True) == [BOS, 5, EOS]


def test_decode_stops_at_first_eos_and_drops_pad_and_bos():
    v = Vocab.build(DATA)
    assert v.decode([BOS, 4, UNK, 5, EOS, 6, PAD]) == ["a", "<unk>", "b"]
    assert v.decode([BOS, 4, EOS, 6], strip_specials=False) == ["<s>", "a", "</s>", "c"]
    with pytest.raises(IndexError):
        v.lookup(len(v))


def test_save_load_round_trip(tmp_path):
    v = Vocab.build([["Va", "!"], ["화요일", "é"]])
    path = tmp_path / "vocab.src.json"
    v.save(path)
    loaded = Vocab.load(path)
    assert loaded == v and loaded.tokens == v.tokens
    assert loaded.encode(["화요일", "!"]) == v.encode(["화요일", "!"])


def test_loading_a_broken_vocab_names_the_file(tmp_path):
    path = tmp_path / "v.json"
    path.write_text('["<pad>", "<s>", "</s>", "<unk>", "a", "a"]')
    with pytest.raises(DataError, match=r"v\.json: duplicate tokens"):
        Vocab.load(path)
    path.write_text('["a", "b"]')
    with pytest.raises(DataError, match=r"v\.json: a vocabulary must start with"):
        Vocab.load(path)
    path.write_text('["<pad>",\n oops]')
    with pytest.raises(DataError, match=r"v\.json:2: not a heed vocabulary"):
        Vocab.load(path)
    with pytest.raises(DataError, match=r"missing\.json: vocabulary file not found"):
        Vocab.load(tmp_path / "missing.json")


# A pretrained model's vocabulary keeps its own ids: OPUS-MT's has </s> = 0, <unk> = 1 and <pad>
# last, which is also the decoder's first input.
MARIAN_LIKE = ["</s>", "<unk>", "▁a", "▁cat", "s", "<pad>"]
MARIAN_SPECIALS = Specials(pad=5, bos=5, eos=0, unk=1)


def test_a_pretrained_vocabulary_keeps_its_special_ids():
    vocab = Vocab(MARIAN_LIKE, MARIAN_SPECIALS)
    assert vocab.encode(["▁a", "▁cat", "s", "▁dog", "<pad>"], add_eos=True) == [2, 3, 4, 1, 1, 0]
    assert vocab.encode(["▁a"], add_bos=True) == [5, 2]
    assert vocab.decode([5, 2, 3, 1, 0, 4]) == ["▁a", "▁cat", "<unk>"]  # start dropped, stops at </s>
    assert vocab.ordinary == ["▁a", "▁cat", "s"]
    assert vocab.control_ids == {5, 0}


def test_a_pretrained_vocabulary_round_trips_with_its_specials(tmp_path):
    vocab = Vocab(MARIAN_LIKE, MARIAN_SPECIALS)
    vocab.save(tmp_path / "v.json")
    back = Vocab.load(tmp_path / "v.json")
    assert back == vocab and back.specials == MARIAN_SPECIALS and back.tokens == MARIAN_LIKE
    assert back != Vocab(MARIAN_LIKE, MARIAN_SPECIALS._replace(unk=4))


def test_special_ids_outside_the_vocabulary_are_refused(tmp_path):
    with pytest.raises(ValueError, match="outside a vocabulary of 6 tokens"):
        Vocab(MARIAN_LIKE, MARIAN_SPECIALS._replace(pad=6))
    (tmp_path / "v.json").write_text('{"tokens": ["a"], "specials": {"pad": 0}}')
    with pytest.raises(DataError, match="pad, bos, eos, unk"):
        Vocab.load(tmp_path / "v.json")
