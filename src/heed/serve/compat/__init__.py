"""The APIs other clients speak, beside heed's own /v1: LibreTranslate's (libretranslate.py) and
DeepL's v2 (deepl.py), each a router over one translation path (engine.py: POST /v1/translate's own
core, so the same checks, batcher, limits and time limit), with the served models' languages in the
codes those clients use (languages.py), their fields as JSON or forms (fields.py), texts cut into
sentences (segments.py), a language identifier (detect.py) and API keys (keys.py).

    install(app, translators, routes.translated, settings, keys=Keys(read_keys(path)))

Browsers may call them from other origins (CORS, `heed serve --cors-origins`; any origin by
default, as LibreTranslate allows): the preflight OPTIONS is answered and the answers carry
Access-Control-Allow-Origin on their paths only; /v1 stays same-origin.

Each API answers in its own error shape. The routers word their own refusals; `ErrorShapes` is the
net under them: an error the app answers on their paths before they run (the body limit's 413, a
wrong method's 405) is reworded from /v1's shape into theirs, so no /v1-style error reaches them.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from heed.api import Translator
from heed.serve.compat import deepl, libretranslate
from heed.serve.compat.engine import CarryCall, Engine, TranslateCall
from heed.serve.compat.keys import Keys, read_keys
from heed.serve.compat.languages import Catalog
from heed.serve.settings import ServeSettings

__all__ = ["Keys", "install", "read_keys"]


def install(app: FastAPI, translators: Mapping[str, Translator], translate: TranslateCall, carry: CarryCall,
            settings: ServeSettings, *, keys: Keys | None = None) -> None:
    """Add LibreTranslate's and DeepL's routes to `app`, translating through `translate` (POST
    /v1/translate's core: a request -> its results) and carrying markup through `carry` (the app's
    batcher), and the net that words any other error on their paths in their shape."""
    keys = keys or Keys()
    engine = Engine(Catalog.of(translators), translate, carry, settings)
    app.include_router(libretranslate.LibreTranslate(engine, settings, keys).router())
    app.include_router(deepl.DeepL(engine, settings, keys).router())
    app.add_middleware(ErrorShapes, shapes=[(_libretranslate, libretranslate.error), (_deepl, deepl.error)])
    if settings.cors_origins:  # outermost: a preflight is answered before any limit, an error carries the header
        app.add_middleware(CrossOrigin, origins=settings.cors_origins,
                           claims=lambda path: _libretranslate(path) or _deepl(path))


def _libretranslate(path: str) -> bool:
    return path in libretranslate.PATHS


def _deepl(path: str) -> bool:
    return path.startswith(deepl.PREFIX)


class CrossOrigin:
    """ASGI middleware: Starlette's CORSMiddleware on the paths `claims` accepts, nothing on the
    others. Simple requests and preflights (OPTIONS with Access-Control-Request-Method) from
    `origins` ("*": any) are allowed with any request header (Content-Type: application/json and
    DeepL's Authorization both ask for a preflight); no credentials (cookies), as neither API
    uses them."""

    def __init__(self, app: ASGIApp, origins: tuple[str, ...], claims: Callable[[str], bool]) -> None:
        self.app, self.claims = app, claims
        self.cors = CORSMiddleware(app, allow_origins=list(origins), allow_methods=["GET", "POST", "OPTIONS"],
                                   allow_headers=["*"], allow_credentials=False, max_age=600)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.claims(scope.get("path", "")):
            await self.cors(scope, receive, send)
        else:
            await self.app(scope, receive, send)


Shape = tuple[Callable[[str], bool], Callable[[int, str], JSONResponse]]


class ErrorShapes:
    """ASGI middleware: on a path a `shape` claims, an error answered in /v1's shape
    ({"error": {"status", "message", "field"}}) is answered again in the shape's own words."""

    def __init__(self, app: ASGIApp, shapes: list[Shape]) -> None:
        self.app, self.shapes = app, shapes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        shape = next((error for claims, error in self.shapes if claims(scope.get("path", ""))), None) \
            if scope["type"] == "http" else None
        if shape is None:
            await self.app(scope, receive, send)
            return
        held: list[Message] = []  # an error's start and body, until it is whole

        async def reshaped(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] >= 400:
                held.append(message)
                return
            if not held:
                await send(message)
                return
            held.append(message)
            if message.get("more_body", False):
                return
            start, body = held[0], b"".join(m.get("body", b"") for m in held[1:])
            reworded = _reworded(start["status"], body, shape)
            if reworded is None:
                for m in held:
                    await send(m)
            else:
                await reworded(scope, receive, send)
            held.clear()

        await self.app(scope, receive, reshaped)


def _reworded(status: int, body: bytes, shape: Callable[[int, str], JSONResponse]) -> JSONResponse | None:
    """The error `body` in `shape`'s words when it is in /v1's shape; None otherwise (leave it)."""
    try:
        found = json.loads(body)
    except ValueError:
        return None
    inner = found.get("error") if isinstance(found, dict) else None
    if not isinstance(inner, dict) or "message" not in inner:
        return None
    field = inner.get("field")
    message = str(inner["message"])
    return shape(status, f"{field}: {message}" if field and field != "body" else message)
