"""What an alignment's target positions count, and how they map onto tokens: whitespace `words`
(the Pharaoh convention), or the target's `chars` without the spaces (what the generated dates
task's gold alignments are written in). Used where links meet tokens: heed.explain (reading
attention) and heed.data.supervision (training on links)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from heed.data.tokenize import SPACE

Units = Literal["words", "chars"]


def unit_count(text: str, units: Units) -> int:
    """How many target units `text` has: whitespace words, or characters without the spaces."""
    words = text.split()
    return len(words) if units == "words" else len("".join(words))


def char_token_index(tgt_tokens: Sequence[str], tgt_text: str) -> list[int]:
    """For each non-space character of `tgt_text`, the index of the target token that writes it.

    A token's characters are its text without the word-start mark "▁" (the char tokenizer's space
    token has none). ValueError when the tokens do not spell the text (a token the tokenizer made
    up, such as "<unk>")."""
    index: list[int] = []
    for k, token in enumerate(tgt_tokens):
        index.extend([k] * len(token.replace(SPACE, "")))
    spelled = "".join(t.replace(SPACE, "") for t in tgt_tokens)
    if spelled != tgt_text.replace(" ", ""):
        raise ValueError(f"the target tokens {list(tgt_tokens)[:8]}... do not spell {tgt_text!r} character "
                         "for character, so they cannot be aligned in characters; use words")
    return index
