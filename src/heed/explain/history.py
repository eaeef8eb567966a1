"""How a training run's attention changed: its kept checkpoints reading one sentence pair, and the
attention entropy its log recorded at each evaluation.

A run keeps one model directory per evaluation when trained with `train.keep_checkpoints: N`
(OUTPUT_DIR/checkpoints/step-NNNNNNN, the N newest). `attention_over_training` reads the same
sentence pair with each of them (teacher forcing, so every snapshot has the same rows and columns),
by default the pair of the source and the run's final model's translation of it. `entropy_history`
reads `attention_entropy` ([layer][head] mean entropy in nats over the dev set) off metrics.jsonl.
`heed attention RUN --checkpoints` and `heed attention RUN --entropy` draw them.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from heed.checkpoint import METRICS_FILE, RECENT_PREFIX, load_model_dir, recent_model_dirs
from heed.data.batching import Batch
from heed.errors import HeedError
from heed.explain.pairs import Subject
from heed.nn.protocol import HeadsModel

if TYPE_CHECKING:
    from heed.config import Config
    from heed.decode_config import DecodeConfig


class Loaded(Protocol):
    """A loaded model as this module reads it: what it reads (model, codec, device) and its config
    (heed.api.Translator is one)."""

    @property
    def subject(self) -> Subject: ...

    @property
    def config(self) -> Config: ...

KEEP_HINT = "train with train.keep_checkpoints: N (e.g. 20) to keep one model directory per evaluation"


@dataclass
class Snapshot:
    """One checkpoint's attention over the pair.

    step:    the training step the checkpoint was written at
    path:    its model directory
    dev:     the run's dev line for that step (metrics.jsonl: bleu, loss, ...), or None
    weights: float32 (len(tgt_tokens) + 1, len(src_tokens) + 1): the attention of the model's
             alignment layer (an RNN's one; a Transformer's last decoder layer), mean over its heads;
             rows the output tokens then </s>, columns the source tokens then </s>
    """

    step: int
    path: Path
    dev: dict[str, Any] | None
    weights: np.ndarray

    def title(self) -> str:
        """"step 1,500 · dev BLEU 12.3" (the dev part when the log has that step)."""
        score = "" if self.dev is None or "bleu" not in self.dev else f" · dev BLEU {self.dev['bleu']:.1f}"
        return f"step {self.step:,}{score}"


@dataclass
class AttentionHistory:
    """The snapshots (by step) of one pair: src_tokens and tgt_tokens without </s>."""

    src_tokens: list[str]
    tgt_tokens: list[str]
    snapshots: list[Snapshot]
    kept: int  # how many checkpoints the run has (snapshots may be an evenly spaced subset)


def final_model(run: str | os.PathLike[str]) -> Path:
    """The model that gives the output the checkpoints read: the run's model/ (its best), else its
    newest kept checkpoint (a run still before its first best)."""
    root = run_dir(run)
    return root / "model" if (root / "model").is_dir() else kept_checkpoints(root)[-1][1]


def run_dir(path: str | os.PathLike[str]) -> Path:
    """The training output directory `path` names: itself, or the run that holds it when `path` is
    its checkpoints/ or model/ folder."""
    path = Path(path)
    if not path.is_dir():
        raise HeedError(f"{path}: no such training output directory; give the directory `heed train` wrote "
                        "(it holds checkpoints/ and metrics.jsonl)")
    if path.name in ("checkpoints", "model") and (path.parent / "checkpoints").is_dir():
        return path.parent
    return path


def kept_checkpoints(run: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """(step, model directory) of every checkpoints/step-NNNNNNN of the run, by step."""
    root = run_dir(run)
    found = recent_model_dirs(root / "checkpoints")
    if not found:
        raise HeedError(f"{root}: no checkpoints/{RECENT_PREFIX}NNNNNNN model directories to compare; {KEEP_HINT}")
    return found


def evenly(items: list[Any], most: int) -> list[Any]:
    """At most `most` of `items`, evenly spaced, the first and the last always kept."""
    if most < 1:
        raise ValueError(f"most must be at least 1, got {most}")
    if len(items) <= most:
        return list(items)
    if most == 1:
        return [items[-1]]
    picks = sorted({round(k * (len(items) - 1) / (most - 1)) for k in range(most)})
    return [items[k] for k in picks]


def dev_lines(run: str | os.PathLike[str]) -> dict[int, dict[str, Any]]:
    """The run's dev evaluations by step ({} without a metrics.jsonl). A line that is not JSON (a
    run killed mid-write) is skipped: the figure's titles are a convenience, not a check."""
    path = run_dir(run) / METRICS_FILE
    if not path.is_file():
        return {}
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("kind") == "dev" and isinstance(entry.get("step"), int):
                out[entry["step"]] = entry
    return out


