"""Statistical priors at run time: eflomal's lexical, jump and fertility priors learned on a training
corpus (eflomal.calculate_priors, as its `eflomal-makepriors` tool does), kept in a file, and
eflomal run with them on a few new pairs only (`priors_input`), without the corpus.

The file is eflomal's own priors text framed by two heed lines, so a cut or foreign file is refused
before eflomal reads it:

    # heed priors 1<TAB>units=words|chars<TAB>pairs=N
    LEX / FERF / FERR / HMMF / HMMR lines (eflomal.write_priors)
    # end<TAB>lines=M                     (M: the eflomal lines above; a cut file has no such line)

`units` is what a target word is: whitespace words, or the target's characters without the spaces
(the dates task's gold). A model directory records its priors as PRIORS_FILE, listed in heed.json's
"files" (sha256 checked like every other file) and named by heed.json's "priors" (`heed data
priors MODEL FILE`). The `aligner` choice (ALIGNERS) says whose links an alignment takes: the
model's reading, the priors', or both joined by BOTH_RULE (bench/studies/align_priors.py) or another
Join; eflomal runs once a call, and every rule reads its two directions (priors_directions).
"""
from __future__ import annotations

import io
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np

from heed.data.corpus import Pair
from heed.data.pharaoh import Link
from heed.data.units import Units
from heed.errors import DataError, HeedError
from heed.explain.align_methods import NEIGHBOURS, Symmetrize, symmetrize
from heed.explain.external import INSTALL, eflomal_directions

if TYPE_CHECKING:
    from heed.data.codec import Codec

Aligner = Literal["model", "priors", "both"]
ALIGNERS: tuple[str, ...] = ("model", "priors", "both")
Join = Literal["intersect", "union", "product", "fill", "grow-diag-final", "arbitrate"]
JOINS: tuple[str, ...] = ("intersect", "union", "product", "fill", "grow-diag-final", "arbitrate")
MAX_WEIGHT = 10.0  # the product rule's exponent on the priors: 0 (the model alone) to this
# The rule `both` uses, measured on the dates gold (bench/studies/align_priors.py, bench/RESULTS.md;
# 1,000 new pairs, a tiny RNN, priors of its 3,000 training pairs): AER model 0.045, priors (eflomal)
# 0.321, intersect 0.326, union 0.071, product 0.025 (weight 1; 0.022 at 2, 0.079 at 4); arbitrate 0.315
# against the priors' 0.326 on the same eflomal sample (it keeps or drops only what eflomal proposes;
# level with the priors on the cross-domain silver).
BOTH_RULE: Join = "product"
PRIORS_FILE = "priors.eflomal"
MAGIC = "# heed priors 1"
END = "# end"
_FIELDS = {"LEX": 4, "FERF": 4, "FERR": 4, "HMMF": 3, "HMMR": 3}
# eflomal with priors on new pairs: 2 samplers and a quarter of its default iterations align 1,000
# dates pairs in 0.4 s against 1.6 s for its defaults (3, 1.0), AER 0.321 against 0.313
# (bench/studies/align_priors.py, bench/RESULTS.md): the priors carry what the iterations learn.
RUN_SAMPLERS = 2
RUN_REL_ITERATIONS = 0.25
MIN_KNOWN = 0.5  # below this share of the priors' words unknown to the model, they are another vocabulary's


@dataclass(frozen=True)
class Priors:
    """A priors file read and checked: its units, the corpus size it was learned on, eflomal's lines."""

    path: Path
    units: Units
    pairs: int
    lines: tuple[str, ...]

    def words(self, side: Literal["src", "tgt"], limit: int = 500) -> list[str]:
        """Up to `limit` distinct words of the lexical priors' source or target side."""
        seen: dict[str, None] = {}
        for line in self.lines:
            if line.startswith("LEX\t"):
                seen.setdefault(line.split("\t")[1 if side == "src" else 2], None)
                if len(seen) >= limit:
                    break
        return list(seen)


def unit_text(text: str, units: Units) -> str:
    """The text eflomal reads for `units`: the words, or every non-space character as a word."""
    return " ".join(text.split()) if units == "words" else " ".join("".join(text.split()))


