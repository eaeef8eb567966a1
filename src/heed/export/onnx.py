"""Export a trained model for deployment: two ONNX graphs, the tokenizers, and a manifest.

    OUT_DIR/
      encoder.onnx       src (batch, src_len) int64, src_lengths (batch,) int64 -> what the
                         decoder reads of the source, once per sentence
      decoder_step.onnx  one decoder step with a dynamic batch and source length: the previous
                         tokens, the source's tensors and the state in; logits, the next state and
                         the attention out
      config.yaml, tokenizers.json, src.vocab.json, tgt.vocab.json [, src/tgt.spm.model]
      manifest.json      heed version, opset, the resolved model config, each graph's inputs and
                         outputs, and the sha256 of every other file

`load_manifest` checks all of that before a byte of a graph reaches onnxruntime: a file changed
after the export (sha256), a manifest from a newer heed, a directory that is not an export.
`heed.export.ort.OrtSeq2Seq` runs the graphs behind the search's protocol.

`heed export --format ctranslate2` writes CTranslate2's model files instead of the two graphs
(heed.export.ct2; manifest kind "ctranslate2", run by heed.export.ct2_run); the manifest, its checks
and the atomic swap of the directory are this module's for both kinds.

Each model family writes its own graphs (heed.nn.rnn.onnx, heed.nn.transformer.onnx: the family's
`graphs` in its heed.nn.build.Family); this module traces them, checks them, quantizes them and
writes the manifest, for any family. The graphs are traced with torch's TorchScript exporter, which
keeps every size read by the step symbolic, so one graph serves any batch, beam and source length.
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

from heed.errors import ConfigError, HeedError, ModelDirError, install_hint
from heed.nn.model_config import ModelConfig, without_family_tag
from heed.nn.protocol import FamilyGraphs, TrainableModel
from heed.plumbing.files import file_digest, open_regular, resolve_dir, verifying
from heed.search.shortlist import recorded_shortlist
from heed.version import __version__

FORMAT_VERSION = 1
MANIFEST_FILE = "manifest.json"
ENCODER_FILE = "encoder.onnx"
STEP_FILE = "decoder_step.onnx"
GRAPH_FILES = {"encoder": ENCODER_FILE, "step": STEP_FILE}  # a family's graph roles -> their files
OPSET = 17
KINDS = ("onnx", "ctranslate2")  # `heed export --format`: ONNX graphs run by heed's search, or CTranslate2's model
INSTALL_HINT = install_hint("onnx")
UPGRADE_HINT = install_hint(upgrade=True)


def require(module: str) -> Any:
    """Import an optional dependency of the [onnx] extra, or say how to install it."""
    try:
        return __import__(module)
    except ImportError:
        raise HeedError(f"exported models need {module}, which is not installed: {INSTALL_HINT}") from None


# ----------------------------------------------------------------------------------- the graphs


def family_graphs(cfg: ModelConfig) -> FamilyGraphs:
    """The model family's export contract (heed.nn.families): its graphs' names, the modules to
    trace, and the runtime's mapping of its encoded batch and state onto the graphs. A ConfigError
    naming model.family for a family that does not export."""
    from heed.nn.families import family

    graphs = family(cfg.family).graphs
    if graphs is None:
        raise ConfigError(f"the {cfg.family} family has no ONNX graphs to export; translate with the model "
                          "directory itself", field="model.family")
    return graphs(cfg)


def graph_files(cfg: ModelConfig) -> dict[str, tuple[list[str], list[str]]]:
    """{graph file: (input names, output names)} of this config's export, in order: what the exporter
    writes and what heed.export.ort feeds and reads."""
    return {GRAPH_FILES[role]: names for role, names in family_graphs(cfg).names().items()}


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence the exporter's C++ shape-inference notes about prim::PackPadded (written straight to
    file descriptor 2, past Python's warnings): the graphs are checked by onnx.checker and by
    tests/export/test_export.py, and a user of `heed export` can do nothing about them."""
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


def export_graphs(model: TrainableModel, cfg: ModelConfig, directory: Path) -> dict[str, dict[str, list[str]]]:
    """Write encoder.onnx and decoder_step.onnx for `model` (in eval mode, on the CPU, float32) into
    `directory`, traced from its family's graph modules; check both with onnx.checker. Returns each
    graph's input and output names."""
    onnx = require("onnx")
    model = model.float().cpu().eval()
    graphs = family_graphs(cfg)
    names = graphs.names()
    for role, (module, example, axes) in graphs.modules(model).items():
        _trace(module, example, directory / GRAPH_FILES[role], *names[role], axes)
        onnx.checker.check_model(str(directory / GRAPH_FILES[role]), full_check=True)
    return {GRAPH_FILES[role]: {"inputs": inputs, "outputs": outputs} for role, (inputs, outputs) in names.items()}


