"""For tests that edit a model directory on purpose: record the edited files' sha256 in its heed.json,
as heed would have had it written them (else loading refuses the edit as damage)."""
from __future__ import annotations

import json
from pathlib import Path

from heed.files import file_digest


def rehash(directory: Path) -> Path:
    meta_path = directory / "heed.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta["files"] = {name: file_digest(directory / name)[1] for name in meta["files"] if (directory / name).exists()}
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    return directory
