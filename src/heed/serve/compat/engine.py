"""The one translation path of the compat APIs: a client's texts, cut into the sentences a model
reads (heed.serve.compat.segments; inside markup, heed.markup's sentences), translated by POST
/v1/translate's own core (heed.serve.app's `translated`: the same checks, limits, batcher, time limit
and refusals apply; its results come as values, not as JSON to read back), and put back together.

Markup's alignment pass is inside the server's limits as the translation is: its work (a forced
pass of each marked sentence's translation, heed.plumbing.limits.markup_work) is counted with the
search's before anything runs and refused past --max-work; the pass runs on the batcher's worker
thread, as the search does (`CarryCall`: the app's `carried`, so it never runs beside the model's
other work, and the texts of concurrent requests are carried together), and the whole request, the
pass included, answers within --timeout (the pass is stopped at the deadline). Where the model's
reading is the attention the search reports, the links are read off the search (heed.markup.carry.
own_links) and no pass runs at all.

Refusals come back as `Refusal`s in neutral words: the /v1 status and message, and which of the
client's texts and which option it is about, so each API words them in its own shape and field names.
"""
from __future__ import annotations

import math
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from starlette.concurrency import run_in_threadpool

from heed.decode_config import MAX_OUTPUT_TOKENS
from heed.errors import HeedError
from heed.plumbing.limits import markup_work, search_work
from heed.serve.compat.detect import Detector, Guess, NoDetector
from heed.serve.compat.languages import Catalog, Route
from heed.serve.compat.segments import Segmented, segment
from heed.serve.costs import Cost, refusal
from heed.serve.schemas import TranslateRequest, TranslateResults
from heed.serve.settings import ApiError, ServeSettings

if TYPE_CHECKING:
    from heed.api import Translation, Translator
    from heed.markup import Marked

