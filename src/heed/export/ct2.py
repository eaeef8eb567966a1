"""Export a heed Transformer to CTranslate2 (`heed export --format ctranslate2`): CTranslate2's own
model files, written from heed's weights through its `TransformerSpec`, so that CTranslate2's C++
runtime (fused attention, int8 GEMMs, its own beam search) translates with heed's model.

    OUT_DIR/
      model.bin, config.json, source_ and target_vocabulary.json (or one
      shared_vocabulary.json)                                                   CTranslate2's model
      config.yaml, tokenizers.json, src/tgt.vocab.json [, src/tgt.spm.model]    heed's, as for ONNX
      manifest.json      kind "ctranslate2", the heed and ctranslate2 versions, every file's sha256

The layer-by-layer mapping is the family's own: heed.nn.transformer.ct2.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from heed.errors import ConfigError, HeedError, install_hint
from heed.search.shortlist import Shortlist, vmap_text

if TYPE_CHECKING:
    from heed.nn.protocol import TorchModel

INSTALL_HINT = install_hint("ct2")
MODEL_FILES = ("model.bin", "config.json")
SHARED_VOCABULARY = "shared_vocabulary.json"  # CTranslate2 writes one list where both sides' are the same
SIDE_VOCABULARIES = ("source_vocabulary.json", "target_vocabulary.json")
VMAP_FILE = "vmap.txt"  # CTranslate2's vocabulary map, where the model records a shortlist


def require_ctranslate2() -> Any:
    """Import ctranslate2 (the [ct2] extra), or say how to install it."""
    try:
        import ctranslate2  # type: ignore[import-untyped]
    except ImportError:
        raise HeedError(f"CTranslate2 exports need ctranslate2, which is not installed: {INSTALL_HINT}") from None
    return ctranslate2


def model_files(listed: set[str] | list[str]) -> list[str]:
    """CTranslate2's files in an export whose manifest lists `listed`: one shared vocabulary or two."""
    return [*MODEL_FILES, *((SHARED_VOCABULARY,) if SHARED_VOCABULARY in listed else SIDE_VOCABULARIES)]


def check_exportable(model_cfg: Any, config_path: Path) -> None:
    """A ConfigError naming model.family unless the model's family has a CTranslate2 converter."""
    from heed.nn.families import families, family

    if family(model_cfg.family).ct2 is None:
        runs = ", ".join(f"{name.capitalize()}s" for name, family in families().items() if family.ct2 is not None)
        raise ConfigError(f"CTranslate2 runs {runs}; export this model with --format onnx (the default)",
                          field="model.family", path=config_path)


def write_ct2(model: TorchModel, cfg: Any, codec: Any, directory: Path, *, max_src_len: int, int8: bool,
              shortlist: Shortlist | None = None) -> None:
    """Write CTranslate2's model files (model_files) for a model whose family has a converter
    (heed.nn.build.Family.ct2) into `directory`;
    `int8`: weights stored as int8 (CTranslate2's int8 GEMMs, activations quantized per call);
    `shortlist`: the model's vocabulary shortlist, written as CTranslate2's vocabulary map (VMAP_FILE,
    which `use_vmap` reads: heed.export.ct2_run with DecodeConfig.shortlist)."""
    from heed.nn.families import family

    require_ctranslate2()
    convert = family(cfg.family).ct2
    assert convert is not None, "check_exportable refuses a family without a converter"
    model = model.float().cpu().eval()
    spec = convert(model, cfg, src_tokens=list(codec.src_vocab.tokens), tgt_tokens=list(codec.tgt_vocab.tokens),
                   max_src_len=max_src_len, unk_id=codec.tgt_vocab.unk_id)
    with tempfile.TemporaryDirectory() as scratch:
        if shortlist is not None:  # the spec copies the file in as its own VMAP_FILE when it saves
            vmap = Path(scratch) / VMAP_FILE
            vmap.write_text(vmap_text(shortlist, src_tokens=list(codec.src_vocab.tokens),
                                      tgt_tokens=list(codec.tgt_vocab.tokens)), encoding="utf-8")
            spec.register_vocabulary_mapping(str(vmap))
        spec.validate()
        spec.optimize(quantization="int8" if int8 else "float32")
        spec.save(str(directory))
