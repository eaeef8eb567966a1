"""What a request costs the server, counted before it runs (heed.serve.costs, in heed.plumbing.limits'
units): every heavy reading is refused up front, over --max-work, --max-weights or --max-answer, in
one 422 naming the field and the limit, with the count the limits' functions give; work past its
deadline stops between passes; answers are encoded off the event loop; /v1/align refuses targets
the vocabulary cannot spell as the other endpoints do."""
from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="heed-nmt[serve] is not installed")
from fastapi.testclient import TestClient

from heed.api import Translator
from heed.plumbing.limits import ALL_PARTS, attention_weights, attribution_work
from heed.serve.app import ServeSettings, create_app

SOURCES = ["3 mars 1998", "le 12 juin 2004"]


@pytest.fixture(scope="module")
def rnn(trained_run: Path) -> Translator:
    return Translator.load(trained_run, device="cpu")


@pytest.fixture(scope="module")
def transformer(transformer_run: Path) -> Translator:
    return Translator.load(transformer_run, device="cpu")


def _refused(translator: Translator, path: str, body: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
             **settings: Any) -> dict[str, Any]:
    """The error of a request that must be refused before the model runs (any pass fails the test)."""
    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the model ran for a request over its budget")

    for method in ("attribute", "translate_nbest", "explore", "align", "attention_layers", "logit_lens"):
        monkeypatch.setattr(translator, method, never)
    with TestClient(create_app({"m": translator}, ServeSettings(**settings))) as client:
        response = client.post(path, json=body)
    monkeypatch.undo()
    assert response.status_code == 422, response.text
    return response.json()["error"]


def test_a_long_attribution_is_refused_up_front_naming_steps_and_max_work(rnn, monkeypatch):
    """The adversary's request: one 1,000-character sentence at 200 points (9 minutes of the RNN)."""
    source = ("le 12 juin 2004 " * 63)[:1000]
    target = "2004-06-12" * 100  # 1,000 characters, each a token it knows
    tokens = rnn.codec.tgt_tokens(target)
    error = _refused(rnn, "/v1/attribute", {"sentences": [source], "targets": [target], "steps": 200}, monkeypatch)
    assert error["field"] == "steps" and "--max-work" in error["message"]
    assert f"{attribution_work(len(tokens), 200):,} decoder rows x steps" in error["message"]
    assert attribution_work(len(tokens), 200) == 200 * (len(tokens) + 1) ** 2


def test_the_attribution_of_the_models_own_output_counts_its_longest_output(rnn, monkeypatch):
    decode = rnn.decode_config
    steps = [min(math.floor(decode.max_len_a * (len(rnn.codec.src_tokens(s)) + 1) + decode.max_len_b), 4096)
             for s in SOURCES]
    search = sum(decode.beam_size * (t + 1) for t in steps)
    want = sum(attribution_work(t, 50) for t in steps) + search
    error = _refused(rnn, "/v1/attribute", {"sentences": SOURCES}, monkeypatch, max_work=want - 1)
    assert error["field"] == "steps" and f"{want:,} decoder rows x steps" in error["message"]
    with TestClient(create_app({"m": rnn}, ServeSettings(max_work=want))) as client:
        assert client.post("/v1/attribute", json={"sentences": SOURCES, "method": "grad_x_input"}).status_code == 200


def test_the_source_share_of_a_wide_n_best_is_refused_over_max_weights(transformer, monkeypatch):
    """beam 64, n-best 64: 64 ALTI+ passes after the search, each reading every part of every head."""
    layers, heads = transformer.model.head_grid
    decode = transformer.resolve_decode({"beam_size": 64, "n_best": 64})
    want = 0
    for source in SOURCES:
        s = len(transformer.codec.src_tokens(source))
        t = min(math.floor(decode.max_len_a * (s + 1) + decode.max_len_b), 4096)
        want += 64 * attention_weights(s, t, layers, heads, ALL_PARTS)
    error = _refused(transformer, "/v1/translate", {"sentences": SOURCES, "beam_size": 64, "n_best": 64,
                                                   "explain": ["source_share"]}, monkeypatch, max_weights=want - 1)
    assert error["field"] == "explain" and "--max-weights" in error["message"]
    assert f"{want:,} attention weights" in error["message"]


def test_an_alti_alignment_is_refused_over_max_weights_naming_the_reading(transformer, monkeypatch):
    layers, heads = transformer.model.head_grid
    targets = ["1998-03-03", "2004-06-12"]
    want = sum(attention_weights(len(transformer.codec.src_tokens(s)), len(transformer.codec.tgt_tokens(t)), layers,
                                 heads, ALL_PARTS) for s, t in zip(SOURCES, targets))
    body = {"sources": SOURCES, "targets": targets, "weights": "alti"}
    error = _refused(transformer, "/v1/align", body, monkeypatch, max_weights=want - 1)
    assert error["field"] == "weights" and f"{want:,} attention weights" in error["message"]
    with TestClient(create_app({"m": transformer}, ServeSettings(max_weights=want - 1))) as client:
        assert client.post("/v1/align", json={**body, "weights": "attention"}).status_code == 200  # weighs nothing


