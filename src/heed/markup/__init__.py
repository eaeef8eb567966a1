"""Markup carried across a translation by the model's alignment. Inline markup (HTML, XML): parse
a fragment into sentences (document.py), place each inline element on the target words its source
words align to (placement.py), and put it back together (carry.py). Subtitles (SRT, WebVTT): read
and write cues (cues.py), translate the sentences they make and split each translation back over
its cues (subtitles.py)."""
from heed.markup.carry import carry, carry_many, target_units, translate_documents, translate_markup
from heed.markup.document import Marked, MarkupError, parse
from heed.markup.placement import Span, place
from heed.markup.subtitles import Layout, translate_subtitle_file, translate_subtitles

__all__ = ["Layout", "Marked", "MarkupError", "Span", "carry", "carry_many", "parse", "place", "target_units",
           "translate_documents", "translate_markup", "translate_subtitle_file", "translate_subtitles"]
