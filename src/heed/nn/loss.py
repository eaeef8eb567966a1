"""The generator and the training loss in one pass over row chunks: logits = W f + b, then
label-smoothed cross-entropy summed over the target tokens.

`F.cross_entropy(generator(features))` makes several (tokens, vocab) tensors a step: the logits,
the log-probabilities, the zero-filled gradient of the loss, the gradient of the logits. At a
Multi30k batch (2,000 tokens x 4,276 pieces, 34 MB each) every one is a fresh allocation that
the C library maps from and returns to the kernel, page by page, and every pass over it misses
the cache. Here the logits of a chunk of rows (about 4 MB) are computed, reduced to what the loss
needs (log-sum-exp, the target's logit, the mean logit), kept, and in the backward turned in place
into their own gradient. Padding rows are dropped before the generator runs at all. Same values
and gradients as `F.cross_entropy(..., ignore_index=, label_smoothing=, reduction="sum")`
(tests/nn/test_loss.py). It is faster than the plain computation in float32 and bf16 alike
(bench/studies/generator_loss.py; the figures, with their CPU: bench/RESULTS.md, "The generator and the
loss in row chunks"). Logits that fit one chunk (a character vocabulary) take
the plain computation, which is as fast there.

With label smoothing eps over V classes, row i's loss is
    (1 - eps) (lse_i - z_iy) + eps (lse_i - mean_v z_iv),   lse_i = log sum_v exp z_iv,
and its gradient in z is  softmax(z_i) - (1 - eps) onehot(y_i) - eps / V.
"""
from __future__ import annotations

from typing import NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

CHUNK_BYTES = 1 << 22  # logits per chunk: 4 MiB of float32 (256 rows of a 4,096-piece vocabulary)


class TargetBatch(Protocol):
    """What `Seq2Seq.loss` reads of a batch (heed.data.batching.Batch is one; heed.nn does not
    import heed.data). Padding is the model's pad_id."""

    @property
    def src(self) -> Tensor: ...  # long (batch, src_len)

    @property
    def src_lengths(self) -> Tensor: ...  # long (batch,)

    @property
    def tgt_in(self) -> Tensor: ...  # long (batch, tgt_len) BOS + ids

    @property
    def tgt_out(self) -> Tensor: ...  # long (batch, tgt_len) ids + EOS


class SeqLoss(NamedTuple):
    """A batch's training loss, each part a scalar summed over its real target tokens (not averaged:
    the trainer divides by the token count).

    total:         what is backpropagated: cross_entropy, plus coverage where the model has one
    cross_entropy: the (label-smoothed, as asked) cross-entropy; with label_smoothing 0, the NLL
    coverage:      the lambda-weighted coverage loss (See et al. 2017, eq. 13), None without coverage
    attention:     with `loss(..., attention_layer=L)`: layer L's every head's attention over the source
                   in the same pass, (batch, heads, tgt_len, src_len), row t the step predicting
                   tgt_out[t] (what guided alignment training supervises, heed.train.alignment); else None
    """

    total: Tensor
    cross_entropy: Tensor
    coverage: Tensor | None
    attention: Tensor | None = None