def attention_over_training(run: str | os.PathLike[str], src_text: str,
                            tgt_text: str | Sequence[str] | None = None, *, most: int = 12,
                            decode: DecodeConfig | None = None, final: Loaded | None = None,
                            device: str = "auto") -> AttentionHistory:
    """One pair's attention at each kept checkpoint of `run` (at most `most`, evenly spaced, the
    first and the last among them). `tgt_text`: the output every checkpoint reads (teacher
    forcing), a text or its tokens; None: the translation of `src_text` (with `decode`, default
    the model's own decode config) by the run's model/ (its best model), or by the newest
    checkpoint when the run has no model/ yet (`final`: that model, when the caller has loaded it
    already: a heed.api.Translator, say). Every model is read as (model, codec, device), never
    through the facade. The checkpoints must share the run's tokenizers and vocabularies (a
    HeedError names the first that does not)."""
    from heed import decoding, translations
    from heed.explain.forced import attention_shape
    from heed.explain.readings import explain
    from heed.plumbing.runtime import resolve_device

    checkpoints = kept_checkpoints(run)
    chosen = evenly(checkpoints, most)
    root = run_dir(run)
    if final is None:
        torch_device = resolve_device(device, field="device")
        loaded = load_model_dir(final_model(root), device=torch_device)
        subject, config = Subject(loaded.model, loaded.codec, torch_device), loaded.config
    else:
        subject, config = final.subject, final.config
    if not subject.model.has_attention:
        raise HeedError(f"{root}: the model has no attention (model.decoder: none), so there is nothing to draw")
    if tgt_text is None:
        cfg = decoding.ready(decode or config.decode, tgt_vocab_size=len(subject.codec.tgt_vocab))
        nbest, _ = translations.decode(subject, [src_text], cfg, max_src_len=translations.source_limit(config))[0]
        tokens: str | Sequence[str] = nbest[0].tokens  # the run's model's own translation
    else:
        tokens = tgt_text
    dev = dev_lines(root)
    snapshots = []
    src_tokens: list[str] = []
    tgt_tokens: list[str] = []
    for step, path in chosen:
        checkpoint = load_model_dir(path, device=subject.device)
        difference = subject.codec.difference(checkpoint.codec)
        if difference is not None:
            raise HeedError(f"{path}: {difference} differs from the run's model's; the checkpoints of one run "
                            "share them (was this directory copied in from another run?)")
        maps = explain("heads", checkpoint.model, checkpoint.codec, subject.device, [src_text], [tokens],
                       max_src_len=translations.source_limit(checkpoint.config))[0]
        layer = attention_shape(checkpoint.model)[2]
        src_tokens, tgt_tokens = maps.src_tokens, maps.tgt_tokens
        snapshots.append(Snapshot(step, path, dev.get(step), maps.values[layer].mean(axis=0)))
    return AttentionHistory(src_tokens, tgt_tokens, snapshots, len(checkpoints))


def entropy_history(run: str | os.PathLike[str]) -> tuple[list[int], np.ndarray]:
    """(steps, entropy (evaluations, layers, heads)) of the run's logged attention entropy, in nats."""
    dev = dev_lines(run)
    root = run_dir(run)
    if not dev:
        raise HeedError(f"{root / METRICS_FILE}: no dev evaluations logged; the attention entropy is measured on "
                        "the dev set at each evaluation (give data.dev, or let data.split hold some out)")
    rows = [(step, entry["attention_entropy"]) for step, entry in sorted(dev.items())
            if isinstance(entry.get("attention_entropy"), list) and entry["attention_entropy"]]
    if not rows:
        raise HeedError(f"{root / METRICS_FILE}: no attention entropy logged (a model with attention logs it at "
                        "every dev evaluation; this one has none, or was trained with an older heed)")
    shapes = {np.shape(entropy) for _, entropy in rows}
    if len(shapes) != 1:
        raise HeedError(f"{root / METRICS_FILE}: the attention entropy changes shape between evaluations "
                        f"({sorted(shapes)}); one run logs one model's heads")
    return [step for step, _ in rows], np.asarray([entropy for _, entropy in rows], dtype=np.float64)


class EntropyModel(HeadsModel, Protocol):
    """What attention_entropy reads: a model's heads (HeadsModel), whether it attends, its padding
    id, and eval mode (a torch Module's)."""

    pad_id: int

    @property
    def has_attention(self) -> bool: ...

    def eval(self) -> Any: ...


def attention_entropy(model: EntropyModel, batches: Iterable[Batch]) -> list[list[float]] | None:
    """The mean entropy (nats) of the attention over the source of every decoder layer's every head,
    over the target tokens of `batches` (on the model's device) read teacher-forced: [layer][head]
    (an RNN's one attention is [[h]]); low = peaked, log(source length) = uniform. What training
    records at each evaluation and `entropy_history` reads back. None without attention or tokens."""
    if not model.has_attention:
        return None
    model.eval()
    total, tokens = None, 0
    with torch.inference_mode():
        for batch in batches:
            weights = model.attention_heads(batch.src, batch.src_lengths, batch.tgt_in).float()  # (L, H, B, T, S)
            entropy = -torch.special.xlogy(weights, weights).sum(-1)  # (L, H, B, T)
            real = (batch.tgt_out != model.pad_id).float()  # (B, T)
            summed = (entropy * real).sum((-1, -2)).double().cpu()
            total = summed if total is None else total + summed
            tokens += int(real.sum())
    if total is None or not tokens:
        return None
    return (total / tokens).tolist()
