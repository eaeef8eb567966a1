"""Alignments from attention: hard links, Pharaoh I/O, AER, unknown-word replacement."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from heed.data.pharaoh import parse_gold_pharaoh, parse_pharaoh, read_alignments, read_gold_alignments, to_pharaoh
from heed.errors import DataError
from heed.explain.align import alignment_error_rate, hard_alignment, load_dictionary, replace_unknowns, word_attention


def test_aer_matches_hand_computation():
    # Sentence 1: S = {0-0, 1-1}, P = S + {2-1}, A = {0-0, 2-1, 2-2}
    #   |A∩S| = 1 (0-0), |A∩P| = 2 (0-0, 2-1), |A| = 3, |S| = 2
    #   alone: AER = 1 - (1 + 2) / (3 + 2) = 1 - 3/5 = 0.4
    # Sentence 2: S = {0-0}, P as written = {1-0} (the gold file left 0-0 out of P), A = {0-0}
    #   with S ⊆ P enforced P = {0-0, 1-0}: |A∩S| = 1, |A∩P| = 1, |A| = 1, |S| = 1
    # Corpus (counts summed): 1 - (2 + 3) / (4 + 3) = 2/7
    # (without S ⊆ P it would be 1 - (2 + 2) / 7 = 3/7)
    hyp = [{(0, 0), (2, 1), (2, 2)}, {(0, 0)}]
    sure = [{(0, 0), (1, 1)}, {(0, 0)}]
    possible = [{(0, 0), (1, 1), (2, 1)}, {(1, 0)}]
    assert alignment_error_rate(hyp[:1], sure[:1], possible[:1]) == pytest.approx(0.4)
    assert alignment_error_rate(hyp, sure, possible) == pytest.approx(2 / 7)


def test_aer_is_zero_for_the_sure_links_and_one_for_disjoint_links():
    sure = [{(0, 0), (1, 1)}]
    possible = [{(0, 0), (1, 1), (1, 0)}]
    assert alignment_error_rate(sure, sure, possible) == 0.0
    assert alignment_error_rate([{(5, 5)}], sure, possible) == 1.0


def test_aer_rejects_different_sentence_counts():
    with pytest.raises(ValueError, match="one link set per sentence"):
        alignment_error_rate([set()], [set(), set()], [set(), set()])


def test_pharaoh_round_trip():
    pairs = [(0, 0), (2, 1), (1, 2), (10, 3)]
    line = to_pharaoh(pairs)
    assert line == "0-0 2-1 1-2 10-3"
    assert parse_pharaoh(line) == set(pairs)
    assert to_pharaoh({(2, 1), (0, 0)}) == "0-0 2-1"  # sets have no order: sorted
    assert to_pharaoh([]) == "" and parse_pharaoh("") == set()


def test_gold_line_separates_sure_and_possible():
    sure, possible = parse_gold_pharaoh("0-0 1?2 2-3-P 3-4-S 4p5")
    assert sure == {(0, 0), (3, 4)}
    assert possible == {(0, 0), (1, 2), (2, 3), (3, 4), (4, 5)}
    assert parse_pharaoh("0-0 1?2") == {(0, 0), (1, 2)}  # hypotheses: every link counts


@pytest.mark.parametrize("token", ["1-", "-1-2", "1--2", "a-b", "1-2-Q", "1?2-S", "1:2", "1-2-"])
def test_malformed_link_names_file_and_line(tmp_path, token):
    path = tmp_path / "hyp.align"
    path.write_text(f"0-0 1-1\n0-1 {token} 2-2\n", encoding="utf-8")
    with pytest.raises(DataError) as err:
        read_alignments(path)
    assert err.value.line == 2 and err.value.path == str(path)
    assert f"{path}:2:" in str(err.value) and repr(token) in str(err.value)


def test_read_gold_alignments_one_set_per_line(tmp_path):
    path = tmp_path / "gold.talp"
    path.write_text("0-0 1?1\n\n2-0-S 0-1-P\n", encoding="utf-8")
    sure, possible = read_gold_alignments(path)
    assert sure == [{(0, 0)}, set(), {(2, 0)}]
    assert possible == [{(0, 0), (1, 1)}, set(), {(2, 0), (0, 1)}]


def test_missing_alignment_file_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="cannot read"):
        read_alignments(tmp_path / "nope.align")


def test_hard_alignment_picks_the_argmax_source_position():
    weights = np.array(
        [
            [0.1, 0.7, 0.2],  # output 0 looked at source 1
            [0.6, 0.3, 0.1],  # output 1 looked at source 0
            [0.2, 0.2, 0.6],  # output 2 looked at source 2
            [0.0, 0.0, 0.0],  # padding step: no link
        ]
    )
    assert hard_alignment(weights) == [(1, 0), (0, 1), (2, 2)]
    assert hard_alignment(torch.tensor(weights, dtype=torch.float32)) == [(1, 0), (0, 1), (2, 2)]
    assert to_pharaoh(hard_alignment(weights)) == "1-0 0-1 2-2"


SRC = ["der", "Hund", "von", "Müller", "bellt"]
TGT = ["the", "<unk>", "of", "<unk>", "barks"]
WEIGHTS = np.eye(5) * 0.8 + 0.04  # each output attends mostly to the source word at its position


def test_replace_unknowns_copies_the_most_attended_source_word():
    assert replace_unknowns(TGT, SRC, WEIGHTS) == ["the", "Hund", "of", "Müller", "barks"]


def test_replace_unknowns_translates_with_the_dictionary():
    out = replace_unknowns(TGT, SRC, WEIGHTS, dictionary={"Hund": "dog", "bellt": "woofs"})
    assert out == ["the", "dog", "of", "Müller", "barks"]  # Müller: no entry, copied


def test_replace_unknowns_uses_the_given_unk_and_checks_shapes():
    assert replace_unknowns(["UNK"], ["Hund"], [[1.0]], unk="UNK") == ["Hund"]
    with pytest.raises(ValueError, match=r"expected \(tgt_len, src_len\) = \(5, 4\)"):
        replace_unknowns(TGT, SRC[:4], WEIGHTS)


def test_load_dictionary_reads_tab_pairs_first_entry_wins(tmp_path):
    path = tmp_path / "lex.tsv"
    path.write_text("Hund\tdog\n\nHund\thound\nbellt\tbarks\n", encoding="utf-8")
    assert load_dictionary(path) == {"Hund": "dog", "bellt": "barks"}


@pytest.mark.parametrize("bad", ["Hund dog", "Hund\tdog\textra", "\tdog", "Hund\t"])
def test_load_dictionary_error_names_file_and_line(tmp_path, bad):
    path = tmp_path / "lex.tsv"
    path.write_text(f"Katze\tcat\n{bad}\n", encoding="utf-8")
    with pytest.raises(DataError) as err:
        load_dictionary(path)
    assert err.value.line == 2 and f"{path}:2:" in str(err.value)


def test_replace_unknowns_keeps_a_piece_s_word_start_mark_out_of_the_dictionary():
    # SentencePiece pieces: "▁Zoltan" starts a word; the dictionary is of words.
    out = replace_unknowns(["▁le", "<unk>", "<unk>"], ["▁the", "▁Zoltan", "ich"], np.eye(3),
                           dictionary={"Zoltan": "Zoltán", "ich": "ICH"})
    assert out == ["▁le", "▁Zoltán", "ICH"]
    assert replace_unknowns(["<unk>"], ["▁"], [[1.0]], dictionary={"": "x"}) == ["▁"]  # a char-level space


def test_align_space_mark_is_the_tokenizers():
    from heed.data.tokenize import SPACE
    from heed.explain import align

    assert align.SPACE == SPACE


def test_word_attention_sums_source_pieces_and_averages_target_pieces():
    # source pieces  "▁new" "▁yor" "k" "</s>"  -> words new(0), york(1); </s> in no word
    # target pieces  "▁nueva" "▁Yo" "rk"       -> words nueva(0), York(1)
    weights = np.array([
        [0.7, 0.1, 0.1, 0.1],
        [0.1, 0.6, 0.2, 0.1],
        [0.0, 0.2, 0.7, 0.1],
    ])
    words = word_attention(weights, [0, 1, 1, None], [0, 1, 1])
    # nueva: [0.7, 0.1 + 0.1]; York: mean of [0.1, 0.6 + 0.2] and [0.0, 0.2 + 0.7] = [0.05, 0.85]
    np.testing.assert_allclose(words, [[0.7, 0.2], [0.05, 0.85]])
    assert hard_alignment(words) == [(0, 0), (1, 1)]


def test_word_attention_lets_a_split_word_outweigh_one_sharper_piece():
    # "▁a" gets 0.4; "▁b" "c" get 0.3 each: the word b holds 0.6 of the attention (max would pick a).
    words = word_attention([[0.4, 0.3, 0.3]], [0, 1, 1], [0])
    np.testing.assert_allclose(words, [[0.4, 0.6]])
    assert hard_alignment(words) == [(1, 0)]


def test_word_attention_drops_separators_and_keeps_word_tokens_as_they_are():
    weights = np.array([[0.5, 0.2, 0.3], [0.1, 0.1, 0.8]])
    # char tokens "a" "▁" "b": the space belongs to no word, its weight is dropped
    np.testing.assert_allclose(word_attention(weights, [0, None, 1], [0, 1]), [[0.5, 0.3], [0.1, 0.8]])
    # a target "▁" (None) gets no row
    np.testing.assert_allclose(word_attention(weights, [0, 1, 2], [0, None]), weights[:1])
    np.testing.assert_allclose(word_attention(weights, [0, 1, 2], [0, 1]), weights)  # word level: unchanged
    with pytest.raises(ValueError, match="expected"):
        word_attention(weights, [0, 1], [0, 1])
