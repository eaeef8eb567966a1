"""The one builder that reads the model's config (heed.nn.model_config): build_model, which builds
`model.family`'s model through the registry (heed.nn.families: one line per family, naming its
config class and its Family, what a model family gives the rest of heed; re-exported here)."""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import torch

from heed.errors import ConfigError
from heed.nn.families import Family, family
from heed.nn.model_config import ModelConfig
from heed.nn.protocol import TorchModel, TrainableModel


def build_model(cfg: ModelConfig, *, src_vocab_size: int, tgt_vocab_size: int, pad_id: int = 0,
                bos_id: int = 1, eos_id: int = 2, unk_id: int = 3,
                source_to_target: Sequence[int] | None = None) -> TrainableModel:
    """A fresh model of `cfg.family` for this config and these vocabulary sizes. A copy model (`cfg.copy`) also
    needs `source_to_target`, each source id's target id by string or -1
    (heed.data.extended.source_to_target; heed.data.codec.Codec.source_to_target).

    The model is first built on torch's meta device (shapes, no memory): one whose float32 weights
    alone would not fit in this machine's memory is a ConfigError saying how large it is, before
    the allocator is asked (model.hidden_size: 10^9 made it fail with a traceback)."""
    if cfg.copy and (source_to_target is None or len(source_to_target) != src_vocab_size):
        raise ValueError("a copy model needs source_to_target, one target id (or -1) per source vocabulary id")

    def build() -> TrainableModel:
        return family(cfg.family).build(cfg, src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size,
                                          pad_id=pad_id, bos_id=bos_id, eos_id=eos_id, unk_id=unk_id,
                                          source_to_target=source_to_target)

    check_size(cfg, build, vocab=(src_vocab_size, tgt_vocab_size))
    return build()


def physical_memory() -> int | None:
    """This machine's memory in bytes, where the OS says."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_size(cfg: ModelConfig, build: Callable[[], TorchModel], *, vocab: tuple[int, int]) -> int:
    """The parameter count of the model `build()` makes, counted on the meta device; a ConfigError
    when its float32 weights alone exceed this machine's memory."""
    sizes = f"{family(cfg.family).sizes(cfg)}, vocabularies {vocab[0]:,} and {vocab[1]:,}"
    try:
        with torch.device("meta"):
            count = sum(p.numel() for p in build().parameters())
    except (RuntimeError, OverflowError, ValueError):  # "Storage size calculation overflowed"
        raise ConfigError(f"too large: the parameter count overflows ({sizes}); make them smaller",
                          field="model") from None
    memory = physical_memory()
    if memory is not None and count * 4 > memory:
        raise ConfigError(f"too large: {count:,} parameters need {count * 4 / 1e9:,.1f} GB as float32 weights "
                          f"alone, and this machine has {memory / 1e9:,.1f} GB ({sizes}); make them smaller",
                          field="model")
    return count


__all__ = ["Family", "ModelConfig", "build_model", "check_size", "physical_memory"]
