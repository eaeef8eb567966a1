import pytest

from heed.errors import HeedError
from heed.evaluate import evaluate, exact_matches, format_scores


def test_identical_texts_score_100():
    texts = ["the cat sat on the mat", "1998-03-03", "a b c d e"]
    scores = evaluate(texts, texts)
    assert scores.bleu == pytest.approx(100.0)
    assert scores.chrf == pytest.approx(100.0)
    assert scores.exact_match == 100.0
    assert (scores.exact, scores.total) == (3, 3)


def test_exact_match_counts_whole_sentences():
    scores = evaluate(["1998-03-03", "1998-03-04", "2001-01-01"], ["1998-03-03", "1998-03-05", "2001-01-01"])
    assert (scores.exact, scores.total) == (2, 3)
    assert scores.exact_match == pytest.approx(200 / 3)


def test_exact_match_ignores_only_outer_whitespace():
    assert exact_matches([" a b ", "a  b", "A b"], ["a b", "a b", "a b"]) == 1


def test_disjoint_texts_score_0_bleu():
    assert evaluate(["x y z w"], ["a b c d"]).bleu == pytest.approx(0.0)


def test_signatures_and_format_name_how_scores_were_computed():
    scores = evaluate(["a b c d"], ["a b c d"])
    assert "tok:13a" in scores.bleu_signature and "nrefs:1" in scores.bleu_signature
    assert "nc:6" in scores.chrf_signature
    text = format_scores(scores)
    assert "BLEU = 100.00" in text and scores.bleu_signature in text
    assert "chrF = 100.00" in text and "exact match = 100.00% (1/1)" in text


def test_different_counts_are_a_user_error():
    with pytest.raises(HeedError, match="2 translations but 1 references"):
        evaluate(["a", "b"], ["a"])
    with pytest.raises(HeedError, match="nothing to evaluate"):
        evaluate([], [])