# POST /v1/translate's core: a request -> its results (or an ApiError).
TranslateCall = Callable[[TranslateRequest], Awaitable[TranslateResults]]
# The app's markup pass on the batcher's thread: (model, (src_lang, tgt_lang), items, each item's
# work, seconds left) -> each item's rendered markup (or an ApiError). An item is a text's Marked, its
# sentences' translations, and their search Translations (None where there is none).
CarryCall = Callable[[str, tuple["str | None", "str | None"], list[tuple["Marked", list[str], list["Translation | None"]]],
                      list[int], float], Awaitable[list[str]]]
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
    """The served models (`catalog`), /v1's translate core, the server's limits, and a language
    identifier."""

    def __init__(self, catalog: Catalog, translate: TranslateCall, carry: CarryCall, settings: ServeSettings) -> None:
        self.catalog, self._translate, self._carry_call, self.settings = catalog, translate, carry, settings
        self.max_texts = settings.max_sentences
        self.detector = Detector(catalog.sources())

    async def translate(self, route: Route, texts: Sequence[str], *, markup: Markup | None = None,
                        ignore_tags: Sequence[str] = (), sentences: bool = True, alternatives: int = 0) -> Translated:
        """`texts` translated along `route`: plain text, or markup ("html", "xml") whose tags are
        carried over by the model's alignment (heed.markup); `alternatives` more of the n-best each
        (plain text only). A text is a sentence or more, so more texts than --max-sentences are
        refused before any is read (blank ones too, which cost nothing else)."""
        deadline = time.monotonic() + self.settings.timeout
        if len(texts) > self.max_texts:
            raise Refusal(413, f"{len(texts)} texts; the server takes at most {self.max_texts} a request "
                               "(--max-sentences)", texts=True)
        marked = [self._parse(text, markup, ignore_tags) for text in texts] if markup else None
        runs = [(k, run) for k, m in enumerate(marked) for run in m.runs] if marked is not None else []
        units = ([_Unit(k, segment(run.text, sentences=sentences)) for k, run in runs] if marked is not None
                 else [_Unit(k, segment(t, sentences=sentences)) for k, t in enumerate(texts)])
        owner = [unit.text for unit in units for _ in unit.cut.pieces]  # sentence -> its text's number
        pieces = [piece for unit in units for piece in unit.cut.pieces]
        paired, own = None, False
        if marked is not None:
            from heed.markup.carry import reads_search_attention, target_units

            paired = route.served.translator.with_languages(route.src_lang, route.tgt_lang)
            reading, _ = paired.default_reading(target_units(paired))
            carried = [bool(run.spans) for (_, run), unit in zip(runs, units) for _ in unit.cut.pieces]
            self._within(paired, pieces, carried)
            own = reads_search_attention(paired, reading)
        results = await self._results(route, pieces, owner, 1 + alternatives, attention=own) if pieces else []
        nbests = [[h["text"] for h in result["hypotheses"]] for result in results]
        joined: list[list[str]] = []  # per unit, its best then each alternative
        start = 0
        for unit in units:
            mine = nbests[start:start + len(unit.cut.pieces)]
            start += len(unit.cut.pieces)
            joined.append([unit.cut.join([n[min(i, len(n) - 1)] for n in mine]) for i in range(1 + alternatives)])
        if marked is None or paired is None:
            return Translated([j[0] for j in joined], [_distinct(j) for j in joined])
        # a run cut into one piece was translated as it is: the search's own Translation of it
        searched = _translations(results) if own else [None] * len(results)
        outputs: list[list[str]] = [[] for _ in marked]
        translations: list[list[Translation | None]] = [[] for _ in marked]
        first = 0  # the unit's first piece
        for (k, _), unit, j in zip(runs, units, joined):
            outputs[k].append(j[0])
            translations[k].append(searched[first] if len(unit.cut.pieces) == 1 else None)
            first += len(unit.cut.pieces)
        return Translated(await self._carry(route, paired, marked, outputs, translations, deadline),
                          [[] for _ in marked])

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

    def _within(self, translator: Translator, pieces: Sequence[str], carried: Sequence[bool]) -> None:
        """Refuse markup whose search and alignment pass together pass --max-work, before anything
        runs: per sentence, the search as /v1/translate counts it (its rows for its longest output)
        and, where `carried`, a forced pass of that output (heed.plumbing.limits.markup_work)."""
        cfg = translator.decode_config
        width = cfg.n_best if cfg.sampling else cfg.beam_size
        work = []
        for piece, marks in zip(pieces, carried):
            src_len = len(translator.codec.src_tokens(piece)[:translator.max_src_len])
            steps = min(math.floor(cfg.max_len_a * (src_len + 1) + cfg.max_len_b), MAX_OUTPUT_TOKENS)
            work.append(search_work(width, steps) + (markup_work(steps) if marks else 0))
        cost = Cost(work, what=f"{len(pieces)} sentences, beam {width}, outputs up to their max length, and the "
                               f"alignment pass carrying the markup of {sum(carried)}",
                    advice={"work": "send fewer or shorter texts, or fewer of them marked up"})
        refused = refusal(cost, self.settings)
        if refused is not None:
            raise Refusal(422, refused[0], texts=True)

    async def _results(self, route: Route, pieces: list[str], owner: list[int], n: int, *,
                       attention: bool = False) -> list[dict[str, Any]]:
        """Each piece's result from /v1/translate's core (its n-best, with its attention when
        `attention`); its refusals as Refusals."""
        decode = route.served.translator.decode_config
        wider = {"n_best": n} if decode.sampling else {"n_best": n, "beam_size": max(n, decode.beam_size)}
        request = TranslateRequest(model=route.served.name, sentences=pieces, src_lang=route.src_lang,
                                   tgt_lang=route.tgt_lang, attention=attention, **(wider if n > 1 else {}))
        try:
            return (await self._translate(request)).results
        except ApiError as e:
            raise _refusal(e, owner) from None

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

    async def _carry(self, route: Route, translator: Translator, marked: list[Marked], outputs: list[list[str]],
                     translations: list[list[Translation | None]], deadline: float) -> list[str]:
        """Every text's markup carried onto its translations by the app's batcher (one batched
        alignment pass, with other requests' texts), stopped and refused (504) at the request's
        `deadline` (--timeout); each text's work is its marked sentences' forced passes."""
        late = Refusal(504, f"the request took longer than the server's limit of {self.settings.timeout:g} s "
                            "(--timeout), carrying its markup included; send fewer or shorter texts")
        left = deadline - time.monotonic()
        if left <= 0:
            raise late
        costs = [sum(markup_work(len(translator.codec.tgt_tokens(o))) for o, run in zip(out, m.runs) if run.spans)
                 for m, out in zip(marked, outputs)]
        try:
            return await self._carry_call(route.served.name, (route.src_lang, route.tgt_lang),
                                          list(zip(marked, outputs, translations)), costs, left)
        except ApiError as e:
            if e.status == 504:
                raise late from None
            raise Refusal(e.status, e.message, texts=True, retry_after=e.headers.get("Retry-After")) from None


def _translations(results: list[dict[str, Any]]) -> list[Translation | None]:
    """The best hypothesis of each /v1 result as the search's Translation, its attention included
    (None where the answer has none)."""
    import numpy as np

    from heed.api import Translation

    out: list[Translation | None] = []
    for result in results:
        best = result["hypotheses"][0]
        attention = best.get("attention")
        out.append(None if attention is None else Translation(
            best["text"], best["tokens"], result["src_tokens"], best["score"] or 0.0,
            np.asarray(attention, dtype=np.float32), truncated=result["truncated"]))
    return out


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
