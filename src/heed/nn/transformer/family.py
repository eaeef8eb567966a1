"""The Transformer family as the rest of heed meets it (heed.nn.build.Family), named by its line in
heed.nn.families. Its converters of pretrained checkpoints are imported when one is used."""
from __future__ import annotations

from heed.nn.build import Family
from heed.nn.families import LazyMapping
from heed.nn.transformer.alignment_layer import build
from heed.nn.transformer.config import describe, sizes
from heed.nn.transformer.convert import CONVERTERS, RELEASES
from heed.nn.transformer.ct2 import transformer_spec
from heed.nn.transformer.onnx import TransformerGraphs

FAMILY = Family(build=build, describe=describe, sizes=sizes, graphs=TransformerGraphs,
                ct2=transformer_spec, converters=LazyMapping(CONVERTERS), releases=LazyMapping(RELEASES))
