"""Export a trained model for deployment: two ONNX graphs, the tokenizers, and a manifest.

    OUT_DIR/
      encoder.onnx       src (batch, src_len) int64, src_lengths (batch,) int64 ->
                         states (batch, src_len, hidden)   every step, zero under padding
                         keys (batch, src_len, ·)          the attention's projected keys, computed
                                                           once per source (attention models only)
                         h0 [, c0] (layers, batch, hidden) the decoder's initial state (bridge applied)
                         summary (1, batch, hidden)        the plain decoder's source summary only
      decoder_step.onnx  one decoder step with a dynamic batch and source length (see `StepGraph`)
      config.yaml, tokenizers.json, src.vocab.json, tgt.vocab.json [, src/tgt.spm.model]
      manifest.json      heed version, opset, the resolved model config, each graph's inputs and
                         outputs, and the sha256 of every other file

`load_manifest` checks all of that before a byte of a graph reaches onnxruntime: a file changed
after the export (sha256), a manifest from a newer heed, a directory that is not an export.
`heed.export.ort.OrtSeq2Seq` runs the graphs behind the search's protocol.

The graphs are traced with torch's TorchScript exporter: it maps a packed `nn.LSTM`/`nn.GRU` onto
ONNX's own LSTM/GRU operator with `sequence_lens` (each source stops at its length, as packing
does), and keeps every size read by the step (`states.size(0)`) symbolic, so one graph serves any
batch, beam and source length.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import heed
from heed.errors import ConfigError, HeedError, ModelDirError, install_hint
from heed.files import file_digest, open_regular, resolve_dir, verifying
from heed.nn.rnn.decoder import _RNNDecoder
from heed.nn.rnn.seq2seq import Seq2Seq

FORMAT_VERSION = 1
MANIFEST_FILE = "manifest.json"
ENCODER_FILE = "encoder.onnx"
STEP_FILE = "decoder_step.onnx"
OPSET = 17
INSTALL_HINT = install_hint("onnx")
UPGRADE_HINT = install_hint(upgrade=True)


def require(module: str) -> Any:
    """Import an optional dependency of the [onnx] extra, or say how to install it."""
    try:
        return __import__(module)
    except ImportError:
        raise HeedError(f"exported models need {module}, which is not installed: {INSTALL_HINT}") from None


# ----------------------------------------------------------------------------------- the graphs


class EncoderGraph(nn.Module):
    """What `Seq2Seq.encode` + `init_state` compute once per source, as one graph."""

    def __init__(self, model: Seq2Seq) -> None:
        super().__init__()
        self.encoder, self.bridge, self.decoder = model.encoder, model.bridge, model.decoder

    def forward(self, src: Tensor, src_lengths: Tensor) -> tuple[Tensor, ...]:
        """src (batch, src_len), src_lengths (batch,) -> states, [keys,] h0 [, c0] [, summary]."""
        enc = self.encoder
        embedded = enc.embedding(src)  # (batch, src_len, embed)
        packed = pack_padded_sequence(embedded, src_lengths.clamp(min=1), batch_first=True, enforce_sorted=False)
        out, raw = enc.rnn(packed)
        states, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))  # (batch, src_len, hidden)
        final = tuple(enc._join_directions(t) for t in (raw if isinstance(raw, tuple) else (raw,)))
        outputs: list[Tensor] = [states]
        keys = self.decoder.project_keys(states)  # (batch, src_len, ·), once per source; None without attention
        if keys is not None:
            outputs.append(keys)
        outputs.extend(self.bridge(final))  # each (dec_layers, batch, hidden)
        if not self.decoder.has_attention:
            outputs.append(final[0][-1:])  # (1, batch, hidden): the plain decoder's summary of the source
        return tuple(outputs)


def _cell(rnn: nn.RNNBase, layer: int, x: Tensor, hx: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """One step of layer `layer` of nn.LSTM / nn.GRU, written out (gate orders as PyTorch's:
    LSTM i, f, g, o; GRU r, z, n), so the step graph is plain MatMul/Add/Sigmoid/Tanh.
    x (rows, in), hx each (rows, hidden) -> the new state, each (rows, hidden)."""
    w_ih, w_hh, b_ih, b_hh = (getattr(rnn, f"{n}_l{layer}") for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
    if isinstance(rnn, nn.LSTM):
        h, c = hx
        gates = x @ w_ih.t() + h @ w_hh.t() + (b_ih + b_hh)  # (rows, 4 hidden)
        i, f, g, o = gates.split(rnn.hidden_size, dim=-1)  # one Split node (chunk traces to 4 Slices)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c
    (h,) = hx
    gi = x @ w_ih.t() + b_ih  # (rows, 3 hidden)
    gh = h @ w_hh.t() + b_hh
    i_r, i_z, i_n = gi.split(rnn.hidden_size, dim=-1)
    h_r, h_z, h_n = gh.split(rnn.hidden_size, dim=-1)
    r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)  # PyTorch's GRU: r gates W_hn h + b_hn
    return ((1 - z) * n + z * h,)


class StepGraph(nn.Module):
    """One decoder step, the arithmetic of `LuongDecoder`/`BahdanauDecoder`/`PlainDecoder._step_features`
    plus the generator, over the same parameters (tests/test_export.py holds it to PyTorch's search).

    Inputs: prev_tokens (rows,) int64; h [, c] (layers, rows, hidden); feed (rows, hidden) for
    Luong with input feeding; coverage (rows, src_len) float32, c^t, for a coverage model;
    summary (rows, hidden) for plain; states (batch, src_len, hidden), keys (batch, src_len, ·)
    and src_mask bool (batch, src_len), True = real token, for attention.
    rows = batch * group: a source's `group` rows (its beams) are consecutive and attend in one
    grouped call, as `_RNNDecoder._attend` does, so beams never copy the source.
    Outputs: logits (rows, vocab), h [, c] [, feed] [, coverage c^{t+1}] [, attention (rows, src_len)]."""

    def __init__(self, decoder: _RNNDecoder, kind: str) -> None:
        super().__init__()
        self.decoder: Any = decoder  # Any: the three decoders' own attributes (input_feeding, combine, readout)
        self.kind = kind
        self.lstm = isinstance(decoder.rnn, nn.LSTM)
        self.feeding = kind == "luong" and decoder.input_feeding
        self.coverage = decoder.coverage

    def input_names(self) -> list[str]:
        return graph_names(self.kind, lstm=self.lstm, feeding=self.feeding, coverage=self.coverage)[STEP_FILE][0]

    def output_names(self) -> list[str]:
        return graph_names(self.kind, lstm=self.lstm, feeding=self.feeding, coverage=self.coverage)[STEP_FILE][1]

    def _rnn(self, x: Tensor, state: tuple[Tensor, ...]) -> tuple[Tensor, tuple[Tensor, ...]]:
        """x (rows, in), state each (layers, rows, hidden) -> top output (rows, hidden), new state."""
        rnn, layers = self.decoder.rnn, []
        for k in range(rnn.num_layers):
            out = _cell(rnn, k, x, tuple(t[k] for t in state))
            layers.append(out)
            x = out[0]
        return x, tuple(torch.stack(parts) for parts in zip(*layers))

    def _attend(self, query: Tensor, states: Tensor, keys: Tensor, mask: Tensor,
                coverage: Tensor | None) -> tuple[Tensor, Tensor]:
        """query (rows, hidden), coverage (rows, src_len) or None -> context (rows, hidden), weights (rows, src_len)."""
        # Sizes known at export are Python ints, so they trace as constants, not Shape/Gather chains.
        grouped = query.reshape(states.size(0), -1, self.decoder.hidden_size)  # (batch, group, hidden)
        if coverage is not None:
            coverage = coverage.reshape(states.size(0), -1, coverage.size(-1))  # (batch, group, src_len)
        context, weights = self.decoder.attention(grouped, keys, states, mask, coverage=coverage)
        return context.reshape(-1, self.decoder.attention.key_size), weights.flatten(0, 1)

    def forward(self, *inputs: Tensor) -> tuple[Tensor, ...]:
        named = dict(zip(self.input_names(), inputs))
        dec, prev = self.decoder, named["prev_tokens"]
        state: tuple[Tensor, ...] = (named["h"], named["c"]) if self.lstm else (named["h"],)
        embedded = dec.embedding(prev)  # (rows, embed)
        weights = None
        coverage = named.get("coverage")
        if self.kind == "luong":
            x = torch.cat([embedded, named["feed"]], dim=-1) if self.feeding else embedded  # Luong §3.3
            h, state = self._rnn(x, state)
            context, weights = self._attend(h, named["states"], named["keys"], named["src_mask"], coverage)
            features = torch.tanh(dec.combine(torch.cat([h, context], dim=-1)))  # Luong eq. 5
        elif self.kind == "bahdanau":
            context, weights = self._attend(state[0][-1], named["states"], named["keys"], named["src_mask"], coverage)
            s, state = self._rnn(torch.cat([embedded, context], dim=-1), state)  # Bahdanau A.1.2
            features = torch.tanh(dec.readout(torch.cat([s, context, embedded], dim=-1)))
        else:
            features, state = self._rnn(torch.cat([embedded, named["summary"]], dim=-1), state)
        outputs = [dec.generator(features), *state]  # logits (rows, vocab)
        if self.feeding:
            outputs.append(features)
        if coverage is not None:
            outputs.append(coverage + weights)  # c^{t+1} = c^t + a^t (See et al. 2017, eq. 10)
        if weights is not None:
            outputs.append(weights)
        return tuple(outputs)


def _example_inputs(model: Seq2Seq, graph: StepGraph) -> tuple[Tensor, ...]:
    """Small inputs to trace with: 2 sources, 2 rows each, 5 source positions (sizes that differ from
    each other, so the tracer cannot mistake one dimension for another)."""
    cfg = {"rows": 4, "batch": 2, "src": 5}
    dec: Any = model.decoder
    hidden, layers = dec.hidden_size, dec.rnn.num_layers
    values = {"prev_tokens": torch.full((cfg["rows"],), model.bos_id, dtype=torch.long),
              "h": torch.zeros(layers, cfg["rows"], hidden), "c": torch.zeros(layers, cfg["rows"], hidden),
              "feed": torch.zeros(cfg["rows"], hidden), "summary": torch.zeros(cfg["rows"], hidden),
              "coverage": torch.zeros(cfg["rows"], cfg["src"]),
              # a private generator: exporting leaves the global RNG as it was
              "states": torch.randn(cfg["batch"], cfg["src"], hidden, generator=torch.Generator().manual_seed(0)),
              "src_mask": torch.tensor([[True] * 5, [True] * 3 + [False] * 2])}
    if graph.kind != "plain":
        values["keys"] = dec.project_keys(values["states"])
    return tuple(values[name] for name in graph.input_names())


STEP_AXES = {"prev_tokens": {0: "rows"}, "h": {1: "rows"}, "c": {1: "rows"}, "feed": {0: "rows"},
             "summary": {0: "rows"}, "states": {0: "batch", 1: "src_len"}, "keys": {0: "batch", 1: "src_len"},
             "src_mask": {0: "batch", 1: "src_len"}, "logits": {0: "rows"}, "h_out": {1: "rows"},
             "c_out": {1: "rows"}, "feed_out": {0: "rows"}, "attention": {0: "rows", 1: "src_len"},
             "coverage": {0: "rows", 1: "src_len"}, "coverage_out": {0: "rows", 1: "src_len"}}


def graph_names(kind: str, *, lstm: bool, feeding: bool, coverage: bool) -> dict[str, tuple[list[str], list[str]]]:
    """{graph file: (input names, output names)} of a decoder `kind`'s export, in order: what the
    exporter writes and what heed.export.ort feeds and reads."""
    attention = kind != "plain"
    enc_out = ["states"] + (["keys"] if attention else []) + ["h0"] + (["c0"] if lstm else []) + \
        ([] if attention else ["summary"])
    step_in = ["prev_tokens", "h"] + (["c"] if lstm else []) + (["feed"] if feeding else []) + \
        (["coverage"] if coverage else []) + (["states", "keys", "src_mask"] if attention else ["summary"])
    step_out = ["logits", "h_out"] + (["c_out"] if lstm else []) + (["feed_out"] if feeding else []) + \
        (["coverage_out"] if coverage else []) + (["attention"] if attention else [])
    return {ENCODER_FILE: (["src", "src_lengths"], enc_out), STEP_FILE: (step_in, step_out)}


ENCODER_AXES = {"src": {0: "batch", 1: "src_len"}, "src_lengths": {0: "batch"},
                "states": {0: "batch", 1: "src_len"}, "keys": {0: "batch", 1: "src_len"},
                "h0": {1: "batch"}, "c0": {1: "batch"}, "summary": {1: "batch"}}


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence the exporter's C++ shape-inference notes about prim::PackPadded (written straight to
    file descriptor 2, past Python's warnings): the graphs are checked by onnx.checker and by
    tests/test_export.py, and a user of `heed export` can do nothing about them."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _trace(module: nn.Module, args: tuple[Tensor, ...], path: Path, inputs: list[str], outputs: list[str],
           axes: dict[str, dict[int, str]]) -> None:
    with warnings.catch_warnings(), torch.no_grad(), _quiet_stderr():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer notes
        torch.onnx.export(module, args, str(path), dynamo=False, opset_version=OPSET, input_names=inputs,
                          output_names=outputs, dynamic_axes={n: axes[n] for n in inputs + outputs},
                          do_constant_folding=True)


def export_graphs(model: Seq2Seq, kind: str, directory: Path) -> dict[str, dict[str, list[str]]]:
    """Write encoder.onnx and decoder_step.onnx for `model` (a Seq2Seq in eval mode, on the CPU,
    float32) into `directory`; check both with onnx.checker. Returns each graph's input and output names."""
    onnx = require("onnx")
    model = model.float().cpu().eval()
    encoder = EncoderGraph(model)
    step = StepGraph(model.decoder, kind)
    names = graph_names(kind, lstm=step.lstm, feeding=step.feeding, coverage=step.coverage)
    src = torch.full((2, 5), 3, dtype=torch.long)
    _trace(encoder, (src, torch.tensor([5, 3])), directory / ENCODER_FILE, *names[ENCODER_FILE], ENCODER_AXES)
    _trace(step, _example_inputs(model, step), directory / STEP_FILE, *names[STEP_FILE], STEP_AXES)
    for name in (ENCODER_FILE, STEP_FILE):
        onnx.checker.check_model(str(directory / name), full_check=True)
    return {name: {"inputs": inputs, "outputs": outputs} for name, (inputs, outputs) in names.items()}


def quantize_int8(directory: Path) -> None:
    """Replace both graphs by ONNX Runtime's dynamic int8 quantization of them: weights stored as
    int8, activations quantized per call (MatMul -> DynamicQuantizeMatMul; the encoder's LSTM ->
    DynamicQuantizeLSTM)."""
    require("onnxruntime")
    from onnxruntime.quantization import QuantType, quantize_dynamic  # type: ignore[import-untyped]

    quiet = logging.getLogger()  # the quantizer logs a pre-processing hint for image models on the root logger
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        for name in (ENCODER_FILE, STEP_FILE):
            path = directory / name
            tmp = directory / f"{name}.int8"
            quantize_dynamic(str(path), str(tmp), weight_type=QuantType.QInt8, per_channel=True)
            os.replace(tmp, path)
    finally:
        quiet.setLevel(level)


# ----------------------------------------------------------------------------------- the manifest


def sha256(path: Path) -> str:
    return file_digest(path)[1]


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for part in str(version).split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


@dataclass(frozen=True)
class Manifest:
    directory: Path
    data: dict[str, Any]

    @property
    def int8(self) -> bool:
        return bool(self.data.get("int8"))

    def graph(self, name: str) -> dict[str, list[str]]:
        return self.data["graphs"][name]


def exported_dir(path: str | os.PathLike[str]) -> Path | None:
    """The complete exported directory at `path` (it holds manifest.json), or `path.old` while
    `heed export` swaps a new one in (heed.files.replace_dir); None if `path` is no export."""
    return resolve_dir(path, (MANIFEST_FILE,))


def is_exported_dir(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a directory `heed export` wrote (it holds manifest.json)."""
    return exported_dir(path) is not None


def load_manifest(path: str | os.PathLike[str], *, verify: bool | None = None) -> Manifest:
    """Read and verify an exported directory: its manifest is this heed's format and version or
    older, and every file it lists is there with the sha256 it had at export. Any problem is a
    ModelDirError that names the file and what to do."""
    directory = exported_dir(path) or Path(path)
    file = directory / MANIFEST_FILE
    if not file.is_file():
        raise ModelDirError(f"{directory}: not an exported model directory (no {MANIFEST_FILE}); "
                            "make one with `heed export MODEL_DIR -o OUT_DIR`")
    try:
        with open_regular(file, "r", encoding="utf-8") as f:
            data = json.loads(f.read())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelDirError(f"{file}: unreadable manifest ({e}); export the model again") from None
    if not isinstance(data, dict) or data.get("kind") != "onnx" or not isinstance(data.get("files"), dict):
        raise ModelDirError(f"{file}: not a heed export manifest; export the model again")
    written_by = str(data.get("heed_version", "?"))
    if (not isinstance(data.get("format"), int) or data["format"] > FORMAT_VERSION
            or _version_tuple(written_by) > _version_tuple(heed.__version__)):
        raise ModelDirError(f"{file}: written by heed {written_by} (export format {data.get('format')}), newer "
                            f"than this heed {heed.__version__}; upgrade heed ({UPGRADE_HINT})")
    _check_manifest_schema(data, file, directory)
    for name, digest in data["files"].items():
        target = directory / name
        if Path(name).name != name or not target.is_file():
            raise ModelDirError(f"{target}: missing from the exported directory; export the model again")
        if verifying(verify) and sha256(target) != digest:
            raise ModelDirError(f"{target}: sha256 does not match {MANIFEST_FILE} (the file changed after "
                                "`heed export`); export the model again")
    return Manifest(directory, data)


def _check_manifest_schema(data: dict[str, Any], file: Path, directory: Path) -> None:
    """The manifest's fields have the types and values this heed's runtime reads, and it lists every
    file the runtime reads (the set is fixed by the format: a file left out of "files" would go
    unchecked). A ModelDirError naming the field otherwise."""
    from pydantic import ValidationError

    from heed.data.tokenize import spm_model_path
    from heed.data.vocab import BOS, EOS, PAD
    from heed.nn.model_config import ModelConfig
    from heed.pipeline import SRC_VOCAB_FILE, TGT_VOCAB_FILE, TOKENIZERS_FILE

    def bad(field: str, what: str) -> ModelDirError:
        return ModelDirError(f"{file}: {field} {what}; the manifest is damaged, export the model again")

    try:
        model = ModelConfig.model_validate(data.get("model"))
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        raise bad(".".join(["model", *map(str, err["loc"])]), err["msg"].lower()) from None
    ids = data.get("special_ids")
    if not isinstance(ids, dict):
        raise bad("special_ids", "is missing")
    for name, expected in (("pad", PAD), ("bos", BOS), ("eos", EOS)):
        if type(ids.get(name)) is not int or ids[name] != expected:
            raise bad(f"special_ids.{name}", f"is {ids.get(name)!r}, but heed's vocabularies have {name} = {expected}")
    if not isinstance(data.get("int8", False), bool):
        raise bad("int8", f"is {data['int8']!r}, not true or false")
    if type(data.get("parameters", 0)) is not int or data.get("parameters", 0) < 0:
        raise bad("parameters", f"is {data.get('parameters')!r}, not a count")
    expected_names = graph_names(model.decoder, lstm=model.rnn == "lstm",
                                 feeding=model.decoder == "luong" and model.input_feeding, coverage=model.coverage)
    graphs = data.get("graphs")
    for name, (inputs, outputs) in expected_names.items():
        listed = graphs.get(name) if isinstance(graphs, dict) else None
        if not isinstance(listed, dict) or listed.get("inputs") != inputs or listed.get("outputs") != outputs:
            raise bad(f"graphs.{name}", f"does not give the inputs {inputs} and outputs {outputs} of a "
                      f"{model.decoder} decoder's export")
    files = data["files"]
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise bad("files", "must map file names to sha256 digests")
    required = [ENCODER_FILE, STEP_FILE, "config.yaml", TOKENIZERS_FILE, SRC_VOCAB_FILE, TGT_VOCAB_FILE]
    optional = [spm_model_path(directory, side).name for side in ("src", "tgt")]
    for name in required + [n for n in optional if (directory / n).exists()]:
        if name not in files:
            raise bad("files", f"does not list {name}, which the exported model reads")


def check_graph_io(session: Any, name: str, manifest: Manifest) -> None:
    """A ModelDirError unless an onnxruntime session's inputs and outputs are the ones the manifest
    gives for graph `name` (two graphs swapped, or a graph from another export)."""
    listed = manifest.graph(name)
    inputs = [i.name for i in session.get_inputs()]
    outputs = [o.name for o in session.get_outputs()]
    if sorted(inputs) != sorted(listed["inputs"]) or outputs != listed["outputs"]:
        raise ModelDirError(f"{manifest.directory / name}: its inputs {inputs} and outputs {outputs} are not those "
                            f"{MANIFEST_FILE} gives it ({listed['inputs']} -> {listed['outputs']}); the graphs "
                            "were swapped or replaced, export the model again")


# ----------------------------------------------------------------------------------- the command


def export_model(model_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str], *, int8: bool = False) -> Path:
    """`heed export`: write an exported directory for the model directory `model_dir` (or the
    `model/` of a training output directory) into `out_dir`, atomically. Returns `out_dir`."""
    from heed.checkpoint import CONFIG_FILE, METRICS_FILE, load_model_dir, replace_dir
    from heed.config import save_config

    require("onnx")
    if int8:
        require("onnxruntime")
    if is_exported_dir(model_dir):
        raise ModelDirError(f"{model_dir}: already an exported directory; export the model directory it came from")
    loaded = load_model_dir(model_dir, device="cpu")
    if loaded.config.model.copy:
        # The step graph would need the pointer-generator's scatter over a per-batch extended
        # vocabulary, and the runtime the copy-aware source ids; neither exists yet, so refuse
        # rather than export a graph that writes <unk> where the model copies.
        raise ConfigError("copy attention cannot be exported to ONNX yet; translate with the model directory "
                          "itself (heed translate / heed serve run it in PyTorch)", field="model.copy",
                          path=loaded.directory / CONFIG_FILE)
    kind = loaded.config.model.decoder
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise HeedError(f"{out}: exists and is not a directory; give another -o")
    if out.resolve() == loaded.directory.resolve():
        raise HeedError(f"{out}: is the model directory itself; give another -o")

    def fill(tmp: Path) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        graphs = export_graphs(loaded.model, kind, tmp)
        if int8:
            quantize_int8(tmp)
        save_config(loaded.config, tmp / CONFIG_FILE)
        loaded.codec.save(tmp)
        if (loaded.directory / METRICS_FILE).is_file():  # the training log: the server shows its last scores
            shutil.copyfile(loaded.directory / METRICS_FILE, tmp / METRICS_FILE)
        onnx = require("onnx")
        files = sorted(p.name for p in tmp.iterdir() if p.is_file())
        manifest = {
            "format": FORMAT_VERSION,
            "kind": "onnx",
            "heed_version": heed.__version__,
            "opset": OPSET,
            "onnx_version": onnx.__version__,
            "torch_version": torch.__version__,
            "int8": int8,
            "model": loaded.config.model.model_dump(mode="json"),
            "parameters": sum(p.numel() for p in loaded.model.parameters()),
            "special_ids": {"pad": loaded.model.pad_id, "bos": loaded.model.bos_id, "eos": loaded.model.eos_id},
            "graphs": graphs,
            "files": {name: sha256(tmp / name) for name in files},
        }
        (tmp / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")

    if out.is_dir() and any(out.iterdir()) and not is_exported_dir(out):
        raise HeedError(f"{out}: exists and is not an exported directory; give an empty or new -o "
                        "(an earlier export there is replaced)")
    return replace_dir(out, fill)
