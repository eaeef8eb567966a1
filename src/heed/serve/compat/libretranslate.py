"""LibreTranslate's API over heed's models, for its clients (libretranslatepy, Mastodon, Subtitle
Edit, browser extensions, LibreTranslate's own web page):

    POST /translate          q (a string or a list), source (a code or auto), target, format (text,
                             html), alternatives, api_key -> {translatedText, detectedLanguage when
                             source is auto, alternatives when asked}
    GET  /languages          [{code, name, targets}]
    POST /detect             q -> [{confidence (0-100), language}]
    GET  /frontend/settings  what LibreTranslate's page reads: limits, keys, default languages

Fields come as JSON or a form (heed.serve.compat.fields). Every error is LibreTranslate's
`{"error": "..."}`: 400 for a missing field, an unknown language or a text the server cannot take,
403 for a wrong key, 413 past a size limit, 429 when the queue is full, 500 otherwise.
"""
from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.requests import Request

from heed.serve.compat.engine import Engine, Refusal
from heed.serve.compat.fields import BadField, Fields, read_fields
from heed.serve.compat.keys import Keys
from heed.serve.compat.languages import UnknownLanguage, name_of
from heed.serve.settings import ServeSettings

log = logging.getLogger("heed.serve")
PATHS = ("/translate", "/languages", "/detect", "/frontend/settings")
FIELDS_AT_MOST = 32  # besides q's list items: a LibreTranslate request has six fields


class LibreTranslateError(BaseModel):
    """LibreTranslate's error shape."""

    error: str


# What OpenAPI shows these routes answer besides 200 (in place of /v1's error shape).
ERRORS: dict[int | str, dict[str, Any]] = {status: {"model": LibreTranslateError}
                                           for status in (400, 403, 413, 422, 429, 500)}


