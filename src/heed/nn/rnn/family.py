"""The RNN family as the rest of heed meets it (heed.nn.build.Family), named by its line in
heed.nn.families."""
from __future__ import annotations

from heed.nn.build import Family
from heed.nn.rnn.build import build_rnn
from heed.nn.rnn.config import describe, sizes
from heed.nn.rnn.onnx import RNNGraphs

FAMILY = Family(build=build_rnn, describe=describe, sizes=sizes, graphs=RNNGraphs)