def test_the_logit_lens_answer_is_bounded_by_max_answer(transformer, monkeypatch):
    layers, _ = transformer.model.head_grid
    targets = [["1", "9"], ["2", "0", "0", "4"]]
    want = sum(len(transformer.codec.src_tokens(s)) + len(t) + layers * (len(t) + 1) * (2 * 50 + 2)
               for s, t in zip(SOURCES, targets))
    error = _refused(transformer, "/v1/lens", {"sources": SOURCES, "targets": targets, "top": 50}, monkeypatch,
                     max_answer=want - 1)
    assert error["field"] == "top" and f"{want:,} numbers in its answer" in error["message"]
    assert "--max-answer" in error["message"]


def test_head_maps_count_in_the_answer_too(transformer, monkeypatch):
    layers, heads = transformer.model.head_grid
    targets = [["1", "9"], ["2", "0", "0", "4"]]
    sizes = [(len(transformer.codec.src_tokens(s)), len(t)) for s, t in zip(SOURCES, targets)]
    weights = sum(attention_weights(s, t, layers, heads, ("cross",)) for s, t in sizes)
    want = weights + sum(s + t for s, t in sizes)
    error = _refused(transformer, "/v1/heads", {"sources": SOURCES, "targets": targets}, monkeypatch,
                     max_answer=want - 1)
    assert error["field"] == "sources" and f"{want:,} numbers in its answer" in error["message"]


def test_a_translation_with_attention_is_bounded_by_its_answer(rnn, monkeypatch):
    body = {"sentences": SOURCES, "beam_size": 4, "n_best": 4}
    decode = rnn.resolve_decode({"beam_size": 4, "n_best": 4})
    want = 0
    for source in SOURCES:
        s = len(rnn.codec.src_tokens(source))
        t = min(math.floor(decode.max_len_a * (s + 1) + decode.max_len_b), 4096)
        want += s + 4 * (t + 1) * (2 + s + 1)
    error = _refused(rnn, "/v1/translate", body, monkeypatch, max_answer=want - 1)
    assert error["field"] == "sentences" and f"{want:,} numbers in its answer" in error["message"]
    assert "attention false" in error["message"]
    with TestClient(create_app({"m": rnn}, ServeSettings(max_answer=want - 1))) as client:
        assert client.post("/v1/translate", json={**body, "attention": False}).status_code == 200


def test_an_attribution_past_its_deadline_stops_between_passes(rnn):
    """One sentence: before, the server asked once, before the sentence, and then ran its every
    output token; now every pass asks, and it stops within the sentence."""
    from heed.errors import Abandoned
    from heed.serve.app import _Key, _run_batch

    asked = []

    def abandoned() -> bool:  # the request times out after its third question
        asked.append(True)
        return len(asked) > 3

    from heed.explain.readings import AttributionOptions

    key = _Key("m", "explain", read="attribution", options=AttributionOptions(steps=8), shown="attribution")
    with pytest.raises(Abandoned):
        _run_batch({"m": rnn}, key, [("le 12 juin 2004", "2004-06-12", {})], abandoned)
    assert len(asked) == 4  # 11 output tokens, stopped at the third pass


def test_answers_are_encoded_off_the_event_loop(rnn, monkeypatch):
    import heed.serve.app as app_module

    threads = []
    encode = app_module._encode

    def watched(body: dict[str, Any]) -> bytes:
        try:
            asyncio.get_running_loop()
            threads.append("event loop")
        except RuntimeError:
            threads.append("worker")
        return encode(body)

    monkeypatch.setattr(app_module, "_encode", watched)
    with TestClient(create_app({"m": rnn})) as client:
        translated = client.post("/v1/translate", json={"sentences": SOURCES})
        aligned = client.post("/v1/align", json={"sources": SOURCES, "targets": ["1998-03-03", "2004-06-12"]})
    assert translated.status_code == aligned.status_code == 200
    assert translated.headers["content-type"] == "application/json"
    assert threads == ["worker", "worker"]


def test_align_refuses_a_target_the_vocabulary_cannot_spell(rnn):
    """As /v1/heads, /v1/attribute and translate's prefix: aligned as <unk>, it would be an answer
    to another question."""
    with TestClient(create_app({"m": rnn})) as client:
        response = client.post("/v1/align", json={"sources": SOURCES, "targets": ["1998-03-03", "2004-06-12 Ω"]})
        fine = client.post("/v1/align", json={"sources": SOURCES, "targets": ["1998-03-03", "2004-06-12"]})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "targets[1]" and "not a token of the model's target vocabulary" in error["message"]
    assert fine.status_code == 200


def test_every_budget_is_a_serve_flag_with_its_setting() -> None:
    """--max-work, --max-weights and --max-answer are read in `heed serve --help`, each a
    ServeSettings field of the same default (the CLI cannot import FastAPI to read them)."""
    from typer.testing import CliRunner

    from heed.cli import app
    from heed.cli.serve import LIMIT_OPTIONS
    from heed.serve.costs import BUDGETS

    shown = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"}).output
    for setting, flag, _ in BUDGETS.values():
        assert flag in shown, flag
        assert LIMIT_OPTIONS[setting][1].default == ServeSettings.model_fields[setting].default, setting
