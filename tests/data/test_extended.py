"""The extended vocabulary (See et al. 2017, §2.2): temporary target ids for a sentence's source
tokens the target vocabulary lacks, and the copy model's source ids that name them."""
from __future__ import annotations

import pytest

from heed.data.extended import ExtendedVocab, copyable_unknowns, source_ids, source_to_target
from heed.data.vocab import EOS, SPECIALS, UNK, Vocab

SRC = Vocab([*SPECIALS, "a", "b"])  # S = 6
TGT = Vocab([*SPECIALS, "a", "q"])  # V = 6: "b" is a source word the target lacks
TOKENS = ["b", "zed", "a", "b", "zed", "q"]  # "zed" in neither vocabulary, "q" only in the target's


def test_copyable_unknowns_are_the_distinct_target_unknowns_in_order_of_first_appearance() -> None:
    assert copyable_unknowns(TOKENS, TGT) == ("b", "zed")
    assert copyable_unknowns(["a", "q"], TGT) == ()
    # text that reads like a special token is a word the vocabulary lacks, not a control id
    assert copyable_unknowns(["<unk>", "<s>"], TGT) == ("<unk>", "<s>")


def test_source_ids_keep_the_source_vocabulary_and_name_the_rest_by_target_id_or_per_sentence() -> None:
    # b -> 5 (source vocab); zed -> S + V + 0 = 12; a -> 4; q -> S + target id 5 = 11
    assert source_ids(TOKENS, SRC, TGT) == [5, 12, 4, 5, 12, 11]
    assert source_ids(["x", "y", "x"], SRC, TGT) == [12, 13, 12]


def test_source_to_target_maps_by_string_and_marks_the_missing() -> None:
    assert source_to_target(SRC, TGT) == [0, 1, 2, 3, 4, -1]


def test_extended_vocab_encodes_a_copyable_unknown_with_its_temporary_id_and_others_as_unk() -> None:
    ext = ExtendedVocab.of(TOKENS, TGT)
    assert len(ext) == 8
    # the reference's "zed" and "b" are in the source: V + 1 and V + 0; "nowhere" is not: <unk>
    assert ext.encode(["q", "zed", "b", "nowhere", "a"]) == [5, 7, 6, UNK, 4]
    assert ext.decode([5, 7, 6, UNK, 4, EOS, 7]) == ["q", "zed", "b", "<unk>", "a"]
    assert ext.lookup(6) == "b"
    with pytest.raises(IndexError, match="extended vocabulary of size 8"):
        ext.lookup(8)


def test_a_source_without_unknowns_extends_nothing() -> None:
    ext = ExtendedVocab.of(["a", "q"], TGT)
    assert len(ext) == len(TGT) and ext.encode(["a", "b"]) == [4, UNK]


@pytest.mark.parametrize("kind", ["word", "char", "bpe", "unigram"])
def test_a_copy_codec_round_trips_a_sentence_whose_tokens_the_target_vocabulary_lacks(kind: str) -> None:
    from heed.config import DataConfig
    from heed.data.codec import Codec
    from heed.data.corpus import Pair

    spec = {"kind": kind, "vocab_size": 40}
    data = DataConfig(task="dates", tokenizer={"src": spec, "tgt": spec})
    train = [Pair("le chat dort ici", "the cat sleeps here"), Pair("le chien mange", "the dog eats")] * 5
    codec = Codec.build(train, data, copy=True)
    # "Zoé" (word), or its pieces "Z", "o", "é" (char, and the subwords' pieces): in no vocabulary
    pair = Pair("le chat Zoé", "the cat Zoé")
    [(src_ids, tgt_ids)] = codec.encode_pairs([pair])
    src_tokens = codec.src_tokens(pair.src)
    assert max(src_ids) >= len(codec.src_vocab) + len(codec.tgt_vocab)  # named past both vocabularies
    assert UNK not in tgt_ids and max(tgt_ids) >= len(codec.tgt_vocab)  # trained as a copy, not <unk>
    assert codec.decode_tgt(tgt_ids, src_tokens)[1] == "the cat Zoé"
    plain = Codec.build(train, data)
    assert UNK in plain.encode_pairs([pair])[0][1] and plain.decode_tgt(plain.encode_pairs([pair])[0][1])[1] != pair.tgt
