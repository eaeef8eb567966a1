"""Dynamic int8 matrix products for decoding on the CPU (`heed translate --int8`, `heed.load(path, int8=True)`).

A weight matrix W (out, in) is stored as int8 with one scale per output row, symmetric:
s_o = max_i |W_oi| / 127, W_oi ~ s_o q_oi (per-channel weight quantization, Krishnamoorthi 2018,
section 2.2). The activations are quantized at every call, over their own range, to uint8 with a
zero point (dynamic quantization: no calibration data), and the product is summed in int32 and
scaled back to float32 by PyTorch's own kernels (`quantized::linear_prepack` and
`quantized::linear_dynamic`, fbgemm on x86). The weights are packed once, in the layout those
kernels read.

`reduce_range`: on x86 CPUs without VNNI or AMX (heed.plumbing.runtime.cpu_int8_products_exact),
fbgemm multiplies unsigned by signed bytes with VPMADDUBSW, whose 16-bit pair sums saturate; there
the activations get 7 bits (0..127), as torch.ao's own dynamic Linear always does, so that no sum
saturates. With VNNI or AMX the sums are 32-bit and the activations keep all 8 bits.

A family's model opts in with `to_int8` (the protocol heed.nn.protocol.Int8Model): it replaces its
nn.Linear layers with Int8Linear (`quantize_linears`) and its other products as it knows them (the
Transformer: the attention's stacked projections and the tied output layer). What it converts is
meant for decoding: the model is not trained afterwards. Gradients still flow back to the inputs
(attribution over an int8 model), through the dequantized weight, treating the activations'
rounding as the identity (the straight-through estimate).
"""
from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

ENGINES = ("x86", "fbgemm")  # PyTorch's quantized engines on x86 CPUs whose dynamic linear heed uses


@contextmanager
def _x86_engine() -> Iterator[None]:
    """Pack with fbgemm (the 'x86' engine's dynamic linear, or fbgemm itself), whatever engine the
    process had chosen; the packed weight remembers its engine, so calls need no setting. PyTorch's
    quantized tensor constructors warn that they are deprecated: heed makes them only here."""
    before = torch.backends.quantized.engine
    engine = next(e for e in ENGINES if e in torch.backends.quantized.supported_engines)
    torch.backends.quantized.engine = engine
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*")
            yield
    finally:
        torch.backends.quantized.engine = before


def quantize_rows(weight: Tensor) -> Tensor:
    """weight (out, in) float -> a per-channel qint8 tensor (out, in): one symmetric scale per row,
    max |row| / 127 (an all-zero row gets the smallest scale, so its values stay 0)."""
    weight = weight.detach().float().contiguous()
    scales = (weight.abs().amax(dim=1) / 127).clamp_min(torch.finfo(torch.float32).eps).double()
    zero_points = torch.zeros(weight.size(0), dtype=torch.long)
    with _x86_engine():
        return torch.quantize_per_channel(weight, scales, zero_points, 0, torch.qint8)


class _StraightThrough(torch.autograd.Function):
    """The int8 product forward; backward, d x = d y W (the dequantized weight), as if the
    activations had not been rounded."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, layer: Int8Linear) -> Tensor:
        ctx.layer = layer
        return layer.product(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return grad @ ctx.layer.weight, None


class Int8Linear(nn.Module):
    """y = x W^T + b, W int8 per output row, x quantized per call (see the module doc).
    x (..., in) float32 -> y (..., out) float32. It holds no parameters: the packed weight is not
    part of a state_dict (an int8 model is made from a float one at load, never saved)."""

    def __init__(self, weight: Tensor | None = None, bias: Tensor | None = None, *, reduce_range: bool,
                 qweight: Tensor | None = None) -> None:
        """From a float `weight` (out, in), or an already quantized `qweight` (quantize_rows'); `bias` (out,)."""
        super().__init__()
        if qweight is None:
            assert weight is not None, "Int8Linear needs a weight or a quantized one"
            qweight = quantize_rows(weight)
        self.out_features, self.in_features = qweight.shape
        self.reduce_range = reduce_range
        bias = None if bias is None else bias.detach().float().contiguous()
        with _x86_engine():
            self.packed = torch.ops.quantized.linear_prepack(qweight, bias)

    @classmethod
    def of(cls, linear: nn.Linear, *, reduce_range: bool) -> Int8Linear:
        return cls(linear.weight, linear.bias, reduce_range=reduce_range)

    def unpacked(self) -> tuple[Tensor, Tensor | None]:
        """(the qint8 weight (out, in), the float bias (out,) or None) as packed."""
        qweight, bias = torch.ops.quantized.linear_unpack(self.packed)
        return qweight, bias

    @property
    def weight(self) -> Tensor:
        """The weight as the product sees it: int8 times its row's scale, float32 (out, in)."""
        return self.unpacked()[0].dequantize()

    @property
    def bias(self) -> Tensor | None:
        return self.unpacked()[1]

    def rows(self, ids: Tensor) -> Int8Linear:
        """The layer restricted to output rows `ids` (n,) long: the same int8 values and scales, packed
        again (heed.search.shortlist multiplies a batch's candidate rows only)."""
        qweight, bias = self.unpacked()
        ids = ids.cpu()
        picked = torch._make_per_channel_quantized_tensor(
            qweight.int_repr().index_select(0, ids), qweight.q_per_channel_scales().index_select(0, ids),
            qweight.q_per_channel_zero_points().index_select(0, ids), 0)
        return Int8Linear(bias=None if bias is None else bias.index_select(0, ids), qweight=picked,
                          reduce_range=self.reduce_range)

    def product(self, x: Tensor) -> Tensor:
        # fbgemm reads x as contiguous rows whatever its strides: a strided view would be misread
        return torch.ops.quantized.linear_dynamic(x.float().contiguous(), self.packed, self.reduce_range)

    def forward(self, x: Tensor) -> Tensor:
        if torch.is_grad_enabled() and x.requires_grad:
            return _StraightThrough.apply(x, self)
        return self.product(x)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, reduce_range={self.reduce_range}"


def quantize_linears(module: nn.Module, *, reduce_range: bool) -> int:
    """Replace, in place, every nn.Linear inside `module` (not `module` itself) with an Int8Linear of
    its weight and bias; -> how many were replaced."""
    replaced = 0
    for name, child in list(module.named_children()):
        if isinstance(child, nn.Linear):
            setattr(module, name, Int8Linear.of(child, reduce_range=reduce_range))
            replaced += 1
        else:
            replaced += quantize_linears(child, reduce_range=reduce_range)
    return replaced


__all__ = ["ENGINES", "Int8Linear", "quantize_linears", "quantize_rows"]
