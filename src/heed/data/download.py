"""`heed data get NAME DIR`: the recipes' corpora, from their official sources, checked by sha256.

    DIR/multi30k/         train.de train.en val.de val.en test_2016_flickr.de test_2016_flickr.en
    DIR/tatoeba-fra-eng/  fra.txt _about.txt
    DIR/NAME/SOURCE.md    where each file came from, its sha256, the license and what to cite

That is the layout configs/multi30k_de_en.yaml and configs/tatoeba_fra_eng.yaml read (their
`data.root` is the repository's data/ folder; `--set data.root=DIR` or HEED_DATA_ROOT points them
elsewhere).

Every download streams into a hidden temp file beside its target, is checked against the sha256
pinned here (the compressed file and the text inside it), and only then is renamed into place: an
interrupted or corrupted download leaves nothing that looks finished. A file already there with
the right sha256 is not fetched again. Sources:

- Multi30k task 1 (Elliott et al. 2016): the raw text of github.com/multi30k/dataset at commit
  a3d2e0d, pinned by commit, so every byte is known.
- Tatoeba fra-eng (manythings.org/anki, built from tatoeba.org): the site publishes one moving
  release. heed pins the 2019-04-07 release its recipe was measured on; a newer release there is
  refused unless `--any-release` (its sha256 is then recorded in SOURCE.md, and the recipe's
  figures in bench/RESULTS.md no longer apply).

`--mirror URL` fetches the same paths from another host (a mirror, or the tests' loopback server).
"""
from __future__ import annotations

import gzip
import hashlib
import http.client
import io
import os
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from heed.errors import DataError, HeedError, OutputError
from heed.plumbing.files import atomic_write_text, make_temp_dir, sweep_stale
from heed.version import __version__

MAX_DOWNLOAD_BYTES = 256 << 20  # far above any file here (the largest is 6 MB): a runaway answer stops
# Inflated, a file may hold at most this much (the largest here, fra.txt, is 11.7 MB): a small zip
# that inflates to gigabytes stops at this size, not after it is all in memory.
MAX_INFLATED_BYTES = 64 << 20
TIMEOUT_SECONDS = 60.0  # one read
DEADLINE_SECONDS = 600.0  # one whole file: a server that trickles a byte at a time still ends


@dataclass(frozen=True)
class Remote:
    """One file to download: `url`, its `sha256` (None: not pinned), and what it holds: a gzip of
    one text file (`members` {target name: sha256 of the text}), or a zip (`members` {name in the
    zip: sha256}); a member's sha256 None is written unchecked (a readme)."""

    url: str
    sha256: str | None
    kind: str  # "gzip" | "zip"
    members: dict[str, str | None]


@dataclass(frozen=True)
class Dataset:
    name: str
    files: tuple[Remote, ...]
    license: str
    cite: str
    note: str = ""
    size: str = ""  # the text it writes, for `heed data list`
    release: str = ""  # the pinned release of a source that publishes one moving release

    def citation(self, *, off_release: bool = False) -> str:
        """What to cite: the pinned release's, or with `off_release` the source without it (the
        files are some other release)."""
        if not self.release:
            return self.cite
        if off_release:
            return f"{self.cite} (a release other than the pinned {self.release}: name the date you downloaded it)"
        return f"{self.cite}, release of {self.release}."

    @property
    def file_names(self) -> list[str]:
        return [name for remote in self.files for name in remote.members]


_MULTI30K = "https://raw.githubusercontent.com/multi30k/dataset/a3d2e0d26b56f3846f66a952536ffed4e401d05a/" \
            "data/task1/raw/"

