"""Where a batch-1 beam step's time goes, PyTorch vs. an exported model under ONNX Runtime.

    OMP_NUM_THREADS=1 .venv/bin/python bench/studies/onnx_step_profile.py MODEL_DIR EXPORTED_DIR [EXPORTED_INT8_DIR]
        --input FILE [--sentences 200] [--beam 5] [--batch 1] [--max-len 20]

Decodes the first --sentences lines of --input (--batch at a time; default one at a time) with
beam search (greedy with --beam 1), timing: the model's `step` calls (for ONNX Runtime split into the session's `run`
and the conversion around it), `state.select` (beam reordering), `encode` + `init_state`, and the
rest: the search's own bookkeeping (log-softmax, top-k, finishing, backtracking). Prints one table,
microseconds per decoder step, 1 thread, the fastest of --repeats interleaved runs. The first directory's tokenizer reads the input.
"""
from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

import heed
from heed.search import DecodeConfig, translate_ids

TIMES: dict[str, float] = defaultdict(float)
COUNTS: dict[str, int] = defaultdict(int)


class _Timed:
    """A model behind the search protocol, timing its calls (and the selects of what they return)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.pad_id, self.bos_id, self.eos_id = model.pad_id, model.bos_id, model.eos_id
        self.has_attention = model.has_attention

    def encode(self, src, lengths):
        start = time.perf_counter()
        enc = self.model.encode(src, lengths)
        TIMES["encode + init_state"] += time.perf_counter() - start
        return _TimedEnc(enc)

    def init_state(self, enc):
        start = time.perf_counter()
        state = self.model.init_state(enc.inner)
        TIMES["encode + init_state"] += time.perf_counter() - start
        return _TimedState(state)

    def step(self, prev, state, enc):
        start = time.perf_counter()
        out = self.model.step(prev, state.inner, enc.inner)
        TIMES["model.step"] += time.perf_counter() - start
        COUNTS["steps"] += 1
        return out._replace(state=_TimedState(out.state))


class _TimedState:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def select(self, indices):
        start = time.perf_counter()
        out = _TimedState(self.inner.select(indices))
        TIMES["state.select"] += time.perf_counter() - start
        return out


class _TimedEnc:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    @property
    def mask(self):
        return self.inner.mask

    def repeat(self, k):
        start = time.perf_counter()
        out = _TimedEnc(self.inner.repeat(k))
        TIMES["enc.repeat / select"] += time.perf_counter() - start
        return out

    def select(self, sources):
        start = time.perf_counter()
        out = _TimedEnc(self.inner.select(sources))
        TIMES["enc.repeat / select"] += time.perf_counter() - start
        return out


def _patch_session_run(model: Any) -> None:
    """Time onnxruntime's InferenceSession.run of the step graph inside model.step."""
    for threads, (enc, step) in list(model._sessions.items()):
        class Wrapped:
            def __init__(self, inner):
                self.inner = inner

            def run(self, *a, **k):
                start = time.perf_counter()
                out = self.inner.run(*a, **k)
                TIMES["  of which session.run"] += time.perf_counter() - start
                return out

            def __getattr__(self, name):
                return getattr(self.inner, name)

        model._sessions[threads] = (enc, Wrapped(step))


def profile(path: str, ids: list[list[int]], cfg: DecodeConfig, batch: int) -> dict[str, float]:
    TIMES.clear()
    COUNTS.clear()
    translator = heed.load(path, device="cpu")
    model = translator.model
    if hasattr(model, "_sessions"):
        _patch_session_run(model)
    timed = _Timed(model)
    with torch.inference_mode():
        translate_ids(timed, ids[: max(5, batch)], cfg, device=torch.device("cpu"), batch_size=batch)  # warm up
        TIMES.clear()
        COUNTS.clear()
        start = time.perf_counter()
        translate_ids(timed, ids, cfg, device=torch.device("cpu"), batch_size=batch)
        total = time.perf_counter() - start
    steps = COUNTS["steps"]
    out = {name: 1e6 * t / steps for name, t in TIMES.items()}
    accounted = sum(t for name, t in TIMES.items() if not name.startswith("  "))
    out["search bookkeeping (the rest)"] = 1e6 * (total - accounted) / steps
    out["total per step"] = 1e6 * total / steps
    out["sentences/s"] = len(ids) / total
    out["steps"] = steps
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("dirs", nargs="+", help="a model directory and exported directories")
    p.add_argument("--input", type=Path, required=True, help="source lines")
    p.add_argument("--sentences", type=int, default=200)
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3, help="interleaved runs per directory; the fastest is kept")
    p.add_argument("--max-len", type=int, default=20)
    args = p.parse_args()
    torch.set_num_threads(1)
    first = heed.load(args.dirs[0], device="cpu")
    lines = args.input.read_text(encoding="utf-8").splitlines()
    texts = [line for line in lines if line.strip()][: args.sentences]
    ids = [first.codec.src_vocab.encode(first.codec.src_tokens(t)[: first.max_src_len]) for t in texts]
    cfg = DecodeConfig(beam_size=args.beam, n_best=1, max_len_a=0.0, max_len_b=args.max_len)
    # Interleaved repeats, each directory's fastest kept: a shared host's speed drifts.
    results: dict[str, dict[str, float]] = {}
    for _ in range(args.repeats):
        for d in args.dirs:
            r = profile(d, ids, cfg, args.batch)
            if d not in results or r["total per step"] < results[d]["total per step"]:
                results[d] = r
    names = list(dict.fromkeys(k for r in results.values() for k in r))
    print(f"beam {args.beam}, batch {args.batch}, {len(ids)} sentences, 1 thread; microseconds per decoder step")
    print("| | " + " | ".join(Path(d).name for d in args.dirs) + " |")
    print("|---|" + "---|" * len(args.dirs))
    for name in names:
        fmt = ",.0f" if name in ("steps",) else ".1f"
        print(f"| {name.strip()} | " + " | ".join(format(results[d].get(name, 0.0), fmt) for d in args.dirs) + " |")


if __name__ == "__main__":
    main()