def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """LibreTranslate's error shape, at its status for a /v1 status (422 is its 400, a full queue
    its 429, a time limit its 500)."""
    status = {422: 400, 503: 429, 504: 500}.get(status, status)
    if status not in (400, 403, 404, 405, 413, 429, 500):
        status = 500
    if status == 429:
        message = f"Slowdown: {message}"
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class LibreTranslate:
    """The routes, over the compat engine, the server's limits and its keys."""

    def __init__(self, engine: Engine, settings: ServeSettings, keys: Keys) -> None:
        self.engine, self.settings, self.keys = engine, settings, keys
        self.max_fields = settings.max_sentences + FIELDS_AT_MOST

    def router(self) -> APIRouter:
        router = APIRouter(tags=["LibreTranslate"], responses=ERRORS)
        router.add_api_route("/translate", self._guarded(self.translate), methods=["POST"])
        router.add_api_route("/detect", self._guarded(self.detect), methods=["POST"])
        for method in ("GET", "POST"):  # a route a method: OpenAPI names each operation once
            router.add_api_route("/languages", self._guarded(self.languages, key=False), methods=[method],
                                 name=f"libretranslate_languages_{method.lower()}")
        router.add_api_route("/frontend/settings", self._guarded(self.frontend_settings, key=False),
                             methods=["GET"])
        return router

    def _guarded(self, handler: Callable[[Fields], Awaitable[Any]], *,
                 key: bool = True) -> Callable[[Request], Awaitable[JSONResponse]]:
        """`handler` with the fields read, the key checked (when `key`), and every error in
        LibreTranslate's shape."""

        async def route(request: Request) -> JSONResponse:
            fields = Fields({})
            try:
                fields = await read_fields(request, max_fields=self.max_fields)
                if key and self.keys.required:
                    given = fields.text("api_key")
                    if not given:
                        return error(400, "Please contact the server operator to get an API key (api_key)")
                    if not self.keys.accepts(given):
                        return error(403, "Invalid API key")
                return JSONResponse(await handler(fields))
            except BadField as e:
                return error(e.status, f"Invalid request: {e.message}")
            except UnknownLanguage as e:
                return error(400, str(e))
            except Refusal as e:
                return error(e.status, _worded(e, fields),
                             {"Retry-After": e.retry_after} if e.retry_after else None)
            except Exception as e:  # heed's bug: logged, answered in the API's shape
                log.error("internal error: %s: %s", type(e).__name__, e, exc_info=e)
                return error(500, "Cannot translate text: internal error; the server log has the details")

        route.__name__ = f"libretranslate_{handler.__name__}"
        route.__doc__ = handler.__doc__
        return route

    async def translate(self, fields: Fields) -> dict[str, Any]:
        """Translate q (a text or a list) from source (or auto) to target."""
        given = fields.texts("q")
        if given is None or not given[0] or not given[1] and not given[0][0]:
            raise BadField(400, "missing q parameter", "q")
        texts, many = given
        source, target = fields.text("source"), fields.text("target")
        if not source:
            raise BadField(400, "missing source parameter", "source")
        if not target:
            raise BadField(400, "missing target parameter", "target")
        form = fields.text("format", "text") or "text"
        if form not in ("text", "html"):
            raise BadField(400, f"{form} format is not supported (text, html)", "format")
        alternatives = _count(fields.text("alternatives", "0"), "alternatives")
        catalog = self.engine.catalog
        target = catalog.public(target, "target")
        detected = None
        if source == "auto":
            writers = [code for m in catalog.models if target in m.targets for code in m.sources if code != target]
            detected = (await self.engine.detect("\n".join(texts), writers, markup=form == "html"))[0]
            source = detected.language
        else:
            source = catalog.public(source, "source")
        route = catalog.route(source, target)
        done = await self.engine.translate(route, texts, markup="html" if form == "html" else None,
                                           alternatives=alternatives if form == "text" else 0)
        body: dict[str, Any] = {"translatedText": done.texts if many else done.texts[0]}
        if detected is not None:
            found = {"confidence": detected.confidence, "language": detected.language}
            body["detectedLanguage"] = [found] * len(texts) if many else found
        if alternatives:
            body["alternatives"] = done.alternatives if many else done.alternatives[0]
        body["model"] = route.served.name  # heed's extra: which model translated
        return body

    async def detect(self, fields: Fields) -> list[dict[str, Any]]:
        """The language of q: the one source of the served models, or the language identifier's guesses."""
        text = fields.text("q")
        if not text:
            raise BadField(400, "missing q parameter", "q")
        return [{"confidence": g.confidence, "language": g.language} for g in await self.engine.detect(text)]

    async def languages(self, fields: Fields) -> list[dict[str, Any]]:
        """Every language a served model reads, with the codes it can be translated into."""
        catalog = self.engine.catalog
        return [{"code": code, "name": name_of(code), "targets": catalog.targets(code)} for code in catalog.sources()]

    async def frontend_settings(self, fields: Fields) -> dict[str, Any]:
        """What LibreTranslate's web page reads before it starts."""
        catalog = self.engine.catalog
        source = catalog.sources()[0]
        targets = catalog.targets(source) or catalog.targets()
        return {"charLimit": self.settings.max_chars * self.settings.max_sentences, "frontendTimeout": 500,
                "apiKeys": self.keys.required, "keyRequired": self.keys.required, "suggestions": False,
                "filesTranslation": False, "supportedFilesFormat": [],
                "language": {"source": {"code": "auto", "name": "Auto Detect"},
                             "target": {"code": targets[0], "name": name_of(targets[0])}}}


def _count(value: str | None, name: str) -> int:
    try:
        n = int(value or 0)
    except ValueError:
        raise BadField(400, f"{name} must be a whole number", name) from None
    if n < 0:
        raise BadField(400, f"{name} must be 0 or more", name)
    return n


def _worded(refusal: Refusal, fields: Fields) -> str:
    """A Refusal in LibreTranslate's words: its field names (q[k], source, target, ...)."""
    given = fields.texts("q")
    many = bool(given and given[1])
    if refusal.text is not None:
        where = f"q[{refusal.text}]" if many else "q"
    elif refusal.texts:
        where = "q"
    else:
        where = refusal.option or ""
    if refusal.status in (503, 504):
        return refusal.message
    return f"Invalid request: {where}: {refusal.message}" if where else f"Invalid request: {refusal.message}"
