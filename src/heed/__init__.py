"""heed: sequence-to-sequence learning with attention."""
from __future__ import annotations

from typing import TYPE_CHECKING

from heed.version import __version__ as __version__  # heed.__version__

if TYPE_CHECKING:
    import os
    from collections.abc import Sequence

    from heed.api import Translator


def load(path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *, device: str = "auto",
         bf16: bool = False, int8: bool = False, src_lang: str | None = None,
         tgt_lang: str | None = None) -> Translator:
    """Load a trained model directory (or a `heed export` directory, run by ONNX Runtime);
    `heed.load(path).translate(["..."])`. A list of directories loads an ensemble that decodes
    with the mean of their log-probabilities (heed.nn.ensemble); they must share tokenizers and vocabularies.
    `device`: "auto" (CUDA if available), "cpu" or "cuda"; `bf16`: decode in bfloat16; `int8`: decode
    with dynamic int8 products on the CPU (heed.nn.int8); `src_lang`, `tgt_lang`: the language pair
    of a many-language model (an imported M2M-100 or NLLB model)."""
    from heed.api import Translator

    return Translator.load(path, device=device, bf16=bf16, int8=int8, src_lang=src_lang, tgt_lang=tgt_lang)
