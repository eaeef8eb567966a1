"""A CTranslate2 export (heed.export.ct2) run by CTranslate2's own search, behind heed's Translator.

CTranslate2 has no step function to hand heed's search: it searches itself, in C++. So this model
is an `OwnSearchModel` (heed.search): `translate_ids` takes what heed's `search.translate_ids`
takes (source ids, a DecodeConfig, batch size, prefixes) and gives the same `Decoded` hypotheses,
with heed's tokens, scores and lengths:
- greedy, and the best hypothesis of a beam search without penalties: CTranslate2's search gives
  heed's (tests/export/test_export_ct2.py; bench/compare's heed-ct2 column); with the power length penalty
  (the imported OPUS-MT, NLLB and M2M-100 models' own) CTranslate2 also finishes and ranks the best
  (`ranking` says which path a request takes; the same best hypothesis as heed's exact search on
  1,000 sentences: bench/RESULTS.md). Below the best, an n-best
  list is what CTranslate2's beam finished, searched past its own stop (`beam * PATIENCE` finished)
  and ranked by heed; it can still miss a hypothesis heed's search finishes, most often a short one
  (the empty output, a prefix cut by EOS), and show the next instead. On 300 dates test sentences
  at beam 5, n-best 3 (a 1-layer dates Transformer): 14 of 900 entries differ, 41 with min_len 0
  (58 and 80 when CTranslate2 stopped at its own stop), and no best entry;
- the GNMT length penalty (`length_norm` gnmt, `length_penalty` > 0): CTranslate2's penalty is length^alpha, not GNMT's,
  and stops early differently; so CTranslate2 searches without a penalty past its own early stop,
  keeping `beam * PATIENCE` finished hypotheses, and heed ranks them by GNMT's score;
- `max_len_a`/`max_len_b` per source (CTranslate2 takes one limit a call: the batch's largest; a
  source whose output passed its own limit is decoded again alone with it);
- min_len, n-best, prefixes, no_repeat_ngram, forbid_unk, sampling (temperature, top-k, top-p,
  seed through ctranslate2.set_random_seed: CTranslate2's draws, not heed's).
Refused with a message naming the option: the coverage penalty (heed's is GNMT's over every step,
CTranslate2's is applied in its own search) and everything that needs heed's step or teacher-forced
pass (the explorer's beam tree and alternatives, align, attention layers, attribution, ensembles):
those take the model directory or an ONNX export.

Scores: `log_prob` is CTranslate2's sum over the tokens and EOS, the model's own as heed's, except
where tokens are disallowed (EOS before min_len, <unk> with forbid_unk, and PAD and BOS for a source
searched again because CTranslate2 put them in a beam): CTranslate2 renormalises over the rest
there, heed does not, so such scores differ by the disallowed tokens' probability. The attention of each output
token and of EOS is the last decoder layer's cross-attention averaged over its heads, as heed's; a
hypothesis cut at max_len gets EOS's log-probability from a teacher-forced CTranslate2 pass
(score_batch; only those that can still rank among the n-best), as heed's search forces and
charges EOS there, and a row of zeros for its attention;
a forced prefix (which CTranslate2's scores leave out) is charged its log-probability the same way,
past a many-language model's target language token (scored 0, as heed's search does).
"""
from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import torch

from heed.decode_config import DecodeConfig
from heed.errors import Abandoned, ConfigError, HeedError, ModelDirError
from heed.export.ct2 import VMAP_FILE, require_ctranslate2
from heed.export.onnx import Manifest
from heed.plumbing.runtime import cpu_int8_products_exact
from heed.search import Decoded, Hypothesis, length_penalty, max_output_lengths

PATIENCE = 4  # with a length penalty or n-best > 1: finished hypotheses kept = beam * PATIENCE before heed ranks them
# Any non-zero length penalty turns off CTranslate2's early exit (which is only right without one);
# this one leaves its scores raw sums of log-probabilities (length ** 1e-30 == 1.0f).
RAW_SCORES = 1e-30
NEEDS_HEED = ("a CTranslate2 export translates with CTranslate2's own search, which has no step or teacher-forced "
              "pass to give heed; {what} needs the model directory or an ONNX export (heed export --format onnx)")


