"""`heed serve`: trained models behind a JSON API, and the attention explorer page.

    app = create_app({"dates": Translator.load("runs/demo/model")}, ServeSettings())
    uvicorn.run(app, host="127.0.0.1", port=8000)

Routes (schemas in heed.serve.schemas; the OpenAPI page is /docs):
    GET  /               the explorer (static/index.html: plain JS + SVG, no CDN; /fonts/heed-cjk.ttf its
                         CJK fallback font, heed's bundled one)
    GET  /health         {"status": "ok", "models": [...], "queued": sentences waiting}
    GET  /v1/models      each model's resolved config, parameter count, last metrics
    POST /v1/translate   sentences + any decoding option -> n-best, attention, alignments, trace
    POST /v1/align       forced decoding of given translations -> word alignments
    POST /v1/explain/{reading}  given translations read by a reading of heed.explain.readings (one route
                         per registered reading, its request made from the reading's options)
    POST /translate, /v2/translate, ...   LibreTranslate's and DeepL's APIs (heed.serve.compat), through
                         /v1/translate's core (_Routes.translated: its checks, limits and batcher, its
                         results as values), each answering in its own error shape

Every request's sentences go through one Batcher (heed.serve.batcher): the model runs on its
worker thread, never on the event loop. Every error is JSON, {"error": {"status", "message",
"field"}}: 400 for a body that is not JSON, 404 for an unknown model, 413 for a limit passed (body
bytes, sentences, characters), 422 for a wrong value, 503 with Retry-After when the queue is full,
504 past the time limit. A user's input never reaches a 500. No request names a file: models are
chosen by the names they were loaded under.
"""
from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import math
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePath
from typing import Any, cast

import numpy as np
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from heed import translations
from heed.api import Exploration, HeadMaps, Translation, Translator, runs_torch
from heed.checkpoint import METRICS_FILE
from heed.data.corpus import text_problem
from heed.decode_config import MAX_OUTPUT_TOKENS, DecodeConfig
from heed.errors import Abandoned, ConfigError, HeedError
from heed.explain.align_methods import ALIGNMENT_LAYER, AlignOptions, Symmetrize, symmetrize
from heed.explain.forced import no_alignment_layer
from heed.explain.priors import Priors
from heed.explain.readings import READINGS, PairSize, Reading
from heed.explain.source_share import nbest_source_shares
from heed.nn.ensemble import Ensemble
from heed.nn.intervention import Intervention
from heed.nn.protocol import AlignmentLayerModel, AttributableModel, ContributionModel, HeadsModel
from heed.plumbing.files import open_regular
from heed.plumbing.limits import forced_work, search_work
from heed.search import OwnSearchModel
from heed.serve.batcher import Batcher, QueueFull
from heed.serve.compat import Keys, install
from heed.serve.costs import (
    Cost,
    align_cost,
    attribute_cost,
    heads_cost,
    lens_cost,
    reading_cost,
    refusal,
    translate_cost,
)
from heed.serve.schemas import (
    DECODE_FIELDS,
    AlignRequest,
    AlignResponse,
    AttributeRequest,
    AttributeResponse,
    ErrorResponse,
    ExplainResponse,
    HeadsRequest,
    HeadsResponse,
    Health,
    LensRequest,
    LensResponse,
    ModelsResponse,
    TranslateRequest,
    TranslateResponse,
    TranslateResults,
    reading_request,
)
from heed.serve.settings import ApiError, ServeSettings

STATIC_DIR = Path(__file__).parent / "static"
CJK_FONT = Path(__file__).parent.parent / "fonts" / "HeedCJKSans-Regular.ttf"
# What an endpoint that runs a model may answer besides 200 and 422 (OpenAPI's list).
WORK_ERRORS: dict[int | str, dict[str, Any]] = {404: {"model": ErrorResponse}, 503: {"model": ErrorResponse},
                                               504: {"model": ErrorResponse}}
log = logging.getLogger("heed.serve")


def _error(status: int, message: str, field: str | None = None,
           headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"status": status, "message": message, "field": field}}, status_code=status,
                        headers=dict(headers or {}))


# ------------------------------------------------------------------------------- body size


class BodyLimit:
    """ASGI middleware: a request body over `limit` bytes gets 413 before it is parsed, whether it
    declares its length or streams in chunks. The body is read here (at most `limit` bytes are
    held) and handed to the app in one piece."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(scope, send)
            return
        chunks, seen = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.limit:
                await self._refuse(scope, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: a disconnect, when it comes

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, send: Send) -> None:
        response = _error(413, f"the request body is over the server's limit of {self.limit} bytes (--max-body)",
                          "body")
        await response(scope, _no_body, send)


async def _no_body() -> Message:
    return {"type": "http.disconnect"}


# ------------------------------------------------------------------------------ the models


@dataclass(frozen=True)
class _Key:
    """What requests must share to be decoded in one call: the model, the task and the task's
    options, as values (DecodeConfig is frozen and hashable). Each task has one handler (_TASKS)."""

    model: str
    task: str  # "translate", "explore", "align", "explain" or "carry"
    decode: DecodeConfig | None = None  # translate and explore: the request's resolved config
    replace_unk: bool = False
    attention: bool = True
    alternatives: int = 0  # explore: each step's top tokens
    intervention: Intervention | None = None  # decode with intervened attention
    explain: tuple[str, ...] = ()  # translate and explore: the readings added to each hypothesis
    reading: AlignOptions | None = None  # align: how the attention is read
    languages: tuple[str | None, str | None] = (None, None)  # a many-language model's (src_lang, tgt_lang)
    read: str = ""  # explain: the reading's name (heed.explain.readings)
    options: Any = None  # explain: the reading's Options (frozen, hashable), without its per-pair values
    shown: str = "reading"  # explain: how a result is answered (_SHOWN: the route's own shape)


def model_info(name: str, translator: Translator, metrics: Mapping[str, Any] | None) -> dict[str, Any]:
    """GET /v1/models' entry for one model."""
    config = translator.config
    kind = config.model.kind  # the family's word for the model: its RNN decoder, or transformer
    return {
        "name": name,
        "family": config.model.family,
        "attention": kind if translator.model.has_attention else "none",
        "parameters": translator.model.num_parameters(),
        "src_vocab": len(translator.codec.src_vocab),
        "tgt_vocab": len(translator.codec.tgt_vocab),
        "max_src_len": translator.max_src_len,
        "languages": translator.languages,
        "decode": translator.decode_config.model_dump(mode="json"),
        "config": without_paths(config),
        "metrics": dict(metrics) if metrics else None,
        "runtime": runtime_of(translator.model),
        "gives": gives(translator.model),
    }


