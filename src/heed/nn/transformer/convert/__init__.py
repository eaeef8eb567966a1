"""Pretrained checkpoints in Hugging Face's layout -> the Transformer family: one module per
format, each reading `config.json`, the weights and the tokenizer files directly (transformers is
not needed). `CONVERTERS` maps config.json's `model_type` to the module's `convert`; heed.pretrained
looks a directory's type up here through the family registry (heed.nn.build.Family.converters)."""
from __future__ import annotations

from collections.abc import Callable

from heed.nn.transformer.convert import m2m100, marian
from heed.nn.transformer.convert.common import Converted

CONVERTERS: dict[str, Callable[..., Converted]] = {
    "marian": marian.convert,
    "m2m_100": m2m100.convert,
}

__all__ = ["CONVERTERS", "Converted"]
