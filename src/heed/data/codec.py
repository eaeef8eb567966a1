"""From the data config to id examples, shared by training and translation.

    DataConfig --load_corpora--> Corpora(train, dev, test) of Pair(src, tgt) strings
    train pairs --Codec.build--> tokenizers + vocabularies (trained on the training side only)
    Codec.encode_pairs --> [(src_ids, tgt_ids)]  ids without specials (batching adds BOS/EOS)

A `Codec` is everything that turns text into ids and back; it is saved beside the weights in
every model directory and checkpoint, so translation uses exactly what training used.

With `data.split:` the held-out dev and test pairs exist nowhere on disk; `write_heldout` writes
them as line-aligned files, so `heed evaluate` and `heed compare` can score on them.
"""
from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from heed.config import CORPUS_PATH_KEYS, CORPUS_SPLITS, DATA_ROOT_ENV, CorpusConfig, DataConfig, TokenizerConfig
from heed.data.corpus import Pair, normalize, read_parallel, read_tsv
from heed.data.dates import generate_dates_aligned
from heed.data.extended import ExtendedVocab, source_ids, source_to_target
from heed.data.names import generate_names
from heed.data.prepared import PreparedCorpus, verify_ids
from heed.data.tokenize import SentencePieceTokenizer, Tokenizer, load_tokenizer, spm_model_path, train_tokenizer
from heed.data.vocab import SPECIALS, Vocab
from heed.errors import ConfigError, DataError, ModelDirError
from heed.plumbing.files import atomic_open, atomic_write_text, read_model_json

Example = tuple[list[int], list[int]]
TOKENIZERS_FILE = "tokenizers.json"
SRC_VOCAB_FILE = "src.vocab.json"
TGT_VOCAB_FILE = "tgt.vocab.json"


@dataclass(frozen=True)
class Corpora:
    train: list[Pair]
    dev: list[Pair]
    test: list[Pair]
    dev_gold: DevGold | None = None  # gold alignments of dev, when the task has them or data.dev.align gives them
    train_gold: DevGold | None = None  # a generated task's links of its training pairs (guided alignment)
    train_lines: list[int] | None = None  # with data.split: each training pair's 0-based line in data.train
    train_read: int | None = None  # with data.split: the pairs read from data.train (its lines)


def _word_gold(links: list[tuple[set[tuple[int, int]], set[tuple[int, int]]]]) -> DevGold:
    """Per pair (sure, possible) links as a DevGold over words."""
    return DevGold([sure for sure, _ in links], [possible for _, possible in links], "words")


@dataclass(frozen=True)
class DevGold:
    """Gold alignments of the dev pairs, one (sure, possible) set pair each; `units`: what target
    positions count ("words", or "chars" for the dates task)."""

    sure: list[set[tuple[int, int]]]
    possible: list[set[tuple[int, int]]]
    units: Literal["words", "chars"]


# Pairs read into memory to train from text, at most: each costs a few hundred bytes as strings and
# as many again as ids, so 10M pairs already take about 10 GB. Larger corpora go through
# `heed prepare` (memory-mapped shards, read a batch at a time).
MAX_TEXT_PAIRS = 10_000_000
READ_REPORT_SECONDS = 5.0  # a corpus that takes longer than this to read says so, this often
READ_CLOCK_EVERY = 10_000  # pairs between looks at the clock

ReadProgress = Callable[[str, int], None]  # (what is being read, pairs so far)


