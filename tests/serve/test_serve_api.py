"""The server's JSON API through FastAPI's test client: every endpoint, every error, and that
dynamic batching changes no hypothesis."""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="heed-nmt[serve] is not installed")
import httpx
from fastapi.testclient import TestClient

from heed.api import Translator
from heed.data.dates import generate_dates
from heed.serve.app import ServeSettings, create_app, last_metrics

SETTINGS = dict(max_sentences=60, max_chars=80, max_body=64 * 1024, max_queue=200, timeout=60.0)


@pytest.fixture(scope="module")
def plain_run(tiny_config: Callable[..., dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model without attention."""
    from heed.config import config_from_dict
    from heed.train import train

    config = tiny_config(tmp_path_factory.mktemp("plain") / "out")
    config["model"] = {**config["model"], "decoder": "plain"}
    train(config_from_dict(config))
    return Path(config["output_dir"])


@pytest.fixture(scope="module")
def translators(trained_run: Path, plain_run: Path) -> dict[str, Translator]:
    return {"tiny": Translator.load(trained_run, device="cpu"), "plain": Translator.load(plain_run, device="cpu")}


def _app(translators: dict[str, Translator], trained_run: Path, **settings: Any) -> Any:
    return create_app(translators, ServeSettings(**{**SETTINGS, **settings}),
                      metrics={"tiny": last_metrics(trained_run / "model")})


@pytest.fixture(scope="module")
def client(translators: dict[str, Translator], trained_run: Path) -> Iterator[TestClient]:
    with TestClient(_app(translators, trained_run)) as c:
        yield c


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    """50 date sentences the tiny model has not seen."""
    splits = generate_dates(n_train=1, n_dev=1, n_test=50, seed=11, languages=("en", "fr"), verbose_forms=False)
    return [p.src for p in splits.test]


def _post(client: TestClient, path: str, body: Any) -> tuple[int, dict[str, Any]]:
    response = client.post(path, json=body)
    return response.status_code, response.json()


# ------------------------------------------------------------------------------ endpoints


def test_health_names_the_models(client: TestClient) -> None:
    assert client.get("/health").json() == {"status": "ok", "models": ["tiny", "plain"], "queued": 0}


def test_models_give_config_parameters_and_metrics(client: TestClient, translators: dict[str, Translator],
                                                   trained_run: Path) -> None:
    models = {m["name"]: m for m in client.get("/v1/models").json()["models"]}
    tiny = translators["tiny"]
    assert models["tiny"]["parameters"] == sum(p.numel() for p in tiny.model.parameters())
    assert models["tiny"]["attention"] == "luong" and models["plain"]["attention"] == "none"
    assert models["tiny"]["config"]["model"]["hidden_size"] == 16
    assert "output_dir" not in models["tiny"]["config"]  # no server paths
    assert models["tiny"]["decode"]["max_len_b"] == 12
    assert models["tiny"]["tgt_vocab"] == len(tiny.codec.tgt_vocab)
    assert models["tiny"]["metrics"] == last_metrics(trained_run / "model")
    assert set(models["tiny"]["metrics"]) == {"dev", "test"}
    assert models["plain"]["metrics"] is None


def test_the_explorer_page_and_its_files_are_served_locally(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "static/explorer.js" in page.text and "http" not in page.text.replace("http-equiv", "")  # no CDN
    for path, kind in [("/static/explorer.js", "javascript"), ("/static/explorer.css", "text/css"),
                       ("/fonts/heed-cjk.ttf", "font/ttf")]:
        reply = client.get(path)
        assert reply.status_code == 200 and kind in reply.headers["content-type"], path


def test_openapi_schema_documents_every_decode_option(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    assert {"/v1/translate", "/v1/align", "/v1/models", "/health"} <= set(schema["paths"])
    request = schema["components"]["schemas"]["TranslateRequest"]["properties"]
    for option in ("beam_size", "n_best", "length_penalty", "coverage_penalty", "min_len", "max_len_a", "max_len_b",
                   "no_repeat_ngram", "sampling", "temperature", "top_k", "top_p", "seed", "replace_unk", "prefix"):
        assert option in request, option
    assert client.get("/docs").status_code == 200


def test_translate_returns_the_n_best_list_with_attention_and_alignments(client: TestClient,
                                                                         translators: dict[str, Translator]) -> None:
    status, body = _post(client, "/v1/translate", {"model": "tiny", "sentences": ["March 3, 1998", "le 5 mai 2001"],
                                                   "beam_size": 4, "n_best": 3})
    assert status == 200
    assert body["decode"]["beam_size"] == 4 and body["decode"]["n_best"] == 3
    want = translators["tiny"].translate_nbest(["March 3, 1998", "le 5 mai 2001"], beam=4, n_best=3)
    for result, nbest in zip(body["results"], want):
        assert result["src_tokens"] == nbest[0].src_tokens
        assert [h["tokens"] for h in result["hypotheses"]] == [t.tokens for t in nbest]
        assert [h["text"] for h in result["hypotheses"]] == [t.text for t in nbest]
        scores = [h["score"] for h in result["hypotheses"]]
        assert scores == sorted(scores, reverse=True)
        assert scores == pytest.approx([t.score for t in nbest], abs=1e-5)
        for h in result["hypotheses"]:
            attention = np.array(h["attention"])
            assert attention.shape == (len(h["tokens"]) + 1, len(result["src_tokens"]) + 1)
            np.testing.assert_allclose(attention.sum(axis=1), 1.0, atol=1e-5)
            tgt_words = h["text"].split()
            assert h["alignment"]["tgt_words"] == tgt_words
            assert h["alignment"]["src_words"] == result["source"].split()
            assert all(0 <= i < len(result["source"].split()) and 0 <= j < len(tgt_words)
                       for i, j in h["alignment"]["links"])
        assert result["steps"] is None and result["beam"] is None


def test_trace_gives_step_alternatives_and_a_beam_tree_whose_paths_spell_the_hypotheses(client: TestClient) -> None:
    status, body = _post(client, "/v1/translate", {"model": "tiny", "sentences": ["le 5 mai 2001"], "beam_size": 3,
                                                   "n_best": 2, "trace": True, "alternatives": 4})
    assert status == 200
    result = body["results"][0]
    best = result["hypotheses"][0]
    assert len(result["steps"]) == len(best["tokens"]) + 1
    assert all(len(step) == 4 for step in result["steps"])
    nodes = {n["id"]: n for n in result["beam"]["nodes"]}
    assert nodes[0]["status"] == "root"
    assert {n["status"] for n in nodes.values()} >= {"root", "kept", "finished"}
    for h in result["hypotheses"]:
        path, node = [], nodes[h["node"]]
        assert node["status"] == "finished"
        assert node["log_prob"] == pytest.approx(h["log_prob"], abs=1e-5)
        while node["parent"] is not None:
            path.append(node["token"])
            node = nodes[node["parent"]]
        assert path[::-1] == [*h["tokens"], "</s>"]


def test_a_forced_prefix_starts_every_hypothesis(client: TestClient) -> None:
    status, body = _post(client, "/v1/translate", {"model": "tiny", "sentences": ["le 5 mai 2001", "March 3, 1998"],
                                                   "beam_size": 2, "n_best": 2, "prefix": [["1", "7"], None]})
    assert status == 200
    assert all(h["tokens"][:2] == ["1", "7"] for h in body["results"][0]["hypotheses"])
    _, free = _post(client, "/v1/translate", {"model": "tiny", "sentences": ["March 3, 1998"], "beam_size": 2,
                                              "n_best": 2})
    _assert_same(_hypotheses(body["results"][1:]), _hypotheses(free["results"]))  # no prefix: as without


def test_sampling_reports_its_seed_and_the_seed_reproduces_it(client: TestClient) -> None:
    request = {"model": "tiny", "sentences": ["le 5 mai 2001"], "sampling": True, "n_best": 5, "temperature": 1.5}
    _, first = _post(client, "/v1/translate", request)
    seed = first["decode"]["seed"]
    assert isinstance(seed, int)
    _, again = _post(client, "/v1/translate", {**request, "seed": seed})
    assert again["results"] == first["results"]
    assert len(first["results"][0]["hypotheses"]) == 5


def test_align_matches_the_python_api(client: TestClient, translators: dict[str, Translator]) -> None:
    status, body = _post(client, "/v1/align", {"model": "tiny", "sources": ["le 5 mai 2001"],
                                               "targets": ["2001-05-05"]})
    assert status == 200
    want = translators["tiny"].align(["le 5 mai 2001"], ["2001-05-05"])[0]
    got = body["results"][0]
    assert got["pharaoh"] == want.pharaoh()
    assert got["src_words"] == want.src_words and got["tgt_words"] == want.tgt_words
    np.testing.assert_allclose(np.array(got["attention"]), want.attention, atol=1e-6)


def test_attention_can_be_left_out(client: TestClient) -> None:
    _, body = _post(client, "/v1/translate", {"model": "tiny", "sentences": ["le 5 mai 2001"], "attention": False})
    assert body["results"][0]["hypotheses"][0]["attention"] is None


def test_a_model_without_attention_translates_with_null_attention(client: TestClient) -> None:
    status, body = _post(client, "/v1/translate", {"model": "plain", "sentences": ["le 5 mai 2001"]})
    assert status == 200
    assert body["results"][0]["hypotheses"][0]["attention"] is None


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize("body, status, field", [
    ({"model": "nope", "sentences": ["a"]}, 404, "model"),
    ({"sentences": ["a"]}, 422, "model"),  # two models loaded: name one
    ({"model": "tiny", "sentences": []}, 422, "sentences"),
    ({"model": "tiny", "sentences": ["ok", "  "]}, 422, "sentences[1]"),
    ({"model": "tiny", "sentences": ["ok", "x" * 81]}, 413, "sentences[1]"),
    ({"model": "tiny", "sentences": ["a"] * 61}, 413, "sentences"),
    ({"model": "tiny", "sentences": ["a\x07b"]}, 422, "sentences[0]"),
    ({"model": "tiny", "sentences": "le 5 mai"}, 422, "sentences"),
    ({"model": "tiny", "sentences": [5]}, 422, "sentences[0]"),
    ({"model": "tiny", "sentences": ["a"], "beam_size": "wide"}, 422, "beam_size"),
    ({"model": "tiny", "sentences": ["a"], "beam_size": 0}, 422, "beam_size"),
    ({"model": "tiny", "sentences": ["a"], "beam_size": 2, "n_best": 3}, 422, "n_best"),
    ({"model": "tiny", "sentences": ["a"], "beam_size": 2, "sampling": True}, 422, "sampling"),
    ({"model": "tiny", "sentences": ["a"], "top_p": 1.5}, 422, "top_p"),
    ({"model": "tiny", "sentences": ["a"], "temperature": 0}, 422, "temperature"),
    ({"model": "tiny", "sentences": ["a"], "max_len_a": 0, "max_len_b": 0}, 422, "max_len_b"),
    ({"model": "tiny", "sentences": ["a"], "beam_sizes": 2}, 422, "beam_sizes"),
    ({"model": "tiny", "sentences": ["a"], "prefix": [["no-such-token"]]}, 422, "prefix[0]"),
    ({"model": "tiny", "sentences": ["a", "b"], "prefix": [["1"]]}, 422, "prefix"),
    ({"model": "tiny", "sentences": ["a"], "prefix": [["</s>"]]}, 422, "prefix[0]"),
    ({"model": "plain", "sentences": ["a"], "coverage_penalty": 0.2}, 422, "coverage_penalty"),
    ({"model": "plain", "sentences": ["a"], "replace_unk": True}, 422, "replace_unk"),
    ({"model": "tiny", "sentences": ["a"], "trace": True, "alternatives": 0}, 422, "alternatives"),
    ({"model": "tiny", "sentences": ["a"], "dictionary": "/etc/passwd"}, 422, "dictionary"),
    # A value past a server limit is a wrong value (422), not a body too large (413).
    ({"model": "tiny", "sentences": ["a"], "beam_size": 65, "n_best": 1}, 422, "beam_size"),
    ({"model": "tiny", "sentences": ["a"], "sampling": True, "n_best": 100}, 422, "n_best"),
    ({"model": "tiny", "sentences": ["a"], "max_len_b": 100000}, 422, "max_len_b"),
    ({"model": "tiny", "sentences": ["a"], "max_len_a": 50}, 422, "max_len_a"),
    ({"model": "tiny", "sentences": ["a"], "min_len": 40, "max_len_b": 50, "no_repeat_ngram": 1}, 422, "min_len"),
    ({"model": "tiny", "sentences": ["a"] * 60, "beam_size": 64, "n_best": 1, "max_len_b": 1000}, 422, "beam_size"),
    ({"model": "tiny", "sentences": ["a"], "prefix": [["1"] * 1100]}, 422, "prefix[0]"),
    ({"model": "tiny", "sentences": ["a"], "sampling": True, "seed": 2**64}, 422, "seed"),
])
def test_translate_refuses_bad_requests_naming_the_field(client: TestClient, body: dict, status: int,
                                                         field: str) -> None:
    got, reply = _post(client, "/v1/translate", body)
    assert got == status, reply
    assert set(reply) == {"error"}
    assert reply["error"]["status"] == status
    assert reply["error"]["field"] == field
    assert reply["error"]["message"] and "Traceback" not in reply["error"]["message"]


@pytest.mark.parametrize("body, status, field", [
    ({"model": "tiny", "sources": ["a", "b"], "targets": ["a"]}, 422, "targets"),
    ({"model": "tiny", "sources": [""], "targets": ["a"]}, 422, "sources[0]"),
    ({"model": "plain", "sources": ["a"], "targets": ["b"]}, 422, "model"),
    ({"model": "tiny", "sources": ["a"]}, 422, "targets"),
])
def test_align_refuses_bad_requests_naming_the_field(client: TestClient, body: dict, status: int, field: str) -> None:
    got, reply = _post(client, "/v1/align", body)
    assert (got, reply["error"]["field"]) == (status, field)


def test_a_body_that_is_not_json_is_a_400(client: TestClient) -> None:
    response = client.post("/v1/translate", content=b'{"sentences": ["a"', headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"]["field"] == "body"


def test_an_oversize_body_is_a_413_declared_or_streamed(client: TestClient) -> None:
    big = b'{"sentences": ["' + b"a" * (65 * 1024) + b'"]}'
    response = client.post("/v1/translate", content=big, headers={"content-type": "application/json"})
    assert response.status_code == 413 and response.json()["error"]["field"] == "body"

    def chunks() -> Iterator[bytes]:  # no Content-Length: the server counts as it reads
        yield b'{"sentences": ["'
        for _ in range(70):
            yield b"a" * 1024
        yield b'"]}'

    response = client.post("/v1/translate", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413


def test_unknown_routes_and_methods_get_json_errors(client: TestClient) -> None:
    assert client.get("/v1/nothing").json()["error"]["status"] == 404
    assert client.get("/v1/translate").json()["error"]["status"] == 405


class Gate:
    """Wraps a translator so its translations wait for `open`."""

    def __init__(self, translator: Translator) -> None:
        self.translator, self.open, self.entered = translator, threading.Event(), threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.translator, name)

    def translate_nbest(self, *args: Any, **kwargs: Any) -> Any:
        self.entered.set()
        self.open.wait(30)
        return self.translator.translate_nbest(*args, **kwargs)


def test_a_full_queue_gets_503_with_retry_after_and_a_slow_request_504(translators: dict[str, Translator],
                                                                       trained_run: Path) -> None:
    gate = Gate(translators["tiny"])
    app = _app({"tiny": gate}, trained_run, max_queue=1, timeout=2.0, batch_wait_ms=0)  # type: ignore[dict-item]
    with TestClient(app) as c:
        replies: dict[str, Any] = {}

        def send(name: str) -> None:
            replies[name] = c.post("/v1/translate", json={"sentences": ["le 5 mai 2001"]})

        running = threading.Thread(target=send, args=("running",))
        running.start()
        assert gate.entered.wait(10)  # the worker holds the first request
        queued = threading.Thread(target=send, args=("queued",))
        queued.start()
        while c.get("/health").json()["queued"] < 1:
            pass
        full = c.post("/v1/translate", json={"sentences": ["le 5 mai 2001"]})
        assert full.status_code == 503
        assert int(full.headers["Retry-After"]) >= 1
        assert "--max-queue" in full.json()["error"]["message"]
        running.join(10)
        queued.join(10)
        assert replies["running"].status_code == 504  # the gate held it past --timeout 2
        assert "--timeout" in replies["running"].json()["error"]["message"]
        gate.open.set()
        assert c.post("/v1/translate", json={"sentences": ["le 5 mai 2001"]}).status_code == 200


# ------------------------------------------------------------------------------ batching


class Counting:
    """Wraps a translator and records how many sentences each decoding call got."""

    def __init__(self, translator: Translator) -> None:
        self.translator, self.sizes = translator, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.translator, name)

    def translate_nbest(self, texts: list[str], **kwargs: Any) -> Any:
        self.sizes.append(len(texts))
        return self.translator.translate_nbest(texts, **kwargs)


def _hypotheses(results: list[dict[str, Any]]) -> list[list[tuple[list[str], float]]]:
    return [[(h["tokens"], h["score"]) for h in r["hypotheses"]] for r in results]


def _assert_same(got: list, want: list) -> None:
    """Tokens exactly; scores to float rounding (see heed.serve.batcher's doc)."""
    assert [[tokens for tokens, _ in s] for s in got] == [[tokens for tokens, _ in s] for s in want]
    for g, w in zip(got, want):
        assert [score for _, score in g] == pytest.approx([score for _, score in w], abs=1e-5)


@pytest.mark.parametrize("decode", [{"beam_size": 4, "n_best": 2}, {"beam_size": 1},
                                    {"sampling": True, "seed": 3, "n_best": 2}], ids=["beam", "greedy", "sampling"])
def test_batching_changes_no_hypothesis(translators: dict[str, Translator], trained_run: Path, sentences: list[str],
                                        decode: dict[str, Any]) -> None:
    counting = Counting(translators["tiny"])
    app = _app({"tiny": counting}, trained_run, batch_wait_ms=50)  # type: ignore[dict-item]
    with TestClient(app) as c:
        one_by_one = [c.post("/v1/translate", json={"sentences": [s], **decode}).json()["results"][0]
                      for s in sentences]
        all_at_once = c.post("/v1/translate", json={"sentences": sentences, **decode}).json()["results"]
    counting.sizes.clear()

    async def concurrently() -> list[dict[str, Any]]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as ac:
            replies = await asyncio.gather(*(ac.post("/v1/translate", json={"sentences": [s], **decode})
                                             for s in sentences))
        return [r.json()["results"][0] for r in replies]

    app = _app({"tiny": counting}, trained_run, batch_wait_ms=50)  # type: ignore[dict-item]
    concurrent = asyncio.run(concurrently())
    assert max(counting.sizes) > 1, counting.sizes  # the 50 requests were really batched
    want = _hypotheses(one_by_one)
    _assert_same(_hypotheses(all_at_once), want)
    _assert_same(_hypotheses(concurrent), want)


class Recording(Counting):
    """Counting, and the texts of each decoding call, in order."""

    def __init__(self, translator: Translator) -> None:
        super().__init__(translator)
        self.calls: list[list[str]] = []
        self.first_call_waits_for: threading.Event | None = None  # the first call holds its turn until set

    def translate_nbest(self, texts: list[str], **kwargs: Any) -> Any:
        self.calls.append(list(texts))
        if len(self.calls) == 1 and self.first_call_waits_for is not None:
            self.first_call_waits_for.wait(10)
        return super().translate_nbest(texts, **kwargs)


def test_a_costly_request_is_decoded_in_slices_and_a_later_small_one_runs_between_them(
        translators: dict[str, Translator], trained_run: Path, sentences: list[str]) -> None:
    """--slice-work: a request over it is decoded a slice at a time with later requests' batches
    between its slices (a small request is not held up for the whole costly one), and slicing
    changes no hypothesis."""
    decode = {"beam_size": 4, "n_best": 2}
    with TestClient(_app(translators, trained_run)) as c:
        whole = c.post("/v1/translate", json={"model": "tiny", "sentences": sentences, **decode}).json()["results"]
    recording = Recording(translators["tiny"])
    # The costly request's first turn is held until the small request has had time to reach the
    # queue (its handler runs in well under the 0.2 s), so the race with the tiny model's fast turns
    # cannot decide where the small one lands.
    recording.first_call_waits_for = threading.Event()
    # Each sentence costs beam 4 x (its max length + 1) rows x steps, so 60 a turn is one sentence.
    app = _app({"tiny": recording}, trained_run, slice_work=60, batch_wait_ms=0)  # type: ignore[dict-item]
    small = "le 5 mai 2001"

    async def costly_then_small() -> tuple[Any, Any]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as ac:
            costly = asyncio.create_task(ac.post("/v1/translate", json={"sentences": sentences, **decode}))
            while not recording.calls:
                await asyncio.sleep(0.001)
            cheap = asyncio.create_task(ac.post("/v1/translate", json={"sentences": [small], **decode}))
            await asyncio.sleep(0.2)
            assert recording.first_call_waits_for is not None
            recording.first_call_waits_for.set()
            return await costly, await cheap

    costly, cheap = asyncio.run(costly_then_small())
    assert costly.status_code == 200 and cheap.status_code == 200
    assert [len([t for t in call if t != small]) for call in recording.calls] == [1] * len(sentences)
    # The small request (same options: it may share a slice's call) ran within the first two turns.
    assert min(k for k, call in enumerate(recording.calls) if small in call) <= 2
    _assert_same(_hypotheses(costly.json()["results"]), _hypotheses(whole))


def test_slice_work_must_be_positive_and_defaults_to_one_beam_64_sentence() -> None:
    from pydantic import ValidationError
    with pytest.raises(ValidationError, match="slice_work"):
        ServeSettings(slice_work=0)
    assert ServeSettings().slice_work == 4096


@pytest.mark.parametrize("raw, field", [
    ('{"model": "tiny", "sentences": ["a"], "max_len_a": Infinity}', "max_len_a"),  # Python's JSON reads it
    ('{"model": "tiny", "sentences": ["a"], "length_penalty": NaN}', "length_penalty"),
    ('{"model": "tiny", "sentences": ["a\\ud800b"]}', "sentences[0]"),  # a lone surrogate, valid JSON
    ('{"model": "tiny", "sentences": ["a"], "prefix": ["\\udfff"]}', "prefix[0]"),
])
def test_non_finite_numbers_and_lone_surrogates_are_422_naming_the_field(client: TestClient, raw: str,
                                                                         field: str) -> None:
    reply = client.post("/v1/translate", content=raw.encode(), headers={"content-type": "application/json"})
    assert reply.status_code == 422, reply.text
    assert reply.json()["error"]["field"] == field


def test_align_refuses_a_lone_surrogate_in_a_target(client: TestClient) -> None:
    raw = '{"model": "tiny", "sources": ["le 5 mai"], "targets": ["2001-05-\\ud800"]}'
    reply = client.post("/v1/align", content=raw.encode(), headers={"content-type": "application/json"})
    assert reply.status_code == 422 and reply.json()["error"]["field"] == "targets[0]", reply.text


def test_a_sentence_the_constraints_leave_no_hypothesis_has_a_null_score(client: TestClient, monkeypatch) -> None:
    """When no hypothesis finishes with a finite score (the constraints left the search no allowed
    token), the answer is an empty text scored -inf (JSON null), not a certain empty translation."""
    import heed.translations
    from heed.search import Decoded

    monkeypatch.setattr(heed.translations, "translate_ids", lambda model, src_ids, cfg, **kw: [Decoded([]) for _ in src_ids])
    status, body = _post(client, "/v1/translate", {"model": "tiny", "sentences": ["le 5 mai 2001"]})
    assert status == 200
    hypothesis = body["results"][0]["hypotheses"][0]
    assert (hypothesis["text"], hypothesis["score"], hypothesis["log_prob"]) == ("", None, None)


def test_the_batching_key_holds_the_frozen_decode_config_itself() -> None:
    """Requests whose decoding options resolve to equal DecodeConfigs share a key (and so a call);
    the config is frozen, so a key cannot change under the batcher."""
    from pydantic import ValidationError

    from heed.decode_config import DecodeConfig
    from heed.serve.app import _Key

    a = _Key("m", "translate", DecodeConfig(beam_size=3, n_best=2))
    b = _Key("m", "translate", DecodeConfig.model_validate({"n_best": 2, "beam_size": 3}))
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != _Key("m", "translate", DecodeConfig(beam_size=3, n_best=1))
    with pytest.raises(ValidationError, match="frozen"):
        a.decode.beam_size = 4  # type: ignore[union-attr]


# ------------------------------------------------------------------------------ no server paths


def _path_fields(model: Any, where: Path, name: str = "") -> tuple[Any, list[str]]:
    """A copy of a config model with every field that can hold a path (by its declared type, not
    its name) set to a path under `where`, and the sections that were None filled in to hold
    theirs; and the dotted names of those fields."""
    import types
    import typing

    from pydantic import BaseModel

    def kinds(annotation: Any) -> list[Any]:
        args = typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType):
            return [k for a in args for k in kinds(a)]
        return [typing.get_origin(annotation) or annotation]

    update, names = {}, []
    for field, info in type(model).model_fields.items():
        value, found = getattr(model, field, None), kinds(info.annotation)
        dotted = f"{name}.{field}".lstrip(".")
        if any(isinstance(k, type) and issubclass(k, Path) for k in found):
            update[field], names = where / dotted, [*names, dotted]
            continue
        sections = [k for k in found if isinstance(k, type) and issubclass(k, BaseModel)]
        if value is None and sections:
            value = sections[0].model_construct()
        if isinstance(value, BaseModel):
            update[field], inner = _path_fields(value, where, dotted)
            names += inner
    return model.model_copy(update=update), names


def test_no_response_shows_a_server_path(translators: dict[str, Translator], trained_run: Path,
                                         tiny_corpus: dict[str, Path], tmp_path: Path) -> None:
    """Every path field of the model's config is set (train.init, train.alignment.supervision, the
    corpora, data.root, data.prepared, output_dir, ...), and neither the paths nor the server's
    directory names appear in /v1/models, a translation, an alignment or an error."""
    import copy

    secret = tmp_path / "server-secret-dir"
    config, names = _path_fields(translators["tiny"].config, secret)
    assert {"train.init", "train.alignment.supervision", "output_dir", "data.root", "data.prepared",
            "data.train.tsv", "data.dev.align", "data.test.src"} <= set(names)
    translator = copy.copy(translators["tiny"])
    translator.config = config
    private = [str(secret), secret.name, str(trained_run), trained_run.parent.name,
               tiny_corpus["train"].parent.name]
    with TestClient(create_app({"tiny": translator}, ServeSettings(**SETTINGS))) as client:
        replies = [client.get("/v1/models"), client.get("/health"),
                   client.post("/v1/translate", json={"sentences": ["le 5 mai 2001"], "trace": True}),
                   client.post("/v1/translate", json={"sentences": ["le 5 mai 2001"], "beam_size": 10_000}),
                   client.post("/v1/translate", json={"sentences": ["x"], "prefix": [["no-such-token"]]}),
                   client.post("/v1/align", json={"sources": ["le 5 mai 2001"], "targets": ["2001-05-05"]}),
                   client.post("/v1/align", json={"sources": ["le 5 mai 2001"], "targets": ["2001-05-05"],
                                                  "weights": "alti"}),
                   client.post("/v1/heads", json={"sources": ["le 5 mai 2001"], "targets": [["<pad>"]]}),
                   client.post("/v1/translate", json={"model": "other", "sentences": ["x"]})]
    config_out = replies[0].json()["models"][0]["config"]
    assert config_out["model"] == translators["tiny"].config.model.model_dump(mode="json")  # the rest is shown
    assert config_out["train"]["alignment"]["weight"] == config.train.alignment.weight
    for reply in replies:
        for needle in private:
            assert needle not in reply.text, (reply.request.url.path, needle)