def quantize_int8(directory: Path) -> None:
    """Replace both graphs by ONNX Runtime's dynamic 8-bit quantization of them: weights stored in
    8 bits per output channel, activations quantized per call (MatMul -> DynamicQuantizeMatMul; the
    encoder's LSTM -> DynamicQuantizeLSTM).

    Weights are unsigned (ORT's U8U8 products), not signed (U8S8): on x86 CPUs without VNNI
    (AVX2, and AVX-512 before Cascade Lake) ORT computes U8S8 with VPMADDUBSW, whose 16-bit pair
    sums saturate, and that changed many more translations than U8U8 does, 7-bit weights
    (`reduce_range`) fewer but still more (bench/RESULTS.md, "int8 on a CPU without VNNI", with the
    CPU and the counts). An export may run on any CPU, so it takes the kind that is right on all of
    them."""
    require("onnxruntime")
    from onnxruntime.quantization import QuantType, quantize_dynamic  # type: ignore[import-untyped]

    quiet = logging.getLogger()  # the quantizer logs a pre-processing hint for image models on the root logger
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        for name in (ENCODER_FILE, STEP_FILE):
            path = directory / name
            tmp = directory / f"{name}.int8"
            quantize_dynamic(str(path), str(tmp), weight_type=QuantType.QUInt8, per_channel=True)
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
    model: ModelConfig  # data["model"], validated by load_manifest

    @property
    def int8(self) -> bool:
        return bool(self.data.get("int8"))

    @property
    def kind(self) -> str:
        """What runs it: "onnx" (heed.export.ort) or "ctranslate2" (heed.export.ct2_run)."""
        return str(self.data["kind"])

    def graph(self, name: str) -> dict[str, list[str]]:
        return self.data["graphs"][name]


def exported_dir(path: str | os.PathLike[str]) -> Path | None:
    """The complete exported directory at `path` (it holds manifest.json), or `path.old` while
    `heed export` swaps a new one in (heed.plumbing.files.replace_dir); None if `path` is no export."""
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
    if not isinstance(data, dict) or data.get("kind") not in KINDS or not isinstance(data.get("files"), dict):
        raise ModelDirError(f"{file}: not a heed export manifest; export the model again")
    written_by = str(data.get("heed_version", "?"))
    if (not isinstance(data.get("format"), int) or data["format"] > FORMAT_VERSION
            or _version_tuple(written_by) > _version_tuple(__version__)):
        raise ModelDirError(f"{file}: written by heed {written_by} (export format {data.get('format')}), newer "
                            f"than this heed {__version__}; upgrade heed ({UPGRADE_HINT})")
    model = _check_manifest_schema(data, file, directory)
    for name, digest in data["files"].items():
        target = directory / name
        if Path(name).name != name or not target.is_file():
            raise ModelDirError(f"{target}: missing from the exported directory; export the model again")
        if verifying(verify) and sha256(target) != digest:
            raise ModelDirError(f"{target}: sha256 does not match {MANIFEST_FILE} (the file changed after "
                                "`heed export`); export the model again")
    return Manifest(directory, data, model)


def _check_manifest_schema(data: dict[str, Any], file: Path, directory: Path) -> ModelConfig:
    """The manifest's fields have the types and values this heed's runtime reads, and it lists every
    file the runtime reads (the set is fixed by the format: a file left out of "files" would go
    unchecked). Returns the validated model config; a ModelDirError naming the field otherwise."""
    from pydantic import ValidationError

    from heed.data.codec import SRC_VOCAB_FILE, TGT_VOCAB_FILE, TOKENIZERS_FILE
    from heed.data.tokenize import spm_model_path

    def bad(field: str, what: str) -> ModelDirError:
        return ModelDirError(f"{file}: {field} {what}; the manifest is damaged, export the model again")

    try:
        model = ModelConfig.model_validate(data.get("model"))
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        loc, _ = without_family_tag(err["loc"])
        if err["type"] == "unknown_family":
            loc = ["family"]
        raise bad(".".join(["model", *map(str, loc)]), err["msg"].lower()) from None
    assert isinstance(model, ModelConfig)
    ids = data.get("special_ids")
    if not isinstance(ids, dict):
        raise bad("special_ids", "is missing")
    for name in ("pad", "bos", "eos", "unk"):
        if type(ids.get(name)) is not int or ids[name] < 0:
            raise bad(f"special_ids.{name}", f"is {ids.get(name)!r}, not a token id")
    if not isinstance(data.get("int8", False), bool):
        raise bad("int8", f"is {data['int8']!r}, not true or false")
    if type(data.get("parameters", 0)) is not int or data.get("parameters", 0) < 0:
        raise bad("parameters", f"is {data.get('parameters')!r}, not a count")
    expected_names = graph_files(model) if data["kind"] == "onnx" else {}
    graphs = data.get("graphs")
    for name, (inputs, outputs) in expected_names.items():
        listed = graphs.get(name) if isinstance(graphs, dict) else None
        if not isinstance(listed, dict) or listed.get("inputs") != inputs or listed.get("outputs") != outputs:
            raise bad(f"graphs.{name}", f"does not give the inputs {inputs} and outputs {outputs} of a "
                      f"{model.kind} model's export")
    files = data["files"]
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise bad("files", "must map file names to sha256 digests")
    from heed.export.ct2 import model_files

    runtime_files = [ENCODER_FILE, STEP_FILE] if data["kind"] == "onnx" else model_files(set(files))
    required = [*runtime_files, "config.yaml", TOKENIZERS_FILE, SRC_VOCAB_FILE, TGT_VOCAB_FILE]
    optional = [spm_model_path(directory, side).name for side in ("src", "tgt")]
    for name in required + [n for n in optional if (directory / n).exists()]:
        if name not in files:
            raise bad("files", f"does not list {name}, which the exported model reads")
    return model


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


