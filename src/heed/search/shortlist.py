"""A vocabulary shortlist: search over the target pieces a batch's sources make likely, not the
whole vocabulary (Marian's lexical shortlist; CTranslate2's vocabulary map, `use_vmap`).

A decoding step's output layer multiplies every row by every target embedding: for OPUS-MT's
58,101 pieces at beam 5 that is 119 MB of weights a step, about a third of the step. A shortlist
names, for each source piece, its `k` likeliest target pieces, and the `common` most frequent
target pieces that any sentence may need. A batch searches the union of its sources' lists, the
common pieces, the specials and any forced prefix's pieces: the output layer's rows are gathered
once per batch, and every step multiplies only those.

Built from a parallel corpus (`build_shortlist`, `heed data shortlist`): the common pieces are the
target side's most frequent, and a source piece's list ranks the other target pieces by how often
they occur in the sentences it occurs in, p(t | s) = c(s, t) / c(s), the counts over sentence
pairs. The search over a shortlist normalises over the shortlist's pieces (as Marian and
CTranslate2 do), so its scores and, sometimes, its outputs differ from the full search's: what it
costs in quality is measured (bench/pretrained_speed.py, bench/RESULTS.md), and it is used only when
asked (DecodeConfig.shortlist, `heed translate --shortlist`).

The file (SHORTLIST_FILE in a model directory, listed in heed.json with its sha256):

    {"format": "heed shortlist 1", "source_vocab": SHA256, "target_vocab": SHA256, "k": 50,
     "common": 500, "pairs": N, "always": [target pieces], "table": {source piece: [target pieces]},
     "entries": how many source pieces the table holds}

The two sha256 are of the model's src.vocab.json and tgt.vocab.json: a shortlist of another
vocabulary is refused, and so is a cut file (it is not JSON, or its "entries" do not count its
table). A CTranslate2 export writes it as its vocabulary map (vmap.txt, heed.export.ct2).
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import Tensor

from heed.errors import DataError, HeedError
from heed.nn.protocol import Encoded, SearchState, ShortlistModel
from heed.search.scoring import Hypothesis

FORMAT = "heed shortlist 1"
SHORTLIST_FILE = "shortlist.json"
DEFAULT_K = 50  # target pieces per source piece
DEFAULT_COMMON = 500  # the target side's most frequent pieces, always searched
MAX_K = 10_000


@dataclass(frozen=True)
class Shortlist:
    """A shortlist in target ids: `always` (the common pieces), `table` {source id: target ids}."""

    always: tuple[int, ...]
    table: dict[int, tuple[int, ...]]
    k: int
    common: int
    pairs: int

    def candidates(self, sources: Iterable[Sequence[int]], *, specials: Iterable[int] = (),
                   prefixes: Iterable[Sequence[int]] = ()) -> list[int]:
        """The sorted target ids a batch searches: its sources' lists, the common pieces, `specials`
        and every forced prefix's ids."""
        out = set(self.always)
        out.update(specials)
        for ids in sources:
            for s in ids:
                out.update(self.table.get(s, ()))
        for ids in prefixes:
            out.update(ids)
        return sorted(out)


