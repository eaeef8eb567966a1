"""From the data config to id examples, shared by training and translation.

    DataConfig --load_corpora--> Corpora(train, dev, test) of Pair(src, tgt) strings
    train pairs --Codec.build--> tokenizers + vocabularies (trained on the training side only)
    Codec.encode_pairs --> [(src_ids, tgt_ids)]  ids without specials (batching adds BOS/EOS)

A `Codec` is everything that turns text into ids and back; it is saved beside the weights in
every model directory and checkpoint, so translation uses exactly what training used.
"""
from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from heed.config import DataConfig
from heed.data.corpus import Pair, load_pairs, normalize
from heed.data.dates import generate_dates
from heed.data.tokenize import Tokenizer, load_tokenizer, train_tokenizer
from heed.data.vocab import Vocab
from heed.errors import ConfigError, DataError, ModelDirError
from heed.files import atomic_write_text, read_model_json

Example = tuple[list[int], list[int]]
TOKENIZERS_FILE = "tokenizers.json"
SRC_VOCAB_FILE = "src.vocab.json"
TGT_VOCAB_FILE = "tgt.vocab.json"


@dataclass(frozen=True)
class Corpora:
    train: list[Pair]
    dev: list[Pair]
    test: list[Pair]


def load_corpora(data: DataConfig) -> Corpora:
    """Generate (task) or read (corpora) the train/dev/test pairs the config describes."""
    if data.task == "dates":
        d = data.dates
        splits = generate_dates(n_train=d.n_train, n_dev=d.n_dev, n_test=d.n_test, seed=d.seed,
                                languages=tuple(d.languages), verbose_forms=d.verbose_forms)
        return Corpora(list(splits.train), list(splits.dev), list(splits.test))
    assert data.train is not None  # the config validator guarantees it

    def read(corpus) -> list[Pair]:
        if corpus is None:
            return []
        return load_pairs(tsv=corpus.tsv, src=corpus.src, tgt=corpus.tgt, reverse=data.reverse)

    train = read(data.train)
    if data.split is not None:
        return split_corpus(train, dev=data.split.dev, test=data.split.test, seed=data.split.seed)
    return Corpora(train, read(data.dev), read(data.test))


def split_corpus(pairs: Sequence[Pair], *, dev: int, test: int, seed: int) -> Corpora:
    """Hold exactly `dev` and `test` pairs out of `pairs`, chosen by `random.Random(seed)`.

    Pairs are grouped by source sentence first, and a group goes wholly to one side: a held-out
    source never appears in training with another translation. When the last group taken is larger
    than needed, its extra pairs are dropped (from every side), so the counts are exact. Training
    pairs keep their corpus order."""
    groups: dict[str, list[int]] = {}
    for i, pair in enumerate(pairs):
        groups.setdefault(pair.src, []).append(i)
    if dev + test >= len(groups):
        raise ConfigError(f"asks for {dev} dev + {test} test pairs, but the corpus has only {len(groups)} "
                          "distinct source sentences; lower the split sizes", field="data.split")
    sources = list(groups)
    random.Random(seed).shuffle(sources)
    held: set[int] = set()

    def take(n: int) -> list[Pair]:
        out: list[Pair] = []
        while len(out) < n:
            members = groups[sources.pop()]
            held.update(members)
            out.extend(pairs[i] for i in members[: n - len(out)])
        return out

    test_pairs = take(test)
    dev_pairs = take(dev)
    return Corpora([p for i, p in enumerate(pairs) if i not in held], dev_pairs, test_pairs)


@dataclass(frozen=True)
class Codec:
    """Text <-> ids for both sides: a tokenizer and a vocabulary each."""

    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    src_vocab: Vocab
    tgt_vocab: Vocab

    @classmethod
    def build(cls, pairs: Sequence[Pair], data: DataConfig) -> "Codec":
        """Train tokenizers, then count vocabularies, on the training pairs only."""
        if not pairs:
            raise DataError("no training pairs to build tokenizers and vocabularies from")
        try:
            src_tok = train_tokenizer(data.tokenizer.src.kind, (p.src for p in pairs),
                                      vocab_size=data.tokenizer.src.vocab_size)
            tgt_tok = train_tokenizer(data.tokenizer.tgt.kind, (p.tgt for p in pairs),
                                      vocab_size=data.tokenizer.tgt.vocab_size)
        except ValueError as e:
            raise ConfigError(str(e), field="data.tokenizer") from None
        src_vocab = Vocab.build((src_tok.tokenize(p.src) for p in pairs),
                                min_freq=data.vocab.min_freq, max_size=data.vocab.max_size)
        tgt_vocab = Vocab.build((tgt_tok.tokenize(p.tgt) for p in pairs),
                                min_freq=data.vocab.min_freq, max_size=data.vocab.max_size)
        return cls(src_tok, tgt_tok, src_vocab, tgt_vocab)

    def src_tokens(self, text: str) -> list[str]:
        return self.src_tokenizer.tokenize(normalize(text))

    def tgt_tokens(self, text: str) -> list[str]:
        return self.tgt_tokenizer.tokenize(normalize(text))

    def encode_src(self, text: str) -> list[int]:
        """A source sentence -> ids without specials (batching appends EOS)."""
        return self.src_vocab.encode(self.src_tokens(text))

    def encode_pairs(self, pairs: Sequence[Pair]) -> list[Example]:
        """Pairs -> (src_ids, tgt_ids) without specials."""
        return [(self.src_vocab.encode(self.src_tokenizer.tokenize(p.src)),
                 self.tgt_vocab.encode(self.tgt_tokenizer.tokenize(p.tgt))) for p in pairs]

    def decode_tgt(self, ids: Sequence[int]) -> tuple[list[str], str]:
        """Target ids (specials allowed; stops at EOS) -> (tokens, detokenized text)."""
        tokens = self.tgt_vocab.decode(ids)
        return tokens, self.tgt_tokenizer.detokenize(tokens)

    def save(self, directory: str | Path) -> None:
        """tokenizers.json (specs), tokenizer files (SentencePiece models), src/tgt.vocab.json."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.src_tokenizer.save(directory, "src")
        self.tgt_tokenizer.save(directory, "tgt")
        specs = {"src": self.src_tokenizer.to_spec(), "tgt": self.tgt_tokenizer.to_spec()}
        atomic_write_text(directory / TOKENIZERS_FILE, json.dumps(specs, indent=2) + "\n")
        self.src_vocab.save(directory / SRC_VOCAB_FILE)
        self.tgt_vocab.save(directory / TGT_VOCAB_FILE)

    @classmethod
    def load(cls, directory: str | Path) -> "Codec":
        directory = Path(directory)
        path = directory / TOKENIZERS_FILE
        specs = read_model_json(path)
        try:
            src_vocab = Vocab.load(directory / SRC_VOCAB_FILE)
            tgt_vocab = Vocab.load(directory / TGT_VOCAB_FILE)
        except DataError as e:
            raise ModelDirError(str(e)) from None
        return cls(load_tokenizer(directory, "src", specs["src"]), load_tokenizer(directory, "tgt", specs["tgt"]),
                   src_vocab, tgt_vocab)
