"""DeepL's API v2 over heed's models, the part translation tools use (the official `deepl` clients,
CAT tools, subtitle editors, browser extensions that take a server URL):

    POST /v2/translate        text (a list; a repeated form field), source_lang, target_lang, tag_handling
                              (xml, html), ignore_tags, split_sentences (0, 1, nonewlines),
                              preserve_formatting -> {"translations": [{detected_source_language, text,
                              billed_characters}]}
    GET|POST /v2/languages    ?type=source|target -> [{language, name (, supports_formality)}]
    GET|POST /v2/usage        {character_count, character_limit}: characters translated since the
                              server started; heed sets no quota, so the limit is DeepL's "unlimited"

Codes are DeepL's upper-case ones; a regional target (EN-GB, EN-US, PT-BR, PT-PT) is the base language.
With `heed serve --api-keys FILE` every request needs `Authorization: DeepL-Auth-Key KEY` (or the
older auth_key field). Errors are DeepL's `{"message": "..."}` at its status codes: 400 bad request,
403 authorization, 404 unknown path, 413 too large, 429 busy (the queue is full), 456 quota, 500,
504 past the server's time limit.
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
PREFIX = "/v2/"
FIELDS_AT_MOST = 32  # besides text's items: DeepL's other options
UNLIMITED = 1_000_000_000_000  # what DeepL reports as the character_limit of a plan without one
# A DeepL target code for a base language that DeepL names by region (its plain code is deprecated there).
REGIONS = {"en": (("EN-GB", "English (British)"), ("EN-US", "English (American)")),
           "pt": (("PT-BR", "Portuguese (Brazilian)"), ("PT-PT", "Portuguese (European)"))}


class DeepLError(BaseModel):
    """DeepL's error shape."""

    message: str


# What OpenAPI shows these routes answer besides 200 (in place of /v1's error shape).
ERRORS: dict[int | str, dict[str, Any]] = {status: {"model": DeepLError}
                                           for status in (400, 403, 413, 422, 429, 456, 500, 504)}


def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """DeepL's error shape, at its status for a /v1 status (422 is its 400, a full queue its 429)."""
    status = {422: 400, 503: 429}.get(status, status)
    if status not in (400, 403, 404, 405, 413, 429, 456, 500, 504):
        status = 500
    return JSONResponse({"message": message}, status_code=status, headers=headers)