def build_shortlist(pairs: Iterable[tuple[Sequence[int], Sequence[int]]], *, src_vocab: int, tgt_vocab: int,
                    k: int = DEFAULT_K, common: int = DEFAULT_COMMON, skip: Iterable[int] = ()) -> Shortlist:
    """A shortlist from a corpus of (source ids, target ids) pairs: the `common` most frequent target
    ids, and for each source id its `k` likeliest other target ids by p(t | s) = c(s, t) / c(s), counted
    over sentence pairs (each id once a sentence). `skip`: ids never listed (the specials)."""
    if not 1 <= k <= MAX_K or common < 0:
        raise HeedError(f"a shortlist needs 1 <= k <= {MAX_K:,} and common >= 0 (got k {k}, common {common})")
    skipped = set(skip)
    rows: list[Tensor] = []
    cols: list[Tensor] = []
    tgt_counts = torch.zeros(tgt_vocab, dtype=torch.long)
    src_counts = torch.zeros(src_vocab, dtype=torch.long)
    n = 0
    for src, tgt in pairs:
        s = torch.tensor(sorted(set(src) - skipped), dtype=torch.long)
        t = torch.tensor(sorted(set(tgt) - skipped), dtype=torch.long)
        n += 1
        src_counts[s] += 1
        tgt_counts[t] += 1
        rows.append(s.repeat_interleave(t.numel()))
        cols.append(t.repeat(s.numel()))
    if not n:
        raise HeedError("the corpus holds no sentence pair to count a shortlist from")
    always = [int(i) for i in tgt_counts.argsort(descending=True, stable=True)[:common] if tgt_counts[i] > 0]
    index = torch.stack([torch.cat(rows), torch.cat(cols)])
    pair_counts = torch.sparse_coo_tensor(index, torch.ones(index.size(1)), (src_vocab, tgt_vocab),
                                          check_invariants=True).coalesce()
    (s_ids, t_ids), counts = pair_counts.indices(), pair_counts.values()
    keep = ~torch.isin(t_ids, torch.tensor(always, dtype=torch.long))
    s_ids, t_ids, counts = s_ids[keep], t_ids[keep], counts[keep]
    # p(t | s) ranks t within s; src_counts is a constant per s, so the counts rank alone.
    # Sorted by source, then by count (descending), then by target id: ties break the same way each time.
    order = torch.argsort(t_ids, stable=True)
    order = order[torch.argsort(-counts[order], stable=True)]
    order = order[torch.argsort(s_ids[order], stable=True)]
    s_sorted, t_sorted = s_ids[order].tolist(), t_ids[order].tolist()
    table: dict[int, list[int]] = {}
    for s_id, t_id in zip(s_sorted, t_sorted):
        listed = table.setdefault(s_id, [])
        if len(listed) < k:
            listed.append(t_id)
    return Shortlist(tuple(always), {s: tuple(t) for s, t in table.items()}, k, common, n)


# ---------------------------------------------------------------------------------------------- the file


def shortlist_json(shortlist: Shortlist, *, src_tokens: Sequence[str], tgt_tokens: Sequence[str],
                   source_vocab: str, target_vocab: str) -> str:
    """The file's text: pieces as strings, the two vocabularies' sha256."""
    table = {src_tokens[s]: [tgt_tokens[t] for t in ids] for s, ids in sorted(shortlist.table.items())}
    data = {"format": FORMAT, "source_vocab": source_vocab, "target_vocab": target_vocab, "k": shortlist.k,
            "common": shortlist.common, "pairs": shortlist.pairs, "entries": len(table),
            "always": [tgt_tokens[t] for t in shortlist.always], "table": table}
    return json.dumps(data, ensure_ascii=False) + "\n"


