import pytest

from heed.errors import HeedError
from heed.evaluate import (
    Bucket,
    by_length,
    default_buckets,
    evaluate,
    exact_matches,
    format_scores,
    parse_buckets,
    source_lengths,
)


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


# ------------------------------------------------------------------------------- by length

SHORT_1 = "the cat sat"  # 3 words
SHORT_2 = "a dog ran in the park"  # 6 words
LONG_1 = "one two three four five six seven eight nine ten eleven twelve"  # 12 words
LONG_2 = "we walked along the river for a long time and then we went home"  # 14 words


def test_by_length_scores_each_bucket_on_its_own_sentences():
    srcs = [LONG_1, SHORT_1, LONG_2, SHORT_2]
    refs = ["un deux trois quatre cinq six", "le chat", "nous avons marché", "un chien a couru"]
    hyps = ["un deux trois quatre cinq six", "le chat", "quelque chose d'autre", "un chien a couru"]
    short, long = by_length(srcs, hyps, refs, [Bucket(1, 10), Bucket(11, None)])
    # 1-10: both short sentences, both translated exactly
    assert (short.label, short.count, short.exact, short.exact_match) == ("1-10", 2, 2, 100.0)
    assert short.bleu == pytest.approx(100.0) and short.chrf == pytest.approx(100.0)
    # 11+: one of two exact; BLEU is the corpus BLEU of those two sentences alone
    assert (long.label, long.count, long.exact, long.exact_match) == ("11+", 2, 1, 50.0)
    alone = evaluate([hyps[0], hyps[2]], [refs[0], refs[2]])
    assert long.bleu == pytest.approx(alone.bleu) and 0 < long.bleu < 100


def test_by_length_leaves_out_empty_buckets_and_sentences_outside_all():
    srcs, texts = [SHORT_1, SHORT_2, LONG_1], ["a", "b", "c"]
    scores = by_length(srcs, texts, texts, [Bucket(1, 3), Bucket(4, 5), Bucket(6, 10)])
    assert [(b.label, b.count) for b in scores] == [("1-3", 1), ("6-10", 1)]  # 4-5 empty; 12 words: nowhere


def test_by_length_counts_characters_or_given_lengths():
    srcs = ["ab c", "abcdefgh"]  # 4 and 8 characters (a space counts), 2 and 1 words
    assert source_lengths(srcs, "words") == [2, 1] and source_lengths(srcs, "chars") == [4, 8]
    scores = by_length(srcs, ["x", "y"], ["x", "z"], [Bucket(1, 5), Bucket(6, 10)], unit="chars")
    assert [(b.label, b.exact) for b in scores] == [("1-5", 1), ("6-10", 0)]
    scores = by_length(srcs, ["x", "y"], ["x", "z"], [Bucket(1, 5), Bucket(6, 10)], lengths=[7, 3])
    assert [(b.label, b.exact) for b in scores] == [("1-5", 0), ("6-10", 1)]
    with pytest.raises(HeedError, match="2 sources, 1 translations and 2 references"):
        by_length(srcs, ["x"], ["x", "z"])


def test_default_buckets_are_fixed_per_unit_whatever_the_test_set():
    assert [b.label for b in default_buckets("words")] == ["0-5", "6-10", "11-15", "16-20", "21-30", "31-40",
                                                           "41-50", "51+"]
    assert [b.label for b in default_buckets("chars")][:2] == ["0-25", "26-50"]
    assert default_buckets("tokens")[-1] == Bucket(101, None)
    for unit in ("words", "tokens", "chars"):  # every length falls in exactly one bucket
        buckets = default_buckets(unit)
        assert all(sum(n in b for b in buckets) == 1 for n in range(400))


def test_two_test_sets_of_different_lengths_get_the_same_default_buckets():
    short = ["a b c", "a b", "a b c d e f g"]  # 3, 2 and 7 words
    long = ["w " * 12, "w " * 25, "w " * 4, "w " * 60]  # 12, 25, 4 and 60 words
    rows_short = {b.label: b.count for b in by_length(short, short, short)}
    rows_long = {b.label: b.count for b in by_length(long, long, long)}
    assert rows_short == {"0-5": 2, "6-10": 1}
    assert rows_long == {"0-5": 1, "11-15": 1, "21-30": 1, "51+": 1}  # the same ranges, empty ones left out


def test_parse_buckets_reads_inclusive_ranges():
    assert parse_buckets("1-10, 11-20,21+") == [Bucket(1, 10), Bucket(11, 20), Bucket(21, None)]
    assert parse_buckets("5,6-9") == [Bucket(5, 5), Bucket(6, 9)]
    assert [b.label for b in parse_buckets("5,6-9,10+")] == ["5", "6-9", "10+"]
    assert 10 in Bucket(1, 10) and 11 not in Bucket(1, 10) and 10**6 in Bucket(21, None)


@pytest.mark.parametrize("spec, message", [
    ("0-10,10-20", "overlap at 10: ranges include both ends"),
    ("11-20,1-10", "overlap"),
    ("1-10,20+,30-40", "must come last"),
    ("10-1", "ends before it starts"),
    ("1-10,x", "cannot read 'x'"),
    ("", "cannot read ''"),
])
def test_parse_buckets_says_what_is_wrong(spec, message):
    with pytest.raises(HeedError, match=message):
        parse_buckets(spec)


# ---------------------------------------------------------------------------- repetition


def test_repeated_token_rate_counts_tokens_equal_to_the_one_before():
    from heed.evaluate import repeated_token_rate

    # "the the cat sat sat sat": tokens 1, 4 and 5 repeat their predecessor -> 3 of 6
    assert repeated_token_rate([["the", "the", "cat", "sat", "sat", "sat"]]) == 0.5
    # a repeat elsewhere in the sentence is not a loop: "a b a" has none at n = 1
    assert repeated_token_rate([["a", "b", "a"]]) == 0.0
    # pooled over outputs: 3 repeats in 6 + 4 tokens
    assert repeated_token_rate([[1, 1, 2, 3, 3, 3], [4, 5, 6, 7]]) == 3 / 10


def test_repeated_token_rate_of_bigrams_counts_the_tokens_completing_a_repeated_bigram():
    from heed.evaluate import repeated_token_rate

    # "a b a b a": tokens 3 (a b | a b) and 4 (b a | b a) -> 2 of 5; at n = 1 none repeats
    assert repeated_token_rate([["a", "b", "a", "b", "a"]], n=2) == 2 / 5
    assert repeated_token_rate([["a", "b", "a", "b", "a"]], n=1) == 0.0
    # "a a a": at n = 2 only token 3 would have a bigram before its own; three tokens have none
    assert repeated_token_rate([["a", "a", "a"]], n=2) == 0.0
    assert repeated_token_rate([["a", "a", "a", "a"]], n=2) == 1 / 4


def test_repeated_token_rate_of_nothing_is_zero_and_n_must_be_positive():
    from heed.evaluate import repeated_token_rate

    assert repeated_token_rate([]) == 0.0
    assert repeated_token_rate([[], []]) == 0.0
    with pytest.raises(ValueError, match="at least 1"):
        repeated_token_rate([[1, 1]], n=0)