def without_paths(config: BaseModel) -> dict[str, Any]:
    """`config` as JSON without a single path: the files a model was trained from (corpora, its
    output directory, train.init, a supervision file, ...) are the server's own, and their paths
    stay on it. The rule is the value's type, wherever the config holds it: every field, list item
    or mapping value that is a path (a pydantic Path field holds a pathlib path) is left out, so a
    path field added to a config model later is left out too."""
    return config.model_dump(mode="json", exclude=_path_exclusions(config) or None)


def _path_exclusions(value: Any) -> Any:
    """pydantic's `exclude` for every path inside `value`: True for a path itself (and a section
    holding nothing else), a mapping of field names (or list positions, or keys) for what holds
    paths, None where there is none."""
    if isinstance(value, PurePath):
        return True
    inner: dict[Any, Any]  # field name, list position or key -> the value there
    if isinstance(value, BaseModel):
        inner = {name: getattr(value, name) for name in type(value).model_fields}
    elif isinstance(value, Mapping):
        inner = dict(value)
    elif isinstance(value, (list, tuple)):
        inner = dict(enumerate(value))
    else:
        return None
    found = {key: sub for key, sub in ((key, _path_exclusions(item)) for key, item in inner.items()) if sub is not None}
    if found and isinstance(value, BaseModel) and all(k in found or v is None for k, v in inner.items()):
        return True  # a section of nothing but paths (a corpus) goes whole: an empty one would say nothing
    return found or None


def runtime_of(model: Any) -> str:
    """What runs the model: pytorch, onnx, ctranslate2, or ensemble."""
    if isinstance(model, Ensemble):
        return "ensemble"
    manifest = getattr(model, "manifest", None)
    return manifest.kind if manifest is not None else "pytorch"


def gives(model: Any) -> dict[str, bool]:
    """What the explorer may ask of the model, so the page asks only that and says in place what a
    model cannot show: the beam tree and step alternatives (heed's own search: not CTranslate2's),
    every head of every layer (a PyTorch model), attribution (gradients) and interventions on its
    attention (PyTorch weights)."""
    return {"tree": not isinstance(model, OwnSearchModel), "heads": isinstance(model, HeadsModel),
            "attribution": isinstance(model, AttributableModel), "intervention": runs_torch(model),
            "contributions": isinstance(model, ContributionModel)}


def last_metrics(model_dir: Path) -> dict[str, Any] | None:
    """{"dev": ..., "test": ...}: the last evaluation lines of a model directory's training log
    (metrics.jsonl), without their wall-clock times; None when it has none."""
    found: dict[str, Any] = {}
    try:
        with open_regular(Path(model_dir) / METRICS_FILE, "r", encoding="utf-8") as f:
            for line in f:
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    if isinstance(entry, dict) and entry.get("kind") in ("dev", "test"):
                        found[entry["kind"]] = {k: v for k, v in entry.items() if k not in ("kind", "time")}
    except OSError:
        return None
    return found or None


def _finite(x: float) -> float | None:
    """JSON has no infinities: a -inf score (the constraints left the search no allowed token) is null."""
    return x if math.isfinite(x) else None


def _matrix(values: Any) -> list[list[float]] | None:
    return None if values is None else [[float(x) for x in row] for row in values]


def _hypothesis(translator: Translator, t: Translation, *, attention: bool, node: int | None = None,
                alignment: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"text": t.text, "tokens": t.tokens, "score": _finite(t.score), "log_prob": _finite(t.log_prob),
                           "attention": None, "alignment": None, "node": node, "source_share": None}
    if attention and t.attention is not None and t.src_tokens:
        a = alignment if alignment is not None else translations.word_alignment(translator.codec, t)
        out["attention"] = _matrix(t.attention)
        out["alignment"] = None if a is None else {"src_words": a.src_words, "tgt_words": a.tgt_words,
                                                   "links": [list(link) for link in a.links]}
    return out


def _sentence(translator: Translator, source: str, nbest: Sequence[Translation], *, attention: bool,
              explored: Exploration | None = None) -> dict[str, Any]:
    best = nbest[0]
    result: dict[str, Any] = {"source": source, "src_tokens": best.src_tokens, "truncated": best.truncated,
                              "steps": None, "beam": None}
    if explored is None:
        result["hypotheses"] = [_hypothesis(translator, t, attention=attention) for t in nbest]
        return result
    result["hypotheses"] = [_hypothesis(translator, t, attention=attention, node=node, alignment=a)
                            for t, node, a in zip(explored.hypotheses, explored.nodes, explored.alignments)]
    result["steps"] = [[{"token": token, "log_prob": lp} for token, lp in step if math.isfinite(lp)]
                       for step in explored.steps]
    if explored.beam is not None:
        result["beam"] = {"nodes": [{"id": n.id, "parent": n.parent, "step": n.step, "token": n.token,
                                     "log_prob": n.log_prob, "score": n.score, "status": n.status}
                                    for n in explored.beam]}
    return result


def _run_batch(translators: Mapping[str, Translator], key: _Key, items: list[Any],
               abandoned: Callable[[], bool]) -> list[dict[str, Any]]:
    """The worker's call for a batch of one key: its task's handler, under the key's attention
    intervention if any. Items are (source, prefix tokens or None) for translating, (source,
    target) for the others. Returns one JSON-ready result per item. The work stops
    (heed.api.Abandoned) once `abandoned()`: every request of the batch timed out."""
    translator = translators[key.model]
    if key.languages != (None, None):
        translator = translator.with_languages(*key.languages)
    handler = _TASKS[key.task]
    if key.intervention is None:
        return handler(translator, key, items, abandoned)
    with translator.intervening(key.intervention):
        return handler(translator, key, items, abandoned)


