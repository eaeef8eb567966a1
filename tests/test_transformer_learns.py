"""The Transformer learns: a small one trained on the demo's dates task (5 languages -> ISO 8601,
characters) reaches >= 95% exact match on the held-out test set in under a minute of 2 CPU cores:
one layer each side of 64, 4 heads, 2,989 updates of 1,500 tokens with label smoothing 0.1 and a
flat 0.003 after warm-up (8 epochs). configs/dates_transformer.yaml is a bigger sibling; the times,
with the CPU, are in bench/RESULTS.md ("The Transformer")."""
from __future__ import annotations

import json

from heed.config import config_from_dict
from heed.train import train


def test_a_small_transformer_learns_the_dates_task(tmp_path):
    config = config_from_dict({
        "data": {"task": "dates", "batch_tokens": 1500,
                 "dates": {"n_train": 30000, "n_dev": 500, "n_test": 1000, "seed": 0,
                           "languages": ["en", "fr", "de", "es", "ko"]},
                 "tokenizer": {"src": {"kind": "char"}, "tgt": {"kind": "char"}}},
        "model": {"family": "transformer", "layers": 1, "d_model": 64, "heads": 4, "ff_size": 128,
                  "dropout": 0.0, "attention_dropout": 0.0},
        "train": {"seed": 1, "epochs": 8, "lr": 0.003, "betas": [0.9, 0.98], "clip": 1.0,
                  "schedule": {"name": "warmup", "warmup_steps": 200, "decay": "none"}, "label_smoothing": 0.1,
                  "early_stopping": {"metric": "exact_match", "patience": None},
                  "log_every": 500, "threads": 2},
        "decode": {"beam_size": 1},
        "output_dir": str(tmp_path / "run"),
    })
    result = train(config)
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    test = [r for r in lines if r["kind"] == "test"][-1]
    assert test["exact_match"] >= 95.0, (result.steps, test)
