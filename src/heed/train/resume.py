"""What a run may resume onto: the config fields that may change, the same number of processes,
the same data (a fingerprint of its files); the tokenizers handed to the other ranks; and the command
that scores an interrupted run."""
from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from heed.checkpoint import (
    read_meta,
    resolve_dir,
)
from heed.config import (
    CORPUS_PATH_KEYS,
    CORPUS_SPLITS,
    SUPERVISION,
    Config,
    DataConfig,
    config_to_dict,
)
from heed.data.codec import Codec
from heed.data.prepared import MANIFEST_FILE
from heed.errors import ConfigError, HeedError, ModelDirError
from heed.plumbing.files import file_digest

# Fields a resumed run may change; any other difference from the checkpoint's config is an error.
RESUMABLE_CHANGES = ("train.epochs", "train.max_steps", "train.max_minutes", "train.log_every", "train.device",
                     "train.threads", "train.backend", "train.compile", "train.keep_checkpoints",
                     "train.eval_every", "train.early_stopping.patience", "train.early_stopping.target",
                     "decode", "output_dir", "data.train", "data.dev", "data.test", "data.prepared")


def saved_step(target: Path) -> int | None:
    """The training step a checkpoint or model directory was saved at; None if there is none."""
    directory = resolve_dir(target)
    if directory is None:
        return None
    try:
        return read_meta(directory).get("step")
    except ModelDirError:  # unreadable: as good as missing, so it is written again
        return None


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: data}


def check_resumable(saved: Config, now: Config, where: Path) -> None:
    """Resuming with another model, data or optimisation would not continue the same run."""
    old, new = _flatten(config_to_dict(saved)), _flatten(config_to_dict(now))
    for key in sorted(set(old) | set(new)):
        if any(key == p or key.startswith(p + ".") for p in RESUMABLE_CHANGES):
            continue
        if old.get(key) != new.get(key):
            raise ConfigError(f"is {old.get(key)!r} in the checkpoint ({where}) but {new.get(key)!r} now; "
                              "a resumed run needs the same config (only epochs, max_steps, logging, device, "
                              "early stopping and decode may change)", field=key)


def check_same_world(saved: int, now: int, where: Path) -> None:
    """The data position and each rank's random state belong to the number of processes that saved them."""
    if saved != now:
        how = ("one process, without torchrun" if saved == 1
               else f"{saved} processes (torchrun's --nnodes x --nproc-per-node)")
        raise HeedError(f"{where} was trained by {saved} process{'es' * (saved != 1)} and this run has {now}; "
                        f"resume with {how}")


def codec_files(codec: Codec) -> dict[str, bytes]:
    """The tokenizer and vocabulary files of `codec`, as bytes (to hand to the other ranks)."""
    with tempfile.TemporaryDirectory(prefix="heed-codec-") as tmp:
        codec.save(tmp)
        return {p.name: p.read_bytes() for p in Path(tmp).iterdir() if p.is_file()}


def codec_from_files(files: dict[str, bytes], data: DataConfig) -> Codec:
    with tempfile.TemporaryDirectory(prefix="heed-codec-") as tmp:
        for name, content in files.items():
            (Path(tmp) / name).write_bytes(content)
        return Codec.load(tmp, data=data)


# ------------------------------------------------------------------------------ data fingerprint


def data_fingerprint(data: DataConfig) -> dict[str, Any]:
    """What a run trains on, keyed by config field: each configured corpus file's size and sha256
    (`{"data.train.tsv": {"bytes": 1234, "sha256": "..."}}`), or a generated task's settings (its
    data is a function of them). Paths are left out: a moved corpus with the same bytes is the same."""
    if data.task is not None:
        return {f"data.{data.task}": getattr(data, data.task).model_dump(mode="json")}
    fingerprint: dict[str, Any] = {}
    if data.prepared is not None:  # the manifest holds every shard's sha256, checked at the start
        fingerprint["data.prepared"] = _file_fingerprint(data.prepared / MANIFEST_FILE)
    for split in CORPUS_SPLITS:
        corpus = getattr(data, split)
        for key in CORPUS_PATH_KEYS:
            path = None if corpus is None else getattr(corpus, key)
            if path is not None:
                fingerprint[f"data.{split}.{key}"] = _file_fingerprint(path)
    return fingerprint


def run_fingerprint(config: Config) -> dict[str, Any]:
    """data_fingerprint, and the guided alignment's supervision file when there is one."""
    fingerprint = data_fingerprint(config.data)
    guided = config.train.alignment
    if guided is not None and isinstance(guided.supervision, Path):
        fingerprint[SUPERVISION] = _file_fingerprint(guided.supervision)
    return fingerprint


def _file_fingerprint(path: Path) -> dict[str, Any]:
    """Size and sha256 (a corpus may be gigabytes: read in chunks)."""
    size, digest = file_digest(path)
    return {"bytes": size, "sha256": digest}


def check_same_data(saved: dict[str, Any], now: dict[str, Any], data: DataConfig) -> None:
    """Refuse to resume onto data other than the checkpoint's: the run would not continue the same."""
    changes = []
    for field_name in sorted(set(saved) | set(now)):
        old, new = saved.get(field_name), now.get(field_name)
        if old == new:
            continue
        parts = field_name.split(".")
        corpus = getattr(data, parts[1], None) if len(parts) == 3 else None
        where = f"{field_name} {getattr(corpus, parts[2])}" if corpus is not None else field_name
        if old is None:
            changes.append(f"{where} is new since the checkpoint")
        elif new is None:
            changes.append(f"{where} was in the checkpoint's data and is not configured now")
        elif "bytes" in old:
            size = (f"{old['bytes']:,} -> {new['bytes']:,} bytes" if old["bytes"] != new["bytes"]
                    else f"same size, {old['bytes']:,} bytes, other content")
            changes.append(f"{where} changed since the checkpoint ({size})")
        else:
            changes.append(f"{where} changed since the checkpoint ({old} -> {new})")
    if changes:
        raise HeedError(f"{'; '.join(changes)}; resume with --allow-data-change to continue anyway")


# ------------------------------------------------------------------------------------- entry


def score_command(config: Config, model_dir: Path, *, resume_command: Sequence[str], step: int) -> list[str] | None:
    """After an interrupted run (which skips the final test scoring): a command that scores the best
    model on the test set, or None without one. `heed evaluate` with the test files when they are two
    line-aligned files, what it reads; otherwise (a TSV, a `split`, a generated task) the run's own
    `resume_command` (ending with --resume) with `train.max_steps` at `step`: that trains no further,
    scores the test set and leaves `checkpoints/last` as it was, so a later plain resume goes on
    training."""
    data = config.data
    if data.test is None and (data.split is None or data.split.test == 0) and data.task is None:
        return None
    test = data.test
    if test is not None and test.src is not None and test.tgt is not None:
        src, ref = (test.tgt, test.src) if data.reverse else (test.src, test.tgt)
        return ["heed", "evaluate", str(model_dir), "--src", str(src), "--ref", str(ref)]
    # The run's own `--set train.max_steps=...`, if any, gives way to this one (not both on one line).
    kept: list[str] = []
    args = list(resume_command[:-1])
    while args:
        arg = args.pop(0)
        if arg == "--set" and args and args[0].replace(" ", "").startswith("train.max_steps="):
            args.pop(0)
            continue
        kept.append(arg)
    return [*kept, "--set", f"train.max_steps={step}", resume_command[-1]]