def load_corpora(data: DataConfig, *, progress: ReadProgress | None = None) -> Corpora:
    """Generate (task) or read (corpora) the train/dev/test pairs the config describes.
    `progress(what, pairs)` hears every READ_REPORT_SECONDS of reading a corpus (a quick read says
    nothing); a training corpus of more than MAX_TEXT_PAIRS is a DataError pointing to `heed prepare`."""
    from heed.data.pharaoh import parse_gold_pharaoh, read_gold_for

    if data.task == "dates":
        d = data.dates
        splits, golds = generate_dates_aligned(n_train=d.n_train, n_dev=d.n_dev, n_test=d.n_test, seed=d.seed,
                                               languages=tuple(d.languages), verbose_forms=d.verbose_forms)
        dev_gold = DevGold([set(s) for s, _ in golds.dev], [set(p) for _, p in golds.dev], "chars")
        train_gold = DevGold([set(s) for s, _ in golds.train], [set(p) for _, p in golds.train], "chars")
        return Corpora(list(splits.train), list(splits.dev), list(splits.test), dev_gold, train_gold)
    if data.task == "names":
        n = data.names
        names = generate_names(n_train=n.n_train, n_dev=n.n_dev, n_test=n.n_test, seed=n.seed,
                               train_names=n.train_names, heldout_names=n.heldout_names)
        links = [parse_gold_pharaoh(e.gold) for e in names.dev]
        train_links = [parse_gold_pharaoh(e.gold) for e in names.train]
        return Corpora([e.pair for e in names.train], [e.pair for e in names.dev], [e.pair for e in names.test],
                       _word_gold(links) if links else None, _word_gold(train_links))
    check_corpus_files(data)

    def read(corpus: CorpusConfig | None, split: str) -> list[Pair]:
        if corpus is None:
            return []
        what = f"data.{split} ({corpus.tsv or corpus.src})"
        pairs: list[Pair] = []
        said = time.monotonic()
        for pair in iter_pairs(corpus, reverse=data.reverse):
            pairs.append(pair)
            if progress is not None and len(pairs) % READ_CLOCK_EVERY == 0 \
                    and time.monotonic() - said >= READ_REPORT_SECONDS:
                said = time.monotonic()
                progress(what, len(pairs))
            if len(pairs) > MAX_TEXT_PAIRS:
                raise DataError(f"more than {MAX_TEXT_PAIRS:,} pairs, more than training from text holds in "
                                "memory; prepare the corpus once (`heed prepare CONFIG -o SHARDS`) and train "
                                "from its shards (data.prepared: SHARDS), which reads a batch at a time", path=what)
        return pairs

    train = read(data.train, "train")  # none with data.prepared: training reads the shards (open_prepared)
    if data.split is not None:
        assert data.train is not None  # the config validator guarantees it
        # The file the source sentences (after `reverse`) come from: the one the counts are about.
        source = data.train.tsv or (data.train.tgt if data.reverse else data.train.src)
        return split_corpus(train, dev=data.split.dev, test=data.split.test, seed=data.split.seed,
                            source=str(source))
    dev = read(data.dev, "dev")
    gold: DevGold | None = None
    if data.dev is not None and data.dev.align is not None:
        sizes = [(len(p.src.split()), len(p.tgt.split())) for p in dev]
        if data.reverse:  # the file aligns the corpus as written: its source is now the target
            sure, possible = read_gold_for(data.dev.align, [(t, s) for s, t in sizes], sides="data.dev")
            sure, possible = ([{(j, i) for i, j in links} for links in side] for side in (sure, possible))
        else:
            sure, possible = read_gold_for(data.dev.align, sizes, sides="data.dev")
        gold = DevGold(sure, possible, "words")
    return Corpora(train, dev, read(data.test, "test"), gold)


