"""Load an exported directory (either kind heed.export.onnx.export_model writes) for the Translator."""
from __future__ import annotations

import os
from typing import Any

from heed.errors import ConfigError, ModelDirError
from heed.export.onnx import load_manifest, require


def load_exported(path: str | os.PathLike[str], *, verify: bool | None = None) -> tuple[Any, Any, Any]:
    """An exported directory -> (runtime model, Codec, Config), after `load_manifest`'s checks: an
    OrtSeq2Seq (heed's search over ONNX Runtime) or a CT2Seq2Seq (CTranslate2's search)."""
    from heed.config import load_config
    from heed.data.codec import Codec

    manifest = load_manifest(path, verify=verify)
    directory = manifest.directory
    if manifest.kind == "onnx":
        require("onnxruntime")
    try:
        config = load_config(directory / "config.yaml", environment=False, streams=False)
    except ConfigError as e:
        raise ModelDirError(f"{e}; the exported directory's config does not match this heed") from None
    codec = Codec.load(directory, data=config.data)
    ids = manifest.data["special_ids"]
    for name, expected in codec.special_ids().items():  # {"pad_id": 0, ...}: the vocabulary's own
        key = name.removesuffix("_id")
        if ids[key] != expected:
            raise ModelDirError(f"{directory / 'manifest.json'}: special_ids.{key} is {ids[key]}, but the target "
                                f"vocabulary's is {expected}; the manifest is damaged, export the model again")
    if manifest.kind == "ctranslate2":
        from heed.export.ct2_run import CT2Seq2Seq

        return CT2Seq2Seq(manifest, codec.src_vocab.tokens, codec.tgt_vocab.tokens), codec, config
    from heed.export.ort import OrtSeq2Seq

    return OrtSeq2Seq(manifest), codec, config
