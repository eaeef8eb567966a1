"""Imported M2M-100 and NLLB models against Hugging Face's own: the same ids (a language token
first), the same log-probabilities, the same greedy outputs and the same best beam with the target
language forced; and the language pair as a user gives it. The models are tiny random
M2M100ForConditionalGenerations that transformers builds (pretrained_models.make_m2m100), one with
M2M-100's tokenizer and one with NLLB's."""
from __future__ import annotations

import json
import warnings

import pytest
import torch
from tests.pretrained_models import assert_teacher_forced_like_hugging_face, make_m2m100, tatoeba

import heed
from heed.errors import HeedError
from heed.pretrained import import_model

transformers = pytest.importorskip("transformers")

MAX_TOKENS = 60  # output tokens before </s> at most (the language token included), in both searches
# kind -> (source language, target language): M2M-100's codes are "fr" (token __fr__), NLLB's "fra_Latn".
PAIRS = {"m2m100": ("fr", "en"), "nllb": ("fra_Latn", "eng_Latn")}


@pytest.fixture(scope="module", params=list(PAIRS))
def pair(request, tmp_path_factory):
    """(Hugging Face model, its tokenizer set to fr -> en, heed's Translator of the imported copy for the same
    pair, the imported directory, the target language's token id)."""
    kind = request.param
    root = tmp_path_factory.mktemp(kind)
    src, tgt = PAIRS[kind]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_dir = make_m2m100(root / "hf", kind)
        hf = transformers.M2M100ForConditionalGeneration.from_pretrained(hf_dir).eval()
        tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    tokenizer.src_lang, tokenizer.tgt_lang = src, tgt
    directory = import_model(hf_dir, root / "heed")
    translator = heed.load(directory, src_lang=src, tgt_lang=tgt)
    return hf, tokenizer, translator, directory, kind


def sources(count: int = 200) -> list[str]:
    return list(tatoeba(5000, count)[0])


def hf_ids(hf, tokenizer, texts, forced: int, *, beams: int) -> list[list[int]]:
    """Hugging Face's outputs without the decoder start and </s>: the forced language token first."""
    out = []
    for start in range(0, len(texts), 50):
        batch = tokenizer(texts[start:start + 50], return_tensors="pt", padding=True)
        with torch.no_grad():
            ids = hf.generate(**batch, num_beams=beams, do_sample=False, max_new_tokens=MAX_TOKENS + 1, min_length=0,
                              forced_bos_token_id=forced, forced_eos_token_id=2, bad_words_ids=[[1]],
                              length_penalty=1.0, early_stopping="never")
        for row in ids.tolist():
            row = row[1:]
            out.append(row[:row.index(2)] if 2 in row else row)
    return out


def heed_ids(translations, vocab) -> list[list[int]]:
    return [vocab.encode(t.tokens) for t in translations]


def test_source_and_target_ids_are_hugging_faces(pair):
    _hf, tokenizer, translator, _, _ = pair
    codec = translator.codec
    fr, en = tatoeba(0, 500)
    for s, t in zip(fr, en):
        assert codec.encode_src(s) + [2] == tokenizer(s).input_ids, s
        assert codec.tgt_ids(codec.tgt_tokens(t), []) + [2] == tokenizer(text_target=t).input_ids, t
        # The language token is no part of the text (M2M100Tokenizer.decode keeps "__en__" even when told to
        # skip special tokens, so it reads the ids after it).
        ids = tokenizer(text_target=t).input_ids
        if 3 not in ids:
            assert codec.decode_tgt(ids)[1] == tokenizer.decode(ids[1:], skip_special_tokens=True), t


def test_teacher_forced_log_probs_equal_hugging_faces(pair):
    hf, tokenizer, translator, _, _ = pair
    ours = assert_teacher_forced_like_hugging_face(hf, tokenizer, translator, *map(list, tatoeba(5000, 64)))
    assert ours.tgt_in[:, 0].eq(2).all()  # the decoder starts from </s>, then reads the language token


def test_greedy_outputs_are_hugging_faces_on_200_sentences(pair):
    hf, tokenizer, translator, _, _ = pair
    forced = translator.codec.target_frame()[0]
    texts = sources()
    expected = hf_ids(hf, tokenizer, texts, forced, beams=1)
    found = translator.translate(texts, beam=1, max_len_a=0, max_len_b=MAX_TOKENS, min_len=0)
    got = heed_ids(found, translator.codec.tgt_vocab)
    assert got == expected
    assert all(ids[0] == forced for ids in got)  # every output starts with the target language
    assert len({len(ids) for ids in got}) > 5  # outputs end at many lengths, not all at the limit
    # The language token is an output token, not text.
    assert all(t.text == translator.codec.tgt_tokenizer.detokenize(t.tokens[1:]) for t in found)


def test_beam_5_best_is_hugging_faces_with_the_language_forced(pair):
    """Beam 5 with Hugging Face's length normalisation, log P / |Y|^1.0, and its exact stopping.
    The forced language token scores 0 in both (generate's forced_bos_token_id; heed's Prefix.free)
    and counts in |Y|. As with Marian (test_pretrained_marian), only outputs at the length limit may
    differ, where Hugging Face's forced </s> scores 0."""
    hf, tokenizer, translator, _, _ = pair
    texts = sources()
    expected = hf_ids(hf, tokenizer, texts, translator.codec.target_frame()[0], beams=5)
    found = translator.translate(texts, beam=5, max_len_a=0, max_len_b=MAX_TOKENS, min_len=0, length_penalty=1.0,
                                 length_norm="power")
    got = heed_ids(found, translator.codec.tgt_vocab)
    below_limit = [i for i in range(len(texts)) if len(got[i]) < MAX_TOKENS and len(expected[i]) < MAX_TOKENS]
    assert len(below_limit) >= 60
    assert [got[i] for i in below_limit] == [expected[i] for i in below_limit]


