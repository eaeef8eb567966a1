"""Attribution beside attention: how much each input token moved the model's log-probability of each
output token, by Captum (`pip install 'heed-nmt[explain]'`).

For a sentence pair (the source and a target: given, or the model's own translation), output
position j's score is f_j = log p(y_j | y_<j, x), y_T being </s>. Its inputs are the token
embeddings: the source's (tokens and </s>) and the decoder's inputs so far (BOS, y_0 .. y_j-1);
an embedding is the table's row before any scale or position is added (heed.nn.protocol
.AttributableModel). Each input token's attribution is its embedding's attribution summed over the
embedding dimensions:

    grad_x_input          e . df_j/de (Shrikumar et al. 2016; Captum's InputXGradient)
    integrated_gradients  (e - e') . integral_0^1 df_j/de (e' + a (e - e')) da (Sundararajan et
                          al. 2017; Captum's IntegratedGradients, Gauss-Legendre with `steps`
                          points), baseline e' = the zero vector for every input token

Integrated gradients are complete: the attributions of all inputs sum to f_j(e) - f_j(e'); the
gap Captum measures is kept per output token (`Attribution.delta`). The model runs in float32 (or
float64, for checks), in eval mode, with its embedding tables' outputs replaced by the points
attribution evaluates (forward hooks; the rest of the model runs as it is).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import torch
from torch import Tensor, nn

from heed.data.batching import collate, specials_of
from heed.data.codec import Codec
from heed.data.vocab import BOS, SPECIALS
from heed.errors import HeedError
from heed.explain.pairs import forced_pairs
from heed.nn.protocol import AttributableModel
from heed.results import Labelled, ReadingResult

AttributionMethod = Literal["integrated_gradients", "grad_x_input"]
METHODS: tuple[AttributionMethod, ...] = get_args(AttributionMethod)
BASELINE = "zero embedding"


@dataclass(frozen=True)
class Attribution:
    """One sentence pair's attributions, beside its attention.

    src_tokens: the source tokens (without </s>); columns of `source` and `attention` are these
                and then </s>
    tgt_tokens: the output tokens (without </s>); rows are these and then </s>
    prefix_tokens: the decoder's inputs, <s> and then tgt_tokens: the columns of `prefix`
    source:    (len(tgt_tokens) + 1, len(src_tokens) + 1) attribution of each source token to
               each output token's log-probability
    prefix:    (len(tgt_tokens) + 1, len(tgt_tokens) + 1) the same for the decoder's inputs (row j
               reads columns 0..j; the rest are 0)
    attention: (len(tgt_tokens) + 1, len(src_tokens) + 1) the model's attention (as
               Translation.attention), None for a model without attention
    log_probs: (len(tgt_tokens) + 1,) f_j, the model's log-probability of each output token
    delta:     (len(tgt_tokens) + 1,) integrated gradients' completeness gap, sum(attributions) -
               (f_j(input) - f_j(baseline)); None for gradient x input
    """

    src_tokens: list[str]
    tgt_tokens: list[str]
    prefix_tokens: list[str]
    method: AttributionMethod
    steps: int | None
    source: np.ndarray
    prefix: np.ndarray
    attention: np.ndarray | None
    log_probs: np.ndarray
    delta: np.ndarray | None

    def agreement(self) -> np.ndarray | None:
        """Per output token, the Spearman rank correlation between its attention over the source
        (tokens and </s>) and the magnitude of its source attribution: (len(tgt_tokens) + 1,),
        NaN-free (0 for a row where either side is constant). None without attention."""
        if self.attention is None:
            return None
        return np.array([spearman(a, np.abs(s)) for a, s in zip(self.attention, self.source)])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every array as nested lists (what `heed attribute` writes, and the server)."""
        agreement = self.agreement()
        return {"src_tokens": self.src_tokens, "tgt_tokens": self.tgt_tokens, "prefix_tokens": self.prefix_tokens,
                "method": self.method, "steps": self.steps, "baseline": BASELINE,
                "source": self.source.tolist(), "prefix": self.prefix.tolist(),
                "attention": None if self.attention is None else self.attention.tolist(),
                "log_probs": self.log_probs.tolist(),
                "delta": None if self.delta is None else self.delta.tolist(),
                "agreement": None if agreement is None else agreement.tolist()}


def ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties given their mean rank."""
    order = np.argsort(values, kind="stable")
    ranked = np.empty(len(values))
    ranked[order] = np.arange(1, len(values) + 1)
    for value in np.unique(values):
        tied = values == value
        ranked[tied] = ranked[tied].mean()
    return ranked


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation of two vectors; 0 where either is constant (no order to agree on)."""
    ra, rb = ranks(np.asarray(a, float)), ranks(np.asarray(b, float))
    if ra.std() == 0 or rb.std() == 0:
        return 0.0
    return float(np.corrcoef(ra, rb)[0, 1])


def captum() -> Any:
    """The captum.attr module, or a HeedError saying how to install it."""
    try:
        import captum.attr
    except ImportError:
        from heed.errors import HeedError

        raise HeedError("attribution needs Captum: pip install 'heed-nmt[explain]'") from None
    return captum.attr


class EmbeddingSwap:
    """Forward hooks on a model's token embedding tables that record what they give or give stated
    tensors instead. The source table is read once per pass (batch, src_len); the target table once
    (batch, tgt_len) or once per step (batch,), in step order; a shared table is read for the
    source first."""

    def __init__(self, model: AttributableModel) -> None:
        self.src_table, self.tgt_table = model.token_embeddings()

    @contextlib.contextmanager
    def run(self, replace: tuple[Tensor, Tensor] | None = None) -> Iterator[dict[str, Tensor]]:
        """Inside, a pass of the model reads `replace` = (source (batch, src_len, dim), target
        (batch, tgt_len, dim)) instead of its tables' rows; without `replace` the dict yielded gets
        "source" and "target", the rows it read (complete once the pass is done)."""
        seen: dict[str, Any] = {"source": None, "steps": []}
        record: dict[str, Tensor] = {}

        def hook(module: nn.Module, inputs: tuple[Tensor, ...], output: Tensor) -> Tensor | None:
            tokens = inputs[0]
            is_source = seen["source"] is None and (module is self.src_table)
            if is_source:
                seen["source"] = output
                given = None if replace is None else replace[0]
            elif tokens.dim() == 1:  # one decoding step of a step-by-step teacher-forced pass
                step = len(seen["steps"])
                seen["steps"].append(output)
                given = None if replace is None else replace[1][:, step]
            else:
                seen["steps"].append(output)
                given = None if replace is None else replace[1]
            if given is None:
                return None
            if given.shape != output.shape:
                raise RuntimeError(f"attribution replaced an embedding of shape {tuple(output.shape)} by one of "
                                   f"{tuple(given.shape)}: the model read its tables in an unexpected order")
            return given

        handles = [self.src_table.register_forward_hook(hook)]
        if self.tgt_table is not self.src_table:
            handles.append(self.tgt_table.register_forward_hook(hook))
        try:
            yield record
        finally:
            for handle in handles:
                handle.remove()
        if replace is None:
            steps = seen["steps"]
            record["source"] = seen["source"]
            record["target"] = steps[0] if len(steps) == 1 and steps[0].dim() == 3 else torch.stack(steps, dim=1)


