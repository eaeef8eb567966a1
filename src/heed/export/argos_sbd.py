"""The sentence splitter an Argos package of heed carries (`minisbd/heed.onnx`), so that Argos
downloads no sentence-boundary model for it: MiniSBD's model format (a Stanza tokenizer as ONNX:
`units` (batch, len) character ids and `features` (batch, len, feats) in, `logits` (batch, len, 5)
out, class 2 = a sentence ends after this character; its vocabulary and config in the model's
metadata) holding one rule instead of trained weights: a sentence ends at `.`, `!`, `?` (and their
CJK, Arabic and Devanagari forms, `…`) followed by whitespace or the end of the paragraph, so
"It costs 3.14. Fine" is two sentences and "3.14" none. Language-independent, like spaCy's
rule-based sentencizer; MiniSBD itself ends every paragraph (line) with a sentence.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from heed.errors import HeedError, install_hint

FILE = "heed.onnx"
ENDS = ".!?。！？…؟।"
SPACES = " \n\t"  # MiniSBD turns every other whitespace character into a space first
UNITS = ["<PAD>", "<UNK>", *SPACES, *ENDS]  # MiniSBD's Vocab: <PAD> = 0, <UNK> = 1, then ours
# logits = brk * W + B: brk 0 -> class 0 (inside a token), brk 1 -> class 2 (a sentence ends)
W = np.array([-2, -1, 2, -1, -1], np.float32)
B = np.array([1, 0, -1, -1, -1], np.float32)


def write_minisbd(directory: Path) -> None:
    """Write `directory/heed.onnx`, the rule above as a MiniSBD model."""
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        raise HeedError(f"Argos packages need onnx to write their sentence splitter: {install_hint('argos')}") from None
    end = np.array([u in ENDS for u in UNITS], np.float32)
    space = np.array([u in SPACES or u == "<PAD>" for u in UNITS], np.float32)
    constants: dict[str, np.ndarray] = {
        "end_table": end, "space_table": space, "w": W, "b": B, "zero": np.array([0], np.int64),
        "one": np.array([1], np.int64), "big": np.array([2**62], np.int64), "axis2": np.array([2], np.int64),
        "f0": np.array(0.0, np.float32), "f1": np.array(1.0, np.float32)}
    node = helper.make_node
    nodes = [
        node("Gather", ["end_table", "units"], ["end"]),                 # (batch, len): 1 at . ! ?
        node("Gather", ["space_table", "units"], ["space"]),             # (batch, len): 1 at whitespace, <PAD>
        node("Slice", ["space", "one", "big", "one"], ["space_after"]),  # (batch, len - 1): the next unit's
        node("Slice", ["space", "zero", "one", "one"], ["first"]),       # (batch, 1)
        node("Mul", ["first", "f0"], ["zeros"]),
        node("Add", ["zeros", "f1"], ["ones"]),                          # past the paragraph's end: a space
        node("Concat", ["space_after", "ones"], ["next_space"], axis=1),  # (batch, len)
        node("Mul", ["end", "next_space"], ["brk"]),                     # (batch, len): a sentence ends here
        node("Unsqueeze", ["brk", "axis2"], ["brk3"]),                   # (batch, len, 1)
        node("Mul", ["brk3", "w"], ["scaled"]),
        node("Add", ["scaled", "b"], ["logits"]),                        # (batch, len, 5)
    ]
    graph = helper.make_graph(
        nodes, "heed_sentence_ends",
        [helper.make_tensor_value_info("units", TensorProto.INT64, ["batch", "len"]),
         helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", "len", "feats"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "len", 5])],
        [numpy_helper.from_array(value, name) for name, value in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what onnxruntime releases since 1.14 read
    vocab = {"lang": "xx", "idx": 0, "cutoff": 0, "lower": False, "_id2unit": UNITS,
             "_unit2id": {u: i for i, u in enumerate(UNITS)}}
    for key, value in {"lang_code": "xx", "config": json.dumps({"feat_funcs": [], "max_seqlen": 1000}),
                       "vocab": json.dumps(vocab)}.items():
        model.metadata_props.add(key=key, value=value)
    onnx.checker.check_model(model)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / FILE).write_bytes(model.SerializeToString())
