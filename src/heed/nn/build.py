"""The one builder that reads the model's config (heed.nn.model_config): build_model, which builds
`model.family`'s model through the registry (heed.nn.families: one line per family, naming its
config class and its Family, what a model family gives the rest of heed; re-exported here)."""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import torch
from torch.overrides import TorchFunctionMode

from heed.errors import ConfigError
from heed.nn.families import Family, family
from heed.nn.model_config import ModelConfig
from heed.nn.protocol import TorchModel, TrainableModel


def build_model(cfg: ModelConfig, *, src_vocab_size: int, tgt_vocab_size: int, pad_id: int = 0,
                bos_id: int = 1, eos_id: int = 2, unk_id: int = 3,
                source_to_target: Sequence[int] | None = None, file_parameters: int | None = None) -> TrainableModel:
    """A fresh model of `cfg.family` for this config and these vocabulary sizes. A copy model (`cfg.copy`) also
    needs `source_to_target`, each source id's target id by string or -1
    (heed.data.extended.source_to_target; heed.data.codec.Codec.source_to_target).

    The model is first built on torch's meta device (shapes, no memory): one whose float32 weights
    alone would not fit in this machine's memory is a ConfigError saying how large it is, before
    the allocator is asked (model.hidden_size: 10^9 made it fail with a traceback).

    `file_parameters`: the model is about to be filled from a weights file holding that many values
    (heed.checkpoint.load_model_dir): the memory check counts those instead of building on the meta
    device (whose initialisers and `arange` go through torch's Python references, which import
    torch._dynamo: 1.5-2 s of every `heed translate`), and torch.nn.init's functions are skipped (the
    file sets every parameter: 4.6 s of opus-mt-tc-big's load drawing random weights)."""
    if cfg.copy and (source_to_target is None or len(source_to_target) != src_vocab_size):
        raise ValueError("a copy model needs source_to_target, one target id (or -1) per source vocabulary id")

    def build() -> TrainableModel:
        return family(cfg.family).build(cfg, src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size,
                                          pad_id=pad_id, bos_id=bos_id, eos_id=eos_id, unk_id=unk_id,
                                          source_to_target=source_to_target)

    if file_parameters is None:
        check_size(cfg, build, vocab=(src_vocab_size, tgt_vocab_size))
        return build()
    check_memory(file_parameters, f"{family(cfg.family).sizes(cfg)}, vocabularies {src_vocab_size:,} and "
                                  f"{tgt_vocab_size:,}")
    with SkipInit():
        return build()


class SkipInit(TorchFunctionMode):
    """Inside it, torch.nn.init's functions return their tensor as it is (torch.empty's memory): for
    a model whose every parameter is read from a file next (heed.checkpoint.load_weights_into
    refuses a file that leaves one out). Other operations, and buffers computed at build, run."""

    def __torch_function__(self, func: Callable[..., object], types: object, args: tuple[object, ...] = (),
                           kwargs: dict[str, object] | None = None) -> object:
        if getattr(func, "__module__", None) == "torch.nn.init":
            return args[0] if args else (kwargs or {})["tensor"]
        return func(*args, **(kwargs or {}))


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
    check_memory(count, sizes)
    return count


def check_memory(count: int, sizes: str) -> None:
    """A ConfigError when `count` float32 parameters exceed this machine's memory."""
    memory = physical_memory()
    if memory is not None and count * 4 > memory:
        raise ConfigError(f"too large: {count:,} parameters need {count * 4 / 1e9:,.1f} GB as float32 weights "
                          f"alone, and this machine has {memory / 1e9:,.1f} GB ({sizes}); make them smaller",
                          field="model")


__all__ = ["Family", "ModelConfig", "SkipInit", "build_model", "check_memory", "check_size", "physical_memory"]
