"""Checkpoint averaging: one model whose weights are the elementwise mean of several checkpoints'.

    heed average runs/x/checkpoints/last runs/x/checkpoints/best -o runs/x/averaged

Averaging the weights of checkpoints from one training run, a few evaluations apart, smooths the
noise of the last optimizer steps (fairseq's average_checkpoints.py; Vaswani et al. 2017, 6.1,
average the last 5 or 20 checkpoints; Popel & Bojar 2018): one model, no slower to decode,
often a little better. Checkpoints of *independently* trained models do not average (their weights
live in unrelated places: a permuted hidden unit is the same model with different weights); decode
those as an ensemble instead (heed.nn.ensemble, `heed translate A B`).

An input is a checkpoint directory (checkpoints/last, checkpoints/best), a model directory, or a
training output directory (its model/). All inputs must share the architecture (the resolved
`model:` config) and the tokenizers and vocabularies; floating-point tensors are summed in float64
and the mean is stored in the first input's dtype; any other tensor (an integer buffer) must be
equal in every input. The output is a model directory like any other (weights, the first input's
config and codec) whose heed.json lists the averaged inputs under "averaged", written atomically;
it replaces an earlier model directory at that path and nothing else.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from heed.checkpoint import META_FILE, LoadedModel, load_model_dir, read_meta, replace_dir, write_model_files
from heed.errors import HeedError, ModelDirError


def _load_input(path: str | os.PathLike[str], out: Path) -> LoadedModel:
    """An input, on the CPU; a HeedError for an exported directory or the output itself."""
    from heed.export.onnx import is_exported_dir

    if is_exported_dir(path):
        raise ModelDirError(f"{path}: an exported directory (ONNX graphs) has no weights to average; "
                            "give the model directory or checkpoint it was exported from")
    loaded = load_model_dir(path, device="cpu")
    if out.exists() and loaded.directory.resolve() == out.resolve():
        raise HeedError(f"{out}: is one of the checkpoints being averaged ({path}); give another -o")
    return loaded


def architecture_difference(first: dict[str, Any], other: dict[str, Any]) -> tuple[str, Any, Any] | None:
    """The first field (in name order) where two resolved `model:` configs (model_dump()) differ,
    as ("model.FIELD", first's value, other's value), or None when they are the same."""
    for key in sorted(first.keys() | other.keys()):
        if first.get(key) != other.get(key):
            return f"model.{key}", first.get(key), other.get(key)
    return None


class RunningMean:
    """The elementwise mean of state dicts added one at a time (one in memory at a time, beside
    the sums): floating-point tensors summed in float64, the mean cast back to the first's dtype;
    every other tensor (integer, bool) must be equal in all, and is kept."""

    def __init__(self, first: dict[str, torch.Tensor], name: str) -> None:
        self._first = {k: (v.dtype, v.shape, None if v.is_floating_point() else v.clone()) for k, v in first.items()}
        self._sums = {k: v.to(torch.float64, copy=True) for k, v in first.items() if v.is_floating_point()}
        self._name = name
        self.count = 1

    def add(self, state: dict[str, torch.Tensor], name: str) -> None:
        """Add `state`; a HeedError naming `name` for a key, shape or non-float value that differs."""
        if state.keys() != self._first.keys():
            extra = sorted(state.keys() ^ self._first.keys())
            raise HeedError(f"{name}: its tensors are not {self._name}'s (e.g. {extra[0]}); "
                            "averaging needs checkpoints of one architecture")
        for key, value in state.items():
            _, shape, fixed = self._first[key]
            if value.shape != shape:
                raise HeedError(f"{name}: tensor {key} has shape {tuple(value.shape)} there, {tuple(shape)} in "
                                f"{self._name}; averaging needs checkpoints of one architecture")
            if fixed is None:
                self._sums[key] += value.double()
            elif not torch.equal(value, fixed):
                raise HeedError(f"{name}: integer tensor {key} differs from {self._name}'s; "
                                "only floating-point weights can be averaged")
        self.count += 1

    def mean(self) -> dict[str, torch.Tensor]:
        return {k: fixed if fixed is not None else (self._sums[k] / self.count).to(dtype)
                for k, (dtype, _, fixed) in self._first.items()}


def average_state_dicts(states: Sequence[dict[str, torch.Tensor]],
                        names: Sequence[str] | None = None) -> dict[str, torch.Tensor]:
    """The elementwise mean of state dicts with the same keys and shapes (see RunningMean);
    `names[k]` names `states[k]` in a HeedError."""
    if len(states) < 2:
        raise HeedError(f"averaging needs at least two checkpoints, got {len(states)}")
    names = list(names) if names is not None else [f"checkpoint {k}" for k in range(len(states))]
    running = RunningMean(states[0], names[0])
    for name, state in zip(names[1:], states[1:]):
        running.add(state, name)
    return running.mean()


def average_checkpoints(paths: Sequence[str | os.PathLike[str]], output: str | os.PathLike[str], *,
                        warn: Callable[[str], None] | None = None) -> Path:
    """`heed average`: write the model directory `output` holding the mean of the checkpoints
    (or model directories) `paths`; returns it. One input at a time is in memory, beside the
    float64 sums. Any mismatch is a HeedError naming the input and what differs. `warn(message)`
    hears when the inputs come from different training runs (their configs' output_dir differ):
    allowed (one run may have started from another's weights), but usually a mistake."""
    if len(paths) < 2:
        raise HeedError(f"averaging needs at least two checkpoints, got {len(paths)}"
                        f"{f' ({paths[0]})' if paths else ''}; give two or more")
    out = Path(output)
    _check_output(out)
    first = _load_input(paths[0], out)
    arch = first.config.model.model_dump(mode="json")
    running = RunningMean(first.model.state_dict(), str(paths[0]))
    averaged = [_record(paths[0], first)]
    for path in paths[1:]:
        loaded = _load_input(path, out)
        difference = architecture_difference(arch, loaded.config.model.model_dump(mode="json"))
        if difference is not None:
            field, mine, theirs = difference
            raise HeedError(f"{path}: {field} is {theirs!r} here but {mine!r} in {paths[0]}; averaging needs "
                            "checkpoints of one architecture")
        codec_difference = first.codec.difference(loaded.codec)
        if codec_difference is not None:
            raise HeedError(f"{path}: {codec_difference} differs from {paths[0]}'s; averaging needs checkpoints that "
                            "share tokenizers and vocabularies")
        running.add(loaded.model.state_dict(), str(path))
        averaged.append(_record(path, loaded))
        del loaded
    runs = sorted({str(r["run"]) for r in averaged})
    if warn is not None and len(runs) > 1:
        warn(f"the checkpoints come from {len(runs)} training runs ({', '.join(runs)}); the weights of "
             "independently trained models do not average into a working model (decode with them as an "
             "ensemble instead: heed translate A B)")
    mean = running.mean()
    return replace_dir(out, lambda tmp: write_model_files(tmp, model=mean, config=first.config, codec=first.codec,
                                                          info={"averaged": averaged}))


def _record(path: str | os.PathLike[str], loaded: LoadedModel) -> dict[str, Any]:
    """What heed.json's "averaged" says of an input: the path as given, the directory read, its
    kind, training step (None where it has none) and training run (its config's output_dir)."""
    return {"path": str(path), "directory": str(loaded.directory.resolve()), "kind": loaded.meta.get("kind"),
            "step": loaded.meta.get("step"), "run": str(loaded.config.output_dir)}


def _check_output(out: Path) -> None:
    """`out` may be new, an empty directory or an earlier model directory (replaced); anything else
    (a file, a checkpoint with training state, a training output directory, other files) is kept
    and refused."""
    if out.exists() and not out.is_dir():
        raise HeedError(f"{out}: exists and is not a directory; give a new -o")
    if not out.is_dir() or not any(out.iterdir()):
        return
    kind = None
    if (out / META_FILE).is_file():
        try:
            kind = read_meta(out).get("kind")
        except ModelDirError:
            kind = None
    if kind != "model":
        what = "a training checkpoint" if kind == "checkpoint" else "not a model directory"
        raise HeedError(f"{out}: exists and is {what}; give a new or empty -o (only an earlier model "
                        "directory there is replaced)")


__all__ = ["RunningMean", "architecture_difference", "average_checkpoints", "average_state_dicts"]