def _sources(items: list[Any]) -> tuple[list[str], list[Any] | None]:
    """Translating items (source, prefix or None) -> the sources, and their prefixes when any has one."""
    return [source for source, _ in items], ([p for _, p in items] if any(p for _, p in items) else None)


def _translated(translator: Translator, key: _Key, items: list[Any], abandoned: Callable[[], bool]) -> list[Any]:
    texts, prefix = _sources(items)
    nbests = translator.translate_nbest(texts, replace_unk=key.replace_unk, prefix=prefix, stop=abandoned,
                                        decode=key.decode, attention=key.attention)
    results = [_sentence(translator, s, n, attention=key.attention) for s, n in zip(texts, nbests)]
    return _explained(translator, key, texts, nbests, results)


def _explored(translator: Translator, key: _Key, items: list[Any], abandoned: Callable[[], bool]) -> list[Any]:
    texts, prefix = _sources(items)
    explored = translator.explore(texts, alternatives=key.alternatives, replace_unk=key.replace_unk,
                                  prefix=prefix, stop=abandoned, decode=key.decode)
    results = [_sentence(translator, s, e.hypotheses, attention=key.attention, explored=e)
               for s, e in zip(texts, explored)]
    return _explained(translator, key, texts, [e.hypotheses for e in explored], results)


