import pytest

from heed.data.vocab import BOS, EOS, PAD, SPECIALS, UNK, Vocab
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