def export_model(model_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str], *, int8: bool = False,
                 kind: str = "onnx") -> Path:
    """`heed export`: write an exported directory for the model directory `model_dir` (or the
    `model/` of a training output directory) into `out_dir`, atomically. `kind`: "onnx" (the
    family's graphs, run by heed's search) or "ctranslate2" (a Transformer as CTranslate2's model,
    run by CTranslate2's search; heed.export.ct2). Returns `out_dir`."""
    from heed.checkpoint import CONFIG_FILE, METRICS_FILE, load_model_dir, replace_dir
    from heed.config import save_config
    from heed.export import ct2

    if kind not in KINDS:
        raise HeedError(f"unknown export format {kind!r}; choose one of: {', '.join(KINDS)}, argos")
    if kind == "onnx":
        require("onnx")
        if int8:
            require("onnxruntime")
    else:
        ctranslate2 = ct2.require_ctranslate2()
    if is_exported_dir(model_dir):
        raise ModelDirError(f"{model_dir}: already an exported directory; export the model directory it came from")
    loaded = load_model_dir(model_dir, device="cpu")
    if kind == "ctranslate2":
        ct2.check_exportable(loaded.config.model, loaded.directory / CONFIG_FILE)
    if loaded.config.model.copy:
        # The step graph would need the pointer-generator's scatter over a per-batch extended
        # vocabulary, and the runtime the copy-aware source ids; neither exists yet, so refuse
        # rather than export a graph that writes <unk> where the model copies.
        raise ConfigError("copy attention cannot be exported to ONNX yet; translate with the model directory "
                          "itself (heed translate / heed serve run it in PyTorch)", field="model.copy",
                          path=loaded.directory / CONFIG_FILE)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise HeedError(f"{out}: exists and is not a directory; give another -o")
    if out.resolve() == loaded.directory.resolve():
        raise HeedError(f"{out}: is the model directory itself; give another -o")

    def fill(tmp: Path) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        if kind == "onnx":
            graphs = export_graphs(loaded.model, loaded.config.model, tmp)
            if int8:
                quantize_int8(tmp)
            runtime = {"opset": OPSET, "onnx_version": require("onnx").__version__, "graphs": graphs}
        else:
            ct2.write_ct2(loaded.model, loaded.config.model, loaded.codec, tmp,
                          max_src_len=loaded.config.data.max_src_len, int8=int8,
                          shortlist=recorded_shortlist(loaded.directory, loaded.codec))
            runtime = {"ctranslate2_version": ctranslate2.__version__}
        save_config(loaded.config, tmp / CONFIG_FILE)
        loaded.codec.save(tmp)
        if (loaded.directory / METRICS_FILE).is_file():  # the training log: the server shows its last scores
            shutil.copyfile(loaded.directory / METRICS_FILE, tmp / METRICS_FILE)
        files = sorted(p.name for p in tmp.iterdir() if p.is_file())
        manifest = {
            "format": FORMAT_VERSION,
            "kind": kind,
            "heed_version": __version__,
            **runtime,
            "torch_version": torch.__version__,
            "int8": int8,
            "model": loaded.config.model.model_dump(mode="json"),
            "parameters": loaded.model.num_parameters(),
            "special_ids": {"pad": loaded.model.pad_id, "bos": loaded.model.bos_id, "eos": loaded.model.eos_id,
                            "unk": loaded.model.unk_id},
            "files": {name: sha256(tmp / name) for name in files},
        }
        (tmp / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")

    if out.is_dir() and any(out.iterdir()) and not is_exported_dir(out):
        raise HeedError(f"{out}: exists and is not an exported directory; give an empty or new -o "
                        "(an earlier export there is replaced)")
    return replace_dir(out, fill)
