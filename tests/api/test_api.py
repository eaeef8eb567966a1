"""Translator: unknown-word replacement and forced alignments."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from heed.api import Translator
from heed.errors import ConfigError, HeedError
from heed.explain.align import hard_alignment, word_attention


@pytest.fixture(scope="module")
def words(word_run) -> Translator:
    torch.set_num_threads(1)
    return Translator.load(word_run, device="cpu")


@pytest.fixture(scope="module")
def chars(trained_run) -> Translator:
    return Translator.load(trained_run, device="cpu")


# ------------------------------------------------------------------------ unknown words


def test_the_word_model_outputs_unk_for_a_name_it_never_saw(words):
    (t,) = words.translate(["hello zoltan sleeps"])
    assert t.tokens == ["bonjour", "<unk>", "dort"] and t.text == "bonjour <unk> dort"


def test_replace_unk_copies_the_attended_source_word(words):
    (plain,) = words.translate(["hello zoltan sleeps"])
    (t,) = words.translate(["hello zoltan sleeps"], replace_unk=True)
    j = plain.tokens.index("<unk>")
    # the source word that output j attended to most (no </s> column), copied in its place
    source = t.src_tokens[int(plain.attention[j, : len(plain.src_tokens)].argmax())]
    assert source == "zoltan"
    assert t.tokens == ["bonjour", "zoltan", "dort"] and t.text == "bonjour zoltan dort"
    np.testing.assert_array_equal(t.attention, plain.attention)


def test_replace_unk_translates_with_a_dictionary_mapping_or_file(words, tmp_path):
    (t,) = words.translate(["hello zoltan sleeps"], replace_unk=True, dictionary={"zoltan": "Zoltán"})
    assert t.text == "bonjour Zoltán dort"
    lexicon = tmp_path / "lex.tsv"
    lexicon.write_text("zoltan\tZoli\n", encoding="utf-8")
    (t,) = words.translate(["hello zoltan sleeps"], dictionary=lexicon)  # a dictionary implies replace_unk
    assert t.text == "bonjour Zoli dort"


def test_replace_unk_leaves_known_words_alone(words):
    plain = words.translate(["thanks anna sings", "hello zoltan sleeps"])
    replaced = words.translate(["thanks anna sings", "hello zoltan sleeps"], replace_unk=True)
    assert (replaced[0].text, replaced[0].tokens) == (plain[0].text, plain[0].tokens)
    assert replaced[1].text != plain[1].text


# --------------------------------------------------------------------------- alignments


def test_forced_alignment_of_the_model_s_own_output_is_its_search_attention(words, chars):
    """Teacher-forcing the greedy output reproduces the attention greedy search had, per word."""
    for translator, sources in [(words, ["hello anna sleeps", "goodbye paul eats"]),
                                (chars, ["3 March 1998", "le 4 mai 2001"])]:
        outputs = translator.translate(sources, beam=1)
        forced = translator.align(sources, [t.text for t in outputs])
        for source, t, a in zip(sources, outputs, forced):
            src_ids = translator.codec.src_tokenizer.word_ids(t.src_tokens)
            tgt_ids = translator.codec.tgt_tokenizer.word_ids(t.tokens)
            expected = word_attention(t.attention[: len(t.tokens), : len(t.src_tokens)], src_ids, tgt_ids)
            np.testing.assert_allclose(a.attention, expected, atol=1e-5)
            assert a.src_words == source.split() and a.tgt_words == t.text.split()


def test_alignment_links_are_the_word_argmax_within_the_sentence(chars):
    src = ["MARDI 5 DÉCEMBRE 1950", "25-01-1966", "Oct 2, 2012"]
    tgt = ["1950 - 12 - 05", "1966-01-25", "2012 10 02"]
    for a, s, t in zip(chars.align(src, tgt), src, tgt):
        assert a.attention.shape == (len(t.split()), len(s.split()))
        assert np.all(a.attention.sum(axis=1) <= 1 + 1e-5)  # what went to </s> is dropped
        assert a.links == hard_alignment(a.attention)
        assert [j for _, j in a.links] == list(range(len(t.split())))  # one link per target word
        assert a.pharaoh() == " ".join(f"{i}-{j}" for i, j in a.links)


def test_alignment_batching_and_order_change_nothing(chars):
    src = ["1 May 2001", "MARDI 5 DÉCEMBRE 1950", "x", "25-01-1966"]
    tgt = ["2001-05-01", "1950-12-05", "2000 01 01", "1966 01 25"]
    together = chars.align(src, tgt, batch_size=3)
    alone = [chars.align([s], [t])[0] for s, t in zip(src, tgt)]
    for a, b in zip(together, alone):
        assert a.links == b.links
        np.testing.assert_allclose(a.attention, b.attention, atol=1e-5)


def test_an_empty_side_aligns_to_nothing(chars):
    a, b = chars.align(["", "3 May 2001"], ["2001-05-03", ""])
    assert (a.links, a.attention.shape) == ([], (1, 0))
    assert (b.links, b.attention.shape) == ([], (0, 3))


def test_align_rejects_different_counts_and_single_strings(chars):
    with pytest.raises(HeedError, match="2 source sentences but 1 translations"):
        chars.align(["a", "b"], ["c"])
    with pytest.raises(TypeError, match="lists of sentences"):
        chars.align("a", "b")  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def subwords(tiny_config, tmp_path_factory) -> Translator:
    """A one-epoch dates model with BPE sources and unigram targets."""
    from heed.config import config_from_dict
    from heed.train import train

    data = tiny_config(tmp_path_factory.mktemp("subwords") / "out", epochs=1)
    data["data"]["tokenizer"] = {"src": {"kind": "bpe", "vocab_size": 80}, "tgt": {"kind": "unigram", "vocab_size": 30}}
    train(config_from_dict(data))
    return Translator.load(data["output_dir"], device="cpu")


def test_subword_alignments_are_between_whitespace_words(subwords):
    src = ["MARDI 5 DÉCEMBRE 1950", "le 4 mai 2001 Zürich"]  # "Zürich": characters never seen
    tgt = ["1950 - 12 - 05", "2001 05 04 Zürich"]
    for a, s, t in zip(subwords.align(src, tgt), src, tgt):
        assert len(subwords.codec.src_tokens(s)) > len(s.split())  # the model reads pieces ...
        assert (a.src_words, a.tgt_words) == (s.split(), t.split())  # ... links join words
        assert a.attention.shape == (len(t.split()), len(s.split()))
        assert [j for _, j in a.links] == list(range(len(t.split())))
        assert all(0 <= i < len(s.split()) for i, _ in a.links)


# ------------------------------------------------------------------------------ layout


def test_a_cpu_translator_decodes_with_column_major_decoder_weights(words):
    decoder = words.model.decoder
    for weight in (decoder.generator.weight, decoder.combine.weight, decoder.rnn.weight_ih_l0,
                   decoder.rnn.weight_hh_l0):
        assert weight.t().is_contiguous() and not weight.is_contiguous()
    assert decoder.embedding.weight.is_contiguous()
    assert all(p.is_contiguous() for p in words.model.encoder.parameters())


# ------------------------------------------------------------------------------ bfloat16


@pytest.fixture(scope="module")
def words_bf16(word_run) -> Translator:
    return Translator.load(word_run, device="cpu", bf16=True)


WORD_SOURCES = ["hello anna sleeps", "goodbye paul eats", "thanks marie runs", "hello jean sings",
                "goodbye eva sleeps", "thanks luc eats"]


@pytest.mark.cpu_bf16
def test_a_bf16_translator_holds_bf16_weights_and_translates_like_float32(words, words_bf16):
    assert {p.dtype for p in words_bf16.model.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in words.model.parameters()} == {torch.float32}  # loading twice shares nothing
    for beam in (1, 3):
        ref, out = words.translate(WORD_SOURCES, beam=beam), words_bf16.translate(WORD_SOURCES, beam=beam)
        assert [t.text for t in out] == [t.text for t in ref]
        for a, b in zip(out, ref):
            assert a.attention.dtype == np.float32 and a.attention.shape == b.attention.shape
            np.testing.assert_allclose(a.attention, b.attention, atol=0.05)
            np.testing.assert_allclose(a.attention.sum(1), 1.0, atol=0.02)
            assert a.score == pytest.approx(b.score, abs=0.05 + 0.02 * abs(b.score))


@pytest.mark.cpu_bf16
def test_a_bf16_translator_aligns_like_float32(words, words_bf16):
    targets = [t.text for t in words.translate(WORD_SOURCES, beam=1)]
    for a, b in zip(words_bf16.align(WORD_SOURCES, targets), words.align(WORD_SOURCES, targets)):
        assert a.links == b.links
        np.testing.assert_allclose(a.attention, b.attention, atol=0.05)


def test_a_length_limit_that_allows_no_token_is_refused_from_python_too(words):
    with pytest.raises(ConfigError, match=r"field 'decode.max_len_b': max_len_b 0 with max_len_a 0 allows no"):
        words.translate(["hello anna sleeps"], max_len_a=0, max_len_b=0)
    assert words.translate(["hello anna sleeps"], max_len_a=0, max_len_b=1)[0].tokens  # one token is allowed


def test_a_stop_callback_ends_the_search_at_its_next_step(trained_run):
    """What the server uses to stop the work of a request that timed out."""
    from heed.api import Abandoned, Translator

    translator = Translator.load(trained_run, device="cpu")
    asked = []

    def stop_after_three() -> bool:
        asked.append(1)
        return len(asked) > 3

    with pytest.raises(Abandoned):
        translator.translate_nbest(["le 3 mars 1998"], beam=3, stop=stop_after_three)
    assert len(asked) == 4  # one question a step: three steps ran, the fourth was refused
    with pytest.raises(Abandoned):
        translator.align(["le 3 mars 1998"], ["1998-03-03"], stop=lambda: True)
    assert translator.translate(["le 3 mars 1998"])[0].text == translator.translate_nbest(
        ["le 3 mars 1998"], stop=lambda: False)[0][0].text


def test_texts_no_sentence_can_hold_are_refused_naming_them(trained_run):
    from heed.api import Translator
    from heed.errors import HeedError

    translator = Translator.load(trained_run, device="cpu")
    with pytest.raises(HeedError, match=r"texts\[1\]: a lone UTF-16 surrogate \(U\+D800\)"):
        translator.translate(["le 3 mars", "x\ud800"])
    with pytest.raises(HeedError, match=r"tgt_texts\[0\]: control character"):
        translator.align(["le 3 mars"], ["1998\x00"])


def test_a_translation_prints_in_one_short_line(trained_run):
    from heed.api import Translator

    t = Translator.load(trained_run, device="cpu").translate(["le 3 mars 1998"])[0]
    text = repr(t)
    assert "\n" not in text and len(text) < 200 and text.startswith("Translation(text=")
    assert f"attention={t.attention.shape[0]}x{t.attention.shape[1]}" in text


def test_a_decode_config_travels_whole_and_options_beside_it_are_refused(trained_run):
    """The CLI and the server pass one DecodeConfig; Python users may pass options instead, not both."""
    from heed.api import Translator
    from heed.search import DecodeConfig

    translator = Translator.load(trained_run, device="cpu")
    cfg = translator.decode_config.model_copy(update={"beam_size": 3, "n_best": 2})
    whole = translator.translate_nbest(["le 3 mars 1998"], decode=cfg)
    by_options = translator.translate_nbest(["le 3 mars 1998"], beam=3, n_best=2)
    assert [[t.tokens for t in n] for n in whole] == [[t.tokens for t in n] for n in by_options]
    with pytest.raises(TypeError, match="not both"):
        translator.translate(["le 3 mars 1998"], decode=cfg, beam=2)
    sampled = translator.translate(["le 3 mars 1998"], decode=DecodeConfig(sampling=True, n_best=1))
    assert sampled[0].tokens  # a fresh seed is drawn for a config without one