def _explained(translator: Translator, key: _Key, texts: Sequence[str], nbests: Sequence[Sequence[Translation]],
               results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`results` with each hypothesis' source share when the key asks for it (one teacher-forced
    pass over every hypothesis of the batch)."""
    if "source_share" not in key.explain:
        return results
    for result, shares in zip(results, nbest_source_shares(*translator.subject, texts, nbests,
                                                                      max_src_len=translator.max_src_len)):
        for hypothesis, share in zip(result["hypotheses"], shares):
            if share is not None:
                hypothesis["source_share"] = {"sentence": share.sentence,
                                              "per_token": [float(x) for x in share.per_token]}
    return results


def _aligned(translator: Translator, key: _Key, items: list[Any], abandoned: Callable[[], bool]) -> list[Any]:
    alignments = translator.align([s for s, _ in items], [t for _, t in items], options=key.reading, stop=abandoned)
    return [{"src_words": a.src_words, "tgt_words": a.tgt_words, "attention": _matrix(a.attention),
             "links": [list(link) for link in a.links], "pharaoh": a.pharaoh()} for a in alignments]


def _carried(translator: Translator, key: _Key, items: list[Any], abandoned: Callable[[], bool]) -> list[Any]:
    """The compat APIs' markup (heed.serve.compat.engine): items are (a text's Marked, its sentences'
    translations, their search Translations or None), carried in one batched pass (heed.markup.
    carry_many), each answered as its rendered markup."""
    from heed.markup import carry_many

    return carry_many(translator, [m for m, _, _ in items], [o for _, o, _ in items],
                      translations=[t for _, _, t in items], stop=abandoned)


def _read(translator: Translator, key: _Key, items: list[Any], abandoned: Callable[[], bool]) -> list[Any]:
    """A reading of heed.explain.readings, a pair at a time: items are (source, target or None: the
    model's own, the pair's per-pair option values), each answered in the shape `key.shown` names."""
    out = []
    for source, target, own in _until(abandoned, items):
        options = key.options.model_copy(update=own) if own else key.options
        result = translator.explain(key.read, [source], None if target is None else [target], stop=abandoned,
                                    **dict(options))[0]
        out.append(_SHOWN[key.shown](result, options))
    return out


def _attribution_shown(result: Any, options: Any) -> dict[str, Any]:
    from heed.explain.attribution import as_attribution

    return as_attribution(result, options.method, options.steps).to_dict()


def _lens_shown(result: Any, options: Any) -> dict[str, Any]:
    from heed.explain.logit_lens import as_logit_lens

    return as_logit_lens(result).to_dict()


# how a reading's result is answered: /v1/explain's ReadingResult, or an older route's own shape
_SHOWN: dict[str, Callable[[Any, Any], dict[str, Any]]] = {
    "reading": lambda result, options: result.to_dict(), "attribution": _attribution_shown,
    "heads": lambda result, options: HeadMaps.of(result).to_dict(), "lens": _lens_shown,
}

# task -> its handler: (translator, key, items, abandoned) -> one JSON-ready result per item
_TASKS: dict[str, Callable[[Translator, _Key, list[Any], Callable[[], bool]], list[Any]]] = {
    "translate": _translated, "explore": _explored, "align": _aligned, "explain": _read, "carry": _carried,
}


def _until(abandoned: Callable[[], bool], items: list[Any]) -> Iterator[Any]:
    """`items` one at a time, for work done a sentence at a time (heads, attribution): Abandoned
    before the next one once every request of the batch has timed out."""
    for item in items:
        if abandoned():
            raise Abandoned()
        yield item


# ----------------------------------------------------------------------------- the app


def create_app(translators: Mapping[str, Translator], settings: ServeSettings | None = None, *,
               metrics: Mapping[str, Mapping[str, Any] | None] | None = None,
               api_keys: frozenset[str] = frozenset(), priors: Mapping[str, Priors] | None = None,
               reverses: Mapping[str, tuple[Translator, Symmetrize]] | None = None) -> FastAPI:
    """The FastAPI app serving `translators` by name; `metrics`: per name, its last training
    evaluations (GET /v1/models); `api_keys`: the keys LibreTranslate's and DeepL's routes ask for
    (heed.serve.compat; none: they ask for none); `priors`: per name, the statistical priors its
    model directory records (heed.explain.priors), for /v1/align's aligner; `reverses`: per name,
    the other direction its directory's pair records (heed.train.pair) and how the two join, with
    which /v1/align symmetrises as heed align does. The batcher's worker thread starts here and
    stops at shutdown."""
    if not translators:
        raise ValueError("give at least one model")
    settings = settings or ServeSettings()
    models = dict(translators)
    infos = {name: model_info(name, t, (metrics or {}).get(name)) for name, t in models.items()}
    # The reverse models run on the batcher's thread too, under names no request reaches (_model
    # looks in `models`).
    workers = {**models, **{_reverse_name(name): t for name, (t, _) in (reverses or {}).items()}}
    batcher = Batcher(lambda key, items, abandoned: _run_batch(workers, cast(_Key, key), items, abandoned),
                      max_wait=settings.batch_wait_ms / 1000,
                      max_sentences=settings.batch_sentences, max_queue=settings.max_queue,
                      slice_work=settings.slice_work, enabled=settings.batching)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        batcher.stop()

    app = FastAPI(title="heed", version=_version(), lifespan=lifespan,
                  description="Translate with attention models, and look inside them. The explorer is at /.",
                  responses={400: {"model": ErrorResponse}, 413: {"model": ErrorResponse},
                             422: {"model": ErrorResponse}})
    app.state.batcher = batcher
    app.state.settings = settings
    app.add_middleware(BodyLimit, limit=settings.max_body)
    _add_error_handlers(app)
    _add_pages(app)
    routes = _Routes(models, infos, batcher, settings)
    routes.priors = dict(priors or {})
    routes.reverses = dict(reverses or {})
    app.include_router(routes.router())
    install(app, models, routes.translated, routes.carried, settings, keys=Keys(api_keys))
    app.include_router(routes.explain_router())
    return app


def _add_pages(app: FastAPI) -> None:
    """The explorer page, its static files and its CJK font (none in the OpenAPI schema)."""

    @app.get("/", include_in_schema=False)
    async def explorer() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.get("/fonts/heed-cjk.ttf", include_in_schema=False)
    async def cjk_font() -> FileResponse:
        # The explorer's CJK fallback (static/explorer.css): no CJK system font, no boxes.
        return FileResponse(CJK_FONT, media_type="font/ttf", headers={"Cache-Control": "public, max-age=86400"})


def _align_weights(translator: Translator, request: AlignRequest) -> Any:
    """The weights /v1/align reads: the request's, or where it names none the model's alignment layer
    when it has one (heed align's default too); ApiError on "weights" for an alignment layer asked of
    a model without one."""
    has_layer = isinstance(translator.model, AlignmentLayerModel)
    if "weights" not in request.model_fields_set:
        return ALIGNMENT_LAYER if has_layer and request.layer is None else request.weights
    if request.weights == ALIGNMENT_LAYER and not has_layer:
        raise ApiError(422, no_alignment_layer(translator.model), "weights")
    return request.weights


def _reverse_name(name: str) -> str:
    """The batcher's name for model `name`'s recorded reverse."""
    return f"{name} (reverse)"


def _symmetrized(results: list[dict[str, Any]], backward: list[dict[str, Any]], how: Symmetrize
                 ) -> list[dict[str, Any]]:
    """/v1/align's results with their links joined by `how` with the reverse model's (which read
    each pair target first: its links turned back to (source, target))."""
    from heed.data.pharaoh import to_pharaoh

    joined = [symmetrize({(int(i), int(j)) for i, j in r["links"]}, {(int(i), int(j)) for j, i in b["links"]}, how)
              for r, b in zip(results, backward)]
    return [{**r, "links": [list(link) for link in sorted(found)], "pharaoh": to_pharaoh(sorted(found))}
            for r, found in zip(results, joined)]


def _priors_aligned(results: list[dict[str, Any]], request: AlignRequest, priors: Priors) -> list[dict[str, Any]]:
    """/v1/align's results with the links `request.aligner` chooses (heed.explain.priors.aligner_links:
    eflomal with the model's priors on the request's pairs alone, or joined with the model's links)."""
    from heed.data.corpus import Pair
    from heed.data.pharaoh import to_pharaoh
    from heed.explain.priors import aligner_links
    from heed.results import Alignment

    pairs = [Pair(s, t) for s, t in zip(request.sources, request.targets)]
    model = [Alignment(r["src_words"], r["tgt_words"], np.asarray(r["attention"], dtype=np.float32),
                       [(int(i), int(j)) for i, j in r["links"]]) for r in results]
    chosen = aligner_links(request.aligner, lambda: model, pairs, priors, units=request.tgt_units)
    return [{**r, "links": [list(link) for link in sorted(found)], "pharaoh": to_pharaoh(sorted(found))}
            for r, found in zip(results, chosen)]


class _Routes:
    """The JSON API: one handler per route over the served models, their infos, the batcher and the
    limits. Each handler checks its request (`_model` is the prologue they share), then hands the
    work to the batcher under a key of what can share a call."""

    def __init__(self, models: dict[str, Translator], infos: dict[str, dict[str, Any]], batcher: Batcher,
                 settings: ServeSettings) -> None:
        self.models, self.infos, self.batcher, self.settings = models, infos, batcher, settings
        # each model's (layers, heads), found once: a Protocol's isinstance reads every member (~40 us),
        # and the translate route counts it on every request, before the batcher
        self.grids = {name: _grid(translator) for name, translator in models.items()}
        self.priors: dict[str, Priors] = {}
        self.reverses: dict[str, tuple[Translator, Symmetrize]] = {}  # name -> its recorded reverse, the join

    def router(self) -> APIRouter:
        router = APIRouter()
        router.add_api_route("/health", self.health, methods=["GET"], response_model=Health)
        router.add_api_route("/v1/models", self.list_models, methods=["GET"], response_model=ModelsResponse)
        for path, handler, response in (("/v1/translate", self.translate, TranslateResponse),
                                        ("/v1/align", self.align, AlignResponse),
                                        ("/v1/attribute", self.attribute, AttributeResponse),
                                        ("/v1/heads", self.heads, HeadsResponse),
                                        ("/v1/lens", self.lens, LensResponse)):
            router.add_api_route(path, handler, methods=["POST"], response_model=response, responses=WORK_ERRORS)
        return router

    def explain_router(self) -> APIRouter:
        """POST /v1/explain/NAME, a route per reading: included after every other API's routes, as a
        request is matched against each route in turn (~4 us a route), and these requests each run
        a model pass while /translate's are the server's most frequent and cheapest."""
        router = APIRouter()
        for reading in READINGS.values():
            router.add_api_route(f"/v1/explain/{reading.name}", self.reading_route(reading), methods=["POST"],
                                 name=f"explain_{reading.name}", summary=f"Explain: {reading.name}",
                                 description=reading.summary, response_model=ExplainResponse, responses=WORK_ERRORS)
        router.add_api_route("/v1/explain/{reading}", self.unknown_reading, methods=["POST"], include_in_schema=False)
        return router

    def reading_route(self, reading: Reading) -> Callable[..., Any]:
        """POST /v1/explain/NAME's handler, taking the reading's request (heed.serve.schemas.reading_request)."""

        async def handler(request: Any) -> Response:
            return await self.explain(reading, request)

        request = inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                    annotation=reading_request(reading))
        handler.__signature__ = inspect.Signature([request], return_annotation=Response)  # type: ignore[attr-defined]
        return handler

    async def unknown_reading(self, reading: str) -> Response:
        raise ApiError(404, f"no reading named {reading!r}; readings: {', '.join(READINGS)}", "reading")

    async def explain(self, reading: Reading, request: Any) -> Response:
        """A reading of given pairs (or of the model's own translations, where no targets are given):
        refused in one line (422 on "model") for a model that is not what it needs, its cost counted
        by the reading's own cost function, read a sentence a turn."""
        name, translator = self._reader(request, reading)
        _check_sentences(request.sources, "sources", self.settings)
        try:
            options = reading.parse({field: getattr(request, field) for field in reading.options.model_fields})
        except HeedError as e:
            raise ApiError(422, str(e), None) from None
        for field in options.per_pair:
            _one_target_each(request.sources, getattr(options, field), "source", field)
        sizes, search = self._pair_sizes(translator, request.sources, request.targets, "source")
        pairs = _pair_costs(self.grids[name], reading, options, sizes)
        self._within(reading_cost(reading.name, [p._replace(work=p.work + w) for p, w in zip(pairs, search)]))
        results = await self._read(name, request, reading, options, request.sources, request.targets, "reading")
        return await _answer({"model": name, "reading": reading.name, "results": results})

    def _reader(self, request: Any, reading: Reading) -> tuple[str, Translator]:
        """The request's model (`_model`), refused in the reading's one line (422 on "model") when it
        is not what the reading needs."""
        name, translator = self._model(request)
        refused = reading.refusal(translator.model)
        if refused is not None:
            raise ApiError(422, f"model {name!r}: {refused}", "model")
        return name, translator

    def _pair_sizes(self, translator: Translator, sources: Sequence[str],
                    targets: Sequence[str | Sequence[str]] | None, noun: str) -> tuple[list[tuple[int, int]], list[int]]:
        """Each pair's (source tokens, target tokens), and the search work that writes the model's own
        output first: given targets are checked (one per source, each within --max-chars, every
        token known) and cost no search; without them, each output counts at its longest, after a
        search with the model's decode config."""
        if targets is not None:
            _one_target_each(sources, targets, noun)
            _check_targets(targets, self.settings)
            sizes = _check_known_targets(translator, sources, targets)
            return sizes, [0] * len(sizes)
        decode = translator.decode_config
        tokens = [translator.codec.src_tokens(text)[:translator.max_src_len] for text in sources]
        steps = _output_steps(decode, tokens, None, self.settings)
        width = decode.n_best if decode.sampling else decode.beam_size
        return [(len(s), t) for s, t in zip(tokens, steps)], [search_work(width, t) for t in steps]

    async def _read(self, name: str, request: Any, reading: Reading, options: Any, sources: Sequence[str],
                    targets: Sequence[str | Sequence[str]] | None, shown: str) -> list[Any]:
        """The batcher's results of `reading` over the pairs, a pair a turn, each answered in the shape
        `shown` names (_SHOWN); an option given per pair (Options.per_pair) travels with its pair."""
        per_pair = {field: getattr(options, field) for field in options.per_pair}
        common = options.model_copy(update=dict.fromkeys(per_pair, ())) if per_pair else options
        read: Sequence[str | Sequence[str] | None] = [None] * len(sources) if targets is None else targets
        items = [(source, target, {field: (values[k],) for field, values in per_pair.items()})
                 for k, (source, target) in enumerate(zip(sources, read))]
        key = _Key(name, "explain", languages=(request.src_lang, request.tgt_lang), read=reading.name, options=common,
                   shown=shown)
        a_turn_each = [self.settings.slice_work] * len(sources)  # read a sentence at a time
        return await self._decoded(key, items, a_turn_each)

    def _model(self, request: Any, needs: type | None = None, why: str = "") -> tuple[str, Translator]:
        """The request's model by name (the only one when there is one), for the request's language
        pair; a 422 on field "model" saying `why` when it is not a `needs` (an attention model, a
        gradient model, ...), on src_lang or tgt_lang for a pair the model does not have or needs."""
        name = _model_name(request.model, self.models)
        translator = self.models[name]
        if needs is not None and not isinstance(translator.model, needs):
            raise ApiError(422, f"model {name!r} {why}", "model")
        return name, _paired(translator, request.src_lang, request.tgt_lang)

    def _within(self, cost: Cost) -> None:
        """A 422 naming the field to change when the request's cost passes --max-work,
        --max-weights or --max-answer (heed.serve.costs): refused before anything runs."""
        refused = refusal(cost, self.settings)
        if refused is not None:
            raise ApiError(422, *refused)

    async def _decoded(self, key: _Key, items: list[Any], costs: list[int], *, timeout: float | None = None) -> list[Any]:
        """The batcher's results for `items` within `timeout` seconds (default --timeout), its
        refusals as the API's errors."""
        settings = self.settings
        try:
            return await self.batcher.run(key, items, costs=costs, timeout=settings.timeout if timeout is None else timeout)
        except QueueFull as e:
            raise ApiError(503, f"{e}; the queue holds {self.batcher.queued} sentences (--max-queue "
                                f"{settings.max_queue})", None, {"Retry-After": str(e.retry_after)}) from None
        except asyncio.TimeoutError:
            raise ApiError(504, f"the request took longer than the server's limit of {settings.timeout:g} s "
                                "(--timeout); send fewer or shorter sentences", None) from None
        except HeedError as e:
            raise ApiError(422, str(e), None) from None

    async def health(self) -> dict[str, Any]:
        return {"status": "ok", "models": list(self.models), "queued": self.batcher.queued}

    async def list_models(self) -> dict[str, Any]:
        return {"models": list(self.infos.values())}

    async def translate(self, request: TranslateRequest) -> Response:
        # POST /v1/translate (a docstring here would be its OpenAPI description): `translated`, as JSON
        done = await self.translated(request)
        return await _answer({"model": done.model, "decode": done.decode.model_dump(mode="json"),
                              "results": done.results})

    async def carried(self, model: str, languages: tuple[str | None, str | None], items: list[Any], costs: list[int],
                      timeout: float) -> list[str]:
        """The compat APIs' markup pass (heed.serve.compat.engine.CarryCall) on the batcher's thread:
        `items` (a text's Marked, its translations, their search Translations) of `model` along
        `languages`, each text's `costs`, within `timeout` seconds; refusals are ApiErrors."""
        return await self._decoded(_Key(model=model, task="carry", languages=languages), items, costs, timeout=timeout)

    async def translated(self, request: TranslateRequest) -> TranslateResults:
        """The translation core of POST /v1/translate and of the compat APIs (heed.serve.compat):
        the request checked against the model and the server's limits, then decoded by the batcher;
        each sentence's JSON-ready result (the `results` of TranslateResponse). Refusals are ApiErrors."""
        name, translator = self._model(request)
        settings = self.settings
        _check_sentences(request.sentences, "sentences", settings)
        decode = _decode(translator, request, settings)
        if request.replace_unk and not translator.model.has_attention:
            raise ApiError(422, f"model {name!r} has no attention, so it cannot replace <unk>", "replace_unk")
        sources = [translator.codec.src_tokens(text)[:translator.max_src_len] for text in request.sentences]
        prefix_ids = None
        if request.prefix is not None:
            _check_prefix_text(request.prefix)
            try:
                prefix_ids = translations.prefix_ids(translator.codec, request.prefix, len(request.sentences),
                                                     sources=sources)
            except HeedError as e:
                field, _, message = str(e).partition(": ")
                if not field.startswith("prefix["):  # about the list as a whole
                    field, message = "prefix", str(e)
                raise ApiError(422, message, field) from None
        intervention = None
        if request.intervention is not None:
            if not runs_torch(translator.model):
                raise ApiError(422, f"model {name!r} is exported: its attention is inside its ONNX graph, so it cannot "
                                    "be intervened on", "intervention")
            intervention = Intervention(request.intervention, request.intervention_seed)
        refused = READINGS["source_share"].refusal(translator.model) if request.explain else None
        if refused is not None:
            raise ApiError(422, f"model {name!r}: {refused}", "explain")
        width = decode.n_best if decode.sampling else decode.beam_size
        lever = "prefix" if request.prefix is not None and any(request.prefix) else (
            "n_best" if decode.sampling else "beam_size")
        cost = translate_cost([len(tokens) for tokens in sources], _output_steps(decode, sources, prefix_ids, settings),
                              width=width, n_best=decode.n_best, attention=request.attention,
                              alternatives=request.alternatives, trace=request.trace,
                              source_share=bool(request.explain), grid=self.grids[name],
                              fields={"work": lever, "weights": "explain", "numbers": "sentences"})
        self._within(cost)
        # the source shares of a slice are read after its search: a sentence a turn
        costs = [max(w, settings.slice_work) for w in cost.work] if request.explain else cost.work
        key = _Key(name, "explore" if request.trace else "translate", decode, request.replace_unk, request.attention,
                   request.alternatives if request.trace else 0, intervention,
                   languages=(request.src_lang, request.tgt_lang), explain=tuple(dict.fromkeys(request.explain)))
        prefixes = request.prefix or [None] * len(request.sentences)
        return TranslateResults(name, decode, await self._decoded(key, list(zip(request.sentences, prefixes)), costs))

    async def align(self, request: AlignRequest) -> Response:
        name, translator = self._model(request)
        if not translator.model.has_attention:
            raise ApiError(422, f"model {name!r} has no attention, so it has no alignments", "model")
        _check_sentences(request.sources, "sources", self.settings)
        _check_sentences(request.targets, "targets", self.settings)
        _one_target_each(request.sources, request.targets, "source")
        _check_known_targets(translator, request.sources, request.targets)
        src_lens = [len(translator.codec.src_tokens(source)[:translator.max_src_len]) for source in request.sources]
        tgt_lens = [len(translator.codec.tgt_tokens(target)) for target in request.targets]
        units = [len(t.split()) if request.tgt_units == "words" else len("".join(t.split())) for t in request.targets]
        weights = _align_weights(translator, request)
        cost = forward = align_cost(src_lens, tgt_lens, [len(s.split()) for s in request.sources], units,
                                    reading=weights, grid=self.grids[name])
        # heed align's default: a model one of a recorded pair reads the pairs both ways, the model's
        # links joined with its reverse's (the reverse by its own default reading), for the model's
        # own links in words.
        reverse = (self.reverses.get(name) if request.aligner == "model" and request.tgt_units == "words"
                   and not request.one_way else None)
        if reverse is not None:
            cost = replace(cost, work=cost.work + [forced_work(n) for n in src_lens])
        priors = None
        if request.aligner != "model":
            priors = self.priors.get(name)
            if priors is None:
                raise ApiError(422, f"model {name!r} records no statistical priors (heed data priors MODEL FILE); "
                                    "use aligner model", "aligner")
            if priors.units != request.tgt_units:
                raise ApiError(422, f"model {name!r}'s priors count target {priors.units}: give tgt_units "
                                    f"{priors.units}", "tgt_units")
        self._within(cost)
        reading = AlignOptions(method=request.method, layer=request.layer, weights=weights,
                               tgt_units=request.tgt_units, join=request.join, null_threshold=request.null_threshold)
        key = _Key(name, "align", languages=(request.src_lang, request.tgt_lang), reading=reading)
        # ALTI+, rollout and value norms weigh every head: a pair a turn
        costs = forward.work if weights == "attention" else [self.settings.slice_work] * len(forward.work)
        results = await self._decoded(key, list(zip(request.sources, request.targets)), costs)
        if reverse is not None:
            backward, how = reverse
            reading = backward.default_reading("words")[0]
            key = _Key(_reverse_name(name), "align", languages=(request.tgt_lang, request.src_lang), reading=reading)
            as_is = reading.weights == "attention"  # the batcher slices as for the forward pass
            results = _symmetrized(results, await self._decoded(
                key, list(zip(request.targets, request.sources)),
                [forced_work(n) if as_is else self.settings.slice_work for n in src_lens]), how)
        if priors is not None:
            try:
                results = await asyncio.to_thread(_priors_aligned, results, request, priors)
            except HeedError as e:  # eflomal not installed
                raise ApiError(422, str(e), "aligner") from None
        return await _answer({"model": name, "aligner": request.aligner,
                              "symmetrized": None if reverse is None else reverse[1], "results": results})

    async def attribute(self, request: AttributeRequest) -> Response:
        """The reading attribution, answered as heed attribute writes it."""
        reading = READINGS["attribution"]
        name, translator = self._reader(request, reading)
        _check_sentences(request.sentences, "sentences", self.settings)
        options = reading.parse({"method": request.method, "steps": request.steps})
        sizes, search = self._pair_sizes(translator, request.sentences, request.targets, "sentence")
        self._within(attribute_cost(_pair_costs(self.grids[name], reading, options, sizes), points=request.steps,
                                    method=request.method, search=search))
        results = await self._read(name, request, reading, options, request.sentences, request.targets, "attribution")
        return await _answer({"model": name, "attributions": results})

    async def lens(self, request: LensRequest) -> Response:
        """The reading logit_lens, answered as heed lens writes it."""
        reading = READINGS["logit_lens"]
        name, translator = self._reader(request, reading)
        _check_sentences(request.sources, "sources", self.settings)
        options = reading.parse({"top": request.top})
        sizes, _ = self._pair_sizes(translator, request.sources, request.targets, "source")
        self._within(lens_cost(_pair_costs(self.grids[name], reading, options, sizes), top=request.top,
                               layers=self.grids[name][0]))
        results = await self._read(name, request, reading, options, request.sources, request.targets, "lens")
        return await _answer({"model": name, "results": results})

    async def heads(self, request: HeadsRequest) -> Response:
        """The reading heads, with the self-attention `parts` asks for, answered as HeadMaps."""
        reading = READINGS["heads"]
        name, translator = self._reader(request, reading)
        _check_sentences(request.sources, "sources", self.settings)
        parts = tuple(dict.fromkeys(request.parts))
        options = reading.parse({"self_attention": tuple(p for p in parts if p != "cross")})
        sizes, _ = self._pair_sizes(translator, request.sources, request.targets, "source")
        self._within(heads_cost(_pair_costs(self.grids[name], reading, options, sizes), parts=parts,
                                grid=self.grids[name]))
        results = await self._read(name, request, reading, options, request.sources, request.targets, "heads")
        return await _answer({"model": name, "results": results})


