"""Model directories and training checkpoints: atomic saves, pickle-free loads, exact resume.

A model directory is everything translation needs, and nothing machine-specific:

    model.safetensors    weights (safetensors: loading runs no code)
    config.yaml          the resolved config (corpus paths relative to this file)
    tokenizers.json      tokenizer specs; src.spm.model / tgt.spm.model for SentencePiece
    src.vocab.json, tgt.vocab.json
    metrics.jsonl        the training log, when there is one
    heed.json            {"format": 1, "heed_version": ..., "kind": "model" | "checkpoint",
                          "files": {name: sha256 of every other file}, ...}

Loading checks every file against heed.json's sha256 (a flipped byte, an edited vocabulary, a
swapped file) and refuses weights holding NaN or infinity: a broken model is an error naming the
file, never a model that translates to `<unk>`. `heed --no-verify` (or HEED_VERIFY=0) skips the
sha256 check for a model too large to hash at every load. A heed.json without "files" is refused
too: deleting the table must not turn the check off, and heed's version string does not tell a
directory written before checksums (November 2026, before any release) from one whose table was
removed; such a directory loads only with `--no-verify`.

A training run writes

    OUTPUT_DIR/model/             the best model so far (by the dev metric), a model directory
    OUTPUT_DIR/checkpoints/last/  a model directory + training state, written at every evaluation
    OUTPUT_DIR/checkpoints/best/  the same, for the best evaluation
    OUTPUT_DIR/metrics.jsonl

Training state is pickle-free too: `optimizer.safetensors` (every tensor of the optimizer's state),
`rng.safetensors` (torch CPU and CUDA generator states; under torchrun every rank's, rank r > 0's
keys prefixed `rank{r}.`) and `trainer.json` (step, epoch, position in
the epoch, best metric, patience, schedule, the optimizer's non-tensor settings).

Directories are replaced atomically by `heed.plumbing.files.replace_dir` (see there): a reader finds a
complete copy at every instant.
"""
from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from heed.config import Config, load_config, save_config
from heed.data.codec import SRC_VOCAB_FILE, TGT_VOCAB_FILE, TOKENIZERS_FILE, Codec
from heed.data.tokenize import spm_model_path
from heed.errors import ConfigError, ModelDirError, OutputError
from heed.nn.build import build_model
from heed.nn.protocol import TorchModel, TrainableModel
from heed.plumbing.files import (
    atomic_write_text,
    check_regular,
    default_file_mode,
    file_digest,
    read_model_json,
    reason,
    replace_dir,
    resolve_dir,
    verifying,
)
from heed.version import __version__

FORMAT_VERSION = 1
META_FILE = "heed.json"
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
RECENT_PREFIX = "step-"  # OUTPUT_DIR/checkpoints/step-NNNNNNN: the model directories train.keep_checkpoints keeps
OPTIMIZER_FILE = "optimizer.safetensors"
RNG_FILE = "rng.safetensors"
TRAINER_FILE = "trainer.json"
# What every model directory must list in heed.json's "files"; any other file heed reads (a
# SentencePiece model, training state, the log) must be listed when it is there.
REQUIRED_FILES = (WEIGHTS_FILE, CONFIG_FILE, TOKENIZERS_FILE, SRC_VOCAB_FILE, TGT_VOCAB_FILE)
READ_IF_PRESENT = (spm_model_path(Path("."), "src").name, spm_model_path(Path("."), "tgt").name, METRICS_FILE,
                   OPTIMIZER_FILE, RNG_FILE, TRAINER_FILE)


# --------------------------------------------------------------------------- atomic directories
# replace_dir and resolve_dir live in heed.plumbing.files (no torch there); imported here for the callers.


def _write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def _save_tensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """Write a safetensors file (with the umask's permissions; safetensors makes it 0600) and sync
    it; a full disk or another write error is an OutputError naming `path`."""
    try:
        save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(path))
        os.chmod(path, default_file_mode())
        with open(path, "rb") as f:
            os.fsync(f.fileno())
    except (SafetensorError, OSError) as e:
        raise OutputError(f"cannot write: {_write_reason(e)}", path=path) from None


def _write_reason(error: Exception) -> str:
    """What a failed write says, in a few words: "no space left on device" from safetensors'
    'IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'."""
    if isinstance(error, OSError):
        return reason(error)
    text = str(error)
    start = text.find('message: "')
    return text[start + 10 : text.find('"', start + 10)].lower() if start >= 0 else text


# ------------------------------------------------------------------------------ model directory