def needs_eflomal() -> ModuleType:
    """The eflomal module, or a HeedError saying how to install it."""
    try:
        import eflomal
    except ImportError:
        raise HeedError(f"statistical priors need the eflomal package: {INSTALL}") from None
    return eflomal


def priors_text(pairs: Sequence[Pair], forward: Sequence[set[Link]], backward: Sequence[set[Link]], *,
                units: Units) -> str:
    """The priors file's text from a corpus and eflomal's two directions of it (source-first links)."""
    eflomal = needs_eflomal()
    src = [unit_text(p.src, "words") for p in pairs]
    tgt = [unit_text(p.tgt, units) for p in pairs]
    line = lambda links: " ".join(f"{i}-{j}" for i, j in sorted(links))
    counts = eflomal.calculate_priors(src, tgt, [line(f) for f in forward], [line(b) for b in backward])
    body = io.StringIO()
    eflomal.write_priors(body, *counts)
    lines = body.getvalue().splitlines()
    return "\n".join([f"{MAGIC}\tunits={units}\tpairs={len(pairs)}", *lines, f"{END}\tlines={len(lines)}"]) + "\n"


def read_priors(path: str | os.PathLike[str]) -> Priors:
    """A priors file, checked whole: its heed header, every eflomal line's fields and number (finite,
    >= 0), and the end line's count. DataError naming the file and line otherwise."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError("no such priors file", path=path) from None
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"cannot read the priors file: {e}", path=path) from None
    rows = text.split("\n")
    head = rows[0].split("\t")
    if head[0] != MAGIC or len(head) != 3 or not head[1].startswith("units=") or not head[2].startswith("pairs="):
        raise DataError(f"not a heed priors file (its first line is not '{MAGIC}<TAB>units=..<TAB>pairs=..'); write "
                        "one with `heed data align --priors-out FILE`", path=path, line=1)
    units, pairs = head[1][len("units="):], head[2][len("pairs="):]
    if units not in ("words", "chars") or not pairs.isdigit():
        raise DataError("the header's units must be words or chars and pairs a count", path=path, line=1)
    ends = [k for k, row in enumerate(rows) if row.startswith(END + "\t")]
    if not ends or rows[ends[-1] + 1:] not in ([], [""]):
        raise DataError(f"no '{END}' line at the end: the priors file is cut short (truncated); write it again",
                        path=path, line=len(rows) - (rows[-1] == ""))
    body = rows[1:ends[-1]]
    if rows[ends[-1]] != f"{END}\tlines={len(body)}":
        raise DataError(f"the end line does not count the {len(body):,} priors lines above it: the file was cut or "
                        "edited; write it again", path=path, line=ends[-1] + 1)
    for k, row in enumerate(body, 2):
        fields = row.split("\t")
        if _FIELDS.get(fields[0]) != len(fields):
            raise DataError(f"not a priors line ({'/'.join(_FIELDS)} with their fields, tab-separated)", path=path, line=k)
        try:
            alpha = float(fields[-1])
            if fields[0] != "LEX":
                int(fields[-2])
        except ValueError:
            raise DataError(f"{fields[-1]!r} is not a number", path=path, line=k) from None
        if not math.isfinite(alpha) or alpha < 0:
            raise DataError(f"a prior must be a finite number >= 0, got {fields[-1]}", path=path, line=k)
    return Priors(path, units, int(pairs), tuple(body))  # type: ignore[arg-type]


class KnownWords:
    """Whether the model's codec reads a word (a priors unit) without its unknown id."""

    def __init__(self, codec: Codec) -> None:
        self.codec = codec

    def __call__(self, side: str) -> Callable[[str], bool]:
        codec = self.codec
        unk = codec.special_ids()["unk_id"]
        if side == "src":
            return lambda word: unk not in codec.src_ids(codec.src_tokens(word))
        return lambda word: unk not in codec.tgt_ids(codec.tgt_tokens(word), [])