def _pair_costs(grid: tuple[int, int], reading: Reading, options: Any, sizes: Sequence[tuple[int, int]]) -> list[Any]:
    """What each pair of (source, target) token counts costs, as `reading` counts it (Reading.cost),
    in a model of `grid`'s (layers, heads)."""
    layers, heads = grid
    return [reading.cost(PairSize(s, t, layers, heads), options) for s, t in sizes]


def _paired(translator: Translator, src_lang: str | None, tgt_lang: str | None) -> Translator:
    """`translator` for the pair a request gives (heed.api.Translator.with_languages; itself when
    it gives none); a 422 naming the field whose code the model lacks, or that a many-language
    model needs and has no default for."""
    paired = translator
    try:
        if src_lang is not None:
            paired = paired.with_languages(src_lang, None)
        paired.codec.source_frame  # noqa: B018 (a many-language model without a source language refuses)
    except HeedError as e:
        raise ApiError(422, _pair_problem(translator, src_lang, e), "src_lang") from None
    try:
        if tgt_lang is not None:
            paired = paired.with_languages(None, tgt_lang)
        paired.codec.target_frame()
    except HeedError as e:
        raise ApiError(422, _pair_problem(translator, tgt_lang, e), "tgt_lang") from None
    return paired


def _pair_problem(translator: Translator, code: str | None, error: HeedError) -> str:
    """What a request's pair lacks, in the request's words: the library's message names the CLI's
    flags and the Python keywords, which a /v1 client has none of."""
    if code is not None or not translator.languages:
        return str(error)  # a code the model lacks: the message names it and the close ones
    return (f"this model translates between {len(translator.languages)} languages and is served without a default "
            f"pair; give the request's src_lang and tgt_lang, codes of GET /v1/models' languages (e.g. "
            f"{', '.join(translator.languages[:3])})")