def write_model_files(directory: Path, *, model: TorchModel | dict[str, torch.Tensor], config: Config,
                      codec: Codec, metrics: Path | None = None, kind: str = "model",
                      info: dict[str, Any] | None = None) -> None:
    """Write a model directory's files into `directory` (no swap; see `save_model_dir`).
    `heed.json` is written last, so its presence marks a complete directory."""
    directory.mkdir(parents=True, exist_ok=True)
    state = model if isinstance(model, dict) else model.state_dict()
    _save_tensors(dict(state), directory / WEIGHTS_FILE)
    save_config(config, directory / CONFIG_FILE)
    codec.save(directory)
    if metrics is not None and metrics.is_file():
        shutil.copyfile(metrics, directory / METRICS_FILE)
    files = {p.name: file_digest(p)[1] for p in sorted(directory.iterdir())
             if p.name in REQUIRED_FILES + READ_IF_PRESENT and p.is_file()}
    meta = {"format": FORMAT_VERSION, "heed_version": __version__, "kind": kind, **(info or {}), "files": files}
    _write_json(directory / META_FILE, meta)


def save_model_dir(target: str | os.PathLike[str], *, model: TorchModel | dict[str, torch.Tensor],
                   config: Config, codec: Codec, metrics: Path | None = None,
                   info: dict[str, Any] | None = None) -> Path:
    """Atomically (re)write the model directory `target`."""
    return replace_dir(target, lambda tmp: write_model_files(tmp, model=model, config=config, codec=codec,
                                                             metrics=metrics, info=info))


@dataclass(frozen=True)
class LoadedModel:
    model: TrainableModel  # in eval mode, on the requested device
    config: Config
    codec: Codec
    directory: Path  # the model directory actually read
    meta: dict[str, Any]


def recent_model_dirs(ckpt_dir: Path) -> list[tuple[int, Path]]:
    """(step, directory) of every CKPT_DIR/step-NNNNNNN model directory (train.keep_checkpoints), by
    step; not a step-NNNNNNN.old left mid-swap, nor a file of that name."""
    found = []
    for p in ckpt_dir.glob(f"{RECENT_PREFIX}[0-9]*"):
        digits = p.name[len(RECENT_PREFIX):]
        if digits.isdigit() and p.is_dir():
            found.append((int(digits), p))
    return sorted(found)


def find_model_dir(path: str | os.PathLike[str]) -> Path:
    """A model directory, given itself or a training output directory that holds `model/`."""
    path = Path(path)
    found = resolve_dir(path, (META_FILE,))  # first: mid-swap, `path` itself is missing and `path.old` complete
    if found is not None:
        return found
    if not path.exists():
        raise ModelDirError(f"{path}: no such model directory; give a trained model directory "
                            "(e.g. runs/NAME/model) or a training output directory")
    if not path.is_dir():
        raise ModelDirError(f"{path}: not a directory; give a model directory (it holds {META_FILE})")
    found = resolve_dir(path / "model", (META_FILE,))
    if found is not None:
        return found
    if (path / "checkpoints").is_dir():
        raise ModelDirError(f"{path}: training has not written a model yet (no {path / 'model'}); "
                            "wait for the first evaluation, or resume training")
    raise ModelDirError(f"{path}: not a heed model directory (no {META_FILE}, no model/ inside)")


def read_meta(directory: Path) -> dict[str, Any]:
    path = directory / META_FILE
    meta = read_model_json(path)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_VERSION:
        raise ModelDirError(f"{path}: model format {meta.get('format') if isinstance(meta, dict) else '?'} "
                            f"is not this heed's format {FORMAT_VERSION}; use the heed version that wrote it "
                            f"({meta.get('heed_version', '?') if isinstance(meta, dict) else '?'})")
    return meta


