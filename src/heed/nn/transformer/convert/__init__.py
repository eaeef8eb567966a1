"""Pretrained checkpoints -> the Transformer family: one module per format, each reading the
files directly (transformers is not needed).
- `CONVERTERS` maps a Hugging Face config.json's `model_type` (or a native release's kind) to the
  module's `convert`;
- `RELEASES` maps a native release's kind to the test that recognises its directory (one without
  config.json): a Marian release (.npz, vocab.yml, decoder.yml).
heed.pretrained looks a directory's kind up here through the family registry
(heed.nn.build.Family.converters and .releases)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from heed.nn.transformer.convert import m2m100, marian, marian_npz
from heed.nn.transformer.convert.common import Converted

CONVERTERS: dict[str, Callable[..., Converted]] = {
    "marian": marian.convert,
    "m2m_100": m2m100.convert,
    "marian-npz": marian_npz.convert,
}
RELEASES: dict[str, Callable[[Path], bool]] = {
    "marian-npz": marian_npz.is_release,
}

__all__ = ["CONVERTERS", "RELEASES", "Converted"]
