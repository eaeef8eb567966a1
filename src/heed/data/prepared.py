"""Prepared corpora: token ids in memory-mapped shards, for training sets larger than memory.

`heed prepare` tokenizes a corpus once and writes a directory:

    manifest.json               what is here: format version, heed version, the data config it came
                                from, the tokenizer and vocabulary files, and every shard file's
                                size in bytes and sha256
    tokenizers.json, src.vocab.json, tgt.vocab.json, [src|tgt].spm.model    the Codec (heed.data.codec)
    shard-00000.src.npy         source ids of the shard's pairs, concatenated (no specials),
                                1-D, the smallest unsigned dtype that holds the vocabulary
    shard-00000.tgt.npy         target ids, likewise
    shard-00000.offsets.npy     int64 (sentences + 1, 2): pair i is src[o[i, 0]:o[i + 1, 0]],
                                tgt[o[i, 1]:o[i + 1, 1]]
    shard-00000.lengths.npy     uint16 or uint32 (sentences, 2): ids per side, what batching and
                                the length filter read without touching the ids

A shard closes once it holds `shard_tokens` ids (both sides), so no shard, and no writer buffer,
grows past a bound. All files are NumPy `.npy` (`np.load(path, mmap_mode="r")` opens any of them).

Training memory does not grow with the corpus. The reader memory-maps the lengths, which each
window's planning pass reads whole, and unmaps them after it (madvise DONTNEED; the pages stay in
the page cache). It reads a batch's ids and offsets with positioned reads (os.pread), which copy
only what the batch needs. A window's batch plan is NumPy arrays, about 4 bytes a pair. So the
process's resident memory never accumulates the shards an epoch has walked through.

Verification. Opening always checks every file the manifest lists: present, exactly the size the
manifest says (a truncated or extended file is caught without reading it), and, for shards, an
array header whose dtype and shape agree with the manifest's counts. With `verify_hashes`, each
file's sha256 is compared too (a flipped byte); training does that when it starts (sha256 runs at
0.5-2 GB/s on one core: seconds for a 20M-pair corpus of about 1.6 GB, little beside hours of
training), as does `heed prepare --verify`. Every failure is a DataError naming the file.

Batches. A training epoch reads the corpus in windows of `pool_sentences` consecutive pairs
(after the length filter), visited in an order shuffled per epoch; each window is batched exactly as
`token_batches` would batch it (shuffle, length-sorted pools, token-bucketed cuts, batch shuffle),
with one `random.Random(seed, epoch)` drawn through the windows in turn. So:

- a window as large as the corpus gives exactly `token_batches(examples, seed=, epoch=)` on the same
  examples: the same ids, the same order, the same `Batch.indices`;
- a smaller window still gives every pair exactly once per epoch, and bucketing as good as
  `token_batches` inside each window; but a batch only mixes pairs that lie within `pool_sentences`
  of each other in the file. A corpus sorted by source or domain should be shuffled before
  `heed prepare` (e.g. `shuf`), as for any streaming loader.

`Batch.indices` are positions among the pairs that pass the length filter, in corpus order, as
the raw-text path numbers them. The epoch's batch `b` is rebuilt from (seed, epoch, b) alone, so the
checkpoint's (epoch, batches done) is a complete, exact resume position.
"""
from __future__ import annotations

import bisect
import hashlib
import json
import math
import mmap
import os
import random
import weakref
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, overload

import numpy as np

from heed.data.batching import Batch, Example, check_batching, collate, epoch_rng, plan_batches
from heed.data.vocab import HEED_SPECIALS, Specials
from heed.errors import DataError
from heed.plumbing.files import atomic_write_text, file_digest, open_regular

FORMAT = "heed-prepared-corpus"
FORMAT_VERSION = 1
MANIFEST_FILE = "manifest.json"
SIDES = ("src", "tgt")
SHARD_PARTS = ("src", "tgt", "offsets", "lengths")
DEFAULT_SHARD_TOKENS = 1 << 25  # 32M ids, 64 MiB at uint16: a few dozen shards for 20M pairs
_HASH_CHUNK = 1 << 22


