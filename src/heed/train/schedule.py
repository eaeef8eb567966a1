"""The learning rate: warm-up and decay by step, plateau after each evaluation; and what "better"
means for each early-stopping metric."""
from __future__ import annotations

import math
from typing import Any

from heed.config import (
    ScheduleConfig,
)

HIGHER_IS_BETTER = {"bleu": True, "exact_match": True, "loss": False}


class LRSchedule:
    """The learning rate for each step (warm-up) and after each evaluation (plateau).

    State is plain JSON (`state_dict`), saved in every checkpoint."""

    def __init__(self, cfg: ScheduleConfig, *, base_lr: float, higher_is_better: bool) -> None:
        self.cfg = cfg
        self.base_lr = base_lr
        self.higher_is_better = higher_is_better
        self.lr = base_lr  # plateau's current rate
        self.best: float | None = None
        self.bad = 0

    def lr_at(self, step: int) -> float:
        """Rate for update number `step` (1-based)."""
        if self.cfg.name == "warmup":
            w = self.cfg.warmup_steps
            if step <= w:
                return self.base_lr * step / w
            return self.base_lr * (math.sqrt(w / step) if self.cfg.decay == "inverse_sqrt" else 1.0)
        return self.lr

    def after_eval(self, value: float) -> bool:
        """Feed a dev metric; returns True if the rate was just lowered (plateau only)."""
        if self.cfg.name != "plateau":
            return False
        if self.best is None or better(value, self.best, self.higher_is_better):
            self.best, self.bad = value, 0
            return False
        self.bad += 1
        if self.bad > self.cfg.patience and self.lr > self.cfg.min_lr:
            self.lr, self.bad = max(self.lr * self.cfg.factor, self.cfg.min_lr), 0
            return True
        return False

    def state_dict(self) -> dict[str, Any]:
        return {"lr": self.lr, "best": self.best, "bad": self.bad}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.lr, self.best, self.bad = state["lr"], state["best"], state["bad"]


def better(value: float, best: float, higher_is_better: bool) -> bool:
    return value > best if higher_is_better else value < best


def reached(value: float, target: float, higher_is_better: bool) -> bool:
    return value >= target if higher_is_better else value <= target