def read_shortlist(path: str | os.PathLike[str], *, src_ids: dict[str, int], tgt_ids: dict[str, int],
                   source_vocab: str, target_vocab: str) -> Shortlist:
    """A shortlist file checked whole against a model's vocabularies (pieces -> ids, the sha256 of
    its src.vocab.json and tgt.vocab.json): a DataError naming the file otherwise."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError("no such shortlist file", path=path) from None
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"cannot read the shortlist: {e}", path=path) from None
    except json.JSONDecodeError as e:
        raise DataError(f"not a complete shortlist (JSON stops at line {e.lineno}: cut short or not one); write it "
                        "again with `heed data shortlist`", path=path) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise DataError(f"not a heed shortlist (its \"format\" is not {FORMAT!r}); write one with `heed data "
                        "shortlist`", path=path)
    table, always = data.get("table"), data.get("always")
    if not isinstance(table, dict) or not isinstance(always, list) or data.get("entries") != len(table):
        raise DataError("the shortlist's \"entries\" do not count its table: the file was cut or edited; write it "
                        "again", path=path)
    for side, recorded, own in (("source", data.get("source_vocab"), source_vocab),
                                ("target", data.get("target_vocab"), target_vocab)):
        if recorded != own:
            raise DataError(f"a shortlist of another {side} vocabulary (its sha256 is not the model's "
                            f"{side[:3]}.vocab.json's): build one for this model with `heed data shortlist`", path=path)

    def ids_of(pieces: Any, where: str, vocab: dict[str, int]) -> tuple[int, ...]:
        if not isinstance(pieces, list) or not all(isinstance(p, str) and p in vocab for p in pieces):
            raise DataError(f"{where} names pieces the model's vocabulary does not hold", path=path)
        return tuple(vocab[p] for p in pieces)

    parsed = {}
    for piece, targets in table.items():
        if piece not in src_ids:
            raise DataError(f"the table's source piece {piece!r} is not in the model's source vocabulary", path=path)
        parsed[src_ids[piece]] = ids_of(targets, f"the list of {piece!r}", tgt_ids)
    counts = [data.get(key) for key in ("k", "common", "pairs")]
    if not all(isinstance(c, int) and c >= 0 for c in counts):
        raise DataError("k, common and pairs must be counts", path=path)
    return Shortlist(ids_of(always, "\"always\"", tgt_ids), parsed, *counts)  # type: ignore[arg-type]


class Vocabularies(NamedTuple):
    """What a shortlist file is checked against: a model's pieces (id = position) and the sha256 of
    its src.vocab.json and tgt.vocab.json."""

    src_tokens: Sequence[str]
    tgt_tokens: Sequence[str]
    source_vocab: str
    target_vocab: str

    @classmethod
    def of(cls, directory: Path, codec: Any) -> Vocabularies:
        """A model directory's: the sha256 its heed.json lists for the two vocabulary files (checked
        with its other files when the directory loads: heed.checkpoint.verify_files)."""
        files = _meta(directory).get("files", {})
        return cls(list(codec.src_vocab.tokens), list(codec.tgt_vocab.tokens), files.get("src.vocab.json", ""),
                   files.get("tgt.vocab.json", ""))

    def read(self, path: str | os.PathLike[str]) -> Shortlist:
        return read_shortlist(path, src_ids={t: i for i, t in enumerate(self.src_tokens)},
                              tgt_ids={t: i for i, t in enumerate(self.tgt_tokens)},
                              source_vocab=self.source_vocab, target_vocab=self.target_vocab)

    def text(self, shortlist: Shortlist) -> str:
        return shortlist_json(shortlist, src_tokens=self.src_tokens, tgt_tokens=self.tgt_tokens,
                              source_vocab=self.source_vocab, target_vocab=self.target_vocab)


def _meta(directory: Path) -> dict[str, Any]:
    meta = json.loads((directory / "heed.json").read_text(encoding="utf-8"))
    return meta if isinstance(meta, dict) else {}


def recorded_shortlist(directory: Path, codec: Any) -> Shortlist | None:
    """The shortlist a model directory records (heed.json's "shortlist", its sha256 in "files"),
    checked against the model's vocabularies; None, reading nothing more, when it records none."""
    from heed.plumbing.files import file_digest

    meta = _meta(directory)
    name = meta.get("shortlist")
    if name is None:
        return None
    if name != SHORTLIST_FILE or name not in meta.get("files", {}):
        raise DataError(f"heed.json names a shortlist {name!r} it does not list with a sha256",
                        path=directory / "heed.json")
    if file_digest(directory / name)[1] != meta["files"][name]:  # checked even where loading skips the others
        raise DataError("sha256 does not match heed.json (the shortlist changed after heed recorded it); record it "
                        "again with `heed data shortlist`", path=directory / name)
    return Vocabularies.of(directory, codec).read(directory / name)


def record_shortlist(directory: Path, text: str) -> None:
    """Write a shortlist's file text into a model directory as SHORTLIST_FILE and list it in heed.json
    (its sha256 in "files", its name in "shortlist"): the file, then heed.json, replaced atomically,
    so a stop between leaves an unlisted file that heed never reads."""
    from heed.plumbing.files import atomic_write_text, file_digest

    meta_path = directory / "heed.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    atomic_write_text(directory / SHORTLIST_FILE, text)
    meta["files"][SHORTLIST_FILE] = file_digest(directory / SHORTLIST_FILE)[1]
    meta["shortlist"] = SHORTLIST_FILE
    atomic_write_text(meta_path, json.dumps(meta, indent=2, ensure_ascii=False) + "\n")


def vmap_text(shortlist: Shortlist, *, src_tokens: Sequence[str], tgt_tokens: Sequence[str]) -> str:
    """CTranslate2's vocabulary map (vmap.txt): a line "<TAB>common pieces" that every batch searches,
    then "source piece<TAB>its target pieces" (space-separated) per listed source piece."""
    lines = ["\t" + " ".join(tgt_tokens[t] for t in shortlist.always)]
    lines += [f"{src_tokens[s]}\t{' '.join(tgt_tokens[t] for t in ids)}" for s, ids in sorted(shortlist.table.items())]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- the search


class _Step(NamedTuple):
    logits: Tensor  # (rows, n) over the shortlist
    state: SearchState
    attention: Tensor | None


class _Restricted:
    """A model seen through the ids `ids` (n,) sorted long: its step multiplies only those rows of
    the output layer (gathered once), and search's token ids are positions in `ids`."""

    def __init__(self, model: ShortlistModel, ids: Tensor) -> None:
        self.model, self.ids = model, ids
        self.output = model.output_rows(ids)  # features (rows, d) -> logits (rows, n)
        position = {int(t): k for k, t in enumerate(ids.tolist())}
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = (position[i] for i in (model.pad_id, model.bos_id,
                                                                                   model.eos_id, model.unk_id))
        self.position = position

    def encode(self, src: Tensor, src_lengths: Tensor) -> Encoded:
        return self.model.encode(src, src_lengths)

    def init_state(self, enc: Encoded) -> SearchState:
        return self.model.init_state(enc)

    def step(self, prev_tokens: Tensor, state: SearchState, enc: Encoded) -> _Step:
        """prev_tokens (rows,) positions in ids -> logits (rows, n) over the shortlist."""
        out = self.model.step_features(self.ids[prev_tokens], state, enc)
        return _Step(self.output(out.features), out.state, out.attention)

    def inward(self, prefixes: Sequence[Sequence[int]]) -> list[list[int]]:
        """Forced prefixes in the model's ids -> in positions of the shortlist."""
        return [[self.position[t] for t in prefix] for prefix in prefixes]

    def outward(self, hypotheses: Sequence[Hypothesis]) -> list[Hypothesis]:
        """Hypotheses in positions of the shortlist -> in the model's ids."""
        ids = self.ids.tolist()
        return [Hypothesis([ids[t] for t in h.tokens], h.score, h.log_prob, h.attention) for h in hypotheses]


def restricted_to(model: ShortlistModel, shortlist: Shortlist, sources: Sequence[Sequence[int]],
                  prefixes: Sequence[Sequence[int]] | None, device: torch.device) -> _Restricted:
    """`model` seen through a batch's candidates (Shortlist.candidates of its sources, the specials
    and its forced prefixes' ids): heed.search.translate_ids searches it in place of the model."""
    specials = (model.pad_id, model.bos_id, model.eos_id, model.unk_id)
    ids = shortlist.candidates(sources, specials=specials, prefixes=prefixes or ())
    return _Restricted(model, torch.tensor(ids, dtype=torch.long, device=device))


def needs_shortlist_model(model: object) -> ShortlistModel:
    """`model` as a ShortlistModel, or a HeedError saying which models search a shortlist."""
    if isinstance(model, ShortlistModel) and getattr(model, "copy", None) is None:
        return model
    raise HeedError("--shortlist searches a Transformer's output layer in part (the model directory) or a CTranslate2 "
                    "export with a vocabulary map; this model cannot: translate without --shortlist")


__all__ = [
    "DEFAULT_COMMON",
    "DEFAULT_K",
    "FORMAT",
    "SHORTLIST_FILE",
    "Shortlist",
    "Vocabularies",
    "build_shortlist",
    "needs_shortlist_model",
    "read_shortlist",
    "record_shortlist",
    "recorded_shortlist",
    "restricted_to",
    "shortlist_json",
    "vmap_text",
]