def id_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned dtype that holds ids 0 .. vocab_size - 1."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if vocab_size - 1 <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    raise ValueError(f"a vocabulary of {vocab_size} tokens does not fit uint32 ids")


def shard_file(index: int, part: str) -> str:
    """"shard-00003.src.npy" for shard 3's source ids."""
    return f"shard-{index:05d}.{part}.npy"


# ------------------------------------------------------------------------------------- writing


class _HashingFile:
    """A write-only file that counts and hashes what passes through (np.save writes into it)."""

    def __init__(self, f: BinaryIO) -> None:
        self.f, self.digest, self.size = f, hashlib.sha256(), 0

    def write(self, data: bytes | memoryview) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self.f.write(data)


class ShardWriter:
    """Appends (src_ids, tgt_ids) pairs and writes them as shards into `directory`.

    Ids are buffered compactly (NumPy arrays grown by doubling) and written when the shard holds
    `shard_tokens` ids; `close()` writes the last shard and returns each shard's manifest entry."""

    def __init__(self, directory: Path, *, src_dtype: np.dtype, tgt_dtype: np.dtype,
                 shard_tokens: int = DEFAULT_SHARD_TOKENS) -> None:
        if shard_tokens < 1:
            raise ValueError(f"shard_tokens must be >= 1, got {shard_tokens}")
        self.directory = Path(directory)
        self.dtypes = {"src": np.dtype(src_dtype), "tgt": np.dtype(tgt_dtype)}
        self.shard_tokens = shard_tokens
        self.shards: list[dict[str, Any]] = []
        self._reset()

    def _reset(self) -> None:
        self._ids = {side: np.empty(1024, dtype=self.dtypes[side]) for side in SIDES}
        self._used = {side: 0 for side in SIDES}
        self._lengths = array("I")  # src, tgt, src, tgt, ...: 8 bytes a pair, not a tuple's 64

    def add(self, src_ids: Sequence[int], tgt_ids: Sequence[int]) -> None:
        """One pair of id lists (no specials)."""
        for side, ids in (("src", src_ids), ("tgt", tgt_ids)):
            used, buffer = self._used[side], self._ids[side]
            if used + len(ids) > len(buffer):
                # doubling, but never past the shard's bound: a side holds at most shard_tokens ids
                grown = np.empty(max(min(2 * len(buffer), self.shard_tokens), used + len(ids)), dtype=buffer.dtype)
                grown[:used] = buffer[:used]
                self._ids[side] = buffer = grown
            buffer[used : used + len(ids)] = ids
            self._used[side] = used + len(ids)
        self._lengths.extend((len(src_ids), len(tgt_ids)))
        if self._used["src"] + self._used["tgt"] >= self.shard_tokens:
            self._flush()

    def close(self) -> list[dict[str, Any]]:
        """Write the last shard; the manifest entries of all shards, in order."""
        if self._lengths:
            self._flush()
        return self.shards

    def _flush(self) -> None:
        index = len(self.shards)
        lengths = np.frombuffer(self._lengths, dtype=f"u{self._lengths.itemsize}").astype(np.int64).reshape(-1, 2)
        offsets = np.zeros((len(lengths) + 1, 2), dtype=np.int64)
        np.cumsum(lengths, axis=0, out=offsets[1:])
        length_dtype = np.uint16 if lengths.size == 0 or lengths.max() <= np.iinfo(np.uint16).max else np.uint32
        arrays = {"src": self._ids["src"][: self._used["src"]], "tgt": self._ids["tgt"][: self._used["tgt"]],
                  "offsets": offsets, "lengths": lengths.astype(length_dtype)}
        files = {}
        for part, values in arrays.items():
            name = shard_file(index, part)
            with open(self.directory / name, "wb") as f:
                out = _HashingFile(f)
                np.lib.format.write_array(out, np.ascontiguousarray(values),
                                          allow_pickle=False)
            files[part] = {"file": name, "bytes": out.size, "sha256": out.digest.hexdigest()}
        self.shards.append({"sentences": len(lengths), "src_tokens": self._used["src"],
                            "tgt_tokens": self._used["tgt"], "files": files})
        self._reset()