def unpaired(translators: Mapping[str, Translator]) -> list[str]:
    """The names of the many-language models served without a default pair (heed serve warns of
    them at start-up: every request to them must name its src_lang and tgt_lang)."""
    out = []
    for name, translator in translators.items():
        try:
            translator.codec.source_frame  # noqa: B018
            translator.codec.target_frame()
        except HeedError:
            out.append(name)
    return out


def _version() -> str:
    from heed.version import __version__

    return __version__


def _model_name(requested: str | None, models: Mapping[str, Translator]) -> str:
    if requested is None:
        if len(models) == 1:
            return next(iter(models))
        raise ApiError(422, f"several models are loaded; name one: {', '.join(models)}", "model")
    if requested not in models:
        raise ApiError(404, f"no model named {requested!r}; loaded: {', '.join(models)}", "model")
    return requested


def _check_known_targets(translator: Translator, sources: Sequence[str],
                         targets: Sequence[str | Sequence[str]]) -> list[tuple[int, int]]:
    """A 422 naming `targets[k]` for a target token the model does not know (`<pad>`, a word
    outside its vocabulary), as translate's prefix is refused: explained as `<unk>` it would be
    an answer to another question. Returns each pair's (source tokens, target tokens) as read."""
    try:
        src_tokens, tgt_tokens, _ = translator.forced_pairs(sources, targets, empty="there is nothing to explain")
        return [(len(s), len(t)) for s, t in zip(src_tokens, tgt_tokens)]
    except HeedError as e:
        where, _, message = str(e).partition(": ")
        if where.startswith("tgt_texts["):
            raise ApiError(422, message, "targets" + where.removeprefix("tgt_texts")) from None
        raise ApiError(422, str(e), None) from None


