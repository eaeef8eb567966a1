"""Both directions of one corpus: the reverse run of a config, and the record that pairs two models.

Every NMT alignment paper reports its best figures symmetrised (Garg et al. 2019, Table 2; Chen et
al. 2021): a model trained source -> target and one trained target -> source, each reading the
pair its own way, their links joined by grow-diag-final (Koehn et al. 2005) or a set operation.
`heed train CONFIG --both-directions` trains CONFIG, then the same config with `data.reverse`
flipped into OUTPUT_DIR-reverse (guided alignment's supervision file names data.train as written,
before `reverse`, so the same links guide both), and records the pair: each model directory gets
PAIR_FILE naming the other, which `heed align` reads to symmetrise by default.

Torch-free: the command line reads a record before it loads any model.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal, cast

from heed.errors import ConfigError, ModelDirError
from heed.plumbing.files import atomic_open

PAIR_FILE = "heed.pair.json"
REVERSE_SUFFIX = "-reverse"
Join = Literal["intersect", "union", "grow-diag-final"]  # heed.explain.align_methods.Symmetrize, without its imports
PAIR_SYMMETRIZE: Join = "grow-diag-final"  # how a recorded pair joins by default: bench/RESULTS.md, "Both directions"


def reverse_overrides(cfg: Any) -> list[str]:
    """The `--set` overrides that turn the validated config `cfg` into its reverse run: the corpora
    swapped (data.reverse flipped) into OUTPUT_DIR-reverse. A config without corpora to swap (a
    generated task, a prepared corpus) is refused in one line."""
    data = cfg.data
    if data.task is not None or data.prepared is not None or data.train is None:
        what = (f"task '{data.task}'" if data.task is not None else "a prepared corpus (data.prepared)"
                if data.prepared is not None else "a config without data.train")
        raise ConfigError(f"--both-directions trains the corpora swapped (data.reverse), which {what} cannot be; "
                          "give data.train as corpus files", field="data")
    return [f"data.reverse={'false' if data.reverse else 'true'}",
            f"output_dir={Path(cfg.output_dir).absolute()}{REVERSE_SUFFIX}"]


def record_pair(forward: Path, reverse: Path, how: str = PAIR_SYMMETRIZE) -> None:
    """Write PAIR_FILE into both model directories, each naming the other by a path relative to
    itself (the pair moves together), and `how` the two are joined by default."""
    for this, other, direction in ((forward, reverse, "forward"), (reverse, forward, "reverse")):
        record = {"direction": direction, "other": os.path.relpath(other.absolute(), this.absolute()),
                  "symmetrize": how}
        with atomic_open(this / PAIR_FILE) as sink:
            sink.write(json.dumps(record, indent=1) + "\n")


def recorded_reverse(model_dir: Path) -> tuple[Path, Join] | None:
    """(the other direction's model directory, the recorded join) if `model_dir` is one of a pair,
    else None. A record that is damaged or names a directory that is gone is a ModelDirError."""
    path = model_dir / PAIR_FILE
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        other, how = model_dir / record["other"], str(record.get("symmetrize", PAIR_SYMMETRIZE))
        if how not in ("intersect", "union", "grow-diag-final"):
            raise ValueError(how)
    except (ValueError, KeyError, TypeError):
        raise ModelDirError(f"{path}: not a pair record (\"other\": the reverse model's directory); remove it or "
                            "train the pair again with heed train --both-directions") from None
    if not (other / "heed.json").exists():
        raise ModelDirError(f"{path}: names {other.resolve()}, which holds no model; move the pair together, or "
                            "give the reverse model with --reverse MODEL")
    return other.resolve(), cast(Join, how)
