import json
import mmap
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from heed.data.batching import filter_by_length, token_batches
from heed.data.prepared import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST_FILE,
    PreparedCorpus,
    ShardWriter,
    file_digest,
    id_dtype,
    read_manifest,
    shard_file,
    verify_files,
    write_manifest,
)
from heed.errors import DataError


def examples(n: int = 300, seed: int = 0, vocab: int = 300) -> list[tuple[list[int], list[int]]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        length = rng.randint(0, 30)
        out.append(([rng.randrange(4, vocab) for _ in range(length)],
                    [rng.randrange(4, vocab) for _ in range(max(1, length + rng.randint(-3, 3)))]))
    return out


def write_corpus(directory: Path, pairs, *, shard_tokens: int = 1000, vocab: int = 300) -> Path:
    """A prepared corpus of id pairs (no tokenizer files), as heed.data.prepare writes its shards."""
    directory.mkdir(parents=True, exist_ok=True)
    writer = ShardWriter(directory, src_dtype=id_dtype(vocab), tgt_dtype=id_dtype(vocab), shard_tokens=shard_tokens)
    for src, tgt in pairs:
        writer.add(src, tgt)
    shards = writer.close()
    write_manifest(directory, {"format": FORMAT, "format_version": FORMAT_VERSION, "sentences": len(pairs),
                               "dtypes": {s: writer.dtypes[s].name for s in ("src", "tgt")}, "codec_files": {},
                               "shards": shards})
    return directory


def same_batches(a, b) -> bool:
    return len(a) == len(b) and all(
        x.src.equal(y.src) and x.tgt_in.equal(y.tgt_in) and x.tgt_out.equal(y.tgt_out) and x.indices.equal(y.indices)
        for x, y in zip(a, b))


def test_id_dtype_is_the_smallest_unsigned_type_that_holds_the_vocabulary():
    assert [id_dtype(n).name for n in (4, 256, 257, 65536, 65537)] == ["uint8", "uint8", "uint16", "uint16", "uint32"]


def test_pairs_round_trip_through_several_shards(tmp_path):
    pairs = examples()
    corpus = PreparedCorpus(write_corpus(tmp_path, pairs))
    assert len(corpus.shards) > 3
    assert all(len(s.src) + len(s.tgt) < 1000 + 2 * 34 for s in corpus.shards)  # closed at the bound
    assert corpus.shards[0].src.dtype == np.uint16 and not corpus.shards[0].lengths.flags.writeable
    assert list(corpus.examples()) == pairs
    assert (len(corpus), corpus.dropped) == (300, 0)


def test_the_manifest_records_each_files_size_and_sha256(tmp_path):
    directory = write_corpus(tmp_path, examples(50))
    manifest = read_manifest(directory)
    entry = manifest["shards"][0]["files"]["src"]
    assert entry["file"] == shard_file(0, "src") == "shard-00000.src.npy"
    assert (entry["bytes"], entry["sha256"]) == file_digest(directory / entry["file"])
    assert sum(s["sentences"] for s in manifest["shards"]) == 50


@pytest.mark.parametrize("max_src_len", [None, 20])
def test_a_window_as_large_as_the_corpus_gives_exactly_the_batches_of_token_batches(tmp_path, max_src_len):
    pairs = examples()
    corpus = PreparedCorpus(write_corpus(tmp_path, pairs), max_src_len=max_src_len, max_tgt_len=25)
    kept, dropped = filter_by_length(pairs, max_src_len=max_src_len, max_tgt_len=25)
    assert (len(corpus), corpus.dropped) == (len(kept), dropped) and dropped > 0
    for epoch in range(3):
        raw = token_batches(kept, batch_tokens=200, shuffle=True, seed=5, epoch=epoch)
        prepared = corpus.batches(batch_tokens=200, max_sentences=None, seed=5, epoch=epoch, pool_sentences=len(kept))
        assert same_batches(raw, prepared)


@pytest.mark.parametrize("max_src_len", [None, 20])
def test_a_smaller_window_gives_every_pair_once_in_bucketed_batches_of_nearby_pairs(tmp_path, max_src_len):
    pairs, _ = filter_by_length(examples(400), max_src_len=max_src_len, max_tgt_len=None)  # kept, in order
    corpus = PreparedCorpus(write_corpus(tmp_path, examples(400)), max_src_len=max_src_len)
    assert len(corpus) == len(pairs)
    epochs = [corpus.batches(batch_tokens=150, max_sentences=8, seed=1, epoch=e, pool_sentences=64) for e in range(2)]
    for batches in epochs:
        indices = [i for b in batches for i in b.indices.tolist()]
        assert sorted(indices) == list(range(len(pairs)))
        for b in batches:
            assert len({i // 64 for i in b.indices.tolist()}) == 1  # one window per batch
            assert b.size <= 8 and (b.size == 1 or b.size * max(b.src.size(1), b.tgt_out.size(1)) <= 150)
            for row, i in enumerate(b.indices.tolist()):
                assert b.src[row, : b.src_lengths[row] - 1].tolist() == pairs[i][0]
    first = [b.indices.tolist() for b in epochs[0]]
    assert first != [b.indices.tolist() for b in epochs[1]]
    again = corpus.batches(batch_tokens=150, max_sentences=8, seed=1, epoch=0, pool_sentences=64)
    assert [b.indices.tolist() for b in again] == first


def test_any_batch_can_be_read_first_as_a_resumed_run_does(tmp_path):
    corpus = PreparedCorpus(write_corpus(tmp_path, examples(400)))
    in_order = list(corpus.batches(batch_tokens=150, max_sentences=None, seed=3, epoch=1, pool_sentences=50))
    for b in (len(in_order) - 1, len(in_order) // 2, 7):
        fresh = corpus.batches(batch_tokens=150, max_sentences=None, seed=3, epoch=1, pool_sentences=50)
        assert same_batches(fresh[b:], in_order[b:])


def mapped_kb(directory: Path) -> int:
    """Resident kB of this process's memory maps of files in `directory` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
            inside = len(fields) >= 6 and fields[5].startswith(str(directory))
        elif inside and fields[:1] == ["Rss:"]:
            total += int(fields[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists() or not hasattr(mmap, "MADV_DONTNEED"),
                    reason="needs Linux's /proc/self/smaps and madvise")
def test_reading_leaves_no_shard_pages_mapped_so_memory_stays_flat_in_corpus_size(tmp_path):
    directory = write_corpus(tmp_path / "corpus", examples(2000), shard_tokens=20_000)
    corpus = PreparedCorpus(directory)
    assert len(corpus.shards) > 1 and mapped_kb(directory) == 0  # opening read the lengths, then let go
    assert corpus.shards[1].lengths[:, 0].sum() > 0
    assert mapped_kb(directory) > 0  # reading lengths maps pages...
    corpus.release()
    assert mapped_kb(directory) == 0  # ...and release unmaps them
    epoch = corpus.batches(batch_tokens=300, max_sentences=None, seed=0, epoch=0, pool_sentences=500)
    assert mapped_kb(directory) == 0  # planning every window read all lengths
    assert sum(batch.size for batch in epoch) == 2000
    assert mapped_kb(directory) == 0  # ids and offsets are read without mapping them
    assert same_batches(list(epoch), list(corpus.batches(batch_tokens=300, max_sentences=None, seed=0, epoch=0,
                                                           pool_sentences=500)))  # re-reads after release


OPEN_WITH_LIMITS = """
import resource, sys
from heed.data.prepared import PreparedCorpus
from heed.errors import DataError
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[2]), int(sys.argv[3])))
try:
    corpus = PreparedCorpus(sys.argv[1])
except DataError as e:
    print("DataError:", e)
else:
    print(len(corpus.shards), "shards;", sum(1 for _ in corpus.examples()), "pairs; soft limit",
          resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


@pytest.mark.skipif(sys.platform == "win32", reason="no open-file limit on Windows")
def test_more_shards_than_the_soft_open_file_limit_allows_raise_it_or_say_what_to_do(tmp_path):
    directory = write_corpus(tmp_path / "corpus", examples(2000), shard_tokens=300)  # 4 files each
    shards = len(read_manifest(directory)["shards"])
    assert shards > 100

    def open_with(soft: int, hard: int) -> str:
        result = subprocess.run([sys.executable, "-c", OPEN_WITH_LIMITS, str(directory), str(soft), str(hard)],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    raised = open_with(200, 4 * shards + 500)  # 200 is too few for 4 files a shard: raised towards the hard limit
    assert raised.startswith(f"{shards} shards; 2000 pairs; soft limit ") and int(raised.split()[-1]) > 4 * shards
    assert open_with(200, 200) == (f"DataError: {directory}: its {shards} shards need {4 * shards} open files, but "
                                   "this process may open at most 200 (ulimit -Hn): raise that limit, or prepare "
                                   "the corpus again with a larger --shard-tokens (fewer, bigger shards)")


def test_a_truncated_shard_is_caught_by_its_size_naming_the_file(tmp_path):
    directory = write_corpus(tmp_path, examples(100))
    path = directory / "shard-00001.tgt.npy"
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(DataError, match=r"shard-00001\.tgt\.npy: .*truncated"):
        PreparedCorpus(directory)


def test_a_flipped_byte_is_caught_when_hashes_are_verified(tmp_path):
    directory = write_corpus(tmp_path, examples(100))
    path = directory / "shard-00000.src.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    PreparedCorpus(directory)  # sizes still match: only hashing sees it
    with pytest.raises(DataError, match=r"shard-00000\.src\.npy: sha256 differs"):
        PreparedCorpus(directory, verify_hashes=True)


def test_an_offset_past_the_ids_is_caught_naming_the_file_even_without_hashes(tmp_path):
    directory = write_corpus(tmp_path, examples(100))
    offsets = np.load(directory / "shard-00000.offsets.npy")
    offsets[3, 0] = 10**9  # pair 2 would end, and pair 3 start, far past the shard's source ids
    np.save(directory / "shard-00000.offsets.npy", offsets)  # same size: only the hash would differ
    corpus = PreparedCorpus(directory)
    assert corpus.example(0, 0) == examples(100)[0]
    with pytest.raises(DataError, match=r"shard-00000\.src\.npy: an offset points at \d+:1000000000, outside"):
        corpus.example(0, 2)


def test_a_manifest_that_disagrees_with_a_shard_names_the_shard_file(tmp_path):
    directory = write_corpus(tmp_path, examples(100))
    manifest = json.loads((directory / MANIFEST_FILE).read_text())
    manifest["shards"][1]["sentences"] -= 1
    (directory / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=r"shard-00001\.offsets\.npy: holds int64 \(\d+, 2\) but the manifest says"):
        PreparedCorpus(directory, verify_hashes=True)


def test_a_missing_shard_or_manifest_is_named(tmp_path):
    directory = write_corpus(tmp_path / "c", examples(100))
    (directory / "shard-00002.lengths.npy").unlink()
    with pytest.raises(DataError, match=r"shard-00002\.lengths\.npy: missing"):
        verify_files(directory, read_manifest(directory), hashes=False)
    (directory / MANIFEST_FILE).unlink()
    with pytest.raises(DataError, match=r"manifest\.json: missing"):
        PreparedCorpus(directory)
    with pytest.raises(DataError, match="no such directory"):
        PreparedCorpus(tmp_path / "nowhere")


def test_a_manifest_of_another_format_version_is_refused(tmp_path):
    directory = write_corpus(tmp_path, examples(10))
    manifest = json.loads((directory / MANIFEST_FILE).read_text())
    (directory / MANIFEST_FILE).write_text(json.dumps({**manifest, "format_version": 99}))
    with pytest.raises(DataError, match="format version 99"):
        PreparedCorpus(directory)