def attribute_ids(model: Any, src_ids: list[int], tgt_ids: list[int], *, method: AttributionMethod,
                  steps: int, device: torch.device) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None,
                                                             np.ndarray | None]:
    """One pair's (source (T+1, S+1), prefix (T+1, T+1), log_probs (T+1,), delta (T+1,) or None,
    attention (T+1, S+1) or None), S = len(src_ids), T = len(tgt_ids). `model` is an
    AttributableModel in eval mode."""
    attr = captum()
    batch = collate([(src_ids, tgt_ids)], [0], specials_of(model)).to(device)
    src, lengths, tgt_in, tgt_out = batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out
    swap = EmbeddingSwap(model)
    with torch.no_grad(), swap.run() as read:
        out = model(src, lengths, tgt_in)
    # (1, S+1, dim), (1, T+1, dim), leaves that take gradients
    inputs = (read["source"].detach().requires_grad_(), read["target"].detach().requires_grad_())
    attention = None if out.attention is None else out.attention[0].float().cpu().numpy()

    def log_probs(source: Tensor, target: Tensor) -> Tensor:
        """(n, S+1, dim), (n, T+1, dim) -> (n, T+1) log-probabilities of the pair's output tokens."""
        n = source.size(0)
        with swap.run((source, target)):
            logits = model(src.expand(n, -1), lengths.expand(n), tgt_in.expand(n, -1), need_attention=False).logits
        return torch.log_softmax(logits, dim=-1).gather(-1, tgt_out.expand(n, -1).unsqueeze(-1)).squeeze(-1)

    with torch.no_grad():
        scores = log_probs(*inputs)[0]
    positions = tgt_out.size(1)
    source, prefix = np.zeros((positions, src.size(1))), np.zeros((positions, positions))
    delta = np.zeros(positions) if method == "integrated_gradients" else None
    baselines = tuple(torch.zeros_like(x) for x in inputs)
    explainer = attr.IntegratedGradients(log_probs) if method == "integrated_gradients" else attr.InputXGradient(log_probs)
    with torch.enable_grad():
        for j in range(positions):
            if delta is not None:
                (a_src, a_tgt), gap = explainer.attribute(inputs, baselines=baselines, target=j, n_steps=steps,
                                                          return_convergence_delta=True)
                delta[j] = float(gap.sum())
            else:
                a_src, a_tgt = explainer.attribute(inputs, target=j)
            source[j] = a_src[0].detach().sum(-1).double().cpu().numpy()
            prefix[j] = a_tgt[0].detach().sum(-1).double().cpu().numpy()
    return source, prefix, scores.double().cpu().numpy(), delta, attention


@dataclass(frozen=True)
class Contrast:
    """Why the model gives one output and not another (contrastive attribution; Yin & Neubig 2022
    contrast one token, this the whole outputs): the attribution of each source token to

        f = log p(output | source) - log p(contrast | source)

    each output read by teacher forcing, the decoder inputs held at their embeddings (only the
    source moves between baseline and input, so the attributions explain the source's part).

    src_tokens:       the source tokens (without </s>); `source`'s entries are these, then </s>
    output_tokens:    the output explained (without </s>)
    contrast_tokens:  the alternative (without </s>)
    source:           (len(src_tokens) + 1,) each source token's attribution to f; positive: it
                      pushed the model towards `output` and away from `contrast`
    log_prob_output, log_prob_contrast: the two sentences' log-probabilities (</s> included); their
                      difference is f at the input
    delta:            integrated gradients' completeness gap, sum(source) - (f(input) - f(baseline));
                      None for gradient x input
    """

    src_tokens: list[str]
    output_tokens: list[str]
    contrast_tokens: list[str]
    method: AttributionMethod
    steps: int | None
    source: np.ndarray
    log_prob_output: float
    log_prob_contrast: float
    delta: float | None

    @property
    def difference(self) -> float:
        """f at the input: how much likelier (in nats) the output is than the contrast."""
        return self.log_prob_output - self.log_prob_contrast

    def to_dict(self) -> dict[str, Any]:
        return {"src_tokens": self.src_tokens, "output_tokens": self.output_tokens,
                "contrast_tokens": self.contrast_tokens, "method": self.method, "steps": self.steps,
                "baseline": BASELINE, "source": self.source.tolist(), "log_prob_output": self.log_prob_output,
                "log_prob_contrast": self.log_prob_contrast, "difference": self.difference, "delta": self.delta}


