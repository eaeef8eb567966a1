"""Vocabulary: token strings <-> integer ids, with four specials.

A vocabulary heed builds puts them first:

    <pad> = 0   padding, never a real token (batching pads with it)
    <s>   = 1   beginning of sentence, the decoder's first input
    </s>  = 2   end of sentence
    <unk> = 3   any token not in the vocabulary

and is saved as JSON, one list of tokens, id = position. A pretrained model's vocabulary
(heed.nn.transformer.convert) keeps that model's ids, whatever they are: OPUS-MT's has </s> = 0,
<unk> = 1 and <pad> = the last id, which is also its decoder's first input. Its `Specials` say
which id is which, and it is saved as {"tokens": [...], "specials": {"pad": .., "bos": .., ...}}.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from heed.errors import DataError
from heed.plumbing.files import atomic_open, open_regular

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS: tuple[str, ...] = ("<pad>", "<s>", "</s>", "<unk>")


class Specials(NamedTuple):
    """Which ids of a vocabulary are its specials. `bos` is the decoder's first input: a pretrained
    model may start from another special (OPUS-MT from <pad>, NLLB from </s>), so it may equal one."""

    pad: int = PAD
    bos: int = BOS
    eos: int = EOS
    unk: int = UNK


HEED_SPECIALS = Specials()


class Vocab:
    """An ordered token list; `encode` maps tokens to ids, `decode` maps ids back."""

    def __init__(self, tokens: Sequence[str], specials: Specials | None = None) -> None:
        """`tokens` hold no duplicates. Without `specials` they must start with the four SPECIALS
        (heed's own layout); with them (a pretrained model's vocabulary) the ids are theirs."""
        if specials is None and tuple(tokens[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"a vocabulary must start with {list(SPECIALS)}, got {list(tokens[:4])}")
        if len(set(tokens)) != len(tokens):
            dupes = sorted(t for t, c in Counter(tokens).items() if c > 1)
            raise ValueError(f"duplicate tokens in vocabulary: {dupes[:5]}")
        if specials is not None and not all(0 <= i < len(tokens) for i in specials):
            raise ValueError(f"special ids {dict(specials._asdict())} outside a vocabulary of {len(tokens)} tokens")
        self._tokens: list[str] = list(tokens)
        self.specials = HEED_SPECIALS if specials is None else Specials(*specials)
        # Text that happens to read "<s>" or "<pad>" is an unknown word, not a control id.
        control = set(self.specials)
        self._ids: dict[str, int] = {t: i for i, t in enumerate(self._tokens) if i not in control}

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
        """Tokens -> ids, unknown tokens -> <unk>; optionally wrapped in BOS ... EOS."""
        unk = self.specials.unk
        ids = [self._ids.get(t, unk) for t in tokens]
        if add_bos:
            ids.insert(0, self.specials.bos)
        if add_eos:
            ids.append(self.specials.eos)
        return ids

    def decode(self, ids: Iterable[int], *, strip_specials: bool = True) -> list[str]:
        """Ids -> tokens. With `strip_specials`, stop at the first EOS and drop PAD and BOS
        (UNK stays, shown as "<unk>")."""
        return [self.lookup(i) for i in (self.text_ids(ids) if strip_specials else map(int, ids))]

    def text_ids(self, ids: Iterable[int]) -> list[int]:
        """The ids before the first EOS, without PAD and BOS: those that write text (<unk> included)."""
        out = []
        eos, skipped = self.specials.eos, {self.specials.pad, self.specials.bos}
        for i in map(int, ids):
            if i == eos:
                break
            if i not in skipped:
                out.append(i)
        return out

    def lookup(self, token_id: int) -> str:
        """The token with this id."""
        if not 0 <= token_id < len(self._tokens):
            raise IndexError(f"token id {token_id} outside vocabulary of size {len(self._tokens)}")
        return self._tokens[token_id]

    @property
    def tokens(self) -> list[str]:
        """All tokens, position = id (a copy)."""
        return list(self._tokens)

    pad_id = property(lambda self: self.specials.pad, doc="Id of <pad> (0 in heed's own vocabularies).")
    bos_id = property(lambda self: self.specials.bos, doc="The decoder's first input (<s>, 1 in heed's own).")
    eos_id = property(lambda self: self.specials.eos, doc="Id of </s> (2 in heed's own).")
    unk_id = property(lambda self: self.specials.unk, doc="Id of <unk> (3 in heed's own).")

    @property
    def control_ids(self) -> frozenset[int]:
        """The ids that are never text: padding, the decoder's first input, the end."""
        return frozenset((self.specials.pad, self.specials.bos, self.specials.eos))

    def __len__(self) -> int:
        return len(self._tokens)

    def __contains__(self, token: object) -> bool:
        return token in self._ids or any(token == self._tokens[i] for i in self.specials)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and self._tokens == other._tokens and self.specials == other.specials

    def __hash__(self) -> int:
        return hash((tuple(self._tokens), self.specials))

    def __repr__(self) -> str:
        return f"Vocab({len(self)} tokens: {self._tokens[4:9]}...)"

    @property
    def ordinary(self) -> list[str]:
        """Every token that is not a special, in id order."""
        specials = set(self.specials)
        return [t for i, t in enumerate(self._tokens) if i not in specials]

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the vocabulary as JSON (temp file + os.replace, so a crash leaves the old file):
        the token list, or with a pretrained model's special ids {"tokens": [...], "specials": {...}}."""
        data: Any = (self._tokens if self.specials == HEED_SPECIALS
                     else {"tokens": self._tokens, "specials": self.specials._asdict()})
        with atomic_open(path) as f:
            json.dump(data, f, ensure_ascii=False, indent=0)
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
        specials = None
        if isinstance(tokens, dict):  # a pretrained model's: its own special ids
            given = tokens.get("specials")
            if not isinstance(given, dict) or set(given) != set(Specials._fields) \
                    or not all(isinstance(i, int) for i in given.values()):
                raise DataError(f"not a heed vocabulary: \"specials\" must give the ids of "
                                f"{', '.join(Specials._fields)}", path=path)
            specials, tokens = Specials(**given), tokens.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise DataError("not a heed vocabulary: expected a JSON list of token strings", path=path)
        try:
            return cls(tokens, specials)
        except ValueError as e:
            raise DataError(str(e), path=path) from None
