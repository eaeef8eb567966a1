"""For tests that edit a model directory on purpose: record the edited files' sha256 in its heed.json,
as heed would have had it written them (else loading refuses the edit as damage); and a copy of a
model directory with another vocabulary."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from heed.plumbing.files import file_digest


def rehash(directory: Path) -> Path:
    meta_path = directory / "heed.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta["files"] = {name: file_digest(directory / name)[1] for name in meta["files"] if (directory / name).exists()}
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    return directory


def swapped_vocab_copy(model_dir: Path, target: Path, side: str = "tgt") -> Path:
    """A copy of `model_dir` whose `side` vocabulary has two ordinary tokens swapped: it loads (the
    sizes fit the weights) but reads or writes other ids."""
    shutil.copytree(model_dir, target)
    path = target / f"{side}.vocab.json"
    tokens = json.loads(path.read_text(encoding="utf-8"))
    tokens[5], tokens[6] = tokens[6], tokens[5]
    path.write_text(json.dumps(tokens), encoding="utf-8")
    return rehash(target)  # a model of another vocabulary, not a damaged one
