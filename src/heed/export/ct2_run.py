"""A CTranslate2 export (heed.export.ct2) run by CTranslate2's own search, behind heed's Translator.

CTranslate2 has no step function to hand heed's search: it searches itself, in C++. So this model
is an `OwnSearchModel` (heed.search): `translate_ids` takes what heed's `search.translate_ids`
takes (source ids, a DecodeConfig, batch size, prefixes) and gives the same `Decoded` hypotheses,
with heed's tokens, scores and lengths:
- greedy, and the best hypothesis of a beam search without a length penalty: CTranslate2's search
  finishes and ranks, and its stop (the best beam finished) is heed's (`ranking`: "ctranslate2";
  a source whose best it cut at the limit is searched again as below, as heed forces EOS on every
  beam there);
- a length penalty (power or GNMT), an n-best list, min_len > 1: CTranslate2 searches each source to
  its own limit without an early stop and heed ranks every hypothesis it finished by heed's score
  (`ranking`: "heed"), which gives heed's n-best: heed's search stops only where nothing finished
  later could rank above them (and a source the limit cut short of that is searched by heed's rule
  over CTranslate2's steps). On 1,000 sentences of a trained model at beam 5 with the power
  penalty, the best hypothesis of all 1,000 is heed's (bench/RESULTS.md, "The CTranslate2 fast
  path's exactness"), at about three times the time of CTranslate2's own stop with a penalty
  (`beam` finished), which gave another best for 47 of them;
- with stopping "beam" (a sentence ends once `beam` hypotheses finished: DecodeConfig.stopping),
  CTranslate2's own stop (patience 1) is heed's: without a penalty or with the power one, min_len
  <= 1 and no prefix, CTranslate2 stops and ranks (`ranking`: "ctranslate2"; without
  min_decoding_length, whose renormalised first step would shift every score; with min_len 1 a
  source whose EOS ranks among its first step's best `beam` would finish the empty hypothesis,
  which heed's search does not: it is searched with min_decoding_length 1 and that step's shift
  taken off, found first by a one-step probe while such sources are common (FirstStepEnds), else
  searched again where it returned the empty hypothesis; a source the count did not stop before
  its own limit is searched to its limit as with the GNMT penalty, min_len > 1 or a prefix: heed
  keeps what its beam stop finished there, every hypothesis that ended by the step where the
  `beam`-th ended, and ranks them);
- `max_len_a`/`max_len_b` per source (CTranslate2 takes one limit a call: where heed ranks, batches
  are made of sources of one limit; else the batch's largest, and a source whose output passed its
  own limit is decoded again alone with it);
- min_len, n-best, prefixes, no_repeat_ngram, forbid_unk, sampling (temperature, top-k, top-p,
  seed through ctranslate2.set_random_seed: CTranslate2's draws, not heed's).
Refused with a message naming the option: the coverage penalty (heed's is GNMT's over every step,
CTranslate2's is applied in its own search) and everything that needs heed's step or teacher-forced
pass (the explorer's beam tree and alternatives, align, attention layers, attribution, ensembles):
those take the model directory or an ONNX export.

Scores: `log_prob` is CTranslate2's sum over the tokens and EOS, the model's own as heed's, except
where tokens are disallowed (EOS before min_len, except where heed ranks and, with stopping "beam",
where CTranslate2 ranks: both search without min_decoding_length; <unk> with forbid_unk,
no_repeat_ngram's repeats, and PAD and BOS for a source searched again because CTranslate2 put them
in a beam): CTranslate2 renormalises over the rest there, heed does not, so such scores differ by
the disallowed tokens' probability, and where that differs between beams (forbid_unk,
no_repeat_ngram) the searches can part. The attention of each output
token and of EOS is the last decoder layer's cross-attention averaged over its heads, as heed's; a
hypothesis cut at max_len gets EOS's log-probability from a teacher-forced CTranslate2 pass
(score_batch; only those that can still rank among the n-best), as heed's search forces and
charges EOS there (and, from greedy search or sampling, a row of zeros for its attention);
a forced prefix (which CTranslate2's scores leave out) is charged its log-probability the same way,
past a many-language model's target language token (scored 0, as heed's search does).
"""
from __future__ import annotations

import functools
import math
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor

from heed.decode_config import DecodeConfig
from heed.errors import Abandoned, ConfigError, HeedError, ModelDirError
from heed.export.ct2 import VMAP_FILE, require_ctranslate2
from heed.export.onnx import Manifest
from heed.plumbing.runtime import cpu_int8_products_exact
from heed.search import Decoded, Hypothesis, length_penalty, max_output_lengths

# Any non-zero length penalty turns off CTranslate2's early exit (which is only right without one);
# this one leaves its scores raw sums of log-probabilities (length ** 1e-30 == 1.0f).
RAW_SCORES = 1e-30
# The share of sources whose EOS ranks among the first step's best `beam` above which a stopping "beam"
# search probes the first step (CT2Seq2Seq._probe_first_step): the probe (encoder and one step) costs
# 6-8% of a tc-big search at batch 64; a source the search without it finishes empty is searched again.
PROBE_RATE = 0.07
# Where heed ranks a stopping "beam" search, CTranslate2 first searches only as far as this share of
# the model's last STOPS_KEPT such searches stopped by (BeamStops), once MIN_STOPS are known (the largest,
# while fewer than 10 are).
STOP_QUANTILE = 0.9
STOPS_KEPT = 256
MIN_STOPS = 1
NEEDS_HEED = ("a CTranslate2 export translates with CTranslate2's own search, which has no step or teacher-forced "
              "pass to give heed; {what} needs the model directory or an ONNX export (heed export --format onnx)")


