"""Vocabulary: token strings <-> integer ids, with four fixed specials.

    <pad> = 0   padding, never a real token (batching pads with 0)
    <s>   = 1   beginning of sentence, the decoder's first input
    </s>  = 2   end of sentence
    <unk> = 3   any token not in the vocabulary

Saved as JSON: one list of tokens, the specials first, id = position.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Sequence

from heed.errors import DataError
from heed.plumbing.files import atomic_open, open_regular

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS: tuple[str, ...] = ("<pad>", "<s>", "</s>", "<unk>")


class Vocab:
    """An ordered token list; `encode` maps tokens to ids, `decode` maps ids back."""

    def __init__(self, tokens: Sequence[str]) -> None:
        """`tokens` must start with the four SPECIALS and hold no duplicates."""
        if tuple(tokens[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"a vocabulary must start with {list(SPECIALS)}, got {list(tokens[:4])}")
        if len(set(tokens)) != len(tokens):
            dupes = sorted(t for t, c in Counter(tokens).items() if c > 1)
            raise ValueError(f"duplicate tokens in vocabulary: {dupes[:5]}")
        self._tokens: list[str] = list(tokens)
        # Text that happens to read "<s>" or "<pad>" is an unknown word, not a control id.
        self._ids: dict[str, int] = {t: i for i, t in enumerate(self._tokens) if i >= len(SPECIALS)}

    @classmethod
    def build(
        cls, token_lists: Iterable[list[str]], *, min_freq: int = 1, max_size: int | None = None
    ) -> Vocab:
        """Count tokens and keep those seen at least `min_freq` times, the `max_size` most frequent
        (specials not counted in `max_size`). Order: frequency descending, then token, so the same
        data always gives the same ids."""
        counts: Counter[str] = Counter()
        for tokens in token_lists:
            counts.update(tokens)
        return cls.from_counts(counts, min_freq=min_freq, max_size=max_size)

    @classmethod
    def from_counts(cls, counts: Counter[str], *, min_freq: int = 1, max_size: int | None = None) -> Vocab:
        """`build` from token counts already made (e.g. counted while streaming a corpus)."""
        if min_freq < 1:
            raise ValueError(f"min_freq must be >= 1, got {min_freq}")
        if max_size is not None and max_size < 0:
            raise ValueError(f"max_size must be >= 0 or None, got {max_size}")
        kept = sorted((t for t, c in counts.items() if c >= min_freq and t not in SPECIALS),
                      key=lambda t: (-counts[t], t))
        if max_size is not None:
            kept = kept[:max_size]
        return cls([*SPECIALS, *kept])

    def encode(self, tokens: Iterable[str], *, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Tokens -> ids, unknown tokens -> UNK; optionally wrapped in BOS ... EOS."""
        ids = [self._ids.get(t, UNK) for t in tokens]
        if add_bos:
            ids.insert(0, BOS)
        if add_eos:
            ids.append(EOS)
        return ids

    def decode(self, ids: Iterable[int], *, strip_specials: bool = True) -> list[str]:
        """Ids -> tokens. With `strip_specials`, stop at the first EOS and drop PAD and BOS
        (UNK stays, shown as "<unk>")."""
        tokens = []
        for i in ids:
            i = int(i)
            if strip_specials:
                if i == EOS:
                    break
                if i in (PAD, BOS):
                    continue
            tokens.append(self.lookup(i))
        return tokens

    def lookup(self, token_id: int) -> str:
        """The token with this id."""
        if not 0 <= token_id < len(self._tokens):
            raise IndexError(f"token id {token_id} outside vocabulary of size {len(self._tokens)}")
        return self._tokens[token_id]

    @property
    def tokens(self) -> list[str]:
        """All tokens, position = id (a copy)."""
        return list(self._tokens)

    pad_id = property(lambda self: PAD, doc="Id of <pad> (0).")
    bos_id = property(lambda self: BOS, doc="Id of <s> (1).")
    eos_id = property(lambda self: EOS, doc="Id of </s> (2).")
    unk_id = property(lambda self: UNK, doc="Id of <unk> (3).")

    def __len__(self) -> int:
        return len(self._tokens)

    def __contains__(self, token: object) -> bool:
        return token in self._ids or token in SPECIALS

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and self._tokens == other._tokens

    def __hash__(self) -> int:
        return hash(tuple(self._tokens))

    def __repr__(self) -> str:
        return f"Vocab({len(self)} tokens: {self._tokens[4:9]}...)"

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the token list as JSON (temp file + os.replace, so a crash leaves the old file)."""
        with atomic_open(path) as f:
            json.dump(self._tokens, f, ensure_ascii=False, indent=0)
            f.write("\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Vocab:
        """Read a vocabulary written by `save`."""
        try:
            with open_regular(path, "r", encoding="utf-8") as f:
                tokens = json.load(f)
        except FileNotFoundError:
            raise DataError("vocabulary file not found", path=path) from None
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            line = getattr(e, "lineno", None)
            raise DataError(f"not a heed vocabulary (JSON list of tokens): {e}", path=path, line=line) from None
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise DataError("not a heed vocabulary: expected a JSON list of token strings", path=path)
        try:
            return cls(tokens)
        except ValueError as e:
            raise DataError(str(e), path=path) from None