def write_manifest(directory: Path, manifest: dict[str, Any]) -> None:
    """manifest.json, atomically (temp file + os.replace)."""
    atomic_write_text(Path(directory) / MANIFEST_FILE, json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")


# ------------------------------------------------------------------------------------- reading


def read_manifest(directory: Path) -> dict[str, Any]:
    """The manifest of a prepared corpus; a DataError naming the file if it is missing or not one."""
    directory = Path(directory)
    path = directory / MANIFEST_FILE
    if not directory.is_dir():
        raise DataError("no such directory; make a prepared corpus with `heed prepare CONFIG -o DIR`"
                        if not directory.exists() else "is not a directory; a prepared corpus is a directory",
                        path=directory)
    try:
        with open_regular(path, "r", encoding="utf-8") as f:
            manifest = json.loads(f.read())
    except FileNotFoundError:
        raise DataError(f"missing; {directory} is no prepared corpus (or `heed prepare` did not finish)",
                        path=path) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"not a prepared-corpus manifest: {e}", path=path) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DataError(f"not a prepared-corpus manifest (no \"format\": \"{FORMAT}\")", path=path)
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise DataError(f"format version {version!r}, this heed reads version {FORMAT_VERSION}; prepare the "
                        "corpus again with this heed", path=path)
    try:
        _check_manifest_shape(manifest)
    except (KeyError, TypeError, ValueError) as e:
        raise DataError(f"malformed manifest ({e}); prepare the corpus again", path=path) from None
    return manifest


def _check_manifest_shape(manifest: dict[str, Any]) -> None:
    """KeyError/TypeError/ValueError unless the manifest has the fields the reader relies on."""
    for side in SIDES:
        np.dtype(manifest["dtypes"][side])
    entries = list(manifest["codec_files"].values())
    if not isinstance(manifest["shards"], list) or not manifest["shards"]:
        raise ValueError("no shards")
    for shard in manifest["shards"]:
        for key in ("sentences", "src_tokens", "tgt_tokens"):
            _count(shard[key], key)
        entries.extend(shard["files"][part] for part in SHARD_PARTS)
    for entry in entries:
        _count(entry["bytes"], "bytes")
        if not isinstance(entry["sha256"], str) or not isinstance(entry.get("file", ""), str):
            raise TypeError("file names and sha256 sums must be strings")
    for name in [*manifest["codec_files"], *(s["files"][part]["file"] for s in manifest["shards"]
                                             for part in SHARD_PARTS)]:
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", "..") or "\\" in name:
            raise ValueError(f"{name!r} is not a plain file name: a prepared corpus reads only files inside "
                             "its own directory")


