"""Which language a text is in, for `source: auto` and POST /detect when a many-language model (or
several models of one pair from different languages) could read it.

Lingua (lingua-language-detector, the `detect` extra) ships its n-gram models inside its wheel, so
nothing is downloaded at run time. It is told only the languages the served models read: fewer
candidates, fewer mistakes, less memory (its high-accuracy models take about 10 MB a language, loaded
on the first detection). Without it, a detection is a `NoDetector` naming the extra to install.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from heed.errors import install_hint


class NoDetector(Exception):
    """No language identifier is installed (or none knows the served languages)."""


@dataclass(frozen=True)
class Guess:
    """A language (a public code of the served models) and the detector's confidence in percent."""

    language: str
    confidence: float


class Detector:
    """Lingua over the public codes `codes` (those it has no model of are never guessed)."""

    def __init__(self, codes: Sequence[str]) -> None:
        self.codes = list(dict.fromkeys(codes))
        self._lock = threading.Lock()
        self._built: Any = None

    def detect(self, text: str, top: int = 3) -> list[Guess]:
        """The `top` likeliest languages of `text`, best first (blocking: call it off the event loop)."""
        detector, by_iso = self._detector()
        values = detector.compute_language_confidence_values(text)
        isos = [(v.language.iso_code_639_1.name.lower(), v.value) for v in values]
        guesses = [Guess(by_iso[iso], round(100.0 * value, 2)) for iso, value in isos if iso in by_iso][:top]
        return guesses or [Guess(self.codes[0], 0.0)]

    def _detector(self) -> tuple[Any, dict[str, str]]:
        with self._lock:
            if self._built is None:
                try:
                    from lingua import Language, LanguageDetectorBuilder
                except ImportError:
                    raise NoDetector(f"detecting a language needs lingua-language-detector: "
                                     f"{install_hint('detect')}") from None
                known = {lang.iso_code_639_1.name.lower() for lang in Language.all()}
                by_iso = {code.lower(): code for code in self.codes if code.lower() in known}
                languages = [lang for lang in Language.all() if lang.iso_code_639_1.name.lower() in by_iso]
                if not languages:
                    raise NoDetector("the language identifier knows none of the served models' languages; give "
                                     "the source language")
                builder = (LanguageDetectorBuilder.from_languages(*languages) if len(languages) > 1
                           else LanguageDetectorBuilder.from_all_languages())
                self._built = (builder.build(), by_iso)
            return self._built
