"""Pretrained checkpoints -> the Transformer family: one module per format, each reading the
files directly (transformers is not needed).
- `CONVERTERS` maps a Hugging Face config.json's `model_type` (or a native release's kind) to the
  import path of the module's `convert`;
- `RELEASES` maps a native release's kind to the import path of the test that recognises its
  directory (one without config.json): a Marian release (.npz, vocab.yml, decoder.yml).
Import paths, not functions: the family (heed.nn.transformer.family) reads them lazily, so building
a model loads no importer. heed.pretrained looks a directory's kind up through the family registry
(heed.nn.build.Family.converters and .releases), which returns heed.nn.transformer.convert.common.Converted."""
from __future__ import annotations

CONVERTERS: dict[str, str] = {
    "marian": "heed.nn.transformer.convert.marian:convert",
    "m2m_100": "heed.nn.transformer.convert.m2m100:convert",
    "marian-npz": "heed.nn.transformer.convert.marian_npz:convert",
}
RELEASES: dict[str, str] = {
    "marian-npz": "heed.nn.transformer.convert.marian_npz:is_release",
}

__all__ = ["CONVERTERS", "RELEASES"]
