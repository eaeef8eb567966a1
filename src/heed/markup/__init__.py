"""Inline markup (HTML, XML) carried across a translation by the model's alignment: parse a
fragment into sentences (document.py), place each inline element on the target words its source
words align to (placement.py), and put it back together (carry.py)."""
from heed.markup.carry import carry, carry_many, target_units, translate_markup
from heed.markup.document import Marked, MarkupError, parse
from heed.markup.placement import Span, place

__all__ = ["Marked", "MarkupError", "Span", "carry", "carry_many", "parse", "place", "target_units", "translate_markup"]
