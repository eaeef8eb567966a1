"""Does attention explain the output? (Jain & Wallace 2019; Wiegreffe & Pinter 2019.) Over a test
set, each attention intervention (heed.nn.intervention: uniform, permute, drop_top) is measured two
ways against the model's own translations y (decoded without intervention):

    read    y is fed back with the intervened attention (teacher forcing): per output token, the
            change in the probability of y_j, and the total variation distance between the two
            output distributions, 1/2 sum_v |p(v) - p'(v)|; averaged over all output tokens (</s>
            included)
    decode  the test set is translated again under the intervention: BLEU against the
            references, and the share of sentences whose output changed

If attention is how the model chooses, replacing it moves the probabilities and the outputs a lot;
if permuted or uniform attention leaves them alone, the attention a heatmap shows did not decide
them. A model without attention is refused: there is nothing to intervene on.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from heed.data.batching import collate, specials_of
from heed.decode_config import DecodeConfig
from heed.errors import HeedError
from heed.evaluate import evaluate
from heed.nn.intervention import KINDS, Intervention, InterventionKind


@dataclass(frozen=True)
class InterventionEffect:
    """One intervention's effect, over a test set (probabilities in 0..1, BLEU and shares in %)."""

    kind: InterventionKind
    prob_change: float  # mean p'(y_j) - p(y_j) over output tokens (negative: the chosen tokens lost probability)
    abs_prob_change: float  # mean |p'(y_j) - p(y_j)|
    tvd: float  # mean total variation distance between p(. | y_<j, x) and p'(. | y_<j, x)
    bleu: float  # BLEU of the outputs decoded under the intervention
    changed: float  # % of sentences whose output differs from the model's own


@dataclass(frozen=True)
class FaithfulnessReport:
    sentences: int
    tokens: int  # output tokens read (</s> included)
    seed: int
    bleu: float  # BLEU of the model's own outputs
    effects: list[InterventionEffect] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _read_with(translator: Any, examples: Sequence[tuple[list[int], list[int]]], batch_size: int,
               intervention: Intervention | None) -> list[np.ndarray]:
    """Per example, the output distributions (T+1, vocab) while reading its target, teacher forced."""
    out: list[np.ndarray] = [np.empty(0)] * len(examples)
    order = sorted(range(len(examples)), key=lambda k: -len(examples[k][0]))
    with torch.inference_mode(), translator.intervening(intervention):
        for start in range(0, len(order), batch_size):
            group = order[start : start + batch_size]
            batch = collate([examples[k] for k in group], group, specials_of(translator.model)).to(translator.device)
            logits = translator.model(batch.src, batch.src_lengths, batch.tgt_in, need_attention=False).logits
            probs = torch.softmax(logits.float(), dim=-1).cpu().numpy()  # (batch, T+1, vocab)
            for row, k in enumerate(group):
                out[k] = probs[row, : len(examples[k][1]) + 1]
    return out


def passes(sentences: int, kinds: Sequence[InterventionKind] = KINDS) -> int:
    """The sentence passes `faithfulness` makes: a decoding and a forced reading without an
    intervention, and one of each with every intervention."""
    return sentences * 2 * (1 + len(kinds))


def faithfulness(translator: Any, sources: Sequence[str], references: Sequence[str], *, decode: DecodeConfig,
                 kinds: Sequence[InterventionKind] = KINDS, seed: int = 0, batch_size: int = 64,
                 progress: Callable[[int], None] | None = None) -> FaithfulnessReport:
    """Every intervention in `kinds` over `sources` (heed.api.Translator, a PyTorch model with
    attention), decoding with `decode`; `seed` draws the permutations. `progress(n)` hears each
    pass over the sentences as it ends (`passes` of them in all)."""
    done = progress or (lambda n: None)
    if not translator.model.has_attention:
        raise HeedError("this model has no attention, so there is no attention to test; use a model with attention")
    if len(sources) != len(references):
        raise HeedError(f"{len(sources)} sources but {len(references)} references; give one reference per source")
    own = translator.translate(sources, decode=decode, batch_size=batch_size)
    done(len(sources))
    todo = [k for k, t in enumerate(own) if t.src_tokens]  # an empty source is not decoded: nothing to read
    _, _, examples = translator.forced_pairs([sources[k] for k in todo], [own[k].tokens for k in todo],
                                             empty="there is nothing to read")
    base = _read_with(translator, examples, batch_size, None)
    done(len(sources))
    targets = [np.array([*tgt_ids, translator.model.eos_id]) for _, tgt_ids in examples]
    report = FaithfulnessReport(len(sources), sum(len(t) for t in targets), seed,
                                evaluate([t.text for t in own], references).bleu)
    for kind in kinds:
        intervention = Intervention(kind, seed)
        changed_dists = _read_with(translator, examples, batch_size, intervention)
        done(len(sources))
        deltas, tvds = [], []
        for p, q, y in zip(base, changed_dists, targets):
            rows = np.arange(len(y))
            deltas.append(q[rows, y] - p[rows, y])
            tvds.append(0.5 * np.abs(q - p).sum(-1))
        delta, tvd = np.concatenate(deltas), np.concatenate(tvds)
        with translator.intervening(intervention):
            redone = translator.translate(sources, decode=decode, batch_size=batch_size)
        done(len(sources))
        changed = sum(a.text != b.text for a, b in zip(own, redone))
        report.effects.append(InterventionEffect(kind, float(delta.mean()), float(np.abs(delta).mean()),
                                                 float(tvd.mean()), evaluate([t.text for t in redone], references).bleu,
                                                 100.0 * changed / len(sources)))
    return report


__all__ = ["FaithfulnessReport", "InterventionEffect", "faithfulness"]