def test_the_imported_directory_records_languages_and_the_pair_is_chosen_at_load(pair):
    _hf, _tokenizer, translator, directory, kind = pair
    src, tgt = PAIRS[kind]
    meta = json.loads((directory / "heed.json").read_text())
    assert meta["pretrained"]["architecture"] == "M2M100ForConditionalGeneration"
    assert len(translator.languages) >= 100 and {src, tgt} <= set(translator.languages)
    unset = heed.load(directory)
    with pytest.raises(HeedError, match="translates between .* languages; say which: --src-lang"):
        unset.translate(["Bonjour."])
    with pytest.raises(HeedError, match="not one of this model's .*; did you mean"):
        unset.with_languages(src + "x", None)
    back = unset.with_languages(tgt, src)
    assert back.model is unset.model  # a pair is a view of one loaded model, not a copy
    assert back.translate(["Hello."], beam=1)[0].tokens[0] == translator.codec.src_tokens("x")[0]


def test_cli_language_flags(pair):
    from typer.testing import CliRunner

    from heed.cli import app

    _hf, _tokenizer, translator, directory, kind = pair
    src, tgt = PAIRS[kind]
    runner = CliRunner()
    fr = list(tatoeba(5000, 3)[0])
    done = runner.invoke(app, ["translate", str(directory), "--src-lang", src, "--tgt-lang", tgt, "--beam", "1",
                               "--max-len-a", "0", "--max-len-b", str(MAX_TOKENS), "--min-len", "0"],
                         input="".join(s + "\n" for s in fr))
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines() == [t.text for t in translator.translate(fr, beam=1, max_len_a=0,
                                                                             max_len_b=MAX_TOKENS, min_len=0)]
    missing = runner.invoke(app, ["translate", str(directory)], input="Bonjour.\n")
    assert missing.exit_code == 2 and "--src-lang" in missing.output and "Traceback" not in missing.output
    wrong = runner.invoke(app, ["translate", str(directory), "--src-lang", "klingon", "--tgt-lang", tgt],
                          input="Bonjour.\n")
    assert wrong.exit_code == 2 and "'klingon' is not one of this model's" in wrong.output


def test_import_records_a_default_pair_and_refuses_one_the_model_lacks(pair, tmp_path):
    from typer.testing import CliRunner

    from heed.cli import app

    _hf, _tokenizer, translator, directory, kind = pair
    src, tgt = PAIRS[kind]
    hf_dir = directory.parent / "hf"
    runner = CliRunner()
    done = runner.invoke(app, ["import", str(hf_dir), "-o", str(tmp_path / "paired"), "--src-lang", src,
                               "--tgt-lang", tgt])
    assert done.exit_code == 0, done.output
    paired = heed.load(tmp_path / "paired")
    assert (paired.config.data.src_lang, paired.config.data.tgt_lang) == (src, tgt)
    texts = sources(20)
    assert [t.tokens for t in paired.translate(texts, beam=1)] == [t.tokens for t in translator.translate(texts,
                                                                                                          beam=1)]
    refused = runner.invoke(app, ["import", str(hf_dir), "-o", str(tmp_path / "never"), "--tgt-lang", "xx_Yyyy"])
    assert refused.exit_code == 2 and "'xx_Yyyy' is not one of this model's" in refused.output
    assert len(refused.output.strip().splitlines()) == 1 and not (tmp_path / "never").exists()


def test_the_server_takes_the_pair_per_request(pair):
    from fastapi.testclient import TestClient

    from heed.serve.app import ServeSettings, create_app

    _hf, _tokenizer, translator, directory, kind = pair
    src, tgt = PAIRS[kind]
    fr = list(tatoeba(5000, 2)[0])
    with TestClient(create_app({"m": heed.load(directory)}, ServeSettings())) as client:
        assert {src, tgt} <= set(client.get("/v1/models").json()["models"][0]["languages"])
        done = client.post("/v1/translate", json={"sentences": fr, "src_lang": src, "tgt_lang": tgt, "beam_size": 1,
                                                  "max_len_a": 0, "max_len_b": MAX_TOKENS, "min_len": 0})
        assert done.status_code == 200, done.text
        expected = translator.translate(fr, beam=1, max_len_a=0, max_len_b=MAX_TOKENS, min_len=0)
        assert [r["hypotheses"][0]["text"] for r in done.json()["results"]] == [t.text for t in expected]
        missing = client.post("/v1/translate", json={"sentences": fr, "tgt_lang": tgt})
        assert missing.status_code == 422 and missing.json()["error"]["field"] == "src_lang"
        wrong = client.post("/v1/align", json={"sources": fr, "targets": fr, "src_lang": src, "tgt_lang": "xx"})
        assert wrong.status_code == 422 and wrong.json()["error"]["field"] == "tgt_lang"