def check_vocabulary(priors: Priors, known: KnownWords) -> None:
    """Refuse priors learned on another corpus or vocabulary: fewer than MIN_KNOWN of their source
    (or target) words are words the model reads without an unknown token."""
    for side in ("src", "tgt"):
        words = priors.words(side)
        if not words:
            continue
        share = sum(map(known(side), words)) / len(words)
        if share < MIN_KNOWN:
            raise DataError(f"only {share:.0%} of the priors' {'source' if side == 'src' else 'target'} words are in "
                            "the model's vocabulary: priors of another corpus or vocabulary (learn them on the "
                            "model's training corpus)", path=priors.path)


Directions = tuple[list[set[Link]], list[set[Link]]]  # eflomal's forward and backward links, source-first


def priors_directions(pairs: Sequence[Pair], priors: Priors) -> Directions:
    """eflomal's two directions of each pair, run once on `pairs` alone with `priors` (target
    positions in the priors' units): what every rule joins (symmetrize, arbitrate_links)."""
    needs_eflomal()
    unit_pairs = [Pair(unit_text(p.src, "words"), unit_text(p.tgt, priors.units)) for p in pairs]
    return eflomal_directions(unit_pairs, priors_input=[line + "\n" for line in priors.lines],
                              samplers=RUN_SAMPLERS, rel_iterations=RUN_REL_ITERATIONS)


def priors_links(pairs: Sequence[Pair], priors: Priors, *, how: Symmetrize = "grow-diag-final",
                 directions: Directions | None = None) -> list[set[Link]]:
    """Each pair's links by eflomal run on `pairs` alone with `priors`, its two directions joined by
    `how`; `directions`: a run of priors_directions on these pairs, to join instead of running again."""
    ahead, behind = directions or priors_directions(pairs, priors)
    return [symmetrize(f, b, how) for f, b in zip(ahead, behind)]


# arbitrate_links: the least share of its target unit's row the model gives a link eflomal's
# directions dispute, for the link to be kept. Chosen on each model's in-domain pairs in
# bench/studies/cross_domain_alignment.py (bench/RESULTS.md, "Text unlike the training data").
ARBITRATE_SHARE = 0.05


def arbitrate_links(forward: set[Link], backward: set[Link], attention: np.ndarray, *,
                    share: float = ARBITRATE_SHARE) -> set[Link]:
    """eflomal's two directions of a pair joined with the model as the arbiter of the links they
    dispute (those of one direction only). grow-diag-final's steps (heed.explain.align_methods.
    symmetrize), from the links both directions agree on: add a disputed link beside a kept one
    whose source or target unit is still unlinked, then one between two unlinked units; but a
    disputed link only where the model's reading gives its cell at least `share` of its target
    unit's row on the source words, and of the links a step may add, the one the model weighs most
    first (grow-diag-final takes them in position order). Share 0: every disputed link may be added,
    the model only orders them. `attention`: the model's reading, (target units, source words); a
    link outside it (a pair cut to the model's lengths) weighs 0."""
    rows = np.asarray(attention, dtype=np.float64)  # (target units, source words)
    if rows.ndim == 1:  # an empty target's reading may come as (0,)
        rows = rows.reshape(len(rows), -1) if rows.size else np.zeros((0, 0))
    total = rows.sum(axis=1, keepdims=True)  # (target units, 1)
    shares = np.divide(rows, total, out=np.zeros_like(rows), where=total > 0)  # (target units, source words)
    weight = lambda link: float(shares[link[1], link[0]]) if link[1] < len(shares) and link[0] < shares.shape[1] else 0.0
    links = forward & backward
    allowed = links | {link for link in forward ^ backward if weight(link) >= share}
    linked_src, linked_tgt = {i for i, _ in links}, {j for _, j in links}

    def add(link: Link) -> None:
        links.add(link)
        linked_src.add(link[0])
        linked_tgt.add(link[1])

    while True:
        beside = {(i + di, j + dj) for i, j in links for di, dj in NEIGHBOURS} & allowed - links
        open_ = [(i, j) for i, j in beside if i not in linked_src or j not in linked_tgt]
        if not open_:
            break
        add(max(open_, key=lambda link: (weight(link), -link[0], -link[1])))
    for i, j in sorted(allowed - links, key=lambda link: (-weight(link), link)):  # final-and
        if i not in linked_src and j not in linked_tgt:
            add((i, j))
    return links


