"""`heed prepare`: tokenize a training corpus once into memory-mapped shards (heed.data.prepared).

    pass 1 (skipped with `tokenizers_from`): stream the corpus; count word/char tokens over all of
           it; keep a uniform sample of at most `sample_pairs` pairs (reservoir sampling) on which
           SentencePiece sides train and count their pieces
    pass 2: stream the corpus again, encode each pair, append to the shard writer

Memory stays bounded whatever the corpus size: one line at a time, the sample, the token counts
(one entry per distinct word) and one shard's buffer. The result is built in a temporary directory
beside the output and renamed into place at the end, so an interrupted or failed run leaves no
half-prepared corpus that training could mistake for a whole one.

A sample at least as large as the corpus holds every pair in corpus order, so tokenizers and
vocabularies come out exactly as `Codec.build` makes them from the raw corpus: a prepared corpus
then trains on the same ids as the raw one.
"""
from __future__ import annotations

import os
import random
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from heed.config import Config, config_to_dict
from heed.data.codec import Codec, check_corpus_files, iter_pairs, side_groups, train_group
from heed.data.corpus import Pair
from heed.data.prepared import (
    DEFAULT_SHARD_TOKENS,
    FORMAT,
    FORMAT_VERSION,
    ShardWriter,
    id_dtype,
    write_manifest,
)
from heed.data.tokenize import Tokenizer, train_tokenizer
from heed.data.vocab import Vocab
from heed.errors import ConfigError, DataError, HeedError, ModelDirError, OutputError
from heed.plumbing.files import file_digest, make_temp_dir
from heed.version import __version__

DEFAULT_SAMPLE_PAIRS = 1_000_000  # SentencePiece's own advice: 1M-10M sentences train a model well
SAMPLE_SEED = 0  # the same corpus always gives the same sample, tokenizers and shards
PROGRESS_EVERY = 10_000  # pairs between progress reports

# progress(phase, pairs done since the last report); phases "counting" and "writing"
Progress = Callable[[str, int], None]
Warn = Callable[[str], None]


@dataclass(frozen=True)
class PrepareResult:
    directory: Path
    sentences: int
    src_tokens: int
    tgt_tokens: int
    shards: int
    seconds: float

    def summary(self) -> str:
        """One line: what was written, how fast."""
        rate = self.sentences / self.seconds if self.seconds > 0 else 0.0
        return (f"prepared {self.sentences:,} sentence pairs ({self.src_tokens:,} source + {self.tgt_tokens:,} target "
                f"tokens) into {self.shards} shard{'s' if self.shards != 1 else ''} in {self.directory}: "
                f"{self.seconds:.1f} s, {rate:,.0f} sentences/s")


def check_preparable(config: Config) -> None:
    """A ConfigError naming the field unless the config gives a training corpus to prepare."""
    data = config.data
    if data.task is not None:
        raise ConfigError(f"task '{data.task}' generates its data in memory; heed prepare reads a 'train' corpus",
                          field="data.task")
    if data.prepared is not None:
        raise ConfigError(f"is already a prepared corpus ({data.prepared}); to prepare a corpus give data.train and "
                          "leave data.prepared out", field="data.prepared")
    if data.split is not None:
        raise ConfigError("holds sentences out of the whole corpus in memory, which heed prepare never loads; give "
                          "data.dev and data.test corpora instead", field="data.split")