DATASETS: dict[str, Dataset] = {
    "multi30k": Dataset(
        "multi30k",
        files=(
            Remote(_MULTI30K + "train.de.gz", "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
                   "gzip", {"train.de": "2c2b73fd2b548fbcde3a875e0a78d6ee94d498bfdee6bd3eae3945779e9ddf72"}),
            Remote(_MULTI30K + "train.en.gz", "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
                   "gzip", {"train.en": "460a15fbd157e34a7a9957ee388c1ca247fe47af3ef25fb50442af6c274e0fc6"}),
            Remote(_MULTI30K + "val.de.gz", "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
                   "gzip", {"val.de": "660e09eb7e1da2f856ea13ee5ad3cf6d36b3d5b0b733c857e94c5747a3dfc660"}),
            Remote(_MULTI30K + "val.en.gz", "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
                   "gzip", {"val.en": "1f2a23d992769b5b3d209b0a10dd0b77c08cceb1f20dfb97ed0aafa49d107227"}),
            Remote(_MULTI30K + "test_2016_flickr.de.gz",
                   "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8", "gzip",
                   {"test_2016_flickr.de": "4be6b5b3236b79c25475c6bb829800a7ce559e9ba7a1f6c2394fe4d40be46d16"}),
            Remote(_MULTI30K + "test_2016_flickr.en.gz",
                   "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9", "gzip",
                   {"test_2016_flickr.en": "399a4382932c1aadd3ceb9bef1008d388a64c76d4ae4e9d4728c6f4301cac182"}),
        ),
        license="Non-commercial research and education only: the descriptions derive from Flickr30K, whose "
                "images abide by the Flickr Terms of Use (github.com/multi30k/dataset, README).",
        cite="Elliott, Frank, Sima'an and Specia (2016). Multi30K: Multilingual English-German Image "
             "Descriptions. Proceedings of the 5th Workshop on Vision and Language.",
        note="test_2016_flickr is the usual test set; the recipe scores on val (the benchmark copy has no test).",
        size="about 4.2 MB of text (6 files, downloaded gzipped)",
    ),
    "tatoeba-fra-eng": Dataset(
        "tatoeba-fra-eng",
        files=(
            Remote("https://www.manythings.org/anki/fra-eng.zip", None, "zip",
                   {"fra.txt": "0bb85dbaa1c896844649094d7eaf2e34bee34e84fe362b26ce7e8f2e12aae104",
                    "_about.txt": None}),
        ),
        license="CC-BY 2.0 (France), as the Tatoeba sentences it is built from; attribution: "
                "www.manythings.org/anki and tatoeba.org (_about.txt).",
        cite="Tatoeba (tatoeba.org), sentence pairs from manythings.org/anki",
        release="2019-04-07",
        note="English<TAB>French; newer releases add an attribution column, which heed's reader ignores.",
        size="11.7 MB of text (the pinned release's fra.txt, downloaded zipped)",
    ),
}

Progress = Callable[[str, int, int | None], None]  # (file name, bytes so far, bytes in all or None)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _url(url: str, mirror: str | None) -> str:
    """`url`, fetched from `mirror` (scheme://host[:port][/prefix]) when given, same path."""
    if mirror is None:
        return url
    parts = urllib.parse.urlsplit(url)
    base = mirror.rstrip("/")
    return f"{base}{parts.path}"


def _fetch(url: str, name: str, progress: Progress | None) -> bytes:
    """The body of `url` (at most MAX_DOWNLOAD_BYTES, within DEADLINE_SECONDS), or a HeedError
    naming the URL."""
    request = urllib.request.Request(url, headers={"User-Agent": f"heed/{__version__} (heed data get)"})
    started, deadline = time.monotonic(), DEADLINE_SECONDS
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
            total = response.headers.get("Content-Length")
            total_bytes = int(total) if total and total.isdigit() else None
            if total_bytes is not None and total_bytes > MAX_DOWNLOAD_BYTES:
                raise HeedError(f"{url}: the server offers {total_bytes:,} bytes, more than this file can be "
                                f"({MAX_DOWNLOAD_BYTES:,}); not downloaded")
            chunks, seen = [], 0
            # read1: what has arrived, so a server that trickles is checked against the deadline
            # between its bytes (read(n) would wait for all n of them)
            while chunk := response.read1(1 << 16):
                seen += len(chunk)
                if seen > MAX_DOWNLOAD_BYTES:
                    raise HeedError(f"{url}: more than {MAX_DOWNLOAD_BYTES:,} bytes; stopped")
                chunks.append(chunk)
                if progress is not None:
                    progress(name, seen, total_bytes)
                if time.monotonic() - started > deadline:
                    of = f" of {total_bytes:,}" if total_bytes is not None else ""
                    raise HeedError(f"{url}: {seen:,}{of} bytes after {deadline:.0f} s, the limit for one file; the "
                                    "server is too slow: try again later, or give --mirror")
            return b"".join(chunks)
    except urllib.error.HTTPError as e:
        raise HeedError(f"{url}: the server answered {e.code} {e.reason}") from None
    except http.client.HTTPException as e:  # BadStatusLine, IncompleteRead, ...: not an HTTP answer
        raise HeedError(f"{url}: the server's answer is not HTTP ({type(e).__name__}); check the URL and "
                        "--mirror") from None
    except (urllib.error.URLError, TimeoutError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise HeedError(f"{url}: cannot download ({reason}); check the network, or give --mirror") from None


def _inflated(stream: io.BufferedIOBase | IO[bytes], member: str, url: str) -> bytes:
    """All of `stream`, inflated, or a DataError once it passes MAX_INFLATED_BYTES (read in bounded
    pieces, so a zip bomb costs at most that much memory)."""
    data = stream.read(MAX_INFLATED_BYTES + 1)
    if len(data) > MAX_INFLATED_BYTES:
        raise DataError(f"{member} inflates to more than {MAX_INFLATED_BYTES >> 20} MiB, far more than this file "
                        "can be; nothing was written", path=url)
    return data


def _members(remote: Remote, data: bytes, url: str) -> dict[str, bytes]:
    """The files inside a download, by target name."""
    try:
        if remote.kind == "gzip":
            (name,) = remote.members
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
                return {name: _inflated(stream, name, url)}
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist())
            missing = [m for m in remote.members if m not in names]
            if missing:
                raise DataError(f"the archive holds no {missing[0]} (it holds {', '.join(sorted(names))})", path=url)
            out = {}
            for member in remote.members:
                with archive.open(member) as stream:
                    out[member] = _inflated(stream, member, url)
            return out
    except (OSError, EOFError, zipfile.BadZipFile) as e:
        raise DataError(f"not a valid {remote.kind} file ({e})", path=url) from None


