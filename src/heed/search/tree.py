"""The search tree, for people: what beam search kept, finished and pruned at every step (the
explorer draws it)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from heed.decode_config import DecodeConfig
from heed.search.scoring import NEG_INF, Hypothesis, length_penalty


@dataclass
class TreeNode:
    """One candidate of one step: `token` appended to its `parent` node's output.

    step: the output position (-1 for the root, before the first token); log_prob: cumulative;
    score: the ranking score of a finished node (its hypothesis' score where it is in the n-best;
    else log_prob / lp, without the coverage penalty), else its log_prob;
    status: "root", "kept" (live in the beam), "finished" (ended with EOS among the step's best
    `beam`) or "pruned" (among the step's 2 * beam best candidates, but dropped)."""

    id: int
    parent: int | None
    step: int
    token: int | None
    log_prob: float
    score: float
    status: str


@dataclass
class BeamTree:
    """Every finite candidate beam search ranked for one sentence, as a tree rooted at BOS."""

    nodes: list[TreeNode]


class TraceStep(NamedTuple):
    """One step's candidates, copied to the CPU: active (n,) sentence ids; cand_log_prob, token,
    parent (n, 2 * beam) with parent the live beam slot extended; picked (n, beam) the candidates
    that live on, by column."""

    active: Tensor
    cand_log_prob: Tensor
    token: Tensor
    parent: Tensor
    picked: Tensor


def build_trees(recorded: Sequence[TraceStep], batch: int, beam: int, eos_id: int, hyps: Sequence[Hypothesis],
                 fin_step: Tensor, fin_row: Tensor, cfg: DecodeConfig) -> list[BeamTree]:
    """One BeamTree per sentence from the recorded steps; sets each finished hypothesis' `node`.
    hyps (batch * n_best) with fin_step, fin_row (batch, n_best) as beam_search keeps them."""
    trees = [BeamTree([TreeNode(0, None, -1, None, 0.0, 0.0, "root")]) for _ in range(batch)]
    live = [[0] * beam for _ in range(batch)]  # node id of each live beam slot; only slot 0 at first
    finished: dict[tuple[int, int, int], int] = {}  # (sentence, step, parent slot) -> node id
    for t, rec in enumerate(recorded):
        lp, tok, par, picked = (x.tolist() for x in rec[1:])
        for i, b in enumerate(rec.active.tolist()):
            nodes, slot_node = trees[b].nodes, {}
            kept = {c: k for k, c in enumerate(picked[i])}
            for c in range(2 * beam):
                if lp[i][c] == NEG_INF:
                    continue
                if tok[i][c] == eos_id:
                    # Only an EOS among the best `beam` finishes (_finish); one below can still fill
                    # a spare beam slot when too few candidates are finite, as a dead beam: pruned.
                    status = "finished" if c < beam else "pruned"
                    score = lp[i][c] / float(length_penalty(torch.tensor(t + 1), cfg.length_penalty, cfg.length_norm))
                elif c in kept:
                    status, score = "kept", lp[i][c]
                else:
                    status, score = "pruned", lp[i][c]
                node = TreeNode(len(nodes), live[b][par[i][c]], t, tok[i][c], lp[i][c], score, status)
                nodes.append(node)
                if status == "finished":
                    finished[(b, t, par[i][c])] = node.id
                elif status == "kept":
                    slot_node[kept[c]] = node.id
            live[b] = [slot_node.get(k, 0) for k in range(beam)]
    n_best = fin_step.size(1)
    for b in range(batch):
        for j in range(n_best):
            h = hyps[b * n_best + j]
            if not math.isfinite(h.score):  # an empty slot (fewer than n_best finished): no node
                continue
            node_id = finished.get((b, int(fin_step[b, j]), int(fin_row[b, j]) - b * beam))
            if node_id is not None:
                h.node = node_id
                trees[b].nodes[node_id].score = h.score
    return trees