def _check_sentences(sentences: Sequence[str], field: str, settings: ServeSettings) -> None:
    if not sentences:
        raise ApiError(422, "give at least one sentence", field)
    if len(sentences) > settings.max_sentences:
        raise ApiError(413, f"{len(sentences)} sentences; the server takes at most {settings.max_sentences} a "
                            "request (--max-sentences)", field)
    for k, sentence in enumerate(sentences):
        if not sentence.strip():
            raise ApiError(422, "the sentence is empty", f"{field}[{k}]")
        if len(sentence) > settings.max_chars:
            raise ApiError(413, f"the sentence has {len(sentence)} characters; the server takes at most "
                                f"{settings.max_chars} (--max-chars)", f"{field}[{k}]")
        _check_text(sentence, "a sentence", f"{field}[{k}]")


def _one_target_each(sources: Sequence[str], targets: Sequence[Any], noun: str, field: str = "targets") -> None:
    """422 on `field` unless it holds one value per source (`noun`: what the request calls them)."""
    if len(targets) != len(sources):
        raise ApiError(422, f"{len(sources)} {noun}s but {len(targets)} {field}; give one of {field} per {noun}"
                       if field != "targets" else f"{len(sources)} {noun}s but {len(targets)} targets; give one "
                       f"target per {noun}", field)