@dataclass(frozen=True)
class Got:
    """What `get` wrote: the folder, and the files taken with --any-release although they are not
    the pinned release (empty when every file is as pinned)."""

    folder: Path
    off_release: tuple[str, ...] = ()


def get(name: str, directory: str | os.PathLike[str], *, mirror: str | None = None, any_release: bool = False,
        progress: Progress | None = None, datasets: dict[str, Dataset] | None = None) -> Got:
    """Download dataset `name` into `directory`/NAME (see the module doc). A download that fails
    leaves no folder it created behind."""
    table = DATASETS if datasets is None else datasets
    if name not in table:
        raise HeedError(f"no dataset named {name!r}; heed gets: {', '.join(table)}")
    dataset = table[name]
    target = Path(directory) / dataset.name
    if target.exists() and not target.is_dir():
        raise OutputError("exists and is not a directory; give another DIR", path=target)
    created = [p for p in (target, *target.parents) if not p.exists()]  # deepest first
    target.mkdir(parents=True, exist_ok=True)
    try:
        return _get_into(dataset, target, mirror=mirror, any_release=any_release, progress=progress)
    except BaseException:
        for folder in created:
            try:
                folder.rmdir()  # only while empty: nothing of the user's is removed
            except OSError:
                break
        raise


def _get_into(dataset: Dataset, target: Path, *, mirror: str | None, any_release: bool,
              progress: Progress | None) -> Got:
    sweep_stale(target, ".get.", ".partial")
    recorded: list[tuple[str, str, str]] = []  # (file, sha256, from url)
    off_release: list[str] = []
    for remote in dataset.files:
        url = _url(remote.url, mirror)
        if all(pinned is not None and _matches(target / m, pinned) for m, pinned in remote.members.items()):
            recorded += [(m, pinned, url) for m, pinned in remote.members.items() if pinned is not None]
            continue  # already here, as pinned
        data = _fetch(url, Path(urllib.parse.urlsplit(url).path).name, progress)
        if remote.sha256 is not None and _sha256(data) != remote.sha256:
            raise DataError(f"sha256 {_sha256(data)[:16]}... is not the pinned {remote.sha256[:16]}...: the download "
                            "is corrupt or not the file heed knows; nothing was written", path=url)
        members = _members(remote, data, url)
        for member, pinned in remote.members.items():
            digest = _sha256(members[member])
            if pinned is not None and digest != pinned:
                if not any_release:
                    raise DataError(f"{member} has sha256 {digest[:16]}..., not the pinned release's "
                                    f"{pinned[:16]}...: the source changed (a newer release?); nothing was written. "
                                    "--any-release takes it as it is (the recipe's published figures are for the "
                                    "pinned one)", path=url)
                off_release.append(member)
        staging = make_temp_dir(target, ".get.", ".partial")
        try:
            for member, content in members.items():
                (staging / member).write_bytes(content)
            for member in members:  # all checked: only now do they take their names
                os.replace(staging / member, target / member)
        finally:
            for leftover in staging.iterdir():
                leftover.unlink()
            staging.rmdir()
        recorded += [(m, _sha256(members[m]), url) for m in members]
    atomic_write_text(target / "SOURCE.md", _source_text(dataset, recorded, off_release))
    return Got(target, tuple(off_release))


def _matches(path: Path, sha256: str) -> bool:
    try:
        return path.is_file() and _sha256(path.read_bytes()) == sha256
    except OSError:
        return False


def _source_text(dataset: Dataset, recorded: list[tuple[str, str, str]], off_release: list[str]) -> str:
    lines = [f"# {dataset.name}", "", f"Downloaded by heed {__version__} (`heed data get {dataset.name}`).", "",
             f"License: {dataset.license}", "", f"Cite: {dataset.citation(off_release=bool(off_release))}", ""]
    if off_release:
        lines += [(f"Not the pinned release: {', '.join(off_release)} (taken with --any-release; the sha256 below is "
                  "what was downloaded, checked against nothing)."), ""]
    if dataset.note:
        lines += [dataset.note, ""]
    lines += ["| file | sha256 | from |", "|---|---|---|"]
    lines += [f"| {name} | {digest} | {url} |" for name, digest, url in recorded]
    return "\n".join(lines) + "\n"


__all__ = ["DATASETS", "Dataset", "Got", "Remote", "get"]