def ranking(cfg: DecodeConfig, *, prefixed: bool = False) -> str:
    """Who finishes and ranks a search's hypotheses (`prefixed`: some source has a forced prefix),
    each path exact w.r.t. heed's search. With stopping "exact" (heed's default):
    - "ctranslate2" (the fast path) for the best hypothesis alone without a length penalty and with
      min_len <= 1: CTranslate2 stops once its best beam finished; every live beam is below it then,
      so heed's search stops there or earlier, with the same best (min_len 1 renormalises the first
      step, which shifts every hypothesis of a source alike);
    - "heed" for a length penalty (power or GNMT), an n-best list or min_len > 1: CTranslate2 searches
      each source to its own limit without an early stop, and heed ranks everything it finished by
      its own score. heed's search stops once no live beam can beat its n_best-th finished (log-probs
      only fall, and lp grows with length: heed.search.beam._is_done), so nothing finished later ranks
      above its n-best: the full search's n-best is heed's (where the limit cut it with EOS among the
      best at CTranslate2's last step, which leaves out beams heed finishes there, and those could
      rank, the source is searched by heed's rule over CTranslate2's steps, `_searched`; not with a
      prefix, no_repeat_ngram or a shortlist, whose steps it does not read).
      CTranslate2's own stop with a penalty (`beam` finished) is not heed's: on a trained model it
      gave another best for 47 of 1,000 sentences (bench/RESULTS.md, "The CTranslate2 fast path's
      exactness");
    - "none" for greedy search and sampling, which rank nothing.
    With stopping "beam" (a sentence ends once `beam` hypotheses finished), CTranslate2's stop with any
    penalty (patience 1: `beam` finished, each EOS among a step's best `beam` candidates) is heed's:
    - "ctranslate2" without a length penalty or with the power one, min_len <= 1 and no prefix, any
      n-best: CTranslate2 stops, ranks (power: its score / |Y|^alpha with |Y| counting EOS, heed's)
      and returns its `beam` best; a source it did not stop by that count before its own limit (heed
      forces EOS at the limit where CTranslate2 returns what it cut) is searched again as below; with
      min_len 1 CTranslate2 searches without min_decoding_length (which would renormalise the first
      step without EOS, adding to every hypothesis of a source the same -log(1 - p(EOS first)), which
      the power penalty turns into a reordering): its live beams are heed's, and only the empty
      hypothesis, where an EOS among the first step's best `beam` finished it, differs (it counts
      toward the stop); such a source is searched with min_decoding_length 1 and that step's shift
      taken off (`_beam_shifted`): found first by a one-step probe while such sources are common
      (FirstStepEnds, not with a shortlist, whose candidates are the batch's), else searched again
      where its returned hypotheses hold the empty one (`_beam_raw`), and as below only where the
      shift could reorder its n-best;
    - "heed" for the GNMT penalty (CTranslate2 would return its `beam` best by raw sums, which can
      leave out one of heed's n-best), min_len > 1 (CTranslate2's min_decoding_length renormalises
      each beam's step apart) or a prefix (its score leaves the prefix out): CTranslate2 searches each
      source with no early stop, first only as far as the model's earlier such searches stopped
      (BeamStops) and then to the limit for the sources not stopped by then, and heed keeps what its
      beam stop finished (the hypotheses that ended by the step where the `beam`-th ended; all, with
      EOS forced on the live beams, where none such came before the limit) and ranks them."""
    if cfg.sampling or cfg.beam_size == 1:
        return "none"
    if cfg.stopping == "beam":
        fast = cfg.length_penalty == 0 or cfg.length_norm == "power"
        return "ctranslate2" if fast and cfg.min_len <= 1 and not prefixed else "heed"
    if cfg.n_best == 1 and cfg.length_penalty == 0 and cfg.min_len <= 1:
        return "ctranslate2"
    return "heed"


def needs_heed(what: str) -> HeedError:
    return HeedError(NEEDS_HEED.format(what=what))


@dataclass
class FirstStepEnds:
    """How many of the sources a model's stopping "beam" searches (min_len >= 1, ranked by
    CTranslate2) have seen put EOS among their first step's best `beam` (`ended`, of `seen`; with a
    prior of one in two), and so whether the next search probes the first step first
    (CT2Seq2Seq._probe_first_step): where EOS ranks there a search without min_decoding_length finishes
    the empty hypothesis, which heed's does not, and the source is searched twice. Counted from the
    probe's findings, or from the sources searched again where none ran."""

    ended: int = 1
    seen: int = 2

    def add(self, ended: int, seen: int) -> None:
        self.ended += ended
        self.seen += seen

    @property
    def probing(self) -> bool:
        return self.ended >= PROBE_RATE * self.seen


@dataclass
class BeamStops:
    """Where a model's stopping "beam" searches ranked by heed stopped: the length (with EOS) of the
    `beam`-th hypothesis to end, as a share of the source's limit, for the last STOPS_KEPT sources.
    CTranslate2 cannot stop where heed's beam stop does there (its count takes in the hypotheses
    that end before min_len, and its min_decoding_length would renormalise), so it searches with no
    early stop: to the limit, or first only to `reach`, the STOP_QUANTILE of those shares, where
    the sources that had not stopped are searched again to the limit."""

    shares: deque[float] = field(default_factory=lambda: deque(maxlen=STOPS_KEPT))

    def add(self, length: int, limit: int) -> None:
        self.shares.append(length / max(limit, 1))

    def reach(self, limit: int, least: int) -> int:
        """How far to search first a batch whose limit is `limit`; `least`: no hypothesis shorter
        than it can count (min_len and EOS)."""
        if len(self.shares) < MIN_STOPS:
            return limit
        share = sorted(self.shares)[math.ceil(STOP_QUANTILE * len(self.shares)) - 1]
        return min(limit, max(least, math.ceil(share * limit)))


def _without(log_p: float) -> float:
    """log(1 - p) of a log-probability: the log of the mass a step leaves to the rest once a token
    (EOS) is taken out; -inf where it had it all. Its negative is what renormalising without it adds."""
    return math.log1p(-math.exp(log_p)) if log_p < 0 else -math.inf


def _nothing() -> SimpleNamespace:
    """A result with no hypotheses: where a source's are those of a search again, kept apart."""
    return SimpleNamespace(hypotheses=[], scores=[], attention=None)