def verify_files(directory: Path, meta: dict[str, Any]) -> None:
    """Every file heed reads from `directory` is listed in heed.json's "files" with the sha256 it has
    now; a ModelDirError naming the first that is not, or naming heed.json when it lists none."""
    files = meta.get("files")
    meta_path = directory / META_FILE
    if files is None:
        raise ModelDirError(f"{meta_path}: lists no sha256 checksums (\"files\"), so nothing in {directory} can be "
                            "checked: the table was removed, or a pre-release heed wrote the directory. Train, "
                            "average or export it again, or load it unchecked with `heed --no-verify`")
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise ModelDirError(f"{meta_path}: \"files\" must map file names to sha256 digests; the directory is "
                            "damaged (train, average or copy it again)")
    unlisted = [name for name in REQUIRED_FILES + READ_IF_PRESENT
                if name not in files and (name in REQUIRED_FILES or (directory / name).exists())]
    if unlisted:
        raise ModelDirError(f"{directory / unlisted[0]}: not listed in {META_FILE}, so it cannot be checked; the "
                            "directory was altered after heed wrote it")
    for name, digest in files.items():
        path = directory / name
        if Path(name).name != name or name == META_FILE:
            raise ModelDirError(f"{meta_path}: lists {name!r}, which is not a file of the directory")
        try:
            actual = file_digest(path)[1]
        except FileNotFoundError:
            raise ModelDirError(f"{path}: missing (heed.json lists it)") from None
        except OSError as e:
            raise ModelDirError(f"{path}: cannot read: {reason(e)}") from None
        if actual != digest:
            raise ModelDirError(f"{path}: sha256 does not match {META_FILE} (the file changed after heed wrote it: "
                                "damaged, or edited); restore it, or skip the check with `heed --no-verify`")


def check_finite(weights: dict[str, torch.Tensor], path: Path) -> None:
    """A ModelDirError naming the first floating-point tensor with a NaN or an infinity; checked in
    slices of a million values (isfinite's temporaries on a whole output layer are larger than it)."""
    for name, tensor in weights.items():
        if tensor.is_floating_point() and not all(bool(torch.isfinite(part).all())
                                                  for part in tensor.reshape(-1).split(1 << 20)):
            raise ModelDirError(f"{path}: tensor {name} holds NaN or infinite values; this model is broken "
                                "(did training diverge?), use an earlier checkpoint")


