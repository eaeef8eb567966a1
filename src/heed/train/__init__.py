"""Training: `train(config)` opens a run (heed.train.loop.Trainer) and trains it.

    loop      the Trainer: opening a run, the update loop, dev evaluation and checkpoints
    dev       the dev loss and greedy translations an evaluation scores
    schedule  learning-rate warm-up, decay and plateau; what "better" is per metric
    log       the progress bar, log lines, metrics.jsonl and TensorBoard
    resume    what a resumed run may change, the data's fingerprint, the tokenizers for other ranks
    average   checkpoint averaging (`heed average`)
"""
from heed.train.loop import Trainer, TrainResult, train
from heed.train.resume import data_fingerprint, score_command
from heed.train.schedule import LRSchedule

__all__ = ["LRSchedule", "TrainResult", "Trainer", "data_fingerprint", "score_command", "train"]