def _check_targets(targets: Sequence[str | Sequence[str]], settings: ServeSettings) -> None:
    """Translations given as texts (checked as sentences are) or as tokens (at most --max-output)."""
    for k, target in enumerate(targets):
        if isinstance(target, str):
            if len(target) > settings.max_chars:
                raise ApiError(413, f"the translation has {len(target)} characters; the server takes at most "
                                    f"{settings.max_chars} (--max-chars)", f"targets[{k}]")
            _check_text(target, "a translation", f"targets[{k}]")
        elif len(target) > settings.max_output:
            raise ApiError(413, f"{len(target)} tokens; the server allows {settings.max_output} (--max-output)",
                           f"targets[{k}]")
        else:
            for token in target:
                _check_text(token, "a token", f"targets[{k}]")


def _decode(translator: Translator, request: TranslateRequest, settings: ServeSettings) -> DecodeConfig:
    """The request's decoding options over the model's; a sampling seed is drawn when none is given."""
    given = {name: getattr(request, name) for name in DECODE_FIELDS if getattr(request, name) is not None}
    try:
        cfg = translator.resolve_decode(given)
    except ConfigError as e:
        field = (e.field or "decode").removeprefix("decode.")
        raise ApiError(422, e.message, field) from None
    if cfg.coverage_penalty and not translator.model.has_attention:
        raise ApiError(422, "the coverage penalty needs a model with attention; set it to 0", "coverage_penalty")
    # A search's cost grows with the beam and the output length: bounded, as the input is.
    width = cfg.n_best if cfg.sampling else cfg.beam_size
    if width > settings.max_beam:
        field = "n_best" if cfg.sampling else "beam_size"
        raise ApiError(422, f"{field} {width} is over the server's limit of {settings.max_beam} (--max-beam)", field)
    longest = math.floor(cfg.max_len_a * translator.max_src_len + cfg.max_len_b)
    if longest > settings.max_output:
        field = "max_len_b" if request.max_len_b is not None else "max_len_a"
        raise ApiError(422, f"max_len_a {cfg.max_len_a:g} and max_len_b {cfg.max_len_b} allow {longest} output tokens "
                            f"(for a source of the model's max_src_len, {translator.max_src_len}); the server allows "
                            f"{settings.max_output} (--max-output)", field)
    return cfg


def _check_text(text: str, what: str, field: str) -> None:
    """A 422 naming `field` for a text no sentence can hold (heed.data.corpus.text_problem)."""
    bad = text_problem(text)
    if bad is not None:
        raise ApiError(422, f"{bad}; {what} holds characters, and no control characters but tab", field)


def _check_prefix_text(prefix: Sequence[str | Sequence[str] | None]) -> None:
    for k, entry in enumerate(prefix):
        for text in [entry] if isinstance(entry, str) else (entry or []):
            _check_text(text, "a prefix", f"prefix[{k}]")


def _output_steps(cfg: DecodeConfig, sources: Sequence[Sequence[str]], prefix_ids: Sequence[Sequence[int]] | None,
                  settings: ServeSettings) -> list[int]:
    """Each sentence's output tokens at most: its max length under `cfg`, or its forced prefix (the
    search never cuts a prefix, so a prefix counts in --max-output)."""
    steps = []
    for k, tokens in enumerate(sources):
        forced = len(prefix_ids[k]) if prefix_ids is not None else 0
        if forced > settings.max_output:
            raise ApiError(422, f"the prefix has {forced} tokens; the server allows {settings.max_output} output "
                                "tokens (--max-output)", f"prefix[{k}]")
        steps.append(max(min(math.floor(cfg.max_len_a * (len(tokens) + 1) + cfg.max_len_b), MAX_OUTPUT_TOKENS), forced))
    return steps


def _grid(translator: Translator) -> tuple[int, int]:
    """(layers, heads) of the model's attention; (1, 1) where it shows no heads of its own."""
    model = translator.model
    return model.head_grid if isinstance(model, HeadsModel) else (1, 1)


async def _answer(body: dict[str, Any]) -> Response:
    """`body` as JSON (as JSONResponse writes it), encoded on a worker thread: a large answer's
    encoding takes seconds, and on the event loop it would hold every other request meanwhile."""
    content = await run_in_threadpool(_encode, body)
    return Response(content, media_type="application/json")


def _encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode("utf-8")


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_: Request, e: ApiError) -> JSONResponse:
        return _error(e.status, e.message, e.field, e.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0]
        loc = [p for p in first.get("loc", ()) if p != "body"]
        if first.get("type") == "json_invalid":
            return _error(400, f"the body is not valid JSON ({first.get('ctx', {}).get('error', 'parse error')})",
                          "body")
        field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".") or "body"
        message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
        return _error(422, message, field)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, e: StarletteHTTPException) -> JSONResponse:
        return _error(e.status_code, str(e.detail), None, getattr(e, "headers", None))

    @app.exception_handler(Exception)
    async def bug(_: Request, e: Exception) -> JSONResponse:
        log.error("internal error: %s: %s", type(e).__name__, e, exc_info=e)
        return _error(500, "internal error; the server log has the details")
