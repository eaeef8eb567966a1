"""The extended vocabulary of a copy model (See et al. 2017, §2.2): a sentence's source tokens that
the target vocabulary lacks get temporary target ids V, V+1, ... (V = len(target vocabulary)), so
the pointer-generator can put probability on them and decoding can write them out.

Ids, for a target vocabulary of V tokens and a source vocabulary of S:

- target side: 0 .. V-1 the target vocabulary; V + k the sentence's k-th *copyable unknown*, the
  k-th distinct source token (in order of first appearance) whose string the target vocabulary
  lacks. A reference token that is unknown to the target vocabulary but occurs in the source is
  encoded as its V + k (so the loss teaches copying it); any other unknown stays <unk>.
- source side (what the model's encoder is given, `source_ids`): 0 .. S-1 the source vocabulary;
  S + t a token outside the source vocabulary whose string is target token t; S + V + j a token in
  neither vocabulary, j numbering the sentence's distinct such tokens from 0. The encoder reads
  every id >= S as <unk>; the pointer-generator (heed.nn.rnn.copy) recovers each position's extended
  target id from these ids alone, with the `source_to_target` table, so search needs nothing but
  the source ids.

Tokens are matched by string, after each side's own tokenizer: with word tokens a name is copied
whole; with char tokens, characters; with SentencePiece (bpe, unigram) the source's pieces,
which are copied one by one: a piece the target vocabulary lacks is copyable, and one it has (most
pieces of a shared alphabet) is produced by the vocabulary or by attention to it alike.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from heed.data.vocab import BOS, EOS, PAD, SPECIALS, UNK, Vocab


def copyable_unknowns(src_tokens: Sequence[str], tgt_vocab: Vocab) -> tuple[str, ...]:
    """The distinct source tokens the target vocabulary lacks, in order of first appearance:
    the strings of the extended ids V, V+1, ..."""
    seen: dict[str, None] = {}
    for token in src_tokens:
        if tgt_vocab.encode([token])[0] == UNK:  # text reading "<s>" or "<unk>" is an unknown word too
            seen.setdefault(token, None)
    return tuple(seen)


def source_ids(src_tokens: Sequence[str], src_vocab: Vocab, tgt_vocab: Vocab) -> list[int]:
    """Source tokens -> the copy model's source ids (module doc), no specials added."""
    src_size, tgt_size = len(src_vocab), len(tgt_vocab)
    unknown: dict[str, int] = {}
    ids = []
    for token in src_tokens:
        src_id = src_vocab.encode([token])[0]
        if src_id != UNK:
            ids.append(src_id)
            continue
        tgt_id = tgt_vocab.encode([token])[0]
        if tgt_id != UNK:
            ids.append(src_size + tgt_id)
        else:
            ids.append(src_size + tgt_size + unknown.setdefault(token, len(unknown)))
    return ids


def source_to_target(src_vocab: Vocab, tgt_vocab: Vocab) -> list[int]:
    """For each source vocabulary id, the target id of the same string, or -1 where the target
    vocabulary lacks it. The specials map to themselves (<pad>, <s>, </s>, <unk>)."""
    table = [PAD, BOS, EOS, UNK]
    for token in src_vocab.tokens[len(SPECIALS):]:
        tgt_id = tgt_vocab.encode([token])[0]
        table.append(-1 if tgt_id == UNK else tgt_id)
    return table


@dataclass(frozen=True)
class ExtendedVocab:
    """One source sentence's view of the target vocabulary: `target` plus `unknowns`, the copyable
    source tokens it lacks, with ids len(target) + k."""

    target: Vocab
    unknowns: tuple[str, ...]

    @classmethod
    def of(cls, src_tokens: Sequence[str], tgt_vocab: Vocab) -> ExtendedVocab:
        return cls(tgt_vocab, copyable_unknowns(src_tokens, tgt_vocab))

    def __len__(self) -> int:
        return len(self.target) + len(self.unknowns)

    def encode(self, tokens: Iterable[str]) -> list[int]:
        """Target tokens -> extended ids: an unknown token that the source holds gets its
        temporary id, any other unknown <unk>."""
        index = {token: len(self.target) + k for k, token in enumerate(self.unknowns)}
        unk = self.target.unk_id
        return [index.get(token, unk) if token_id == unk else token_id
                for token, token_id in ((t, self.target.encode([t])[0]) for t in tokens)]

    def lookup(self, token_id: int) -> str:
        """The token of an extended id: a target token, or the source token it copies."""
        if token_id >= len(self.target):
            k = token_id - len(self.target)
            if k >= len(self.unknowns):
                raise IndexError(f"token id {token_id} outside the extended vocabulary of size {len(self)}")
            return self.unknowns[k]
        return self.target.lookup(token_id)

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Extended ids -> tokens, as Vocab.decode: stop at the first EOS, drop PAD and BOS."""
        return [self.lookup(i) for i in self.target.text_ids(ids)]
