"""The decoder's weight matrices laid out for the CPU step loop.

A decoding step multiplies a few rows (beam x batch) by every weight matrix of the decoder:
`x @ W.T` with W stored (out, in) as nn.Linear and the RNN cells keep it. For few rows the CPU's
GEMM runs that product markedly faster when W.T is the contiguous one, i.e. when W is stored
column-major (bench/studies/decode_layout.py, 1 thread: 5 rows x 256 by 8,000 outputs 733 -> 426 us,
5 x 512 by 2,048 399 -> 274 us, 64 x 256 by 8,000 2,173 -> 1,876 us; from a few hundred rows
on the two layouts are within about 10 per cent, so training keeps PyTorch's layout).

`for_decoding` changes only the strides: every value, shape, state_dict key and checkpoint stays
the same, and `W.is_contiguous()` becomes False for those weights (they still save and load).
"""
from __future__ import annotations

from torch import Tensor, nn


def column_major(weight: Tensor) -> Tensor:
    """The same (out, in) matrix stored so that its transpose is contiguous."""
    return weight.t().contiguous().t()


def for_decoding(decoder: nn.Module) -> None:
    """Lay out, in place, every matrix of `decoder` that its step multiplies by: the weights of
    its nn.Linear layers (generator, W_c, readout, attention projections) and the input and
    recurrent weights of its RNN layers. Embeddings (looked up, not multiplied) are left as they
    are. Call it on a model that only decodes: an optimizer's state keeps the old layout."""
    for module in decoder.modules():
        if isinstance(module, nn.Linear):
            names = ["weight"]
        elif isinstance(module, nn.RNNBase):
            names = [name for name in module._flat_weights_names if name.startswith("weight_")]
        else:
            continue
        for name in names:
            param = getattr(module, name)
            if param.dim() == 2:
                param.data = column_major(param.data)
