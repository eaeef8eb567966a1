"""Imported Marian (OPUS-MT) models against Hugging Face's own: the same ids, the same
log-probabilities, the same greedy outputs and the same best beam; and `heed import` as a user
meets it. The models are tiny random MarianMTModels that transformers builds (pretrained_models)."""
from __future__ import annotations

import json
import warnings

import pytest
import torch
from tests.pretrained_models import (
    assert_teacher_forced_like_hugging_face,
    make_marian,
    multi30k,
    tatoeba,
    teacher_forced,
)

import heed
from heed.checkpoint import load_model_dir
from heed.pretrained import import_model

transformers = pytest.importorskip("transformers")

MAX_TOKENS = 80  # output tokens before </s> at most, in both searches
# (activation, one table for both sides, the logits' bias towards </s>): two of OPUS-MT's settings,
# swish with a joint table (as opus-mt-fr-en), and gelu with a table per side.
CONFIGS = [("swish", True, 4.5), ("gelu", False, 5.0)]


@pytest.fixture(scope="module", params=CONFIGS, ids=[f"{a}-{'shared' if s else 'separate'}" for a, s, _ in CONFIGS])
def pair(request, tmp_path_factory):
    """(Hugging Face model, its tokenizer, heed's Translator of the imported copy, its directory)."""
    activation, shared, eos_bias = request.param
    root = tmp_path_factory.mktemp(f"marian-{activation}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MarianTokenizer: "Recommended: pip install sacremoses."
        hf_dir = make_marian(root / "hf", activation=activation, shared=shared, eos_bias=eos_bias)
        hf = transformers.MarianMTModel.from_pretrained(hf_dir).eval()
        tokenizer = transformers.MarianTokenizer.from_pretrained(hf_dir)
    directory = import_model(hf_dir, root / "heed")
    return hf, tokenizer, heed.load(directory), directory


def model_log_prob(translator, text: str, tokens: list[str]) -> float:
    """log P(tokens </s> | text) under the imported model, teacher forced."""
    codec = translator.codec
    rows, target = teacher_forced(translator, codec.encode_src(text), codec.tgt_vocab.encode(tokens))
    return float(rows.gather(1, target.unsqueeze(1)).sum())


def sources(count: int = 200) -> list[str]:
    return list(tatoeba(5000, count)[0])


def hf_tokens(hf, tokenizer, texts, *, beams: int, early_stopping) -> list[list[str]]:
    """Hugging Face's outputs as token strings, without the decoder start and </s>."""
    out = []
    for start in range(0, len(texts), 50):
        batch = tokenizer(texts[start:start + 50], return_tensors="pt", padding=True)
        with torch.no_grad():
            ids = hf.generate(**batch, num_beams=beams, do_sample=False, max_new_tokens=MAX_TOKENS + 1, min_length=0,
                              bad_words_ids=[[hf.config.pad_token_id]], length_penalty=1.0,
                              early_stopping=early_stopping)
        for row in ids.tolist():
            row = row[1:]
            out.append(tokenizer.convert_ids_to_tokens(row[:row.index(0)] if 0 in row else row))
    return out


def test_imported_ids_are_marian_tokenizers(pair):
    _hf, tokenizer, translator, _ = pair
    codec = translator.codec
    for fr, en in zip(*tatoeba(5000, 100)):
        assert codec.encode_src(fr) + [codec.src_vocab.eos_id] == tokenizer(fr).input_ids
        assert codec.tgt_ids(codec.tgt_tokens(en), []) + [0] == tokenizer(text_target=en).input_ids


def test_teacher_forced_log_probs_equal_hugging_faces(pair):
    hf, tokenizer, translator, _ = pair
    assert_teacher_forced_like_hugging_face(hf, tokenizer, translator, *map(list, tatoeba(5000, 64)))


def test_greedy_outputs_are_hugging_faces_on_200_sentences(pair):
    hf, tokenizer, translator, _ = pair
    texts = sources()
    expected = hf_tokens(hf, tokenizer, texts, beams=1, early_stopping=False)
    got = [t.tokens for t in translator.translate(texts, beam=1, max_len_a=0, max_len_b=MAX_TOKENS, min_len=0)]
    assert got == expected
    assert len({len(tokens) for tokens in got}) > 5  # outputs end at many lengths, not all at the limit


def test_beam_5_best_is_hugging_faces_with_its_length_penalty(pair):
    """Beam 5 with Hugging Face's length normalisation, log P / |Y|^1.0, and its exact stopping
    (early_stopping="never"). The one difference: an output cut at the length limit, where
    Hugging Face forces </s> with log-probability 0 (ForcedEOSTokenLogitsProcessor) and heed charges
    the model's own. Every other sentence has the same best hypothesis, and where they differ
    heed's best scores at least as well as Hugging Face's under the model's own probabilities."""
    hf, tokenizer, translator, _ = pair
    texts = sources()
    expected = hf_tokens(hf, tokenizer, texts, beams=5, early_stopping="never")
    found = translator.translate(texts, beam=5, max_len_a=0, max_len_b=MAX_TOKENS, min_len=0, length_penalty=1.0,
                                 length_norm="power")
    got = [t.tokens for t in found]
    below_limit = [i for i in range(len(texts)) if len(got[i]) < MAX_TOKENS and len(expected[i]) < MAX_TOKENS]
    assert len(below_limit) >= 60
    assert [got[i] for i in below_limit] == [expected[i] for i in below_limit]
    for i in set(range(len(texts))) - set(below_limit):
        if got[i] != expected[i]:
            theirs = model_log_prob(translator, texts[i], expected[i])
            assert found[i].log_prob / (len(got[i]) + 1) >= theirs / (len(expected[i]) + 1) - 1e-5


def test_beam_5_stopping_beam_is_hugging_faces_early_stopping_true(pair):
    """`stopping="beam"` is Hugging Face's `early_stopping=True`: a sentence ends once 5 hypotheses
    finished (each </s> among a step's best 5 counts). Below the length limit (where Hugging Face
    forces </s> with log-probability 0) the best hypothesis is the same, and it differs from the
    exact stop's for some sentences."""
    hf, tokenizer, translator, _ = pair
    texts = sources()
    expected = hf_tokens(hf, tokenizer, texts, beams=5, early_stopping=True)
    options = dict(beam=5, max_len_a=0, max_len_b=MAX_TOKENS, min_len=0, length_penalty=1.0, length_norm="power")
    got = [t.tokens for t in translator.translate(texts, stopping="beam", **options)]
    exact = [t.tokens for t in translator.translate(texts, **options)]
    below_limit = [i for i in range(len(texts)) if len(got[i]) < MAX_TOKENS and len(expected[i]) < MAX_TOKENS]
    assert len(below_limit) >= 60
    assert [got[i] for i in below_limit] == [expected[i] for i in below_limit]
    assert any(got[i] != exact[i] for i in below_limit)


def test_early_stopping_true_in_the_generation_config_is_imported_as_stopping_beam(pair, tmp_path):
    """Hugging Face's `early_stopping: true` (num_beams finished) is heed's stopping "beam"; without
    it, heed's exact stop (the pair's model)."""
    _hf, _tokenizer, translator, _ = pair
    assert translator.config.decode.stopping == "exact"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_dir = make_marian(tmp_path / "hf")
    settings = json.loads((hf_dir / "generation_config.json").read_text()) if (hf_dir / "generation_config.json").exists() else {}
    (hf_dir / "generation_config.json").write_text(json.dumps(settings | {"num_beams": 4, "early_stopping": True}))
    decode = load_model_dir(import_model(hf_dir, tmp_path / "heed"), verify=True).config.decode
    assert (decode.stopping, decode.beam_size, decode.length_norm) == ("beam", 4, "power")


def test_an_imported_directory_is_an_ordinary_checked_model_directory(pair, tmp_path):
    hf, _tokenizer, _translator, directory = pair
    loaded = load_model_dir(directory, verify=True)
    meta = json.loads((directory / "heed.json").read_text())
    assert meta["pretrained"]["architecture"] == "MarianMTModel"
    assert loaded.codec.tgt_vocab.specials == (hf.config.pad_token_id, hf.config.decoder_start_token_id, 0, 1)
    assert loaded.config.decode.length_norm == "power"
    assert loaded.config.model.norm == "post" and loaded.config.model.sinusoid_layout == "halves"


def test_tokenizer_ids_equal_marian_tokenizers_on_real_sentences(tmp_path):
    """1,000 sentences of each side of Tatoeba (fr-en) and of Multi30k (de-en), with SentencePiece
    models trained here on other sentences of the same corpora."""
    from tests.pretrained_models import marian_tokenizer_files

    corpora = {"tatoeba": ([*tatoeba(0, 4000)[0]], [*tatoeba(0, 4000)[1]])}
    if (m30k := multi30k(4000)) is not None:
        corpora["multi30k"] = m30k
    for name, (src, tgt) in corpora.items():
        directory = tmp_path / name
        marian_tokenizer_files(directory, src[1000:], tgt[1000:], vocab_size=800)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tokenizer = transformers.MarianTokenizer(str(directory / "source.spm"), str(directory / "target.spm"),
                                                     str(directory / "vocab.json"))
        from heed.nn.transformer.convert.marian import codec as marian_codec

        codec = marian_codec(directory, {"vocab_size": len(tokenizer.encoder), "pad_token_id": tokenizer.pad_token_id,
                                         "eos_token_id": 0, "decoder_start_token_id": tokenizer.pad_token_id},
                             {"share_embeddings": True})
        decoded = 0
        for s, t in zip(src[:1000], tgt[:1000]):
            assert codec.encode_src(s) + [0] == tokenizer(s).input_ids, (name, s)
            ids = tokenizer(text_target=t).input_ids
            assert codec.tgt_ids(codec.tgt_tokens(t), []) + [0] == ids, (name, t)
            # With one vocab.json, MarianTokenizer.decode reads target ids with the *source* model by
            # default, which drops pieces only the target's has ("Go." -> "Go"); heed uses the target's.
            # And skip_special_tokens drops <unk>, which heed writes as SentencePiece does (" ⁇ ").
            if tokenizer.unk_token_id not in ids:
                text = tokenizer.decode(ids, skip_special_tokens=True, use_source_tokenizer=False)
                assert codec.decode_tgt(ids)[1] == text, (name, t)
                decoded += 1
        assert decoded >= 900


def test_translate_and_align_take_an_imported_directory(pair, tmp_path):
    from typer.testing import CliRunner

    from heed.cli import app

    _hf, _tokenizer, translator, directory = pair
    fr, en = tatoeba(5000, 3)
    (tmp_path / "s.txt").write_text("".join(s + "\n" for s in fr), encoding="utf-8")
    (tmp_path / "t.txt").write_text("".join(t + "\n" for t in en), encoding="utf-8")
    runner = CliRunner()
    done = runner.invoke(app, ["translate", str(directory), "--beam", "1", "--max-len-a", "0", "--max-len-b",
                               str(MAX_TOKENS), "--min-len", "0"], input="".join(s + "\n" for s in fr))
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines() == [t.text for t in translator.translate(list(fr), beam=1, max_len_a=0,
                                                                             max_len_b=MAX_TOKENS, min_len=0)]
    aligned = runner.invoke(app, ["align", str(directory), "--src", str(tmp_path / "s.txt"), "--tgt",
                                  str(tmp_path / "t.txt"), "--layer", "1", "--head", "3"])
    assert aligned.exit_code == 0, aligned.output
    lines = aligned.stdout.splitlines()
    assert len(lines) == 3 and all(link.count("-") == 1 for line in lines for link in line.split())
    refused = runner.invoke(app, ["translate", str(directory), "--tgt-lang", "fr"], input=fr[0] + "\n")
    assert refused.exit_code == 2 and "this model has no language tokens" in refused.output
    assert len(refused.output.strip().splitlines()) == 1 and refused.stdout == ""
