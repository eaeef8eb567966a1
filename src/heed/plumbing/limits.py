"""Bounds on sizes a user gives, in one place for the CLI, the server and the library. Imports
nothing, so the CLI can name them in `--help` without loading torch."""
from __future__ import annotations

from typing import NamedTuple

# Integrated gradients' integration points at most: Sundararajan et al. 2017 (section 3) find 20 to
# 300 enough to come within 5% of completeness; each point is a forward and backward pass per output
# token, and a run's memory grows with them (`--steps 100000` asked for 74.5 GiB).
MAX_ATTRIBUTION_STEPS = 200

# Tokens the logit lens lists per layer and position at most: each is a row of every answer
# (layers x positions x top), and past a few dozen a list says nothing a probability would not.
MAX_LENS_TOP = 50

# Encoder or decoder layers at most: DeepNet (Wang et al. 2022), the deepest published translator,
# has 1,000. Checked before anything is built, as a million-layer stack takes minutes to count.
MAX_LAYERS = 1000
MAX_THREADS = 1024  # CPU threads at most: far above any machine heed runs on (train.threads, --threads)

# ------------------------------------------------------------------------------ what a request costs
# The server counts what a request will cost before it runs it (heed serve --max-work, --max-weights,
# --max-answer), in three units:
#   work     token positions run through the model, "decoder rows x steps": a search runs its rows
#            (the beam, or the samples) for every step; a teacher-forced pass of a target runs
#            its tokens and </s>; a backward pass counts as its forward pass
#   weights  attention weights a reading computes and weighs: layers x heads x queries x keys of
#            every attention it reads, once per pass (ALTI+ holds a term vector for each)
#   numbers  the numbers and tokens an answer holds (its JSON is about 10-20 bytes a number)
ALL_PARTS = ("cross", "encoder", "decoder")  # a Transformer's attentions: what ALTI+ and rollout read


class PairCost(NamedTuple):
    """What reading one sentence pair costs, in the three units above (a reading of
    heed.explain.readings declares how to count it; the server sums them over a request)."""

    work: int
    weights: int = 0
    numbers: int = 0


def search_work(width: int, steps: int) -> int:
    """A search of `width` rows (beam or samples) for at most `steps` tokens, then </s>."""
    return width * (steps + 1)


def forced_work(tgt_len: int, passes: int = 1) -> int:
    """`passes` teacher-forced passes of a target of `tgt_len` tokens (and </s>)."""
    return passes * (tgt_len + 1)


def markup_work(tgt_len: int) -> int:
    """Carrying a sentence's inline markup (heed.markup): the alignment of the sentence with its
    translation, one teacher-forced pass of a translation of at most `tgt_len` tokens (counted at
    its longest, before the translation is written; the server counts it beside the search)."""
    return forced_work(tgt_len)


def attribution_work(tgt_len: int, points: int) -> int:
    """Attribution of every output token (`tgt_len` and </s>) of a pair: each is `points`
    forward-and-backward passes of the whole pair (integrated gradients' points; 1 for gradient x
    input). One 1,000-character sentence at 200 points is 200 million, minutes of a CPU."""
    return points * forced_work(tgt_len, passes=tgt_len + 1)


def lens_work(tgt_len: int, layers: int) -> int:
    """The logit lens: a teacher-forced pass, and every layer's rows read through the output layer."""
    return forced_work(tgt_len, passes=layers + 1)


def attention_weights(src_len: int, tgt_len: int, layers: int, heads: int, parts: tuple[str, ...] = ("cross",)) -> int:
    """The weights of `parts` (cross: target x source, encoder: source x source, decoder: target x
    target; </s> counted each side) over every layer and head of one pair."""
    s, t = src_len + 1, tgt_len + 1
    per_head = (t * s if "cross" in parts else 0) + (s * s if "encoder" in parts else 0) + \
        (t * t if "decoder" in parts else 0)
    return layers * heads * per_head