def load_weights(path: Path, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Tensors from a safetensors file, straight onto `device` (CUDA-trained weights load on CPU)."""
    try:
        check_regular(path)
        return load_file(str(path), device=str(device))
    except FileNotFoundError:
        raise ModelDirError(f"{path}: missing") from None
    except (SafetensorError, OSError) as e:
        raise ModelDirError(f"{path}: unreadable weights ({e})") from None


def load_model_dir(path: str | os.PathLike[str], *, device: torch.device | str = "cpu",
                   verify: bool | None = None) -> LoadedModel:
    """Load a model directory (or the `model/` of a training output directory) onto `device`,
    after checking its files' sha256 (unless `verifying(verify)` is False) and its weights' finiteness."""
    directory = find_model_dir(path)
    meta = read_meta(directory)
    if verifying(verify):
        verify_files(directory, meta)
    try:
        config = load_config(directory / CONFIG_FILE, environment=False, streams=False)
    except ConfigError as e:
        # A field this heed does not know: a model from another version. Otherwise the file itself
        # is broken (YAML syntax, an alias, a duplicate key), and the message says where.
        hint = "; the model directory's config does not match this heed" if e.field is not None else ""
        raise ModelDirError(f"{e}{hint}") from None
    codec = Codec.load(directory, data=config.data, copy=config.model.copy)
    model = build_model(config.model, src_vocab_size=len(codec.src_vocab), tgt_vocab_size=len(codec.tgt_vocab),
                        source_to_target=codec.source_to_target() if config.model.copy else None,
                        file_parameters=file_parameters(directory), **codec.special_ids())
    load_weights_into(model, directory)
    model.to(device).eval()
    return LoadedModel(model, config, codec, directory, meta)


_SAFETENSORS_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "F64": torch.float64,
                       "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8, "BOOL": torch.bool}


def _read_header(f: BinaryIO, path: Path) -> tuple[dict[str, Any], int]:
    """A safetensors file's header (tensor name -> dtype, shape, data_offsets; no __metadata__) and
    where its data begin."""
    size = int.from_bytes(f.read(8), "little")
    if not 2 <= size <= 100_000_000:
        raise ModelDirError(f"{path}: unreadable weights (not a safetensors file)")
    header = json.loads(f.read(size))
    if not isinstance(header, dict):
        raise ModelDirError(f"{path}: unreadable weights (not a safetensors file)")
    header.pop("__metadata__", None)
    return header, 8 + size


def file_parameters(directory: Path) -> int:
    """How many values the model directory's weights file holds, read off its header."""
    path = directory / WEIGHTS_FILE
    try:
        check_regular(path)
        with open(path, "rb") as f:
            header, _ = _read_header(f, path)
        return sum(math.prod(int(n) for n in entry["shape"]) for entry in header.values())
    except FileNotFoundError:
        raise ModelDirError(f"{path}: missing") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ModelDirError(f"{path}: unreadable weights ({e})") from None


def load_weights_into(model: TorchModel, directory: Path) -> None:
    """The weights of model directory `directory` into `model` (built from its config.yaml), checked
    finite; a ModelDirError naming the file when they are not, or do not fit the model.

    Each tensor is read from the file straight into the model's own memory (safetensors' layout: a
    little-endian header length, a JSON header, then every tensor's bytes), so loading holds the model
    and nothing beside it: no state dict of a second copy, no mapped file (both count in the resident
    memory; bench/pretrained_speed.py measures the peak). A tensor stored in another dtype than the
    model's (an fp16 file) is read whole and converted."""
    path = directory / WEIGHTS_FILE
    own = model.state_dict()  # name -> the model's tensor (shared storage: filling it fills the model)

    def unfit(what: str) -> ModelDirError:
        return ModelDirError(f"{path}: weights do not fit the model in config.yaml ({what})")

    try:
        check_regular(path)
        with open(path, "rb") as f:
            header, start = _read_header(f, path)
            missing, unexpected = sorted(set(own) - set(header)), sorted(set(header) - set(own))
            if missing or unexpected:
                raise unfit(f"missing {missing[:3]}, unexpected {unexpected[:3]}")
            with torch.no_grad():
                for name, entry in header.items():
                    target, dtype = own[name], _SAFETENSORS_DTYPES.get(entry.get("dtype"))
                    begin, end = entry["data_offsets"]
                    if tuple(entry["shape"]) != tuple(target.shape):
                        raise unfit(f"{name} is {tuple(entry['shape'])} in the file, {tuple(target.shape)} in the model")
                    if dtype is None or end - begin != target.numel() * torch.empty(0, dtype=dtype).element_size():
                        raise ModelDirError(f"{path}: unreadable weights ({name}: dtype {entry.get('dtype')} and "
                                            f"{end - begin} bytes)")
                    f.seek(start + begin)
                    if dtype == target.dtype and target.is_contiguous() and target.device.type == "cpu":
                        into = target.view(-1).view(torch.uint8).numpy()
                    else:
                        into = torch.empty(target.shape, dtype=dtype).view(-1).view(torch.uint8).numpy()
                    if f.readinto(into) != end - begin:
                        raise ModelDirError(f"{path}: unreadable weights (the file ends inside {name})")
                    if into.ctypes.data != target.data_ptr():
                        target.copy_(torch.from_numpy(into).view(dtype).view(target.shape))
                    check_finite({name: target}, path)
    except FileNotFoundError:
        raise ModelDirError(f"{path}: missing") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ModelDirError(f"{path}: unreadable weights ({e})") from None


# ---------------------------------------------------------------------------- training state


@dataclass
class TrainerState:
    """Where a training run is, beside its weights and optimizer: all that exact resume needs.

    `epoch` is the epoch in progress (0-based) and `batch_in_epoch` how many of its batches are done;
    the epoch's batch order is rebuilt from (seed, epoch), so the remaining batches are known."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    best_value: float | None = None
    best_step: int | None = None
    bad_evals: int = 0  # evaluations since the best one
    schedule: dict[str, Any] | None = None
    window: dict[str, float] | None = None  # the log window's running sums (loss, tokens, steps)
    finished: bool = False
    stop_reason: str | None = None
    # What the run trains on (heed.train.data_fingerprint): per corpus file its size and sha256, so a
    # resume notices changed data. None in checkpoints written before heed recorded it.
    data: dict[str, Any] | None = None
    # Processes that trained it (torchrun's WORLD_SIZE): a resume needs as many. 1 in older checkpoints.
    world_size: int = 1

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrainerState:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def _flatten_optimizer(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """optimizer.state_dict() -> (tensors keyed "state.<param>.<name>", JSON-able rest)."""
    tensors: dict[str, torch.Tensor] = {}
    rest: dict[str, dict[str, Any]] = {}
    for param, values in state["state"].items():
        for name, value in values.items():
            if torch.is_tensor(value):
                tensors[f"state.{param}.{name}"] = value
            else:
                rest.setdefault(str(param), {})[name] = value
    return tensors, {"param_groups": state["param_groups"], "state": rest}


def _unflatten_optimizer(tensors: dict[str, torch.Tensor], rest: dict[str, Any],
                         current: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        _, param, name = key.split(".", 2)
        state.setdefault(int(param), {})[name] = value
    for param, values in rest["state"].items():
        state.setdefault(int(param), {}).update(values)
    groups = []
    for saved, now in zip(rest["param_groups"], current["param_groups"]):
        # JSON turned tuples (betas) into lists; give them back their type.
        groups.append({k: tuple(v) if isinstance(now.get(k), tuple) else v for k, v in saved.items()})
    return {"state": state, "param_groups": groups}


def rng_states() -> dict[str, torch.Tensor]:
    states = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            states[f"cuda.{i}"] = s
    return states


def set_rng_states(states: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(states["torch_cpu"])
    cuda = [states[k] for k in sorted((k for k in states if k.startswith("cuda.")), key=lambda k: int(k[5:]))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda[: torch.cuda.device_count()])


def _rank_prefix(rank: int) -> str:
    return "" if rank == 0 else f"rank{rank}."


def rank_rng_states(states: dict[str, torch.Tensor], rank: int) -> dict[str, torch.Tensor]:
    """Rank `rank`'s generator states out of a checkpoint's (rank 0's keys carry no prefix, as in a
    single-process checkpoint)."""
    if rank == 0:
        return {k: v for k, v in states.items() if not k.startswith("rank")}
    prefix = _rank_prefix(rank)
    return {k[len(prefix):]: v for k, v in states.items() if k.startswith(prefix)}


def save_checkpoint(target: str | os.PathLike[str], *, model: TorchModel, optimizer: torch.optim.Optimizer,
                    trainer: TrainerState, config: Config, codec: Codec, metrics: Path | None = None,
                    other_ranks_rng: Sequence[dict[str, torch.Tensor]] = ()) -> Path:
    """Atomically write a training checkpoint (a model directory + training state) at `target`.
    `other_ranks_rng`: the generator states of ranks 1, 2, ... of a torchrun run (rank 0 saves)."""
    opt_tensors, opt_rest = _flatten_optimizer(optimizer.state_dict())
    rng = rng_states()
    for rank, states in enumerate(other_ranks_rng, start=1):
        rng.update({_rank_prefix(rank) + k: v for k, v in states.items()})

    def fill(tmp: Path) -> None:
        _save_tensors(opt_tensors, tmp / OPTIMIZER_FILE)
        _save_tensors(rng, tmp / RNG_FILE)
        _write_json(tmp / TRAINER_FILE, {"trainer": trainer.to_json(), "optimizer": opt_rest})
        write_model_files(tmp, model=model, config=config, codec=codec, metrics=metrics, kind="checkpoint",
                          info={"step": trainer.step})

    return replace_dir(target, fill)


@dataclass(frozen=True)
class Checkpoint:
    directory: Path
    weights: dict[str, torch.Tensor]
    trainer: TrainerState
    optimizer_tensors: dict[str, torch.Tensor]
    optimizer_rest: dict[str, Any]
    rng: dict[str, torch.Tensor]
    config: Config

    def restore(self, model: TorchModel, optimizer: torch.optim.Optimizer, *, rank: int = 0) -> None:
        """Load weights and optimizer state; set the global torch RNGs to those rank `rank` saved
        (call inside fork_rng)."""
        model.load_state_dict(self.weights, strict=True)
        optimizer.load_state_dict(_unflatten_optimizer(self.optimizer_tensors, self.optimizer_rest,
                                                       optimizer.state_dict()))
        set_rng_states(rank_rng_states(self.rng, rank))


def load_checkpoint(target: str | os.PathLike[str]) -> Checkpoint:
    """Read a checkpoint written by `save_checkpoint` (falling back to `target.old`, see module doc).

    Every tensor is read onto the CPU: `restore` copies weights into the model wherever it lives, and
    `Optimizer.load_state_dict` moves the moments to their parameters' device while Adam's step
    counters stay on the CPU, where a non-capturable Adam wants them."""
    directory = resolve_dir(target)
    if directory is None:
        raise ModelDirError(f"{target}: no checkpoint to resume from")
    meta = read_meta(directory)
    if verifying():
        verify_files(directory, meta)
    data = read_model_json(directory / TRAINER_FILE)  # a ModelDirError naming the file if unreadable
    return Checkpoint(
        directory=directory,
        weights=load_weights(directory / WEIGHTS_FILE),
        trainer=TrainerState.from_json(data["trainer"]),
        optimizer_tensors=load_weights(directory / OPTIMIZER_FILE),
        optimizer_rest=data["optimizer"],
        rng=load_weights(directory / RNG_FILE),
        config=load_config(directory / CONFIG_FILE, environment=False, streams=False),
    )
