"""What a run says: the progress bar, the log lines, metrics.jsonl (strict JSON) and TensorBoard,
and the running window of losses and speed between two log lines."""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from heed.checkpoint import (
    METRICS_FILE,
)
from heed.plumbing.files import atomic_write_text
from heed.plumbing.heartbeat import Heartbeat

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11


class TrainLog:
    """Where training reports go: metrics.jsonl (always), TensorBoard (if installed), and the
    console: a rich progress bar on a terminal, a plain line per `log_every` steps otherwise, and
    with `progress` True there (a log) also a line every PROGRESS_LINE_SECONDS (heed.plumbing.heartbeat),
    during dev evaluations too. The step total is an estimate (an epoch's batches vary): a step past
    it makes it the total. With `writes` False (ranks other than 0 under torchrun) it writes and
    prints nothing."""

    def __init__(self, output_dir: Path, console: Console | None, *, total_steps: int, start_step: int,
                 progress: bool | None, writes: bool = True) -> None:
        self.path = output_dir / METRICS_FILE
        self.writes = writes
        self.console = console if writes else None
        self.tensorboard = _tensorboard_writer(output_dir / "tensorboard") if writes else None
        # A rich bar on a file draws nothing until it stops: where stderr is a log, --progress means lines.
        use_bar = console is not None and console.is_terminal and progress is not False
        self.progress: Progress | None = None
        self.beat = (Heartbeat(self._progress_line)
                     if self.console is not None and not self.console.is_terminal and progress else None)
        self.step, self.epoch, self.started = start_step, 0.0, time.monotonic()
        if use_bar:
            self.progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[speed]} tok/s"),
                TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                console=console, transient=False)
            self.task = self.progress.add_task("train", total=total_steps, completed=start_step,
                                               loss="-", speed="-")
        self.total_steps = total_steps

    def __enter__(self) -> Self:
        if self.progress is not None:
            self.progress.start()
        if self.beat is not None:
            self.beat.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()
        if self.beat is not None:
            self.beat.__exit__(None, None, None)
        if self.tensorboard is not None:
            self.tensorboard.close()

    def say(self, message: str) -> None:
        if self.console is not None:
            self.console.print(message, highlight=False)

    def record(self, entry: dict[str, Any]) -> None:
        """One JSON line, stamped with the wall-clock `time` (Unix seconds) so durations (time per
        epoch, time to a BLEU) can be read off the file, across resumes too. Strict JSON: a
        non-finite number (a dev loss that overflowed) is written as null, never as bare NaN."""
        entry = {key: None if isinstance(value, float) and not math.isfinite(value) else value
                 for key, value in {**entry, "time": round(time.time(), 3)}.items()}
        if not self.writes:
            return
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, ensure_ascii=False, allow_nan=False) + "\n")
        if self.tensorboard is not None:
            prefix = entry["kind"]
            for key, value in entry.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in ("step", "kind", "time"):
                    self.tensorboard.add_scalar(f"{prefix}/{key}", value, entry["step"])
            for layer, heads in enumerate(entry.get("attention_entropy") or []):  # [layer][head]
                for head, value in enumerate(heads):
                    self.tensorboard.add_scalar(f"{prefix}/attention_entropy/layer{layer}/head{head}", value,
                                                entry["step"])

    def advance(self, step: int, epoch: float) -> None:
        self.step, self.epoch = step, epoch
        if step > self.total_steps:
            self.total_steps = step
            if self.progress is not None:
                self.progress.update(self.task, total=step)
        if self.progress is not None:
            self.progress.update(self.task, completed=step, description=f"epoch {epoch:.2f}")

    def _progress_line(self) -> None:
        """The heartbeat's line (a log, --progress): how far the run is, every few seconds."""
        elapsed = time.monotonic() - self.started
        self.say(f"step {self.step}/{self.total_steps} | epoch {self.epoch:.2f} | {elapsed:.0f} s")

    def show(self, window: Window) -> None:
        if self.progress is not None and window.tokens:
            self.progress.update(self.task, loss=f"{float(window.loss_sum) / window.tokens:.3f}",
                                 speed=f"{window.speed():,.0f}")

    def train_line(self, step: int, epoch: float, loss: float, lr: float, speed: float, eta: float | None, *,
                   align: float | None = None) -> None:
        if self.progress is not None:
            self.progress.update(self.task, loss=f"{loss:.3f}", speed=f"{speed:,.0f}")
        else:
            eta_text = "" if eta is None else f" | eta {_duration(eta)}"
            align_text = "" if align is None else f" | align {align:.4f}"
            self.say(f"step {step}/{self.total_steps} | epoch {epoch:.2f} | loss {loss:.4f}{align_text} | lr {lr:.2e} "
                     f"| {speed:,.0f} tok/s{eta_text}")

    def restore(self, saved: Path) -> None:
        """On resume: the log as the checkpoint saw it (`saved`, the copy inside the checkpoint).
        A run killed after its last checkpoint may have logged more (train and dev lines, or the
        final test line of a run killed while finishing); the resumed run writes those again."""
        if not self.writes:
            return
        if saved.is_file():
            atomic_write_text(self.path, saved.read_text(encoding="utf-8"))
        else:
            self.path.unlink(missing_ok=True)


def _tensorboard_writer(directory: Path) -> Any:
    try:
        import tensorboard  # noqa: F401  (torch's SummaryWriter needs the package)
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(log_dir=str(directory))


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


@dataclass
class Window:
    """Running sums since the last log line. loss_sum stays a tensor so no step waits on the device.

    loss_sum, tokens and steps survive a resume (the checkpoint saves them, so the next log line's
    loss is the one an uninterrupted run logs); timed_tokens counts only the tokens this process
    trained since `started`, so the first speed after a resume is not the saved tokens over a few
    seconds (it read 10x the real figure)."""

    loss_sum: torch.Tensor
    # guided alignment training's loss (before its weight; heed.train.alignment); stays 0 without it
    align_sum: torch.Tensor = field(default_factory=lambda: torch.zeros((), dtype=torch.float64))
    tokens: int = 0
    steps: int = 0
    started: float = field(default_factory=time.perf_counter)
    timed_tokens: int = 0

    def speed(self) -> float:
        """Tokens per second this process trained since the window started."""
        seconds = time.perf_counter() - self.started
        return self.timed_tokens / seconds if seconds > 0 else 0.0

    def to_json(self) -> dict[str, float]:
        return {"loss_sum": float(self.loss_sum), "align_sum": float(self.align_sum), "tokens": self.tokens,
                "steps": self.steps}


def best_so_far(value: float | None, step: int | None) -> str:
    return "  (no best yet)" if value is None else f"  (best {value:.4g} @ {step})"