def contrast_ids(model: Any, src_ids: list[int], output_ids: list[int], contrast: list[int], *,
                 method: AttributionMethod, steps: int,
                 device: torch.device) -> tuple[np.ndarray, float, float, float | None]:
    """One source's contrastive attribution (Contrast): (source (S+1,), log p(output), log p(contrast),
    delta or None). `model` is an AttributableModel in eval mode; the ids are without specials."""
    attr = captum()
    swap = EmbeddingSwap(model)
    specials = specials_of(model)
    sides = []
    for ids in (output_ids, contrast):
        batch = collate([(src_ids, ids)], [0], specials).to(device)
        with torch.no_grad(), swap.run() as read:
            model(batch.src, batch.src_lengths, batch.tgt_in, need_attention=False)
        sides.append((batch, read["target"].detach()))
    source = read["source"].detach().requires_grad_()  # (1, S+1, dim): the same source both times

    def difference(points: Tensor) -> Tensor:
        """(n, S+1, dim) source embeddings -> (n,) log p(output) - log p(contrast)."""
        n = points.size(0)
        total = points.new_zeros(n)
        for sign, (batch, target) in zip((1.0, -1.0), sides):
            with swap.run((points, target.expand(n, -1, -1))):
                logits = model(batch.src.expand(n, -1), batch.src_lengths.expand(n), batch.tgt_in.expand(n, -1),
                               need_attention=False).logits
            gold = batch.tgt_out.expand(n, -1).unsqueeze(-1)
            total = total + sign * torch.log_softmax(logits, dim=-1).gather(-1, gold).squeeze(-1).sum(-1)
        return total

    with torch.no_grad():
        log_probs = []
        for batch, target in sides:
            with swap.run((source, target)):
                logits = model(batch.src, batch.src_lengths, batch.tgt_in, need_attention=False).logits
            log_probs.append(float(torch.log_softmax(logits, -1).gather(-1, batch.tgt_out.unsqueeze(-1)).sum()))
    with torch.enable_grad():
        if method == "integrated_gradients":
            attributions, gap = attr.IntegratedGradients(difference).attribute(
                source, baselines=torch.zeros_like(source), n_steps=steps, return_convergence_delta=True)
            delta: float | None = float(gap.sum())
        else:
            attributions, delta = attr.InputXGradient(difference).attribute(source), None
    return attributions[0].detach().sum(-1).double().cpu().numpy(), log_probs[0], log_probs[1], delta


def check_float32(model: Any) -> None:
    """A HeedError for a model whose weights are bf16: attribution runs in float32."""
    if any(p.dtype == torch.bfloat16 for p in model.parameters()):
        raise HeedError("attribution runs in float32; load the model without bf16")


def attribution(model: Any, codec: Codec, device: torch.device, src_texts: Sequence[str],
                tgt_texts: Sequence[str | Sequence[str]], options: Any, *,
                max_src_len: int | None = None) -> list[ReadingResult]:
    """The reading `attribution` of heed.explain.readings: per pair, each source token's attribution
    to each output token's log-probability (target, source), by `options.method` (integrated
    gradients at `options.steps` points, or gradient x input); extras prefix (target, prefix): the
    decoder inputs', log_probs (target,): f_j, and where there are, delta (target,): integrated
    gradients' completeness gap, and attention (target, source): the model's (Attribution says
    more). One backward pass per output token (times the points), sentence by sentence, in float32:
    an AttributableModel (not an export or an ensemble) without bf16 weights."""
    check_float32(model)
    pairs = forced_pairs(codec, src_texts, tgt_texts, max_src_len=max_src_len, empty="there is nothing to attribute to")
    out = []
    for src, tokens, (src_ids, tgt_ids) in zip(pairs.src_tokens, pairs.tgt_tokens, pairs.examples):
        source, prefix, log_probs, delta, attention = attribute_ids(
            model, src_ids, tgt_ids, method=options.method, steps=options.steps, device=device
        )
        extras = {"prefix": Labelled(("target", "prefix"), prefix), "log_probs": Labelled(("target",), log_probs)}
        if delta is not None:
            extras["delta"] = Labelled(("target",), delta)
        if attention is not None:
            extras["attention"] = Labelled(("target", "source"), attention)
        out.append(ReadingResult("attribution", src, list(tokens), ("target", "source"), source, extras))
    return out


def as_attribution(result: ReadingResult, method: AttributionMethod, steps: int) -> Attribution:
    """The reading `attribution`'s result as an Attribution (Translator.attribute's, heed
    attribute's and /v1/attribute's), read with `method` at `steps` points."""
    extras = result.extras
    return Attribution(result.src_tokens, result.tgt_tokens, [SPECIALS[BOS], *result.tgt_tokens], method,
                       steps if method == "integrated_gradients" else None, result.values, result.extra("prefix"),
                       extras["attention"].values if "attention" in extras else None, result.extra("log_probs"),
                       extras["delta"].values if "delta" in extras else None)


__all__ = ["BASELINE", "METHODS", "Attribution", "AttributionMethod", "Contrast", "EmbeddingSwap", "as_attribution",
           "attribute_ids", "attribution", "check_float32", "contrast_ids", "spearman"]