class CT2Seq2Seq:
    """A CTranslate2 model directory behind heed's Translator (heed.search.OwnSearchModel)."""

    has_attention = True

    def __init__(self, manifest: Manifest, src_tokens: Sequence[str], tgt_tokens: Sequence[str]) -> None:
        self._ct2 = require_ctranslate2()
        self.manifest = manifest
        self.family = manifest.model.family
        ids = manifest.data["special_ids"]
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = (int(ids[name]) for name in ("pad", "bos", "eos", "unk"))
        self.src_tokens = list(src_tokens)
        self.tgt_tokens = list(tgt_tokens)
        self._tgt_ids = {t: i for i, t in enumerate(self.tgt_tokens)}
        self._translators: dict[int, Any] = {}
        self.first_step_ends = FirstStepEnds()
        self.beam_stops = BeamStops()
        self._translator()  # load now: a damaged model fails at load

    @property
    def int8(self) -> bool:
        return self.manifest.int8

    @functools.cached_property
    def compute_type(self) -> str:
        """CTranslate2's compute type: the model's own ("default": int8 products for an int8
        export), except an int8 export on a CPU whose int8 products saturate (x86 without VNNI,
        heed.plumbing.runtime.cpu_int8_products_exact): there CTranslate2's u8s8 GEMM changes many
        translations where int16 changes few (bench/RESULTS.md, "int8 on a CPU without VNNI"), so
        its weights are multiplied in int16, or in float32 where this CTranslate2 has no int16
        products."""
        if not self.manifest.int8 or cpu_int8_products_exact():
            return "default"
        return "int16" if "int16" in self._ct2.get_supported_compute_types("cpu") else "float32"

    def num_parameters(self) -> int:
        """The exported PyTorch model's, as its manifest recorded it."""
        return int(self.manifest.data.get("parameters", 0))

    def _translator(self, *, fresh: bool = False) -> Any:
        """CTranslate2's translator for torch's current thread count (`heed translate --threads N`),
        kept; `fresh`: a new one (its sampling generator starts from the seed set last: CTranslate2
        seeds a translator's generator once, when it draws first)."""
        threads = torch.get_num_threads()
        translator = None if fresh else self._translators.get(threads)
        if translator is None:
            try:
                translator = self._ct2.Translator(str(self.manifest.directory), device="cpu",
                                                  compute_type=self.compute_type, inter_threads=1,
                                                  intra_threads=threads)
            except (RuntimeError, ValueError) as e:
                raise ModelDirError(f"{self.manifest.directory}: CTranslate2 cannot load the model "
                                    f"({str(e).splitlines()[0]}); export the model again with this heed") from None
            if not fresh:
                self._translators[threads] = translator
        return translator

    # ------------------------------------------------------------------ what heed's search would call

    def encode(self, *args: Any, **kwargs: Any) -> Any:
        raise needs_heed("heed's search")

    def step(self, *args: Any, **kwargs: Any) -> Any:
        raise needs_heed("heed's search")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise needs_heed("a teacher-forced pass (alignments, the explorer's alternatives)")

    # ------------------------------------------------------------------ its own search

    def translate_ids(self, src_ids: Sequence[list[int]], cfg: DecodeConfig, *, batch_size: int = 64,
                      prefixes: Sequence[Sequence[int]] | None = None, free_prefix: int = 0, trace: bool = False,
                      stop: Callable[[], bool] | None = None, attention: bool = True) -> list[Decoded]:
        """As heed.search.translate_ids: every source (ids without specials) decoded, in input
        order, sources of similar length batched together; `stop` is asked before every batch.
        `attention`: return each hypothesis' attention (CTranslate2 is a third slower with it);
        without, Hypothesis.attention is None. `cfg.shortlist` searches the export's vocabulary
        map (VMAP_FILE, written from the model's shortlist)."""
        if trace:
            raise needs_heed("the beam search tree (the explorer)")
        if cfg.shortlist:
            self._check_shortlist(prefixes)
        if cfg.coverage_penalty:
            raise ConfigError("a CTranslate2 export does not apply heed's coverage penalty; set it to 0, or translate "
                              "with the model directory or an ONNX export",
                              field="decode.coverage_penalty")
        translator = self._translator()
        if cfg.sampling:  # a seed gives the same samples of the same batch (not, as heed's, in any batch)
            self._ct2.set_random_seed(cfg.seed if cfg.seed is not None else random.SystemRandom().randrange(2**31))
            translator = self._translator(fresh=True)
        # heed's own per-source limit, each source with its EOS as heed's batches have it
        limits = max_output_lengths(torch.tensor([len(ids) + 1 for ids in src_ids]), cfg).tolist()
        ranks = ranking(cfg, prefixed=prefixes is not None and any(prefixes))
        results: list[Decoded] = [Decoded([]) for _ in src_ids]
        for chunk in self._batches(src_ids, limits, ranks, batch_size):
            if stop is not None and stop():
                raise Abandoned()
            got = self._decode(translator, [src_ids[k] for k in chunk], [limits[k] for k in chunk],
                               None if prefixes is None else [prefixes[k] for k in chunk], cfg, free_prefix,
                               attention, ranks)
            for k, decoded in zip(chunk, got):
                results[k] = decoded
        return results

    @staticmethod
    def _batches(src_ids: Sequence[list[int]], limits: list[int], ranks: str, batch_size: int) -> list[list[int]]:
        """The sources' indices in batches of `batch_size` at most, longest sources first; where heed
        ranks, each batch of one output limit, as CTranslate2 searches each source to its own."""
        order = sorted(range(len(src_ids)), key=lambda k: -len(src_ids[k]))
        if ranks != "heed":
            return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
        groups: dict[int, list[int]] = {}
        for k in order:
            groups.setdefault(limits[k], []).append(k)
        return [group[start:start + batch_size] for group in groups.values()
                for start in range(0, len(group), batch_size)]

    def _check_shortlist(self, prefixes: Sequence[Sequence[int]] | None) -> None:
        """A HeedError unless the export has a vocabulary map that can search these prefixes: every
        forced piece must be one that each batch searches (CTranslate2 looks a prefix's pieces up in
        its map as it stood for the first batch; heed.export.ct2._vmap_order)."""
        vmap = self.manifest.directory / VMAP_FILE
        if not vmap.is_file():
            raise HeedError("--shortlist: this CTranslate2 export has no vocabulary map; record a shortlist in the "
                            "model directory (heed data shortlist) and export it again, or translate without it")
        if prefixes is not None and any(prefixes):
            with open(vmap, encoding="utf-8") as lines:
                always = set(lines.readline().rstrip("\n").split("\t")[-1].split(" "))
            always |= {self.tgt_tokens[i] for i in (self.unk_id, self.bos_id, self.eos_id)}
            if any(self.tgt_tokens[i] not in always for p in prefixes for i in p):
                raise HeedError("--shortlist in a CTranslate2 export forces only pieces its shortlist always searches; "
                                "translate this prefix without --shortlist")

    def _decode(self, translator: Any, src_ids: list[list[int]], limits: list[int],
                prefixes: list[Sequence[int]] | None, cfg: DecodeConfig, free: int, attention: bool,
                ranks: str) -> list[Decoded]:
        """One translate_batch call at the batch's largest output limit (where heed ranks, the
        batch's one: `_batches`). A source is decoded again alone where that was not heed's search:
        its best output passed its own limit; where CTranslate2 ranks, its best was cut at the limit
        (heed's search forces EOS on every live beam there, and the best of those may be another: it
        is searched to the limit and ranked by heed); a hypothesis holds PAD or BOS (which heed never
        emits; CTranslate2 is asked to suppress them only then, as it renormalises the rest of the
        distribution when it does). With stopping "beam", `_translate_batch` searches again a source it did
        not settle (`_beam_settled`)."""
        out = self._translate_batch(translator, src_ids, max(limits), prefixes, cfg, free, attention, ranks=ranks,
                                    suppress=False, own=limits)
        for i, (decoded, limit) in enumerate(zip(out, limits)):
            cut = ranks == "ctranslate2" and cfg.stopping == "exact" and self._longest(decoded) == limit
            if cut or self._longest(decoded) > limit or self._emits_specials(decoded):
                prefix = None if prefixes is None else [prefixes[i]]
                again = "heed" if cut else ranks
                alone = self._alone(translator, src_ids[i], limit, prefix, cfg, free, attention, again)
                if again == "ctranslate2" and self._longest(alone) == limit:
                    alone = self._alone(translator, src_ids[i], limit, prefix, cfg, free, attention, "heed")
                out[i] = alone
        return out

    @staticmethod
    def _longest(decoded: Decoded) -> int:
        """The length of its best hypothesis (0 for none)."""
        return len(decoded.hypotheses[0].tokens) if decoded.hypotheses else 0

    def _alone(self, translator: Any, src_ids: list[int], limit: int, prefix: list[Sequence[int]] | None,
               cfg: DecodeConfig, free: int, attention: bool, ranks: str) -> Decoded:
        """One source decoded alone at its own limit, searched again with PAD and BOS suppressed where
        its hypotheses hold them."""
        alone = self._translate_batch(translator, [src_ids], limit, prefix, cfg, free, attention, ranks=ranks,
                                      suppress=False)[0]
        if self._emits_specials(alone):
            alone = self._translate_batch(translator, [src_ids], limit, prefix, cfg, free, attention, ranks=ranks,
                                          suppress=True)[0]
        return alone

    def _translate_batch(self, translator: Any, src_ids: list[list[int]], limit: int,
                         prefixes: list[Sequence[int]] | None,
                         cfg: DecodeConfig, free: int, attention: bool, *, ranks: str, suppress: bool,
                         own: list[int] | None = None, whole: bool = False) -> list[Decoded]:
        """One translate_batch call at output limit `limit` (`own`: each source's own limit, else
        `limit`). Where heed ranks (`ranks`: `ranking`'s), CTranslate2
        searches to the limit (a patience past any count of finished hypotheses, and a penalty, which
        turns its early exit off, that leaves the scores raw sums) and returns every hypothesis it
        finished; min_len drops the shorter ones instead of CTranslate2's min_decoding_length, which
        renormalises each beam's step apart and so would change which beams live; with stopping "beam"
        only those its stop finished are kept (`_beam_stopped`); the attention of the n-best comes
        from one forced pass (`_attention_of`). Where CTranslate2 ranks with stopping "beam", it stops
        once `beam` finished (patience 1, and a penalty, the power one or RAW_SCORES, which turns its
        early exit off; min_decoding_length 0) and returns its `beam` best, whose scores are made raw sums again
        (`_beam_raw`); the sources not settled so are searched again where heed ranks, a batch per limit.
        Where heed ranks with stopping "beam", CTranslate2 first searches only as far as this model's
        searches have stopped (BeamStops.reach; `whole`: to the limit at once): the sources whose beam
        stop came by then are heed's (its stop depends only on the steps before it), the others are
        searched again to the limit."""
        own = own or [limit] * len(src_ids)
        source = [[self.src_tokens[i] for i in ids] + [self.src_tokens[self.eos_id]] for ids in src_ids]
        target_prefix = None
        if prefixes is not None and any(prefixes):
            target_prefix = [[self.tgt_tokens[i] for i in p] or None for p in prefixes]
        ranked_by_heed = ranks == "heed"
        beam_stop = ranks == "ctranslate2" and cfg.stopping == "beam"
        reach = limit  # how far CTranslate2 searches
        if ranked_by_heed and cfg.stopping == "beam" and not whole:
            reach = self.beam_stops.reach(limit, least=min(cfg.min_len, limit) + 1)
        options = self._options(cfg, limit, reach, ranks=ranks, attention=attention, suppress=suppress)
        shifted = None  # where the first step was probed: the sources searched with min_decoding_length 1, their shifts
        if beam_stop and cfg.min_len >= 1 and not cfg.shortlist and self.first_step_ends.probing:
            shifted = self._probe_first_step(translator, source, options, cfg.beam_size)
        if shifted:  # CTranslate2 ranks with stopping "beam" only without a prefix (`ranking`)
            assert target_prefix is None
            results = self._apart(translator, source, options, shifted, limit)
        else:
            results = translator.translate_batch(source, target_prefix=target_prefix, **options)
        again: dict[int, Decoded] = {}  # sources searched again, by index
        if beam_stop:
            again = self._beam_settled(translator, source, src_ids, results, own, limit, options, cfg, free,
                                       attention, suppress, shifted)
        if ranked_by_heed:
            again = self._heed_settled(translator, source, src_ids, prefixes, results, limit, reach, cfg, free,
                                       attention, suppress, prefixed=target_prefix is not None)
        forced = self._prefix_log_probs(translator, source, target_prefix, free)
        ranked = self._ranked(translator, source, results, forced, cfg)
        first = [None] * len(source)
        if attention and ranks == "ctranslate2" and len(source) > 1:
            # CTranslate2 4.x's beam search on the CPU runs its first step on the unexpanded batch and
            # then gathers that step's attention with beam-expanded indices: source i gets source
            # i // beam's first row. One greedy step (encoder and one decoder step) gives the true ones.
            step = translator.translate_batch(source, beam_size=1, max_decoding_length=1, min_decoding_length=0,
                                              max_input_length=0, return_attention=True, return_end_token=True)
            first = [r.attention[0][0] for r in step]
        decoded = [again[i] if i in again else self._decoded(r, len(src), chosen, first[i] if attention else None,
                                                             attention)
                   for i, (r, src, chosen) in enumerate(zip(results, source, ranked))]
        if attention and ranked_by_heed:
            todo = [i for i in range(len(source)) if i not in again]
            self._attention_of(translator, [source[i] for i in todo], [decoded[i] for i in todo])
        return decoded

    def _options(self, cfg: DecodeConfig, limit: int, reach: int, *, ranks: str, attention: bool,
                 suppress: bool) -> dict[str, Any]:
        """translate_batch's options for a search to `reach` (the output limit `limit`, or short of it)
        where `ranks` (`ranking`'s) ranks, as `_translate_batch` says."""
        ranked_by_heed = ranks == "heed"
        beam_stop = ranks == "ctranslate2" and cfg.stopping == "beam"
        patience = reach + 1 if ranked_by_heed else 1  # at most `beam` finish per step, `reach` steps
        num_hypotheses = cfg.beam_size * patience if ranked_by_heed else cfg.beam_size if beam_stop else cfg.n_best
        options: dict[str, Any] = dict(
            max_decoding_length=max(reach, 1),
            min_decoding_length=0 if ranked_by_heed or beam_stop else min(cfg.min_len, limit),
            no_repeat_ngram_size=cfg.no_repeat_ngram, disable_unk=cfg.forbid_unk,
            suppress_sequences=[[self.tgt_tokens[self.pad_id]], [self.tgt_tokens[self.bos_id]]] if suppress else None,
            max_input_length=0, return_scores=True, return_attention=attention and not ranked_by_heed,
            return_end_token=True, num_hypotheses=num_hypotheses, use_vmap=cfg.shortlist)
        if cfg.sampling:
            options.update(beam_size=1, length_penalty=0.0, sampling_temperature=cfg.temperature,
                           sampling_topk=cfg.top_k, sampling_topp=cfg.top_p)
        else:
            penalty = RAW_SCORES if ranked_by_heed else 0.0
            if beam_stop:
                penalty = cfg.length_penalty or RAW_SCORES
            options.update(beam_size=cfg.beam_size, length_penalty=penalty, patience=patience)
        return options

    def _heed_settled(self, translator: Any, source: list[list[str]], src_ids: list[list[int]],
                      prefixes: list[Sequence[int]] | None, results: list[Any], limit: int, reach: int,
                      cfg: DecodeConfig, free: int, attention: bool, suppress: bool, *,
                      prefixed: bool) -> dict[int, Decoded]:
        """A search where heed ranks, to `reach` (the limit, or short of it with stopping "beam"):
        `results` made what heed ranks in place: the hypotheses that ended before min_len left out
        (`_long_enough`); with stopping "beam" what its stop finished (`_beam_stopped`, its length
        counted in `beam_stops`), the sources it had not stopped by a `reach` short of the limit
        searched again to the limit and returned by index; where the limit cut a search that may
        have left out one of heed's n-best, heed's rule over CTranslate2's steps (`_searched`; not
        with a prefix, no_repeat_ngram or a shortlist)."""
        results[:] = [self._long_enough(r, min(cfg.min_len, limit)) for r in results]
        stopped = [self._beam_stopped(r, reach, cfg) if cfg.stopping == "beam" else None for r in results]
        for s in stopped:
            if s is not None:
                self.beam_stops.add(max(map(len, s.hypotheses)), limit)
        again: dict[int, Decoded] = {}
        short = [i for i, s in enumerate(stopped) if s is None] if reach < limit else []
        if short:  # not stopped by `reach`: searched again to the limit
            again = self._searched_whole(translator, src_ids, {limit: short}, prefixes, cfg, free, attention, suppress)
            for i in short:
                stopped[i] = _nothing()
        if not prefixed and not cfg.no_repeat_ngram and not cfg.shortlist:
            results[:] = [self._searched(translator, src, limit, cfg) if s is None and self._unsettled(r, limit, cfg)
                          else r for r, s, src in zip(results, stopped, source)]
        results[:] = [r if s is None else s for r, s in zip(results, stopped)]
        return again

    def _searched_whole(self, translator: Any, src_ids: list[list[int]], groups: dict[int, list[int]],
                        prefixes: list[Sequence[int]] | None, cfg: DecodeConfig, free: int, attention: bool,
                        suppress: bool) -> dict[int, Decoded]:
        """The sources of `groups` (their indices by output limit) searched again where heed ranks, to
        the limit at once, a batch per limit; by index."""
        again: dict[int, Decoded] = {}
        for limit, group in groups.items():
            searched = self._translate_batch(translator, [src_ids[i] for i in group], limit,
                                             None if prefixes is None else [prefixes[i] for i in group], cfg, free,
                                             attention, ranks="heed", suppress=suppress, whole=True)
            again.update(zip(group, searched))
        return again

    def _probe_first_step(self, translator: Any, source: list[list[str]], options: dict[str, Any],
                          beam: int) -> dict[int, float]:
        """The sources whose EOS ranks among their first step's best `beam` (where a search without
        min_decoding_length would finish the empty hypothesis), by index, each with the shift
        min_decoding_length 1 adds to its hypotheses' log-probabilities, -log(1 - p(EOS first)): one
        beam search step (encoder and one decoder step) with the search's `options` (the tokens it
        disallows), whose candidates are that step's best `beam`."""
        eos = [self.tgt_tokens[self.eos_id]]
        step = translator.translate_batch(source, **{**options, "max_decoding_length": 1, "min_decoding_length": 0,
                                                     "num_hypotheses": beam, "length_penalty": 0.0,
                                                     "return_attention": False})
        shifts = {i: -_without(next(s for tokens, s in zip(r.hypotheses, r.scores) if tokens == eos))
                  for i, r in enumerate(step) if eos in r.hypotheses}
        self.first_step_ends.add(len(shifts), len(source))
        return shifts

    @staticmethod
    def _apart(translator: Any, source: list[list[str]], options: dict[str, Any], shifted: dict[int, float],
               limit: int) -> list[Any]:
        """CTranslate2's results for `source` in its order: the sources in `shifted` searched with
        min_decoding_length 1 (the empty hypothesis never finishes), the others without, a call each."""
        results: list[Any] = [None] * len(source)
        rest = [i for i in range(len(source)) if i not in shifted]
        for group, least in ((rest, 0), (sorted(shifted), min(1, limit))):
            if group:
                found = translator.translate_batch([source[i] for i in group], **{**options, "min_decoding_length": least})
                for i, r in zip(group, found):
                    results[i] = r
        return results

    def _beam_settled(self, translator: Any, source: list[list[str]], src_ids: list[list[int]], results: list[Any],
                      own: list[int], limit: int, options: dict[str, Any], cfg: DecodeConfig, free: int,
                      attention: bool, suppress: bool, shifted: dict[int, float] | None) -> dict[int, Decoded]:
        """A stopping "beam" search where CTranslate2 ranked: `results` made heed's in place
        (`_beam_raw`; where the first step was probed, the sources in `shifted`, searched with
        min_decoding_length 1, with their first step's shift taken off: `_beam_shifted`); a source
        unsettled only by its empty hypothesis searched again so (and counted in `first_step_ends`
        where no probe ran); those still unsettled (their result left empty here) searched again
        where heed ranks, a batch per own limit, to the limit at once (most did not stop before it;
        the others are those whose shift could reorder their n-best), and returned by index."""
        shifts = shifted or {}
        raw = [self._beam_shifted(r, shifts[i], cfg, mine, limit) if i in shifts else self._beam_raw(r, cfg, mine, limit)
               for i, (r, mine) in enumerate(zip(results, own))]
        empty = [i for i, (r, mine) in enumerate(zip(results, own))
                 if i not in shifts and raw[i] is None and self._beam_raw(r, cfg, mine, limit, empty_ok=True) is not None]
        if shifted is None and cfg.min_len >= 1:
            self.first_step_ends.add(len(empty), len(results))
        if empty:
            shift = self._first_step_shift(translator, [source[i] for i in empty])
            redone = translator.translate_batch([source[i] for i in empty],
                                                **{**options, "min_decoding_length": min(1, limit)})
            for i, r, delta in zip(empty, redone, shift):
                raw[i] = self._beam_shifted(r, delta, cfg, own[i], limit)
        unsettled: dict[int, list[int]] = {}
        for i, mine in enumerate(own):
            results[i] = raw[i]
            if results[i] is None:
                unsettled.setdefault(mine, []).append(i)
                results[i] = _nothing()
        return self._searched_whole(translator, src_ids, unsettled, None, cfg, free, attention, suppress)

    def _beam_raw(self, result: Any, cfg: DecodeConfig, own: int, limit: int, *, empty_ok: bool = False) -> Any:
        """CTranslate2's result of a stopping "beam" search (patience 1, its `beam` best, at call limit
        `limit`, min_decoding_length 0) with heed's raw log-probabilities (its score times |Y|^alpha),
        or None where it is not heed's search at the source's own limit `own`: a hypothesis registered
        at or past that limit's last step (CTranslate2 registers every best candidate at its last step,
        cut or not, where heed forces EOS a step later; past `own`, the search ran on where heed's
        stopped), or, with min_len >= 1, an empty hypothesis among those returned. Without
        min_decoding_length its first step is heed's with EOS masked (raw log-probabilities; an EOS
        among the top `beam` is registered and its slot refilled by the next best other token, so the
        live beams are the same), and every later step is the same, except that the empty hypothesis,
        where one was registered at step 0, counts toward CTranslate2's stop. Where none is returned,
        none was registered, or `beam` others rank above it: then at least `beam` others had finished
        by CTranslate2's stop, so heed's count stopped at the same step, and its n-best are among them.
        `empty_ok`: the empty hypothesis is no reason (a source it alone unsettles is searched again
        with min_decoding_length 1: `_beam_shifted`)."""
        hypotheses, scores = result.hypotheses, result.scores
        last = own if own < limit else own - 1  # the longest hypothesis, with EOS, heed's search ends as here
        if any(not self._ended(t) or len(t) > last or (len(t) == 1 and cfg.min_len >= 1 and not empty_ok)
               for t in hypotheses):
            return None
        lengths = torch.tensor([len(t) for t in hypotheses])
        alpha = cfg.length_penalty
        lp = length_penalty(lengths, alpha, "power") if alpha else torch.ones(len(hypotheses))
        return SimpleNamespace(hypotheses=hypotheses, scores=(torch.tensor(scores) * lp).tolist(),
                               attention=result.attention)

    @staticmethod
    def _first_step_shift(translator: Any, source: list[list[str]]) -> list[float]:
        """Per source, what CTranslate2's min_decoding_length 1 adds to every hypothesis' log-probability:
        it renormalises the first step without EOS, where heed forbids EOS without, so
        delta = -log(1 - p(EOS first)) (one teacher-forced step, score_batch)."""
        first = translator.score_batch(source, [[] for _ in source])
        return [-_without(s.log_probs[-1]) for s in first]

    def _beam_shifted(self, result: Any, delta: float, cfg: DecodeConfig, own: int, limit: int) -> Any:
        """`_beam_raw` for a stopping "beam" search with min_decoding_length 1 (the empty hypothesis
        never finishes; the live beams are heed's, every score shifted by the first step's `delta`):
        heed's raw log-probabilities, or None where it is not heed's search at `own` (as `_beam_raw`),
        or where `delta` could reorder the n-best past what it returned: a hypothesis not returned
        scores at most the lowest returned less delta / longest^alpha. (One is left out only where more
        than `beam` finished by the step that stopped the search, which the longest returned ended at:
        had none of that step's been returned, `beam` would have finished a step before. So each ended
        by `longest` tokens with EOS.)"""
        hypotheses = result.hypotheses
        last = own if own < limit else own - 1  # as _beam_raw
        if not math.isfinite(delta) or any(not self._ended(t) or len(t) > last for t in hypotheses):
            return None
        alpha = cfg.length_penalty
        lengths = torch.tensor([len(t) for t in hypotheses])
        lp = length_penalty(lengths, alpha, "power") if alpha else torch.ones(len(lengths))
        raw = torch.tensor(result.scores) * lp - delta  # (hypotheses,)
        if delta and len(raw) == cfg.beam_size:
            heed_scores = (raw / lp).topk(cfg.n_best).values
            longest = float(length_penalty(lengths.max(), alpha, "power")) if alpha else 1.0
            bound = min(result.scores) - delta / longest
            if float(heed_scores[-1]) < bound:
                return None
        return SimpleNamespace(hypotheses=hypotheses, scores=raw.tolist(), attention=result.attention)

    def _beam_stopped(self, result: Any, limit: int, cfg: DecodeConfig) -> Any | None:
        """Of a search to `limit` (every hypothesis it finished, those that ended before min_len left
        out), what heed's stopping "beam" finished: the hypotheses that ended by the step where the
        `beam`-th ended (a hypothesis of n tokens with EOS ended at step n - 1), none cut; None where
        fewer ended by the limit (heed forces EOS on every live beam there: `_unsettled`)."""
        ended = sorted(len(t) for t in result.hypotheses if self._ended(t))
        if len(ended) < cfg.beam_size or ended[cfg.beam_size - 1] > limit:
            return None
        last = ended[cfg.beam_size - 1]
        keep = [j for j, t in enumerate(result.hypotheses) if self._ended(t) and len(t) <= last]
        return SimpleNamespace(hypotheses=[result.hypotheses[j] for j in keep], scores=[result.scores[j] for j in keep],
                               attention=None)

    def _ended(self, tokens: Sequence[str]) -> bool:
        """Whether CTranslate2's hypothesis ends with EOS (else it was cut at the length limit)."""
        return bool(tokens) and tokens[-1] == self.tgt_tokens[self.eos_id]

    def _long_enough(self, result: Any, min_len: int) -> Any:
        """`result`'s hypotheses less those that ended before `min_len` tokens (heed's search forbids
        EOS there; CTranslate2 was let finish them, so that its beams stay heed's)."""
        hypotheses, scores = result.hypotheses, result.scores  # each a fresh list at every access
        keep = [j for j, tokens in enumerate(hypotheses) if not self._ended(tokens) or len(tokens) > min_len]
        return SimpleNamespace(hypotheses=[hypotheses[j] for j in keep], scores=[scores[j] for j in keep],
                               attention=None)

    def _unsettled(self, result: Any, limit: int, cfg: DecodeConfig) -> bool:
        """Whether a search to `limit` may have left out one of heed's n-best: CTranslate2 returns what
        ranked within the top `beam` at its last step, while heed's search forces EOS on every live
        beam, among them those ranked below an EOS there. Such a beam's score is at most the lowest
        returned at that step over lp(limit + 1), so the n-best are settled where the n_best-th of
        those that ended with EOS (a cut one's EOS is not charged yet) scores that much (always, where
        no EOS ranked so high)."""
        hypotheses, raw = result.hypotheses, result.scores
        last = [(tokens, score) for tokens, score in zip(hypotheses, raw) if len(tokens) == limit]
        if not any(self._ended(tokens) for tokens, _ in last):
            return False
        ended = [j for j, tokens in enumerate(hypotheses) if self._ended(tokens)]
        if len(ended) < cfg.n_best:
            return True
        lengths = torch.tensor([len(hypotheses[j]) for j in ended])
        scores = torch.tensor([raw[j] for j in ended]) / length_penalty(lengths, cfg.length_penalty, cfg.length_norm)
        bound = torch.tensor(min(score for _, score in last)) / length_penalty(
            torch.tensor(limit + 1), cfg.length_penalty, cfg.length_norm)
        return bool(scores.topk(cfg.n_best).values[-1] < bound)

    def _searched(self, translator: Any, source: list[str], limit: int, cfg: DecodeConfig) -> SimpleNamespace:
        """heed's beam search of one source (heed.search.beam: the 2 * beam best extensions, EOS
        among the top `beam` finished, the `beam` best others live, EOS forced at `limit`, stopped
        once no live beam can beat the n_best-th finished), its steps read from CTranslate2: each
        live beam's EOS log-probability (score_batch) and its best other tokens (translate_batch's
        alternatives after the beam as a prefix, which CTranslate2 normalises without EOS: put back);
        with stopping "beam", stopped once `beam` finished.
        Every hypothesis it finished, with EOS, as a CTranslate2 result has them; for a source whose
        search to its limit may have left one out (`_unsettled`)."""
        beam, eos = cfg.beam_size, self.tgt_tokens[self.eos_id]
        banned = {self.tgt_tokens[i] for i in (self.pad_id, self.bos_id, *((self.unk_id,) if cfg.forbid_unk else ()))}
        far = float(length_penalty(torch.tensor(limit + 1), cfg.length_penalty, cfg.length_norm))
        live: list[tuple[float, list[str]]] = [(0.0, [])]  # (log_prob, tokens), best first
        finished: list[tuple[float, float, list[str]]] = []  # (score, log_prob, tokens with EOS)
        for t in range(limit + 1):
            prefixes = [tokens for _, tokens in live]
            ends = [s.log_probs[-1] for s in translator.score_batch([source] * len(live), prefixes)]
            candidates = [(log_prob + end, tokens + [eos]) for (log_prob, tokens), end in zip(live, ends)
                          if t >= cfg.min_len or t == limit]
            if t < limit:
                alternatives = translator.translate_batch(
                    [source] * len(live), target_prefix=[p or None for p in prefixes], return_alternatives=True,
                    beam_size=1, num_hypotheses=2 * beam + len(banned), max_decoding_length=t + 1,
                    min_decoding_length=0, max_input_length=0, return_scores=True)
                for (log_prob, tokens), end, alt in zip(live, ends, alternatives):
                    rest = _without(end)
                    candidates += [(log_prob + score + rest, tokens + [h[t]])
                                   for h, score in zip(alt.hypotheses, alt.scores) if h[t] not in banned]
            candidates = sorted(candidates, key=lambda c: -c[0])[: 2 * beam]
            for log_prob, tokens in candidates[:beam]:
                if tokens[-1] == eos:
                    score = float(torch.tensor(log_prob) / length_penalty(torch.tensor(len(tokens)), cfg.length_penalty,
                                                                          cfg.length_norm))
                    finished.append((score, log_prob, tokens))
            finished.sort(key=lambda f: -f[0])
            live = [c for c in candidates if c[1][-1] != eos][:beam]
            if not live or (len(finished) >= beam if cfg.stopping == "beam" else
                            len(finished) >= cfg.n_best and finished[cfg.n_best - 1][0] >= live[0][0] / far):
                break
        return SimpleNamespace(hypotheses=[f[2] for f in finished], scores=[f[1] for f in finished], attention=None)

    def _ranked(self, translator: Any, source: list[list[str]], results: list[Any], forced: list[float],
                cfg: DecodeConfig) -> list[list[tuple[int, float, float]]]:
        """Per source, its n-best by heed's score, best first: (index in CTranslate2's hypotheses,
        score, log_prob). heed's search adds to CTranslate2's score the forced prefix's log-probability
        (`forced`), and for a hypothesis cut at the limit the EOS it forces there. A charge only lowers
        a score, so only a cut hypothesis that could still rank among the n-best needs its EOS scored:
        the best are charged (one teacher-forced pass, score_batch, per round) until the n-best are
        settled, in the common case the n-best alone in one round."""
        eos: dict[tuple[int, int], float] = {}

        def scored(i: int) -> tuple[Tensor, Tensor]:  # (hypotheses,) each: heed's score, log_prob (float32)
            r = results[i]
            log_prob = torch.tensor([s + forced[i] + eos.get((i, j), 0.0) for j, s in enumerate(r.scores)])
            lengths = torch.tensor([len(t) if self._ended(t) else len(t) + 1 for t in r.hypotheses])
            return log_prob / length_penalty(lengths, cfg.length_penalty, cfg.length_norm), log_prob

        while True:
            todo = []
            for i, r in enumerate(results):
                best = scored(i)[0].topk(min(cfg.n_best, len(r.hypotheses))).indices.tolist() if r.hypotheses else []
                todo += [(i, j) for j in best if (i, j) not in eos and not self._ended(r.hypotheses[j])]
            if not todo:
                break
            charged = translator.score_batch([source[i] for i, _ in todo], [results[i].hypotheses[j] for i, j in todo])
            eos.update({key: s.log_probs[-1] for key, s in zip(todo, charged)})
        ranked = []
        for i, r in enumerate(results):
            score, log_prob = scored(i)
            best = score.topk(min(cfg.n_best, len(r.hypotheses))).indices.tolist() if r.hypotheses else []
            ranked.append([(j, float(score[j]), float(log_prob[j])) for j in best])
        return ranked

    @staticmethod
    def _prefix_log_probs(translator: Any, source: list[list[str]], target_prefix: list[list[str] | None] | None,
                          free: int) -> list[float]:
        """Per source, the log-probability of its forced prefix past the first `free` tokens:
        CTranslate2's scores leave a target prefix out, heed's search charges it (one teacher-forced
        pass for the sources that have one)."""
        charged = [0.0] * len(source)
        todo = [i for i, p in enumerate(target_prefix or []) if p and len(p) > free]
        if todo:
            prefixes: list[list[str]] = [target_prefix[i] for i in todo]  # type: ignore[index, misc]
            for i, prefix, s in zip(todo, prefixes, translator.score_batch([source[i] for i in todo], prefixes)):
                charged[i] = float(sum(s.log_probs[free:len(prefix)]))
        return charged

    def _decoded(self, result: Any, src_len: int, chosen: list[tuple[int, float, float]],
                 first_row: list[float] | None, attention: bool) -> Decoded:
        """The `chosen` hypotheses of one CTranslate2 result ((index, heed's score, log_prob), best
        first: `_ranked`), with CTranslate2's attention where it returned one; `first_row`: the first
        step's attention, where the beam search's own is wrong. A cut hypothesis' forced EOS gets a
        row of zeros, where its attention comes from CTranslate2's search."""
        hypotheses = []
        for j, score, log_prob in chosen:
            tokens = result.hypotheses[j]
            ids = [self._tgt_ids[t] for t in (tokens[:-1] if self._ended(tokens) else tokens)]
            weights = None  # (tokens + EOS, src_len) when asked
            if attention and result.attention:
                weights = torch.zeros(len(ids) + 1, src_len)
                weights[: len(result.attention[j])] = torch.tensor(result.attention[j], dtype=torch.float32)[:, :src_len]
                if first_row is not None:
                    weights[0] = torch.tensor(first_row[:src_len], dtype=torch.float32)
            hypotheses.append(Hypothesis(ids, score, log_prob, weights))
        return Decoded(hypotheses)

    def _attention_of(self, translator: Any, source: list[list[str]], decoded: list[Decoded]) -> None:
        """Set each hypothesis' attention, (tokens + EOS, src_len), from one pass that forces its tokens
        (translate_batch with them as the target prefix, and one step past them for EOS's row):
        the rows CTranslate2's search computed for it, without returning those of every finished
        hypothesis."""
        todo = [(i, h) for i, d in enumerate(decoded) for h in d.hypotheses]
        if not todo:
            return
        prefixes = [[self.tgt_tokens[t] for t in h.tokens] or None for _, h in todo]
        passes = translator.translate_batch([source[i] for i, _ in todo], target_prefix=prefixes, beam_size=1,
                                            max_decoding_length=max(len(h.tokens) for _, h in todo) + 1,
                                            min_decoding_length=0, max_input_length=0, return_attention=True,
                                            return_end_token=True)
        for (i, h), forced in zip(todo, passes):
            rows = torch.tensor(forced.attention[0][: len(h.tokens) + 1], dtype=torch.float32)
            h.attention = rows[:, : len(source[i])]

    def _emits_specials(self, decoded: Decoded) -> bool:
        return any(self.pad_id in h.tokens or self.bos_id in h.tokens for h in decoded.hypotheses)