def fill_links(model: set[Link], priors: set[Link]) -> set[Link]:
    """The priors' links, and the model's links of the target units the priors leave unlinked."""
    linked = {j for _, j in priors}
    return priors | {(i, j) for i, j in model if j not in linked}


def join_links(model: Sequence[set[Link]], priors: Sequence[set[Link]], rule: Join = BOTH_RULE) -> list[set[Link]]:
    """The model's links joined with the priors', pair by pair: their intersection or union, the
    priors' filled in by the model's (fill_links), or grow-diag-final of the two as if they were
    two directions (heed.explain.align_methods.symmetrize), the priors' first: where a link of
    each would add the same word in its final step, the priors' is taken. (product and arbitrate
    read the model's attention: aligner_links.)"""
    if rule == "product" or rule == "arbitrate":
        raise ValueError(f"join_links does not join by {rule!r}, which reads the model's attention: use aligner_links")
    if len(model) != len(priors):
        raise ValueError(f"join_links: {len(model)} model alignments against {len(priors)} of the priors")
    if rule == "fill":
        return [fill_links(m, p) for m, p in zip(model, priors)]
    return [symmetrize(p, m, rule) for m, p in zip(model, priors)]


class Reading(Protocol):
    """What the rules read of the model's alignment of a pair (heed.results.Alignment, frozen: so
    read-only here)."""

    @property
    def src_words(self) -> list[str]: ...
    @property
    def tgt_words(self) -> list[str]: ...
    @property
    def attention(self) -> np.ndarray: ...  # (target units, len(src_words))
    @property
    def links(self) -> list[Link]: ...


def lexical_table(priors: Priors) -> dict[tuple[str, str], float]:
    """The priors' lexical counts, (source word, target unit) lowercased, as eflomal reads them."""
    table: dict[tuple[str, str], float] = {}
    for line in priors.lines:
        if line.startswith("LEX\t"):
            _, src, tgt, alpha = line.split("\t")
            key = (src.lower(), tgt.lower())
            table[key] = table.get(key, 0.0) + float(alpha)
    return table


def product_links(reading: Reading, table: dict[tuple[str, str], float], *, units: Units,
                  weight: float = 1.0) -> set[Link]:
    """Each target unit j linked to argmax_i attention[j, i] * p(i | j)^weight, where p(i | j) is the
    priors' lexical count of (source word i, target unit j), add-one smoothed and normalised over
    the source words: the model's probabilities times the priors'. weight 0: the model alone."""
    src = [w.lower() for w in reading.src_words]
    tgt = [u.lower() for u in (reading.tgt_words if units == "words" else list("".join(reading.tgt_words)))]
    attention = np.asarray(reading.attention, dtype=np.float64)  # (tgt units, src words)
    counts = np.array([[table.get((s, t), 0.0) + 1.0 for s in src] for t in tgt]).reshape(attention.shape)
    prior = counts / counts.sum(axis=1, keepdims=True)  # (tgt units, src words)
    score = attention * prior ** weight
    return {(int(score[j].argmax()), j) for j in range(score.shape[0]) if attention[j].sum() > 0}


def check_weight(weight: float) -> None:
    """A HeedError for a product weight outside [0, MAX_WEIGHT]."""
    if not (math.isfinite(weight) and 0 <= weight <= MAX_WEIGHT):
        raise HeedError(f"the priors' weight must be between 0 and {MAX_WEIGHT:g}, got {weight:g}")