class _GeneratorCrossEntropy(torch.autograd.Function):
    """features (N, F) of the target tokens only, weight (V, F), bias (V,) or None, target (N,)
    long; the matrix products of full chunks in `compute_dtype`, everything else in float32
    (float64 for a float64 weight). Returns the summed loss, a scalar of that dtype.

    Every full chunk has the same shape; the last, shorter one (a different size every batch) runs
    its products in float32 when `compute_dtype` is bf16: each new shape of a bf16 product is a new
    oneDNN primitive, and a cache of hundreds of them grew a 500-step Multi30k run's memory from
    1.9 to 2.6 GB."""

    @staticmethod
    def forward(ctx, features: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, eps: float,
                compute_dtype: torch.dtype) -> Tensor:
        n, vocab = features.size(0), weight.size(0)
        rows = max(1, CHUNK_BYTES // (4 * vocab))
        acc = torch.promote_types(weight.dtype, torch.float32)
        w_t = {dtype: weight.t().to(dtype) for dtype in {compute_dtype, acc}}  # (F, V) per product dtype
        lse = torch.empty(n, dtype=acc, device=features.device)  # (N,) log-sum-exp of each row's logits
        loss = torch.empty(n, dtype=acc, device=features.device)
        chunks = []
        for start in range(0, n, rows):
            part = slice(start, min(start + rows, n))
            dtype = compute_dtype if part.stop - start == rows else acc
            logits = torch.mm(features[part].to(dtype), w_t[dtype]).to(acc)  # (rows, V)
            if bias is not None:
                logits += bias
            torch.logsumexp(logits, dim=1, out=lse[part])
            nll = lse[part] - logits.gather(1, target[part].unsqueeze(1)).squeeze(1)  # (rows,)
            if eps:
                nll.mul_(1 - eps).add_(lse[part] - logits.mean(dim=1), alpha=eps)
            loss[part] = nll
            chunks.append(logits)
        ctx.save_for_backward(features, weight, target, lse, *chunks)
        ctx.eps, ctx.has_bias, ctx.rows, ctx.compute_dtype = eps, bias is not None, rows, compute_dtype
        return loss.sum()

    @staticmethod
    def backward(ctx, grad: Tensor):
        features, weight, target, lse, *chunks = ctx.saved_tensors
        eps, vocab, acc = ctx.eps, weight.size(0), lse.dtype
        w = {dtype: weight.to(dtype) for dtype in {ctx.compute_dtype, acc}}  # (V, F) per product dtype
        d_features = torch.empty_like(features)
        d_weight = torch.zeros(weight.shape, dtype=acc, device=features.device)
        d_bias = torch.zeros(vocab, dtype=acc, device=features.device) if ctx.has_bias else None
        start = 0
        for logits in chunks:  # each becomes its own gradient, in place
            part = slice(start, start + logits.size(0))
            d = logits.sub_(lse[part].unsqueeze(1)).exp_()  # softmax (rows, V)
            if eps:
                d.sub_(eps / vocab)
            d.scatter_add_(1, target[part].unsqueeze(1), d.new_full((d.size(0), 1), eps - 1.0))
            d.mul_(grad)
            if d_bias is not None:
                d_bias += d.sum(dim=0)
            dtype = ctx.compute_dtype if d.size(0) == ctx.rows else acc
            d_mm, f = d.to(dtype), features[part].to(dtype)
            d_features[part] = torch.mm(d_mm, w[dtype])
            if dtype == acc:
                d_weight.addmm_(d_mm.t(), f)
            else:  # a bf16 product, summed in float32
                d_weight += torch.mm(d_mm.t(), f)
            start = part.stop
        d_bias = None if d_bias is None else d_bias.to(weight.dtype)
        return d_features, d_weight.to(weight.dtype), d_bias, None, None, None


def generator_loss(features: Tensor, generator: nn.Linear, target: Tensor, *, ignore_index: int,
                   label_smoothing: float = 0.0) -> Tensor:
    """Sum over the target tokens (target != ignore_index) of the label-smoothed cross-entropy of
    `generator(features)`: F.cross_entropy(generator(features).float(), target, ignore_index=,
    label_smoothing=, reduction="sum"), without materialising the logits.

    features (..., F) float, target (...) long. Returns a float32 scalar (float64 for a float64
    generator). Under CPU autocast the
    matrix products run in the autocast dtype, as the plain computation's would. Chunked on the
    CPU where the logits outgrow one chunk; otherwise, and on GPUs (whose kernels do not pay the
    CPU's price for fresh memory), the plain computation."""
    features = features.reshape(-1, features.size(-1))  # (N, F)
    target = target.reshape(-1)  # (N,)
    if features.device.type != "cpu" or features.size(0) * generator.out_features * 4 <= CHUNK_BYTES:
        # Logits that fit in one chunk cost no more the plain way (a 15-symbol vocabulary: less).
        logits = generator(features)  # (N, V)
        return F.cross_entropy(logits.to(torch.promote_types(logits.dtype, torch.float32)), target,
                               ignore_index=ignore_index, label_smoothing=label_smoothing, reduction="sum")
    compute_dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else generator.weight.dtype
    keep = (target != ignore_index).nonzero().squeeze(1)  # (tokens,) padding rows never reach the generator
    with torch.autocast("cpu", enabled=False):
        return _GeneratorCrossEntropy.apply(features.index_select(0, keep), generator.weight, generator.bias,
                                            target.index_select(0, keep), label_smoothing, compute_dtype)