def write_task(data: DataConfig, directory: str | os.PathLike[str]) -> dict[str, Path]:
    """A generated task's splits as files in `directory`, each written whole or not at all:
    {train,dev,test}.src / .tgt (a sentence a line) and {train,dev,test}.align, the gold alignments
    by construction (Pharaoh, i-j sure and i?j possible; dates: source words x target characters,
    for `heed align --tgt-units chars`; names: words x words). Returns {file name: path}."""
    from heed.data.pharaoh import gold_pharaoh

    if data.task == "dates":
        d = data.dates
        splits, golds = generate_dates_aligned(n_train=d.n_train, n_dev=d.n_dev, n_test=d.n_test, seed=d.seed,
                                               languages=tuple(d.languages), verbose_forms=d.verbose_forms)
        named = {name: (pairs, [gold_pharaoh(*g) for g in gold])
                 for name, pairs, gold in zip(splits._fields, splits, golds)}
    elif data.task == "names":
        n = data.names
        names = generate_names(n_train=n.n_train, n_dev=n.n_dev, n_test=n.n_test, seed=n.seed,
                               train_names=n.train_names, heldout_names=n.heldout_names)
        named = {name: ([e.pair for e in split], [e.gold for e in split])
                 for name, split in zip(names._fields, names)}
    else:
        raise ValueError(f"data.task must be dates or names to write a task's files, got {data.task!r}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for name, (pairs, gold) in named.items():
        for suffix, lines in (("src", [p.src for p in pairs]), ("tgt", [p.tgt for p in pairs]), ("align", gold)):
            path = directory / f"{name}.{suffix}"
            atomic_write_text(path, "".join(line + "\n" for line in lines))
            written[path.name] = path
    return written


def iter_pairs(corpus: CorpusConfig, *, reverse: bool) -> Iterator[Pair]:
    """Stream a corpus's pairs (one line in memory at a time); `reverse` swaps the sides."""
    if corpus.tsv is not None:
        return read_tsv(corpus.tsv, reverse=reverse)
    assert corpus.src is not None and corpus.tgt is not None  # the config validator guarantees it
    return read_parallel(corpus.tgt, corpus.src) if reverse else read_parallel(corpus.src, corpus.tgt)


def check_corpus_files(data: DataConfig) -> None:
    """A missing corpus file is a DataError saying how to point the config at its data, raised
    before any file is read (a missing test file should not wait for minutes of reading train)."""
    for split in CORPUS_SPLITS:
        corpus = getattr(data, split)
        for key in CORPUS_PATH_KEYS:
            path = None if corpus is None else getattr(corpus, key)
            if path is None:
                continue
            try:
                path.stat()
            except (FileNotFoundError, NotADirectoryError):
                raise DataError(f"no such file (data.{split}.{key}); a config's relative corpus paths resolve "
                                f"against ${DATA_ROOT_ENV}, else data.root, else the config file's folder: for data "
                                f"kept elsewhere give its folder with --set data.root=DIR or {DATA_ROOT_ENV}=DIR",
                                path=path) from None
            except (OSError, ValueError):
                pass  # the reader names what is wrong with it


def split_corpus(pairs: Sequence[Pair], *, dev: int, test: int, seed: int, source: str = "the corpus") -> Corpora:
    """Hold exactly `dev` and `test` pairs out of `pairs`, chosen by `random.Random(seed)`.

    Pairs are grouped by source sentence first, and a group goes wholly to one side: a held-out
    source never appears in training with another translation. When the last group taken is larger
    than needed, its extra pairs are dropped (from every side), so the counts are exact. Training
    pairs keep their corpus order. `source` names the corpus file in errors."""
    groups: dict[str, list[int]] = {}
    for i, pair in enumerate(pairs):
        groups.setdefault(pair.src, []).append(i)
    if dev + test >= len(groups):
        raise ConfigError(f"asks for {dev} dev + {test} test pairs, but {source} has only {len(groups)} distinct "
                          "source sentences (at least one must stay for training); lower the split sizes",
                          field="data.split")
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
    lines = [i for i in range(len(pairs)) if i not in held]
    return Corpora([pairs[i] for i in lines], dev_pairs, test_pairs, train_lines=lines, train_read=len(pairs))


HELDOUT_SPLITS = ("dev", "test")


def write_heldout(corpora: Corpora, directory: str | Path) -> dict[str, Path]:
    """Write the dev and test pairs as line-aligned files `<directory>/{dev,test}.{src,tgt}`
    (a split with no pairs gets no files), each atomically. Returns {"dev.src": path, ...}.

    The pairs are normalized and in the model's direction (after `data.reverse`), so
    `heed evaluate MODEL --src dev.src --ref dev.tgt` scores exactly what was held out. Normalized
    text holds no newline or tab (they are whitespace, collapsed), so each pair is one line."""
    directory = Path(directory)
    written: dict[str, Path] = {}
    for split in HELDOUT_SPLITS:
        pairs: list[Pair] = getattr(corpora, split)
        if not pairs:
            continue
        for side in ("src", "tgt"):
            path = directory / f"{split}.{side}"
            with atomic_open(path) as f:
                f.writelines(getattr(p, side) + "\n" for p in pairs)
            written[f"{split}.{side}"] = path
    return written


def train_side_tokenizer(side: str, spec: TokenizerConfig, texts: Iterable[str], *,
                         warn: Callable[[str], None] | None = None) -> Tokenizer:
    """Train the `side` ("src" or "tgt") tokenizer that `spec` (data.tokenizer.<side>) asks for on
    `texts`. A spec the corpus cannot meet is a ConfigError naming data.tokenizer.<side>; a
    SentencePiece vocabulary smaller than `vocab_size`, because the corpus supports no more pieces,
    is told to `warn`. Shared by `Codec.build` and heed.data.prepare's one-pass `build_codec`."""
    try:
        tokenizer = train_tokenizer(spec.kind, texts, vocab_size=spec.vocab_size)
    except ValueError as e:
        raise ConfigError(str(e), field=f"data.tokenizer.{side}") from None
    if warn is not None and isinstance(tokenizer, SentencePieceTokenizer) and tokenizer.num_pieces < spec.vocab_size:
        warn(f"data.tokenizer.{side}.vocab_size is {spec.vocab_size}, but the training corpus supports only "
             f"{tokenizer.num_pieces} {spec.kind} pieces: the {side} tokenizer has {tokenizer.num_pieces} "
             f"(set vocab_size to {tokenizer.num_pieces} or less to silence this)")
    return tokenizer


def side_groups(data: DataConfig) -> list[tuple[str, ...]]:
    """The sides that share a tokenizer and a vocabulary: both with data.shared_vocab, else each its own."""
    return [("src", "tgt")] if data.shared_vocab else [("src",), ("tgt",)]


def train_group(sides: tuple[str, ...], pairs: Sequence[Pair], data: DataConfig, *,
                warn: Callable[[str], None] | None = None) -> tuple[Tokenizer, Vocab]:
    """The tokenizer (data.tokenizer.<sides[0]>) and vocabulary of `sides` (a `side_groups` entry),
    trained and counted on those sides' texts of `pairs`."""
    texts = [getattr(p, side) for p in pairs for side in sides]
    tokenizer = train_side_tokenizer(sides[0], getattr(data.tokenizer, sides[0]), texts, warn=warn)
    vocab = Vocab.build((tokenizer.tokenize(text) for text in texts),
                        min_freq=data.vocab.min_freq, max_size=data.vocab.max_size)
    return tokenizer, vocab


@dataclass(frozen=True)
class Codec:
    """Text <-> ids for both sides: a tokenizer and a vocabulary each.

    For a copy model (`copy`, the config's model.copy) ids follow heed.data.extended: a source
    token outside the source vocabulary keeps a name the model can copy, and a target token the
    target vocabulary lacks but the source holds gets its sentence's temporary id; decoding writes
    a temporary id as the source token it copies."""

    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    src_vocab: Vocab
    tgt_vocab: Vocab
    copy: bool = False

    @classmethod
    def build(cls, pairs: Sequence[Pair], data: DataConfig, *,
              warn: Callable[[str], None] | None = None, copy: bool = False) -> Codec:
        """Train tokenizers, then count vocabularies, on the training pairs only.

        `warn(message)` hears of what the config asked for and did not get: a SentencePiece
        vocabulary smaller than `vocab_size` because the corpus supports no more pieces."""
        if not pairs:
            raise DataError("no training pairs to build tokenizers and vocabularies from")
        built: dict[str, tuple[Tokenizer, Vocab]] = {}
        for sides in side_groups(data):  # with shared_vocab one group, ("src", "tgt"): one of each for both
            built.update(dict.fromkeys(sides, train_group(sides, pairs, data, warn=warn)))
        (src_tok, src_vocab), (tgt_tok, tgt_vocab) = built["src"], built["tgt"]
        return cls(src_tok, tgt_tok, src_vocab, tgt_vocab, copy)

    def with_languages(self, src: str | None, tgt: str | None) -> Codec:
        """This codec with a many-language model's source language `src` and target language `tgt`
        (codes of `languages`; None keeps a side as it is): sources then start with `src`'s token,
        targets with `tgt`'s (heed.data.tokenize.PretrainedPieces). A HeedError names a code the
        model does not have, or any code for a model without language tokens."""
        sides = {f"{side}_tokenizer": getattr(self, f"{side}_tokenizer").for_language(code)
                 for side, code in (("src", src), ("tgt", tgt)) if code is not None}
        return replace(self, **sides) if sides else self

    @property
    def languages(self) -> list[str]:
        """The codes of the languages a many-language model reads and writes (none for others)."""
        return sorted(self.tgt_tokenizer.languages)

    @property
    def source_frame(self) -> list[str]:
        """The tokens every source starts with (a many-language model's source language token)."""
        return self.src_tokenizer.frame

    def target_frame(self) -> list[int]:
        """The ids every output starts with, forced before the search chooses (a many-language
        model's target language token; none for other models)."""
        return self.tgt_vocab.encode(self.tgt_tokenizer.frame)

    def src_tokens(self, text: str) -> list[str]:
        return self.src_tokenizer.tokenize(normalize(text))

    def tgt_tokens(self, text: str) -> list[str]:
        return self.tgt_tokenizer.tokenize(normalize(text))

    def src_ids(self, tokens: Sequence[str]) -> list[int]:
        """Source tokens -> the model's source ids, without specials (batching appends EOS)."""
        return source_ids(tokens, self.src_vocab, self.tgt_vocab) if self.copy else self.src_vocab.encode(tokens)

    def encode_src(self, text: str) -> list[int]:
        """A source sentence -> ids without specials (batching appends EOS)."""
        return self.src_ids(self.src_tokens(text))

    def target_vocab(self, src_tokens: Sequence[str]) -> ExtendedVocab:
        """The target vocabulary as a sentence with these source tokens sees it: extended by its
        copyable unknowns for a copy model, the plain one (nothing added) otherwise."""
        return ExtendedVocab.of(src_tokens, self.tgt_vocab) if self.copy else ExtendedVocab(self.tgt_vocab, ())

    def tgt_ids(self, tokens: Sequence[str], src_tokens: Sequence[str]) -> list[int]:
        """Target tokens -> ids without specials, given the sentence's source tokens."""
        return self.target_vocab(src_tokens).encode(tokens) if self.copy else self.tgt_vocab.encode(tokens)

    def encode_pairs(self, pairs: Sequence[Pair]) -> list[Example]:
        """Pairs -> (src_ids, tgt_ids) without specials."""
        out = []
        for p in pairs:
            src = self.src_tokenizer.tokenize(p.src)
            out.append((self.src_ids(src), self.tgt_ids(self.tgt_tokenizer.tokenize(p.tgt), src)))
        return out

    def special_ids(self) -> dict[str, int]:
        """The target vocabulary's special ids, as heed.nn.build.build_model takes them (a pretrained
        model's source side has the same ones: heed.nn.transformer.convert checks it)."""
        s = self.tgt_vocab.specials
        return {"pad_id": s.pad, "bos_id": s.bos, "eos_id": s.eos, "unk_id": s.unk}

    def source_to_target(self) -> list[int]:
        """For each source vocabulary id, the target id of the same token or -1: what a copy
        model's build_model needs (heed.data.extended.source_to_target)."""
        return source_to_target(self.src_vocab, self.tgt_vocab)

    def decode_tgt(self, ids: Sequence[int], src_tokens: Sequence[str] = ()) -> tuple[list[str], str]:
        """Target ids (specials allowed; stops at EOS) -> (tokens, detokenized text). A copy model's
        temporary ids become the tokens of `src_tokens` (the sentence's source) they copy."""
        tokens = self.target_vocab(src_tokens).decode(ids)
        return tokens, self.tgt_tokenizer.detokenize(tokens)

    def difference(self, other: Codec, *, sides: Sequence[str] = ("src", "tgt")) -> str | None:
        """What makes `other` read or write text differently from this codec on `sides`, in words
        ("the target vocabulary (12 tokens here, 14 there)"), or None when the two are the same.
        Tokenizers compare by their spec (a SentencePiece model by its sha256; the vocab_size a
        user asked for is no part of it, the pieces the model holds are), vocabularies token by token."""
        names = {"src": "source", "tgt": "target"}
        for side in sides:
            mine, theirs = (getattr(c, f"{side}_tokenizer").to_spec() for c in (self, other))
            mine.pop("vocab_size", None)
            theirs.pop("vocab_size", None)
            if mine != theirs:
                detail = (f"{mine['kind']} here, {theirs['kind']} there" if mine["kind"] != theirs["kind"]
                          else "another SentencePiece model")
                return f"the {names[side]} tokenizer ({detail})"
            a, b = (getattr(c, f"{side}_vocab").tokens for c in (self, other))
            if a != b:
                detail = (f"{len(a)} tokens here, {len(b)} there" if len(a) != len(b) else
                          f"id {next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)} is another token")
                return f"the {names[side]} vocabulary ({detail})"
        return None

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
    def load(cls, directory: str | Path, *, data: DataConfig | None = None, copy: bool = False) -> Codec:
        """Read what `save` wrote. Each tokenizer's `kind` in tokenizers.json is checked against
        the files beside it (a SentencePiece model for bpe/unigram and only then; single
        characters in a char vocabulary) and, given `data` (the model's resolved config), against
        `data.tokenizer`: an edited kind would tokenize differently from training, so a mismatch
        is a ModelDirError naming the file, never silently honoured. `copy`: the model's model.copy.
        A many-language model reads and writes `data.src_lang` and `data.tgt_lang` (with_languages)."""
        directory = Path(directory)
        path = directory / TOKENIZERS_FILE
        specs = read_model_json(path)
        if not isinstance(specs, dict) or not all(isinstance(specs.get(side), dict) for side in ("src", "tgt")):
            raise ModelDirError(f"{path}: expected {{\"src\": {{\"kind\": ...}}, \"tgt\": {{...}}}}; "
                                "not a heed model directory's tokenizers.json")
        try:
            src_vocab = Vocab.load(directory / SRC_VOCAB_FILE)
            tgt_vocab = Vocab.load(directory / TGT_VOCAB_FILE)
        except DataError as e:
            raise ModelDirError(str(e)) from None
        for side, vocab in (("src", src_vocab), ("tgt", tgt_vocab)):
            expected = None if data is None else getattr(data.tokenizer, side).kind
            _check_kind(directory, side, specs[side], vocab, expected)
        codec = cls(load_tokenizer(directory, "src", specs["src"]), load_tokenizer(directory, "tgt", specs["tgt"]),
                    src_vocab, tgt_vocab, copy)
        return codec if data is None else codec.with_languages(data.src_lang, data.tgt_lang)


def _check_kind(directory: Path, side: str, spec: dict, vocab: Vocab, expected: str | None) -> None:
    """A ModelDirError when tokenizers.json's `kind` for `side` disagrees with the config or with
    the files that the tokenizer left beside it."""
    path = directory / TOKENIZERS_FILE
    kind = spec.get("kind")
    if expected is not None and kind != expected:
        raise ModelDirError(f"{path}: the {side} tokenizer's kind is {kind!r}, but the model was trained with "
                            f"{expected!r} (data.tokenizer.{side}.kind in its config); restore kind: {expected!r}")
    model_file = spm_model_path(directory, side)
    if kind in ("char", "word") and model_file.exists():
        raise ModelDirError(f"{path}: the {side} tokenizer's kind is {kind!r}, but {model_file.name} beside it is a "
                            "SentencePiece model (bpe or unigram); the kind was edited, restore it")
    if kind == "char":
        longer = next((t for t in vocab.tokens[len(SPECIALS):] if len(t) != 1), None)
        if longer is not None:
            raise ModelDirError(f"{path}: the {side} tokenizer's kind is 'char', but {side}.vocab.json holds "
                                f"multi-character tokens such as {longer!r}; the kind was edited, restore it")


# ------------------------------------------------------------------------------ prepared corpora

# Settings a prepared corpus was tokenized with: the config that trains on it must say the same,
# or the saved config would describe a tokenizer the model never saw.
PREPARED_SETTINGS = ("tokenizer", "vocab", "reverse")


def open_prepared(data: DataConfig, *, verify_hashes: bool) -> tuple[PreparedCorpus, Codec]:
    """The prepared corpus at `data.prepared` (files checked against its manifest: sizes always,
    sha256 with `verify_hashes`), filtered by `data.max_src_len`/`max_tgt_len`, and the Codec it was
    written with (and, with `verify_hashes`, every id checked against its vocabulary). A
    ConfigError names the field when the config's tokenizer, vocabulary or
    `reverse` settings differ from those the corpus was prepared with."""
    assert data.prepared is not None
    corpus = PreparedCorpus(data.prepared, max_src_len=data.max_src_len, max_tgt_len=data.max_tgt_len,
                            verify_hashes=verify_hashes)
    made_with = corpus.manifest.get("data", {})
    now = data.model_dump(mode="json")
    for key in PREPARED_SETTINGS:
        for field, value in _leaves(now.get(key), f"data.{key}"):
            then = _get_dotted(made_with, field.split(".")[1:])
            if then != value:
                raise ConfigError(f"is {value!r} but the prepared corpus {data.prepared} was made with {then!r}; "
                                  f"set it to {then!r}, or prepare the corpus again", field=field)
    try:
        codec = Codec.load(data.prepared, data=data)
    except ModelDirError as e:
        raise DataError(str(e)) from None
    if verify_hashes:  # with the sha256 pass (a read of every shard), check every id is in its vocabulary
        verify_ids(data.prepared, corpus.manifest, (len(codec.src_vocab), len(codec.tgt_vocab)))
    return corpus, codec


def _leaves(value: object, prefix: str) -> Iterator[tuple[str, object]]:
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _leaves(child, f"{prefix}.{key}")
    else:
        yield prefix, value


def _get_dotted(data: object, parts: Sequence[str]) -> object:
    for part in parts:
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data
