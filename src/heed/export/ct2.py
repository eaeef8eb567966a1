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


def _vmap_order(shortlist: Shortlist, *, tgt_tokens: list[str], model: Any) -> list[int]:
    """The target vocabulary's order in an export with a vocabulary map: the pieces every batch
    searches first (the specials CTranslate2 always adds, then the shortlist's common pieces), then
    the rest as they were.

    CTranslate2 (4.x, `Decoder::update_output_layer`) keeps its map from vocabulary ids to the
    restricted output layer's positions across batches (it adds each batch's entries without
    clearing the last's), so a piece keeps the position it had in the first batch with a map; it
    looks up </s> (to end a hypothesis) and a forced prefix's pieces there. A piece whose position
    is the same in every batch is looked up right: one that every batch searches, and below which
    every id is one too. So those come first (an OPUS-MT model's </s>, id 43,311 of 53,017 in
    opus-mt-tc-big-fr-en, ended no hypothesis from the second batch on without this)."""
    specials = [model.unk_id, model.bos_id, model.eos_id]  # CTranslate2 adds these to every batch
    first = list(dict.fromkeys([*specials, *shortlist.always]))
    placed = set(first)
    return first + [i for i in range(len(tgt_tokens)) if i not in placed]


def _always_first(spec: Any, order: list[int]) -> None:
    """Reorder a TransformerSpec's target side (its vocabulary, the decoder's embedding rows and the
    output layer's rows) by `order` (new id -> old id): the same model under other ids."""
    import numpy as np

    index = np.asarray(order)
    decoder = spec.decoder
    embeddings = decoder.embeddings[0] if isinstance(decoder.embeddings, list) else decoder.embeddings
    embeddings.weight = np.ascontiguousarray(embeddings.weight[index])
    decoder.projection.weight = np.ascontiguousarray(decoder.projection.weight[index])
    if isinstance(getattr(decoder.projection, "bias", None), np.ndarray):
        decoder.projection.bias = np.ascontiguousarray(decoder.projection.bias[index])
    targets = spec._vocabularies["target"]
    targets[0] = [targets[0][i] for i in order]


def write_ct2(model: TorchModel, cfg: Any, codec: Any, directory: Path, *, max_src_len: int, int8: bool,
              shortlist: Shortlist | None = None) -> None:
    """Write CTranslate2's model files (model_files) for a model whose family has a converter
    (heed.nn.build.Family.ct2) into `directory`;
    `int8`: weights stored as int8 (CTranslate2's int8 GEMMs, activations quantized per call);
    `shortlist`: the model's vocabulary shortlist, written as CTranslate2's vocabulary map (VMAP_FILE,
    which `use_vmap` reads: heed.export.ct2_run with DecodeConfig.shortlist), its target vocabulary
    then reordered so that CTranslate2 finds </s> in every batch (_vmap_order)."""
    from heed.nn.families import family

    require_ctranslate2()
    convert = family(cfg.family).ct2
    assert convert is not None, "check_exportable refuses a family without a converter"
    model = model.float().cpu().eval()
    spec = convert(model, cfg, src_tokens=list(codec.src_vocab.tokens), tgt_tokens=list(codec.tgt_vocab.tokens),
                   max_src_len=max_src_len, unk_id=codec.tgt_vocab.unk_id)
    if shortlist is not None:
        _always_first(spec, _vmap_order(shortlist, tgt_tokens=list(codec.tgt_vocab.tokens), model=model))
    with tempfile.TemporaryDirectory() as scratch:
        if shortlist is not None:  # the spec copies the file in as its own VMAP_FILE when it saves
            vmap = Path(scratch) / VMAP_FILE
            vmap.write_text(vmap_text(shortlist, src_tokens=list(codec.src_vocab.tokens),
                                      tgt_tokens=list(codec.tgt_vocab.tokens)), encoding="utf-8")
            spec.register_vocabulary_mapping(str(vmap))
        spec.validate()
        spec.optimize(quantization="int8" if int8 else "float32")
        spec.save(str(directory))
