"""What a request will cost the server, counted before anything runs, in heed.plumbing.limits'
units: the work of its passes (decoder rows x steps), the attention weights its readings weigh, and
the numbers its answer holds. One Cost per request, whatever its endpoint; heed.serve.app refuses one
over --max-work, --max-weights or --max-answer (`refusal`), and slices its work by `work`.

Lengths are token counts without </s>; an output the server has not decoded yet counts at its
longest (the decode config's max length, or its forced prefix).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from heed.plumbing.limits import ALL_PARTS, PairCost, attention_weights, forced_work, search_work

# budget -> (the ServeSettings field that bounds it, its flag, what it counts)
BUDGETS: dict[str, tuple[str, str, str]] = {
    "work": ("max_work", "--max-work", "decoder rows x steps"),
    "weights": ("max_weights", "--max-weights", "attention weights"),
    "numbers": ("max_answer", "--max-answer", "numbers in its answer"),
}


@dataclass(frozen=True)
class Cost:
    """A request's cost.

    work:    per item (sentence or pair), decoder rows x steps: the batcher slices by these
    weights: attention weights its readings compute and weigh, summed over its items
    numbers: numbers and tokens its answer holds, summed over its items
    what:    the request as counted, for a refusal ("2 sentences, integrated gradients at 200 points")
    fields:  per budget ("work", "weights", "numbers"), the request field a refusal names
    advice:  per budget, what to send instead (default: fewer or shorter sentences)
    """

    work: list[int]
    weights: int = 0
    numbers: int = 0
    what: str = ""
    fields: Mapping[str, str] = field(default_factory=dict)
    advice: Mapping[str, str] = field(default_factory=dict)


def refusal(cost: Cost, settings: Any) -> tuple[str, str | None] | None:
    """(message, field) for the first budget of `settings` (a ServeSettings) the cost passes; None
    when it is within all three."""
    amounts = {"work": sum(cost.work), "weights": cost.weights, "numbers": cost.numbers}
    for budget, (setting, flag, unit) in BUDGETS.items():
        limit = getattr(settings, setting)
        if amounts[budget] > limit:
            advice = cost.advice.get(budget, "send fewer or shorter sentences")
            message = (f"this request asks for {amounts[budget]:,} {unit} ({cost.what}); the server allows {limit:,} "
                       f"a request ({flag}): {advice}")
            return message, cost.fields.get(budget)
    return None


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def translate_cost(src_lens: Sequence[int], steps: Sequence[int], *, width: int, n_best: int, attention: bool,
                   alternatives: int, trace: bool, source_share: bool, grid: tuple[int, int],
                   fields: Mapping[str, str]) -> Cost:
    """A search per sentence (`width` rows for at most `steps[k]` tokens) and what it returns:
    `n_best` hypotheses, each with its tokens, its attention (output x source), its source share
    (ALTI+: one teacher-forced pass reading every attention of every layer and head); with `trace`,
    each step's `alternatives` and the beam tree's nodes."""
    layers, heads = grid
    work, weights, numbers = [], 0, 0
    for s, t in zip(src_lens, steps):
        rows, cols = t + 1, s + 1
        work.append(search_work(width, t) + (forced_work(t, passes=n_best) if source_share else 0))
        if source_share:
            weights += n_best * attention_weights(s, t, layers, heads, ALL_PARTS)
        per_hypothesis = rows * (2 + (cols if attention else 0) + (1 if source_share else 0))
        numbers += s + n_best * per_hypothesis
        if trace:
            numbers += rows * alternatives * 2 + (search_work(width, t) * 7 if width > 1 else 0)
    what = (f"{_plural(len(src_lens), 'sentence')}, beam {width}, n-best {n_best}, outputs up to their max length"
            + (", the source share of each" if source_share else "") + (", the attention" if attention else ""))
    return Cost(work, weights, numbers, what, fields,
                {"work": "send fewer sentences, a smaller beam or shorter prefixes",
                 "weights": "send fewer or shorter sentences, a smaller n-best, or no explain",
                 "numbers": "send fewer or shorter sentences, a smaller n-best" + (", or attention false" if attention
                                                                                 else "")})


def align_cost(src_lens: Sequence[int], tgt_lens: Sequence[int], src_words: Sequence[int], tgt_units: Sequence[int], *,
               reading: str, grid: tuple[int, int]) -> Cost:
    """A teacher-forced pass per pair; a reading other than the attention itself (value norms,
    rollout, ALTI+) weighs every attention of every layer and head. The answer: the units' matrix
    and links."""
    layers, heads = grid
    weighs = reading != "attention"
    work = [forced_work(t) for t in tgt_lens]
    weights = sum(attention_weights(s, t, layers, heads, ALL_PARTS) for s, t in zip(src_lens, tgt_lens)) if weighs else 0
    numbers = sum(w + u + u * w + 2 * u for w, u in zip(src_words, tgt_units))
    return Cost(work, weights, numbers, f"{_plural(len(src_lens), 'pair')}, weights {reading}",
                {"work": "sources", "weights": "weights", "numbers": "sources"},
                {"work": "send fewer or shorter pairs", "weights": "send fewer or shorter pairs, or weights attention",
                 "numbers": "send fewer or shorter pairs"})


def attribute_cost(pairs: Sequence[PairCost], *, points: int, method: str, search: Sequence[int]) -> Cost:
    """/v1/attribute: what the reading attribution counts for each pair (every output token
    attributed, `points` passes each), and `search[k]`: the search that writes the model's own output
    first (0 when a target is given)."""
    how = f"integrated gradients at {points} points" if method == "integrated_gradients" else method
    lever = "steps" if method == "integrated_gradients" else "sentences"
    return Cost([p.work + w for p, w in zip(pairs, search)], 0, sum(p.numbers for p in pairs),
                f"{_plural(len(pairs), 'sentence')}, {how}, each output token a pass per point",
                {"work": lever, "numbers": "sentences"},
                {"work": "send fewer or shorter sentences" + (", or fewer steps" if lever == "steps" else "")})


def heads_cost(pairs: Sequence[PairCost], *, parts: tuple[str, ...], grid: tuple[int, int]) -> Cost:
    """/v1/heads: what the reading heads counts for each pair (a teacher-forced pass, every head's
    weights of `parts` read and returned)."""
    layers, heads = grid
    return Cost([p.work for p in pairs], sum(p.weights for p in pairs), sum(p.numbers for p in pairs),
                f"{_plural(len(pairs), 'sentence')}, {layers} layers x {heads} heads, parts {', '.join(parts)}",
                {"work": "sources", "weights": "sources", "numbers": "sources"},
                {"weights": "send fewer or shorter sentences, or fewer parts",
                 "numbers": "send fewer or shorter sentences, or fewer parts"})


def lens_cost(pairs: Sequence[PairCost], *, top: int, layers: int) -> Cost:
    """/v1/lens: what the reading logit_lens counts for each pair (a teacher-forced pass, each layer
    read through the output layer; `top` tokens and probabilities per layer and position answered)."""
    return Cost([p.work for p in pairs], 0, sum(p.numbers for p in pairs),
                f"{_plural(len(pairs), 'sentence')}, {layers} layers, top {top}",
                {"work": "sources", "numbers": "top" if top > 1 else "sources"},
                {"numbers": "send fewer or shorter sentences, or a smaller top"})


def reading_cost(name: str, pairs: Sequence[PairCost]) -> Cost:
    """A reading of heed.explain.readings over given pairs: what each pair costs, as the reading
    counts it (Reading.cost), summed."""
    return Cost([p.work for p in pairs], sum(p.weights for p in pairs), sum(p.numbers for p in pairs),
                f"{_plural(len(pairs), 'sentence pair')}, the reading {name}",
                {"work": "sources", "weights": "sources", "numbers": "sources"},
                {"work": "send fewer or shorter pairs", "weights": "send fewer or shorter pairs",
                 "numbers": "send fewer or shorter pairs"})