class DeepL:
    """The routes, over the compat engine, the server's limits and its keys."""

    def __init__(self, engine: Engine, settings: ServeSettings, keys: Keys) -> None:
        self.engine, self.settings, self.keys = engine, settings, keys
        self.max_fields = settings.max_sentences + FIELDS_AT_MOST
        self.characters = 0  # translated since the server started (GET /v2/usage)

    def router(self) -> APIRouter:
        router = APIRouter(prefix="/v2", tags=["DeepL"], responses=ERRORS)
        router.add_api_route("/translate", self._guarded(self.translate), methods=["POST"])
        for method in ("GET", "POST"):  # a route a method: OpenAPI names each operation once
            router.add_api_route("/languages", self._guarded(self.languages), methods=[method],
                                 name=f"deepl_languages_{method.lower()}")
            router.add_api_route("/usage", self._guarded(self.usage), methods=[method],
                                 name=f"deepl_usage_{method.lower()}")
        return router

    def _guarded(self, handler: Callable[[Fields], Awaitable[Any]]) -> Callable[[Request], Awaitable[JSONResponse]]:
        """`handler` with the fields read, the key checked and every error in DeepL's shape."""

        async def route(request: Request) -> JSONResponse:
            fields = Fields({})
            try:
                fields = await read_fields(request, max_fields=self.max_fields)
                if not self.keys.accepts(_key(request, fields)):
                    return error(403, "Authorization failure: give a key of this server as the header "
                                      "Authorization: DeepL-Auth-Key KEY")
                return JSONResponse(await handler(fields))
            except BadField as e:
                return error(e.status, e.message)
            except UnknownLanguage as e:
                return error(400, f"Value for '{'source_lang' if e.side == 'source' else 'target_lang'}' not "
                                  f"supported: {e}")
            except Refusal as e:
                return error(e.status, _worded(e), {"Retry-After": e.retry_after} if e.retry_after else None)
            except Exception as e:  # heed's bug: logged, answered in the API's shape
                log.error("internal error: %s: %s", type(e).__name__, e, exc_info=e)
                return error(500, "internal error; the server log has the details")

        route.__name__ = f"deepl_{handler.__name__}"
        route.__doc__ = handler.__doc__
        return route

    async def translate(self, fields: Fields) -> dict[str, Any]:
        """Translate each of text into target_lang."""
        given = fields.texts("text")
        if given is None or not given[0]:
            raise BadField(400, "Parameter 'text' not specified.", "text")
        texts = given[0]
        target = fields.text("target_lang")
        if not target:
            raise BadField(400, "Value for 'target_lang' not specified.", "target_lang")
        tags = fields.text("tag_handling") or None
        if tags is not None and tags not in ("xml", "html"):
            raise BadField(400, f"Value for 'tag_handling' not supported: {tags} (xml, html)", "tag_handling")
        split = fields.text("split_sentences", "1")
        if split not in ("0", "1", "nonewlines"):
            raise BadField(400, f"Value for 'split_sentences' not supported: {split} (0, 1, nonewlines)",
                           "split_sentences")
        fields.flag("preserve_formatting")  # checked; pieces keep their spaces and breaks either way
        ignore = _tags(fields)
        catalog = self.engine.catalog
        target = catalog.public(target, "target")
        given_source = fields.text("source_lang")
        if given_source:
            source = catalog.public(given_source, "source")
        else:
            writers = [code for m in catalog.models if target in m.targets for code in m.sources if code != target]
            source = (await self.engine.detect("\n".join(texts), writers, markup=bool(tags)))[0].language
        route = catalog.route(source, target)
        done = await self.engine.translate(route, texts, markup="xml" if tags == "xml" else "html" if tags else None,
                                           ignore_tags=ignore,
                                           sentences=split != "0")
        self.characters += sum(len(t) for t in texts)
        return {"translations": [{"detected_source_language": source.upper(), "text": text,
                                  "billed_characters": len(given_text), "model": route.served.name}
                                 for text, given_text in zip(done.texts, texts)]}

    async def languages(self, fields: Fields) -> list[dict[str, Any]]:
        """The source languages, or with type=target the target languages, of the served models."""
        kind = fields.text("type", "source")
        if kind not in ("source", "target"):
            raise BadField(400, f"Value for 'type' not supported: {kind} (source, target)", "type")
        catalog = self.engine.catalog
        if kind == "source":
            return [{"language": code.upper(), "name": name_of(code)} for code in catalog.sources()]
        out = []
        for code in catalog.targets():
            for language, name in REGIONS.get(code, ((code.upper(), name_of(code)),)):
                out.append({"language": language, "name": name, "supports_formality": False})
        return out

    async def usage(self, fields: Fields) -> dict[str, Any]:
        """Characters translated since the server started; heed sets no quota."""
        return {"character_count": self.characters, "character_limit": UNLIMITED}


def _key(request: Request, fields: Fields) -> str | None:
    """The key of `Authorization: DeepL-Auth-Key KEY`, or of the older auth_key field."""
    scheme, _, key = request.headers.get("authorization", "").strip().partition(" ")
    if scheme.lower() == "deepl-auth-key" and key.strip():
        return key.strip()
    return fields.text("auth_key")


def _tags(fields: Fields) -> tuple[str, ...]:
    """ignore_tags: a list, repeated fields, or comma-separated names."""
    given = fields.texts("ignore_tags")
    if given is None:
        return ()
    return tuple(dict.fromkeys(tag.strip() for item in given[0] for tag in item.split(",") if tag.strip()))


def _worded(refusal: Refusal) -> str:
    """A Refusal in DeepL's words: its field names (text[k], source_lang, target_lang, ...)."""
    names = {"source": "source_lang", "target": "target_lang", "format": "tag_handling"}
    where: str | None = refusal.option and names.get(refusal.option, refusal.option)
    if refusal.text is not None:
        where = f"text[{refusal.text}]"
    elif refusal.texts:
        where = "text"
    return f"{where}: {refusal.message}" if where else refusal.message