def _count(value: Any, key: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{key} must be a count, got {value!r}")


def listed_files(manifest: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(file name, {"bytes", "sha256"}) for every file the manifest lists: codec files, then shards."""
    files = list(manifest["codec_files"].items())
    for shard in manifest["shards"]:
        files.extend((shard["files"][part]["file"], shard["files"][part]) for part in SHARD_PARTS)
    return files


def verify_ids(directory: Path, manifest: dict[str, Any], vocab_sizes: tuple[int, int],
               chunk: int = 1 << 24) -> None:
    """Every id of every shard is below its side's vocabulary size (`vocab_sizes`: source, target);
    a DataError naming the first shard file that is not. Reads the ids in chunks."""
    for shard in manifest["shards"]:
        for side, size in zip(SIDES, vocab_sizes):
            path = Path(directory) / shard["files"][side]["file"]
            ids = np.load(path, mmap_mode="r")
            for start in range(0, ids.shape[0], chunk):
                top = int(ids[start : start + chunk].max())
                if top >= size:
                    raise DataError(f"holds id {top}, but the {'source' if side == 'src' else 'target'} vocabulary "
                                    f"has {size} ids: the shard does not belong to this corpus's vocabulary; "
                                    "prepare the corpus again", path=path)
            del ids


def verify_files(directory: Path, manifest: dict[str, Any], *, hashes: bool) -> int:
    """Check that every listed file exists with the manifest's size (and sha256 with `hashes`).
    Returns the bytes checked; raises a DataError naming the first file that does not match."""
    directory = Path(directory)
    total = 0
    for name, entry in listed_files(manifest):
        path = directory / name
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise DataError("missing; the prepared corpus is incomplete (prepare it again)", path=path) from None
        if size != entry["bytes"]:
            what = "truncated" if size < entry["bytes"] else "longer than written"
            raise DataError(f"{size:,} bytes but the manifest says {entry['bytes']:,}: {what}; prepare the corpus "
                            "again", path=path)
        if hashes and file_digest(path)[1] != entry["sha256"]:
            raise DataError("sha256 differs from the manifest: the file is corrupt or was changed; prepare the "
                            "corpus again", path=path)
        total += size
    return total


# Linux and macOS: give back mapped pages (they stay in the page cache); elsewhere a no-op
_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)


class _ArrayFile:
    """A shard's ids or offsets: an .npy file read with positioned reads (os.pread), element
    ranges of its flattened array. A read copies what it asks for and maps nothing, so reading
    batches adds nothing to the process's resident memory; reading through a memory map would,
    since the kernel maps up to 16 cached pages around each fault (20-40 MB for a batch of 2,000
    tokens of pairs drawn from across a window)."""

    def __init__(self, path: Path, *, data_offset: int, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.path, self.shape, self.dtype = path, shape, dtype
        self._start, self._size = data_offset, math.prod(shape)
        self._fd = os.open(path, os.O_RDONLY)
        weakref.finalize(self, os.close, self._fd)

    def __len__(self) -> int:
        return self.shape[0]

    def read(self, start: int, stop: int) -> np.ndarray:
        """Elements `start` .. `stop - 1` of the flattened array, (stop - start,) of `dtype`."""
        if not 0 <= start <= stop <= self._size:
            raise DataError(f"an offset points at {start}:{stop}, outside the file's {self._size} elements: the "
                            "shard is corrupt; prepare the corpus again", path=self.path)
        size = self.dtype.itemsize
        data = os.pread(self._fd, (stop - start) * size, self._start + start * size)
        if len(data) != (stop - start) * size:
            raise DataError("is shorter than its header says: the file changed after it was opened; prepare the "
                            "corpus again", path=self.path)
        return np.frombuffer(data, dtype=self.dtype)


@dataclass(frozen=True)
class _Shard:
    """One shard: ids and offsets read on demand (`_ArrayFile`), lengths memory-mapped for the
    planning passes that read them all."""

    src: _ArrayFile  # (src_tokens,)
    tgt: _ArrayFile  # (tgt_tokens,)
    offsets: _ArrayFile  # int64 (sentences + 1, 2)
    lengths: np.ndarray  # (sentences, 2), a read-only view of `lengths_map`
    lengths_map: mmap.mmap

    def release(self) -> None:
        """Unmap the length pages this process has read (madvise DONTNEED). They stay in the page
        cache, so reading them again costs a minor fault, not disk; but they no longer count in
        the process's resident memory, which so stays flat however many shards an epoch plans."""
        if _DONTNEED is not None:
            self.lengths_map.madvise(_DONTNEED)


def _read_header(path: Path, *, shape: tuple[int, ...], dtype: np.dtype | None) -> tuple[int, np.dtype]:
    """(where the data starts, dtype) of an .npy file whose header must say `shape` (and `dtype`)."""
    try:
        with open_regular(path) as f:
            version = np.lib.format.read_magic(f)
            if version not in ((1, 0), (2, 0)):
                raise ValueError(f".npy format version {version[0]}.{version[1]}, not 1.0 or 2.0")
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            found_shape, fortran_order, found_dtype = read_header(f)
            data_offset = f.tell()
    except (OSError, ValueError) as e:
        raise DataError(f"not a readable .npy array ({e}); prepare the corpus again", path=path) from None
    if found_shape != shape or (dtype is not None and found_dtype != dtype) or found_dtype.kind not in "iu" \
            or (fortran_order and len(shape) > 1):
        raise DataError(f"holds {found_dtype} {found_shape} but the manifest says {dtype or 'integers'} {shape}: "
                        "the file does not belong to this manifest; prepare the corpus again", path=path)
    return data_offset, found_dtype


def _open_array_file(path: Path, *, shape: tuple[int, ...], dtype: np.dtype | None) -> _ArrayFile:
    data_offset, found_dtype = _read_header(path, shape=shape, dtype=dtype)
    return _ArrayFile(path, data_offset=data_offset, shape=shape, dtype=found_dtype)


def _map_array(path: Path, *, shape: tuple[int, ...], dtype: np.dtype | None) -> tuple[np.ndarray, mmap.mmap]:
    """A read-only view of a memory-mapped .npy file, and the mapping (for `_Shard.release`)."""
    data_offset, found_dtype = _read_header(path, shape=shape, dtype=dtype)
    try:
        with open(path, "rb") as f:
            mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        array = np.frombuffer(mapping, dtype=found_dtype, count=math.prod(shape), offset=data_offset)
    except (OSError, ValueError) as e:
        raise DataError(f"not a readable .npy array ({e}); prepare the corpus again", path=path) from None
    return array.reshape(shape), mapping


def _reserve_open_files(needed: int, directory: Path) -> None:
    """Make room for `needed` more open files (each shard keeps its 4 files open): raise the soft
    limit towards the hard one where it is short, as a 300M-pair corpus (about 330 shards) needs
    on a system whose default is 1,024. A DataError saying what to do where the hard limit is
    too low."""
    try:
        import resource
    except ImportError:  # Windows: no such limit to raise
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/dev/fd")) if os.path.isdir("/dev/fd") else 0
    wanted = in_use + needed + 64  # room for the checkpoints, logs and libraries the run opens
    if soft == resource.RLIM_INFINITY or wanted <= soft:
        return
    if hard != resource.RLIM_INFINITY and wanted > hard:
        raise DataError(f"its {needed // len(SHARD_PARTS)} shards need {needed} open files, but this process may "
                        f"open at most {hard} (ulimit -Hn): raise that limit, or prepare the corpus again with a "
                        "larger --shard-tokens (fewer, bigger shards)", path=directory)
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


class PreparedCorpus:
    """A prepared corpus opened for training: memory-mapped shards, filtered by length.

    `len(corpus)` counts the pairs with at most `max_src_len` source and `max_tgt_len` target ids
    (those the raw-text path keeps); `dropped` the others. `batches(...)` gives an epoch's batches."""

    def __init__(self, directory: Path, *, max_src_len: int | None = None, max_tgt_len: int | None = None,
                 verify_hashes: bool = False) -> None:
        self.directory = Path(directory)
        self.manifest = read_manifest(self.directory)
        verify_files(self.directory, self.manifest, hashes=verify_hashes)
        dtypes = {side: np.dtype(self.manifest["dtypes"][side]) for side in SIDES}
        _reserve_open_files(len(SHARD_PARTS) * len(self.manifest["shards"]), self.directory)
        self.shards: list[_Shard] = []
        kept: list[int] = []
        for entry in self.manifest["shards"]:
            n = int(entry["sentences"])
            path = {part: self.directory / entry["files"][part]["file"] for part in SHARD_PARTS}
            src = _open_array_file(path["src"], shape=(int(entry["src_tokens"]),), dtype=dtypes["src"])
            tgt = _open_array_file(path["tgt"], shape=(int(entry["tgt_tokens"]),), dtype=dtypes["tgt"])
            offsets = _open_array_file(path["offsets"], shape=(n + 1, 2), dtype=np.dtype(np.int64))
            lengths, lengths_map = _map_array(path["lengths"], shape=(n, 2), dtype=None)
            shard = _Shard(src=src, tgt=tgt, offsets=offsets, lengths=lengths, lengths_map=lengths_map)
            self.shards.append(shard)
            kept.append(int(self._kept_mask(shard, max_src_len, max_tgt_len).sum()))
            shard.release()
        self.max_src_len, self.max_tgt_len = max_src_len, max_tgt_len
        self._kept_starts = np.concatenate([[0], np.cumsum(kept)]).astype(np.int64)  # (shards + 1,)
        self.sentences = sum(int(e["sentences"]) for e in self.manifest["shards"])
        self._rows_cache: tuple[int, np.ndarray] | None = None

    @staticmethod
    def _kept_mask(shard: _Shard, max_src_len: int | None, max_tgt_len: int | None) -> np.ndarray:
        """bool (sentences,): True = within the length limits."""
        keep = np.ones(len(shard.lengths), dtype=bool)
        if max_src_len is not None:
            keep &= shard.lengths[:, 0] <= max_src_len
        if max_tgt_len is not None:
            keep &= shard.lengths[:, 1] <= max_tgt_len
        return keep

    def __len__(self) -> int:
        return int(self._kept_starts[-1])

    @property
    def dropped(self) -> int:
        """Pairs over the length limits."""
        return self.sentences - len(self)

    def _kept_rows(self, shard_index: int) -> range | np.ndarray:
        """Row numbers, in shard `shard_index`, of its kept pairs: a range when the length limits
        drop none of them (no memory), else an array (cached for the last shard asked)."""
        kept = int(self._kept_starts[shard_index + 1] - self._kept_starts[shard_index])
        shard = self.shards[shard_index]
        if kept == len(shard.lengths):
            return range(kept)
        if self._rows_cache is None or self._rows_cache[0] != shard_index:
            rows = np.flatnonzero(self._kept_mask(shard, self.max_src_len, self.max_tgt_len))
            shard.release()
            self._rows_cache = (shard_index, rows)
        return self._rows_cache[1]

    def window(self, start: int, stop: int) -> Window:
        """Kept pairs number `start` .. `stop - 1` (positions among the kept pairs, corpus order)."""
        if not 0 <= start <= stop <= len(self):
            raise IndexError(f"window {start}:{stop} outside 0:{len(self)}")
        segments: list[tuple[int, range | np.ndarray]] = []
        firsts: list[int] = []
        first = int(np.searchsorted(self._kept_starts, start, side="right")) - 1
        position = start
        for s in range(first, len(self.shards)):
            if position >= stop:
                break
            base = int(self._kept_starts[s])
            rows = self._kept_rows(s)[position - base : stop - base]
            segments.append((s, rows))
            firsts.append(position - start)
            position += len(rows)
        return Window(self, start, tuple(segments), tuple(firsts))

    def release(self, shards: Iterable[int] | None = None) -> None:
        """Unmap the lengths read from these shards (all by default); see `_Shard.release`."""
        for s in range(len(self.shards)) if shards is None else shards:
            self.shards[s].release()

    def example(self, shard_index: int, row: int) -> Example:
        """(src_ids, tgt_ids) of row `row` of shard `shard_index`, as Python ints."""
        shard = self.shards[shard_index]
        s0, t0, s1, t1 = shard.offsets.read(2 * row, 2 * row + 4).tolist()  # offsets rows `row` and `row + 1`
        return shard.src.read(s0, s1).tolist(), shard.tgt.read(t0, t1).tolist()

    def examples(self) -> Iterator[Example]:
        """Every kept pair in corpus order (for tests and tools; training reads by batch)."""
        for s in range(len(self.shards)):
            for row in self._kept_rows(s):
                yield self.example(s, int(row))

    def batches(self, *, batch_tokens: int, max_sentences: int | None, seed: int, epoch: int,
                pool_sentences: int, pool_size: int = 100, specials: Specials = HEED_SPECIALS) -> PreparedEpoch:
        """The training batches of `epoch` (see the module doc), built lazily as they are read, with
        the vocabulary's special ids (`specials`)."""
        return PreparedEpoch(self, batch_tokens=batch_tokens, max_sentences=max_sentences, seed=seed, epoch=epoch,
                             pool_sentences=pool_sentences, pool_size=pool_size, specials=specials)


@dataclass(frozen=True)
class Window:
    """Consecutive kept pairs of a prepared corpus: `start` is the first one's kept position.
    `segments[k]` = (shard, its rows in the window), in order; `firsts[k]` is the window position
    of segment k's first pair. A range of rows costs no memory, so a window is a few objects."""

    corpus: PreparedCorpus
    start: int
    segments: tuple[tuple[int, range | np.ndarray], ...]
    firsts: tuple[int, ...]

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """(source lengths, target lengths) of the window's pairs, in ids without specials: two
        (pairs,) arrays of the shards' length dtype."""
        parts = [_take(self.corpus.shards[s].lengths, rows) for s, rows in self.segments]
        both = np.concatenate(parts) if parts else np.zeros((0, 2), dtype=np.uint16)  # (pairs, 2)
        return both[:, 0], both[:, 1]

    def example(self, i: int) -> Example:
        k = bisect.bisect_right(self.firsts, i) - 1
        s, rows = self.segments[k]
        return self.corpus.example(s, int(rows[i - self.firsts[k]]))

    def release(self) -> None:
        """Unmap the lengths read from the window's shards (`_Shard.release`)."""
        self.corpus.release(s for s, _ in self.segments)


def _take(array: np.ndarray, rows: range | np.ndarray) -> np.ndarray:
    """array[rows], as a slice when `rows` is a range (a copy either way)."""
    if isinstance(rows, range):
        return array[rows.start : rows.stop].copy()
    return array[rows]


class PreparedEpoch(Sequence[Batch]):
    """One epoch's batches of a prepared corpus, a lazy sequence: `len()` is known up front (one
    planning pass over the lengths, no ids read), `epoch[b]` builds batch b. Reading in order
    plans each window once more; the plan of one window is held at a time."""

    def __init__(self, corpus: PreparedCorpus, *, batch_tokens: int, max_sentences: int | None, seed: int,
                 epoch: int, pool_sentences: int, pool_size: int = 100, specials: Specials = HEED_SPECIALS) -> None:
        check_batching(batch_tokens=batch_tokens, max_sentences=max_sentences, pool_size=pool_size)
        if pool_sentences < 1:
            raise ValueError(f"pool_sentences must be >= 1, got {pool_sentences}")
        self.corpus = corpus
        self.specials = specials
        self.batch_tokens, self.max_sentences, self.pool_size = batch_tokens, max_sentences, pool_size
        self.pool_sentences = pool_sentences
        rng = epoch_rng(seed, epoch)
        windows = list(range(math.ceil(len(corpus) / pool_sentences)))
        # One window draws nothing here (shuffling one item takes no random number), which keeps the
        # whole-corpus window identical to token_batches.
        rng.shuffle(windows)
        self._visits: list[tuple[int, Any]] = []  # (window number, rng state before planning it)
        self._firsts: list[int] = []  # index of each visit's first batch
        total = 0
        self._current: tuple[int, Window, list[np.ndarray]] | None = None
        for k, w in enumerate(windows):
            state = rng.getstate()
            window, plan = self._plan(w, rng)
            if k == 0:
                self._current = (0, window, plan)  # training reads from the start: keep it
            self._visits.append((w, state))
            self._firsts.append(total)
            total += len(plan)
        self._len = total

    def _plan(self, w: int, rng: random.Random) -> tuple[Window, list[np.ndarray]]:
        start = w * self.pool_sentences
        window = self.corpus.window(start, min(start + self.pool_sentences, len(self.corpus)))
        src, tgt = window.lengths()
        window.release()
        return window, plan_batches(src, tgt, batch_tokens=self.batch_tokens, max_sentences=self.max_sentences,
                                    shuffle=True, rng=rng, pool_size=self.pool_size)

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> Batch: ...

    @overload
    def __getitem__(self, index: slice) -> list[Batch]: ...

    def __getitem__(self, index: int | slice) -> Batch | list[Batch]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} of an epoch of {len(self)}")
        k = bisect.bisect_right(self._firsts, index) - 1
        if self._current is None or self._current[0] != k:
            w, state = self._visits[k]
            rng = random.Random()
            rng.setstate(state)
            self._current = (k, *self._plan(w, rng))
        _, window, plan = self._current
        group = plan[index - self._firsts[k]].tolist()
        return collate([window.example(i) for i in group], [window.start + i for i in group], self.specials)