def aligner_links(aligner: Aligner, model: Callable[[], Sequence[Reading]], pairs: Sequence[Pair],
                  priors: Priors | None, *, units: Units, rule: Join = BOTH_RULE,
                  weight: float = 1.0) -> list[set[Link]]:
    """The links `aligner` chooses for `pairs`: those of `model()` (the model's alignments, only
    computed when used), eflomal with `priors` on the pairs alone, or both joined by `rule`
    (product_links with `weight`; arbitrate_links, the model deciding the links eflomal's two
    directions dispute; or join_links: intersect, union, fill, grow-diag-final). A HeedError when
    priors are needed and missing, or counted in other units than `units`, or the weight is out of
    range."""
    if aligner not in ALIGNERS:
        raise HeedError(f"aligner must be one of {', '.join(ALIGNERS)}, got {aligner!r}")
    check_weight(weight)
    if aligner == "model":
        return [set(r.links) for r in model()]
    if priors is None:
        raise HeedError(f"aligner {aligner!r} needs statistical priors: the model directory's (heed data priors "
                        "MODEL FILE) or a priors file")
    if priors.units != units:
        raise DataError(f"priors counted in target {priors.units}, but the alignment is in {units}", path=priors.path)
    if aligner == "both" and rule == "product":
        table = lexical_table(priors)
        return [product_links(r, table, units=units, weight=weight) for r in model()]
    directions = priors_directions(pairs, priors)
    if aligner == "both" and rule == "arbitrate":
        return [arbitrate_links(f, b, r.attention) for f, b, r in zip(*directions, model(), strict=True)]
    theirs = priors_links(pairs, priors, directions=directions)
    if aligner == "priors":
        return theirs
    return join_links([set(r.links) for r in model()], theirs, rule)


def model_priors(directory: Path) -> Priors | None:
    """The priors a model directory records (heed.json's "priors", its sha256 in "files"), or None."""
    from heed.plumbing.files import file_digest

    meta = json.loads((directory / "heed.json").read_text(encoding="utf-8"))
    name = meta.get("priors")
    if name is None:
        return None
    if name != PRIORS_FILE or name not in meta.get("files", {}):
        raise DataError(f"heed.json names priors {name!r} it does not list with a sha256", path=directory / "heed.json")
    if file_digest(directory / name)[1] != meta["files"][name]:
        raise DataError("sha256 does not match heed.json (the priors changed after heed recorded them); record them "
                        "again with `heed data priors`", path=directory / name)
    return read_priors(directory / name)


def record_priors(directory: Path, source: Path, known: KnownWords) -> Priors:
    """Copy the priors file `source` into the model directory as PRIORS_FILE and list it in heed.json
    (its sha256 in "files", its name in "priors"). Checked first (read_priors, check_vocabulary);
    the file, then heed.json, is replaced atomically: a stop between leaves an unlisted file heed
    never reads."""
    from heed.plumbing.files import atomic_write_text, file_digest

    priors = read_priors(source)
    check_vocabulary(priors, known)
    meta_path = directory / "heed.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    atomic_write_text(directory / PRIORS_FILE, source.read_text(encoding="utf-8"))
    meta["files"][PRIORS_FILE] = file_digest(directory / PRIORS_FILE)[1]
    meta["priors"] = PRIORS_FILE
    atomic_write_text(meta_path, json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    return priors


def priors_for(model: Path, given: Path | None, known: KnownWords, units: Units) -> Priors:
    """The priors an `aligner` of priors uses: the file `given`, else the ones the model directory
    `model` records; checked against the model's vocabulary and the alignment's units."""
    if given is not None:
        priors = read_priors(given)
    else:
        from heed.checkpoint import find_model_dir

        directory = find_model_dir(model)
        recorded = model_priors(directory)
        if recorded is None:
            raise HeedError(f"{directory}: records no statistical priors, so --aligner priors/both has none to use: "
                            "write them with `heed data align --priors-out FILE` on its training corpus and record "
                            "them with `heed data priors MODEL FILE`, or give --priors FILE")
        priors = recorded
    if priors.units != units:
        raise DataError(f"priors counted in target {priors.units}, but the alignment is in {units}: use --tgt-units "
                        f"{priors.units} or priors made with --priors-units {units}", path=priors.path)
    check_vocabulary(priors, known)
    return priors


__all__ = [
    "ALIGNERS",
    "ARBITRATE_SHARE",
    "BOTH_RULE",
    "JOINS",
    "PRIORS_FILE",
    "Aligner",
    "Join",
    "KnownWords",
    "Priors",
    "aligner_links",
    "arbitrate_links",
    "check_vocabulary",
    "join_links",
    "model_priors",
    "needs_eflomal",
    "priors_directions",
    "priors_for",
    "priors_links",
    "priors_text",
    "read_priors",
    "record_priors",
    "unit_text",
]