def prepare(config: Config, output: Path, *, tokenizers_from: Path | None = None,
            sample_pairs: int = DEFAULT_SAMPLE_PAIRS, shard_tokens: int = DEFAULT_SHARD_TOKENS,
            progress: Progress | None = None, warn: Warn | None = None) -> PrepareResult:
    """Tokenize `config.data.train` into a prepared corpus at `output` (a new or empty directory).

    `tokenizers_from`: a directory holding tokenizers.json and the vocabularies (a model directory
    or another prepared corpus) to reuse instead of training new ones. Raises HeedError subclasses
    naming the file or field for every user mistake."""
    started = time.perf_counter()
    check_preparable(config)
    if sample_pairs < 1:
        raise ConfigError(f"must be >= 1, got {sample_pairs}", field="--sample")
    if shard_tokens < 1:
        raise ConfigError(f"must be >= 1, got {shard_tokens}", field="--shard-tokens")
    data = config.data
    assert data.train is not None
    check_corpus_files(data)
    output = Path(output)
    _check_output(output)

    def pairs(phase: str) -> Iterator[Pair]:
        count = 0
        for pair in iter_pairs(data.train, reverse=data.reverse):  # type: ignore[arg-type]
            yield pair
            count += 1
            if progress is not None and count % PROGRESS_EVERY == 0:
                progress(phase, PROGRESS_EVERY)
        if progress is not None:
            progress(phase, count % PROGRESS_EVERY)

    if tokenizers_from is not None:
        try:
            codec = Codec.load(tokenizers_from, data=data)
        except ModelDirError as e:
            raise DataError(f"--tokenizers: {e}") from None
    else:
        codec = build_codec(pairs("counting"), config, sample_pairs=sample_pairs, warn=warn)
    # Hidden beside the output, named after this process: a later prepare sweeps it if this one is killed.
    work = make_temp_dir(output.parent, f".{output.name}.", ".partial")
    try:
        writer = ShardWriter(work, src_dtype=id_dtype(len(codec.src_vocab)), tgt_dtype=id_dtype(len(codec.tgt_vocab)),
                             shard_tokens=shard_tokens)
        src_encode, tgt_encode = _encoder(codec.src_tokenizer, codec.src_vocab), _encoder(codec.tgt_tokenizer,
                                                                                          codec.tgt_vocab)
        for pair in pairs("writing"):
            writer.add(src_encode(pair.src), tgt_encode(pair.tgt))
        shards = writer.close()
        codec.save(work)
        codec_files = {path.name: dict(zip(("bytes", "sha256"), file_digest(path)))
                       for path in sorted(work.iterdir()) if not path.name.startswith("shard-")}
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "heed_version": __version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "sentences": sum(s["sentences"] for s in shards),
            "src_tokens": sum(s["src_tokens"] for s in shards),
            "tgt_tokens": sum(s["tgt_tokens"] for s in shards),
            "dtypes": {"src": writer.dtypes["src"].name, "tgt": writer.dtypes["tgt"].name},
            "tokenizers": "reused from " + str(Path(tokenizers_from).absolute()) if tokenizers_from is not None
            else f"trained here (sample of at most {sample_pairs:,} pairs for SentencePiece)",
            "codec_files": codec_files,
            "shards": shards,
            "data": config_to_dict(config)["data"],
        }
        write_manifest(work, manifest)
        os.replace(work, output)  # atomic: an empty directory is replaced whole
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return PrepareResult(output, manifest["sentences"], manifest["src_tokens"], manifest["tgt_tokens"], len(shards),
                         time.perf_counter() - started)


def _check_output(output: Path) -> None:
    """The output must be new or an empty directory: a prepared corpus is never overwritten."""
    if output.is_dir():
        if any(output.iterdir()):
            raise OutputError("exists and is not empty; choose another -o or remove it", path=output)
    elif output.exists() or output.is_symlink():
        raise OutputError("exists and is not a directory; choose another -o", path=output)


def _encoder(tokenizer: Tokenizer, vocab: Vocab) -> Callable[[str], list[int]]:
    return lambda text: vocab.encode(tokenizer.tokenize(text))


def build_codec(pairs: Iterator[Pair], config: Config, *, sample_pairs: int, warn: Warn | None = None) -> Codec:
    """Tokenizers and vocabularies from one pass over `pairs`: word and char sides counted over
    every pair; SentencePiece sides trained and counted on a uniform sample of `sample_pairs`
    (reservoir sampling, Vitter's algorithm R, seeded), which is every pair in order when the corpus
    is no larger. The same as `Codec.build` on the whole corpus whenever the sample holds it all."""
    data = config.data
    groups = side_groups(data)  # with shared_vocab one group, ("src", "tgt"): one tokenizer and vocabulary for both
    specs = {sides: getattr(data.tokenizer, sides[0]) for sides in groups}
    streamed = {sides: train_tokenizer(spec.kind, (), vocab_size=spec.vocab_size)
                for sides, spec in specs.items() if spec.kind in ("char", "word")}
    counts: dict[tuple[str, ...], Counter[str]] = {sides: Counter() for sides in streamed}
    sampling = len(streamed) < len(groups)
    sample: list[Pair] = []
    rng = random.Random(SAMPLE_SEED)
    seen = 0
    for pair in pairs:
        for sides, tokenizer in streamed.items():
            for side in sides:
                counts[sides].update(tokenizer.tokenize(getattr(pair, side)))
        if sampling:
            if seen < sample_pairs:
                sample.append(pair)
            else:
                j = rng.randrange(seen + 1)
                if j < sample_pairs:
                    sample[j] = pair
        seen += 1
    tokenizers: dict[str, Tokenizer] = {}
    vocabs: dict[str, Vocab] = {}
    for sides in groups:
        if sides in streamed:
            tokenizer = streamed[sides]
            vocab = Vocab.from_counts(counts[sides], min_freq=data.vocab.min_freq, max_size=data.vocab.max_size)
        else:
            tokenizer, vocab = train_group(sides, sample, data, warn=warn)
        tokenizers.update(dict.fromkeys(sides, tokenizer))
        vocabs.update(dict.fromkeys(sides, vocab))
    if seen == 0:  # the readers raise for an empty corpus; a guard for our own callers
        raise HeedError("no training pairs to build tokenizers and vocabularies from")
    return Codec(tokenizers["src"], tokenizers["tgt"], vocabs["src"], vocabs["tgt"])
