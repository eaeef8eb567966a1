"""heed: sequence-to-sequence learning with attention."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# On the CPU the encoder runs one oneDNN RNN call per source length in a batch
# (heed.nn.encoder), so a long run meets thousands of shapes; oneDNN caches a primitive per shape
# (1,024 by default), which grew a 1000-step dates run from 471 MB to 997 MB. 16 cached primitives
# keep it at the packed encoder's memory and speed (bench/RESULTS.md). Read by oneDNN at its first
# primitive, so setting it here (before any model runs) works; a value set by the user wins.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "16")

if TYPE_CHECKING:
    from heed.api import Translator


def load(path: str, *, device: str = "auto", bf16: bool = False) -> "Translator":
    """Load a trained model directory; `heed.load(path).translate(["..."])`.
    `device`: "auto" (CUDA if available), "cpu" or "cuda"; `bf16`: decode in bfloat16."""
    from heed.api import Translator

    return Translator.load(path, device=device, bf16=bf16)
