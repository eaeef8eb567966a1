"""The one translation path of the compat APIs: a client's texts, cut into the sentences a model
reads (heed.serve.compat.segments; inside markup, heed.markup's sentences), translated by POST
/v1/translate's own handler (so the same checks, limits, batcher, time limit and refusals apply),
and put back together.

Refusals come back as `Refusal`s in neutral words: the /v1 status and message, and which of the
client's texts and which option it is about, so each API words them in its own shape and field names.
"""
from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from heed.errors import HeedError
from heed.serve.compat.detect import Detector, Guess, NoDetector
from heed.serve.compat.languages import Catalog, Route
from heed.serve.compat.segments import Segmented, segment
from heed.serve.schemas import TranslateRequest
from heed.serve.settings import ApiError

# POST /v1/translate's handler: a request -> its JSON response (or an ApiError).
TranslateCall = Callable[[TranslateRequest], Awaitable[Response]]
Markup = Literal["html", "xml"]


_TAG = re.compile(r"<[^<>]*>")  # a tag, left out of what the language identifier reads


class Refusal(Exception):
    """A request refused: `status` in /v1's terms (400, 413, 422, 503, 504), a one-line `message`,
    and what it is about: `option` ("source", "target", "alternatives", "format") or, with `text`,
    the client's text number `text` (None: the texts as a whole)."""

    def __init__(self, status: int, message: str, *, option: str | None = None, text: int | None = None,
                 texts: bool = False, retry_after: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.option, self.text, self.texts = status, message, option, text, texts
        self.retry_after = retry_after


@dataclass(frozen=True)
class Translated:
    """One translation per client text, and per text its alternatives (the n-best after the best)."""

    texts: list[str]
    alternatives: list[list[str]]


@dataclass(frozen=True)
class _Unit:
    """A piece of a client's text that is translated as plain text: the text's number, and its cut."""

    text: int
    cut: Segmented


class Engine:
    """The served models (`catalog`), /v1's translate handler, and a language identifier."""

    def __init__(self, catalog: Catalog, translate: TranslateCall, *, max_texts: int) -> None:
        self.catalog, self._translate, self.max_texts = catalog, translate, max_texts
        self.detector = Detector(catalog.sources())

    async def translate(self, route: Route, texts: Sequence[str], *, markup: Markup | None = None,
                        ignore_tags: Sequence[str] = (), sentences: bool = True, alternatives: int = 0) -> Translated:
        """`texts` translated along `route`: plain text, or markup ("html", "xml") whose tags are
        carried over by the model's alignment (heed.markup); `alternatives` more of the n-best each
        (plain text only). A text is a sentence or more, so more texts than --max-sentences are
        refused before any is read (blank ones too, which cost nothing else)."""
        if len(texts) > self.max_texts:
            raise Refusal(413, f"{len(texts)} texts; the server takes at most {self.max_texts} a request "
                               "(--max-sentences)", texts=True)
        marked = [self._parse(text, markup, ignore_tags) for text in texts] if markup else None
        units = ([_Unit(k, segment(s, sentences=sentences)) for k, m in enumerate(marked) for s in m.sentences]
                 if marked is not None else [_Unit(k, segment(t, sentences=sentences)) for k, t in enumerate(texts)])
        owner = [unit.text for unit in units for _ in unit.cut.pieces]  # sentence -> its text's number
        pieces = [piece for unit in units for piece in unit.cut.pieces]
        nbests = await self._nbest(route, pieces, owner, 1 + alternatives) if pieces else []
        joined: list[list[str]] = []  # per unit, its best then each alternative
        start = 0
        for unit in units:
            mine = nbests[start:start + len(unit.cut.pieces)]
            start += len(unit.cut.pieces)
            joined.append([unit.cut.join([n[min(i, len(n) - 1)] for n in mine]) for i in range(1 + alternatives)])
        if marked is None:
            return Translated([j[0] for j in joined], [_distinct(j) for j in joined])
        out, start = [], 0
        paired = route.served.translator.with_languages(route.src_lang, route.tgt_lang)
        for k, m in enumerate(marked):
            outputs = [j[0] for j in joined[start:start + len(m.sentences)]]
            start += len(m.sentences)
            out.append(await self._carry(paired, m, outputs, k))
        return Translated(out, [[] for _ in out])

    async def detect(self, text: str, among: Sequence[str] | None = None, *, markup: bool = False) -> list[Guess]:
        """The likeliest source languages of `text` (with `markup`, its tags left out), best first,
        from `among` (default: every language a served model reads). One candidate is the answer,
        at 100; more need the language identifier (a 400 naming what to install without it)."""
        if markup:
            text = _TAG.sub(" ", text)
        candidates = list(dict.fromkeys(among if among is not None else self.catalog.sources()))
        if len(candidates) == 1:
            return [Guess(candidates[0], 100.0)]
        try:
            guesses = await run_in_threadpool(self.detector.detect, text, len(candidates))
        except NoDetector as e:
            raise Refusal(400, str(e), option="source") from None
        guesses = [g for g in guesses if g.language in candidates]
        if not guesses:
            raise Refusal(400, f"cannot tell the language of the text among {', '.join(candidates[:12])}; give the "
                               "source language", option="source")
        return guesses

    async def _nbest(self, route: Route, pieces: list[str], owner: list[int], n: int) -> list[list[str]]:
        """Each piece's n-best texts from /v1/translate's handler; its refusals as Refusals."""
        decode = route.served.translator.decode_config
        wider = {"n_best": n} if decode.sampling else {"n_best": n, "beam_size": max(n, decode.beam_size)}
        request = TranslateRequest(model=route.served.name, sentences=pieces, src_lang=route.src_lang,
                                   tgt_lang=route.tgt_lang, attention=False, **(wider if n > 1 else {}))
        try:
            response = await self._translate(request)
        except ApiError as e:
            raise _refusal(e, owner) from None
        results: list[dict[str, Any]] = json.loads(bytes(response.body))["results"]
        return [[h["text"] for h in result["hypotheses"]] for result in results]

    @staticmethod
    def _parse(text: str, kind: Markup, ignore_tags: Sequence[str]) -> Any:
        try:
            from heed.markup import parse
        except ImportError as e:  # lxml, heed.markup's parser
            raise Refusal(400, f"this server cannot carry markup: {e.name} is not installed; send plain text",
                          option="format") from None
        try:
            return parse(text, kind=kind, ignore_tags=tuple(ignore_tags))
        except (HeedError, ValueError) as e:
            raise Refusal(400, f"the {kind} cannot be read: {e}", option="format") from None

    @staticmethod
    async def _carry(translator: Any, marked: Any, outputs: list[str], text: int) -> str:
        from heed.markup import carry

        try:  # a forced pass of the model: off the event loop
            return str(await run_in_threadpool(carry, translator, marked, outputs))
        except HeedError as e:
            raise Refusal(400, str(e), text=text) from None


def _distinct(nbest: list[str]) -> list[str]:
    """The alternatives after the best, without repeats (n-best lists of joined pieces repeat)."""
    return [t for t in dict.fromkeys(nbest) if t != nbest[0]]


def _refusal(error: ApiError, owner: list[int]) -> Refusal:
    """/v1's refusal in neutral words: "sentences[j]" is the client's text owner[j], "sentences"
    the texts as a whole, src_lang and tgt_lang the pair, beam_size and n_best the alternatives."""
    field = error.field or ""
    retry = error.headers.get("Retry-After")
    if field.startswith("sentences["):
        j = int(field[len("sentences["):-1])
        return Refusal(error.status, error.message, text=owner[j] if 0 <= j < len(owner) else None, texts=True,
                       retry_after=retry)
    option = {"sentences": None, "src_lang": "source", "tgt_lang": "target", "beam_size": "alternatives",
              "n_best": "alternatives"}.get(field)
    return Refusal(error.status, error.message, option=option, texts=field == "sentences", retry_after=retry)
