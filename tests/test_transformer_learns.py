"""The Transformer learns: a small one trained on the demo's dates task (5 languages -> ISO 8601,
characters) reaches >= 95% exact match on the held-out test set. It stops as soon as the dev set
reaches 96% (train.early_stopping.target); configs/dates_transformer.yaml is the same run at full size.
The time it takes, with the CPU, is in bench/RESULTS.md ("The Transformer")."""
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
        "model": {"family": "transformer", "layers": 2, "d_model": 96, "heads": 4, "ff_size": 192,
                  "dropout": 0.0, "attention_dropout": 0.0},
        "train": {"seed": 1, "epochs": 8, "lr": 0.002, "betas": [0.9, 0.98], "clip": 1.0,
                  "schedule": {"name": "warmup", "warmup_steps": 200, "decay": "none"}, "label_smoothing": 0.0,
                  "early_stopping": {"metric": "exact_match", "patience": None, "target": 96.0},
                  "log_every": 100, "threads": 2},
        "decode": {"beam_size": 1},
        "output_dir": str(tmp_path / "run"),
    })
    result = train(config)
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    test = [r for r in lines if r["kind"] == "test"][-1]
    assert test["exact_match"] >= 95.0, (result.steps, test)
