"""The languages the served models translate, in the codes other APIs speak.

A many-language model (M2M-100, NLLB) knows its languages by its own codes ("fr", "fra_Latn"). Other
clients speak ISO 639-1 ("fr"; DeepL's "FR", "EN-GB", "PT-BR"). Each code a model knows gets a
public code: an NLLB code `xxx_Scrp` becomes the two-letter code CLDR gives `xxx` when `Scrp` is that
language's usual script and no other code of the model takes it ("fra_Latn" -> "fr", "zho_Hans" ->
"zh"; "zho_Hant" stays). Input may give either, in any case, with DeepL's regional variants mapped to
the base language ("EN-GB" -> "en").

A model of one pair has no codes: its pair is read off the name it is served under, as `--names`
gives it ("en-de", "opus-mt-en-de"); a name that spells no pair is the model's code on both sides
(GET /languages shows it as such). Names are CLDR's, in English, from babel.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from babel.core import Locale, get_global

from heed.api import Translator

# A served name ending in a pair of ISO 639 codes: "en-de", "opus-mt-en-de", "dates_en_fr".
_PAIR_NAME = re.compile(r"(?:^|[-_./])([a-z]{2,3})[-_]([a-z]{2,3})$")
_NLLB_CODE = re.compile(r"^([a-z]{3})_([A-Z][a-z]{3})$")


@dataclass(frozen=True)
class Served:
    """One served model in public codes: `codes` public -> the model's own (None: a one-pair model,
    which takes no language codes), `sources`/`targets` the public codes it reads and writes."""

    name: str
    translator: Translator
    codes: Mapping[str, str | None]
    sources: tuple[str, ...]
    targets: tuple[str, ...]

    @property
    def many(self) -> bool:
        """Whether the model takes a language pair per request (a many-language model)."""
        return bool(self.translator.languages)


@dataclass(frozen=True)
class Route:
    """Where a request for a pair goes: the model, and the codes to give it (None: its own)."""

    served: Served
    source: str  # public codes
    target: str
    src_lang: str | None  # the model's own codes, for /v1's src_lang and tgt_lang
    tgt_lang: str | None


class UnknownLanguage(Exception):
    """A code no served model reads (`side` "source") or writes ("target")."""

    def __init__(self, code: str, side: str, known: Sequence[str]) -> None:
        shown = ", ".join(known[:12]) + (", ..." if len(known) > 12 else "")
        super().__init__(f"{code} is not supported as a {side} language; supported: {shown}")
        self.code, self.side = code, side


@dataclass
class Catalog:
    """Every served model's languages, and the model a pair goes to."""

    models: list[Served] = field(default_factory=list)
    _spellings: dict[str, dict[str, str]] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(cls, translators: Mapping[str, Translator]) -> Catalog:
        return cls([served(name, t) for name, t in translators.items()])

    def sources(self) -> list[str]:
        return list(dict.fromkeys(code for m in self.models for code in m.sources))

    def targets(self, source: str | None = None) -> list[str]:
        """The public codes some model writes (from `source`, when given)."""
        return list(dict.fromkeys(code for m in self.models if source is None or source in m.sources
                                  for code in m.targets if not (m.many and code == source)))

    def public(self, code: str, side: str) -> str:
        """The public code for `code` as a client gave it (either spelling, any case, a DeepL
        variant); UnknownLanguage when no model has it on that `side`."""
        spelled = self._spelled(side)
        for candidate in _spellings(code):
            if candidate in spelled:
                return spelled[candidate]
        raise UnknownLanguage(code, side, self.sources() if side == "source" else self.targets())

    def _spelled(self, side: str) -> dict[str, str]:
        """{a spelling, lower-cased: its public code} of every code of `side`, the first model's
        and code's first: made once a side (every request asks; a many-language model has
        hundreds of codes, and matching each against each per request took milliseconds)."""
        made = self._spellings.get(side)
        if made is None:
            known = set(self.sources() if side == "source" else self.targets())
            made = {}
            for m in self.models:
                for public, native in m.codes.items():
                    if public in known:
                        made.setdefault(public.lower(), public)
                        if native:
                            made.setdefault(native.lower(), public)
            self._spellings[side] = made
        return made

    def route(self, source: str, target: str) -> Route:
        """The model for a pair of public codes: a one-pair model of that pair first, else a
        many-language model with both; UnknownLanguage (on the target) when none has the pair."""
        found = [m for m in self.models if source in m.sources and target in m.targets and
                 (m.many and source != target or not m.many)]
        if not found:
            raise UnknownLanguage(target, "target", self.targets(source))
        best = min(found, key=lambda m: m.many)
        return Route(best, source, target, best.codes[source], best.codes[target])


def served(name: str, translator: Translator) -> Served:
    languages = translator.languages
    if not languages:
        pair = _PAIR_NAME.search(name)
        source, target = pair.groups() if pair else (name, name)
        return Served(name, translator, {source: None, target: None}, (source,), (target,))
    codes = public_codes(languages)
    return Served(name, translator, codes, tuple(codes), tuple(codes))


def public_codes(languages: Sequence[str]) -> dict[str, str]:
    """{public code: the model's code} for a many-language model's codes (see the module doc)."""
    proposed = {code: _two_letter(code) or code for code in languages}
    taken: dict[str, int] = {}
    for public in proposed.values():
        taken[public] = taken.get(public, 0) + 1
    return {(public if taken[public] == 1 else native): native for native, public in proposed.items()}


def _two_letter(code: str) -> str | None:
    """NLLB's "fra_Latn" -> "fr" when CLDR says French is written in Latin; an ISO 639-1 code as it is."""
    if re.fullmatch(r"[a-z]{2}", code):
        return code
    nllb = _NLLB_CODE.match(code)
    if nllb is None:
        return None
    language, script = nllb.groups()
    two = get_global("language_aliases").get(language)
    if not isinstance(two, str) or not re.fullmatch(r"[a-z]{2}", two):
        return None
    likely = str(get_global("likely_subtags").get(two, ""))
    return two if f"_{script}" in likely else None


def _spellings(code: str) -> list[str]:
    """The spellings a client's code may match, lower-cased, best first: itself; for a script
    variant, NLLB's code of that script ("zh-hant" -> "zho_hant"); then the base ("en-gb" -> "en")."""
    low = code.strip().lower()
    base, _, variant = low.replace("_", "-").partition("-")
    if not variant or len(base) not in (2, 3):
        return [low]
    scripts = [f"{three}_{variant}" for three in _three_letter(base)] if len(variant) == 4 else []
    return [low, *scripts, base]


@lru_cache(maxsize=256)
def _three_letter(two: str) -> tuple[str, ...]:
    """The ISO 639-3 codes CLDR aliases to a two-letter code ("zh" -> "zho", ...)."""
    return tuple(sorted(three for three, to in get_global("language_aliases").items()
                        if to == two and re.fullmatch(r"[a-z]{3}", three)))


@lru_cache(maxsize=1024)
def name_of(code: str) -> str:
    """English name of a code: "fr" -> "French", "zho_Hant" -> "Chinese (Traditional)"; the code
    itself when CLDR has no name for it (a one-pair model's served name)."""
    english = Locale("en")
    nllb = _NLLB_CODE.match(code)
    if nllb is not None:
        language, script = nllb.groups()
        base = english.languages.get(language) or english.languages.get(
            str(get_global("language_aliases").get(language, "")))
        return f"{base} ({english.scripts.get(script, script)})" if base else code
    return english.languages.get(code, code)