def ranking(cfg: DecodeConfig, *, prefixed: bool) -> str:
    """Who finishes and ranks a search's hypotheses (the fast path is CTranslate2's):
    - "ctranslate2" for the best hypothesis alone without a penalty (CTranslate2 stops once its best
      beam finished, as exact as heed's stop), or with the power penalty |Y|^alpha, which CTranslate2
      divides by too (|Y| counting EOS), without a forced prefix (whose charge would change the
      ranking): CTranslate2 stops once `beam` hypotheses finished and returns its best;
    - "heed" for the GNMT penalty, an n-best list, or a prefix with a penalty: CTranslate2 searches on
      to `beam * PATIENCE` finished hypotheses and heed ranks them by its own score;
    - "none" for greedy search and sampling, which rank nothing."""
    if cfg.sampling or cfg.beam_size == 1:
        return "none"
    if cfg.n_best == 1 and (cfg.length_penalty == 0 or (cfg.length_norm == "power" and not prefixed)):
        return "ctranslate2"
    return "heed"


def needs_heed(what: str) -> HeedError:
    return HeedError(NEEDS_HEED.format(what=what))


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
        order = sorted(range(len(src_ids)), key=lambda k: -len(src_ids[k]))
        results: list[Decoded] = [Decoded([]) for _ in src_ids]
        for start in range(0, len(order), batch_size):
            if stop is not None and stop():
                raise Abandoned()
            chunk = order[start:start + batch_size]
            got = self._decode(translator, [src_ids[k] for k in chunk], [limits[k] for k in chunk],
                               None if prefixes is None else [prefixes[k] for k in chunk], cfg, free_prefix,
                               attention)
            for k, decoded in zip(chunk, got):
                results[k] = decoded
        return results

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
                prefixes: list[Sequence[int]] | None, cfg: DecodeConfig, free: int, attention: bool) -> list[Decoded]:
        """One translate_batch call at the batch's largest output limit. A source is decoded again
        alone where that was not heed's search: its best output passed its own limit, or a
        hypothesis holds PAD or BOS (which heed never emits; CTranslate2 is asked to suppress them
        only then, as it renormalises the rest of the distribution when it does)."""
        longest = max(limits)
        out = self._translate_batch(translator, src_ids, longest, prefixes, cfg, free, attention, suppress=False)
        for i, (decoded, limit) in enumerate(zip(out, limits)):
            too_long = limit < longest and decoded.hypotheses and len(decoded.hypotheses[0].tokens) > limit
            if too_long or self._emits_specials(decoded):
                prefix = None if prefixes is None else [prefixes[i]]
                alone = self._translate_batch(translator, [src_ids[i]], limit, prefix, cfg, free, attention,
                                              suppress=False)[0]
                if self._emits_specials(alone):
                    alone = self._translate_batch(translator, [src_ids[i]], limit, prefix, cfg, free, attention,
                                                  suppress=True)[0]
                out[i] = alone
        return out

    def _translate_batch(self, translator: Any, src_ids: list[list[int]], limit: int,
                         prefixes: list[Sequence[int]] | None,
                         cfg: DecodeConfig, free: int, attention: bool, *, suppress: bool) -> list[Decoded]:
        source = [[self.src_tokens[i] for i in ids] + [self.src_tokens[self.eos_id]] for ids in src_ids]
        target_prefix = None
        if prefixes is not None and any(prefixes):
            target_prefix = [[self.tgt_tokens[i] for i in p] or None for p in prefixes]
        ranks = ranking(cfg, prefixed=target_prefix is not None)
        ranked_by_heed = ranks == "heed"
        kept = cfg.beam_size * PATIENCE if ranked_by_heed else cfg.n_best
        options: dict[str, Any] = dict(
            max_decoding_length=max(limit, 1), min_decoding_length=min(cfg.min_len, limit),
            no_repeat_ngram_size=cfg.no_repeat_ngram, disable_unk=cfg.forbid_unk,
            suppress_sequences=[[self.tgt_tokens[self.pad_id]], [self.tgt_tokens[self.bos_id]]] if suppress else None,
            max_input_length=0, return_scores=True, return_attention=attention, return_end_token=True,
            num_hypotheses=kept, use_vmap=cfg.shortlist)
        if cfg.sampling:
            options.update(beam_size=1, length_penalty=0.0, sampling_temperature=cfg.temperature,
                           sampling_topk=cfg.top_k, sampling_topp=cfg.top_p)
        else:
            penalty = RAW_SCORES if ranked_by_heed else cfg.length_penalty if ranks == "ctranslate2" else 0.0
            options.update(beam_size=cfg.beam_size, length_penalty=penalty, patience=PATIENCE if ranked_by_heed else 1)
        results = translator.translate_batch(source, target_prefix=target_prefix, **options)
        if ranks == "ctranslate2" and cfg.length_penalty:  # its scores divided by |Y|^alpha: the sums again
            results = [SimpleNamespace(hypotheses=r.hypotheses, attention=r.attention,
                                       scores=[score * len(tokens) ** cfg.length_penalty
                                               for score, tokens in zip(r.scores, r.hypotheses)]) for r in results]
        forced = self._prefix_log_probs(translator, source, target_prefix, free)
        charges = self._charges(translator, source, results, forced, cfg)
        first = [None] * len(source)
        if attention and cfg.beam_size > 1 and not cfg.sampling and len(source) > 1:
            # CTranslate2 4.x's beam search on the CPU runs its first step on the unexpanded batch and
            # then gathers that step's attention with beam-expanded indices: source i gets source
            # i // beam's first row. One greedy step (encoder and one decoder step) gives the true ones.
            step = translator.translate_batch(source, beam_size=1, max_decoding_length=1, min_decoding_length=0,
                                              max_input_length=0, return_attention=True, return_end_token=True)
            first = [r.attention[0][0] for r in step]
        return [self._decoded(r, len(src), cfg, charges[i], first[i])
                for i, (r, src) in enumerate(zip(results, source))]

    def _ended(self, tokens: Sequence[str]) -> bool:
        """Whether CTranslate2's hypothesis ends with EOS (else it was cut at the length limit)."""
        return bool(tokens) and tokens[-1] == self.tgt_tokens[self.eos_id]

    def _charges(self, translator: Any, source: list[list[str]], results: list[Any], forced: list[float],
                 cfg: DecodeConfig) -> list[list[float | None]]:
        """Per source and hypothesis, what heed's search adds to CTranslate2's score: the forced
        prefix's log-probability (`forced`), and for a hypothesis cut at the limit the EOS heed's
        search forces there. A charge only lowers a score, so only a cut hypothesis that could still
        rank among the n-best needs its EOS scored: the best are charged (one teacher-forced pass,
        score_batch, per round) until the n-best are settled, in the common case the n-best alone in
        one round. A cut hypothesis left uncharged (it cannot rank) is None."""
        eos: dict[tuple[int, int], float] = {}

        def bound(i: int, j: int) -> float:
            tokens = results[i].hypotheses[j]
            length = len(tokens) - 1 if self._ended(tokens) else len(tokens)
            log_prob = results[i].scores[j] + forced[i] + eos.get((i, j), 0.0)
            return log_prob / float(length_penalty(torch.tensor(length + 1), cfg.length_penalty, cfg.length_norm))

        while True:
            todo = []
            for i, r in enumerate(results):
                best = sorted(range(len(r.hypotheses)), key=lambda j: -bound(i, j))[: cfg.n_best]
                todo += [(i, j) for j in best if (i, j) not in eos and not self._ended(r.hypotheses[j])]
            if not todo:
                break
            scored = translator.score_batch([source[i] for i, _ in todo], [results[i].hypotheses[j] for i, j in todo])
            eos.update({key: s.log_probs[-1] for key, s in zip(todo, scored)})
        return [[forced[i] + eos[i, j] if (i, j) in eos else forced[i] if self._ended(h) else None
                 for j, h in enumerate(r.hypotheses)] for i, r in enumerate(results)]

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

    def _decoded(self, result: Any, src_len: int, cfg: DecodeConfig, charges: list[float | None],
                 first_row: list[float] | None) -> Decoded:
        """heed's hypotheses of one CTranslate2 result, ranked by heed's score; `charges`: what
        to add to each hypothesis's score, its forced prefix's log-probability (heed.search charges
        it, CTranslate2 does not) and the forced EOS's of one cut at the limit (None: a cut
        hypothesis left uncharged, as it cannot rank among the n-best: dropped);
        `first_row`: the first step's attention, where the beam search's own is wrong."""
        hypotheses = []
        attentions = result.attention or [None] * len(result.hypotheses)
        for tokens, raw, attention, charge in zip(result.hypotheses, result.scores, attentions, charges):
            if charge is None:
                continue
            ids = [self._tgt_ids[t] for t in (tokens[:-1] if self._ended(tokens) else tokens)]
            log_prob = raw + charge
            score = log_prob / float(length_penalty(torch.tensor(len(ids) + 1), cfg.length_penalty, cfg.length_norm))
            weights = None  # (tokens + EOS, src_len) when asked; a forced EOS's row stays zeros
            if attention:
                weights = torch.zeros(len(ids) + 1, src_len)
                weights[: len(attention)] = torch.tensor(attention, dtype=torch.float32)[:, :src_len]
                if first_row is not None:
                    weights[0] = torch.tensor(first_row[:src_len], dtype=torch.float32)
            hypotheses.append(Hypothesis(ids, float(score), float(log_prob), weights))
        hypotheses.sort(key=lambda h: -h.score)
        return Decoded(hypotheses[: cfg.n_best])

    def _emits_specials(self, decoded: Decoded) -> bool:
        return any(self.pad_id in h.tokens or self.bos_id in h.tokens for h in decoded.hypotheses)

