"""Guided alignment training: the alignment loss beside the translation loss.

Garg et al. 2019 ("Jointly Learning to Align and Translate with Transformer Models", eq. 5)
supervise one head of the penultimate decoder layer with a statistical aligner's links:

    L_a = - sum_t sum_s p_ts log a_ts

a_ts: the chosen heads' mean attention from the step that predicts target token t to source token
s; p_t: the links of token t spread evenly over its linked source tokens (a row of zeros, and no
loss, for a token without links). Summed over the batch like the translation loss, the trainer's
division by the update's target tokens normalises it per target token; it is weighed by
`train.alignment.weight` (Garg et al.'s lambda, 0.05).

The supervision (heed.config.GuidedAlignmentConfig): links of the training pairs (a file, a
generated task; heed.data.supervision.TokenLinks) or `self`, the model's own shift-att (Chen et al.
2020, Shift-AET): the layer's head mean read at the step after token t (whose input is t) names
the source token t aligns to, and that link supervises the step that predicts t. Alignment is then
there when the token is chosen, which shift-att, a step late, cannot give at decoding time.

In an RNN the supervised row is the step whose attention feeds the prediction of token t (with or
without input feeding): the supervision fixes what the row means by construction.

A model with an alignment layer (model.alignment_layer; heed.nn.transformer.alignment_layer, Garg et
al.'s full-context alignment) has the same loss trained on that layer's heads instead (their mean,
row t for target token t), and no decoder head is supervised: the layer reads the whole target,
detached from the translator. With `self` the labels are still the shift-att of train.alignment's
decoder layer (Garg et al. 2019, 4.3: the model's own attention as the target).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from heed.config import Config, GuidedAlignmentConfig
from heed.data.codec import Codec, Corpora, DevGold
from heed.data.corpus import Pair
from heed.data.supervision import TokenLinks
from heed.data.units import Units
from heed.errors import ConfigError
from heed.explain.align_methods import ALIGNMENT_LAYER, AlignOptions, recorded_options
from heed.explain.forced import corpus_aer, sweep, word_rules
from heed.nn.loss import TargetBatch
from heed.nn.protocol import HeadsModel

TRAINED_MARGIN = 0.001  # the trained heads stay heed align's reading unless a reading beats them by this AER on the dev gold
ALIGNER_PREFIX = "aligner."  # an alignment layer's parameters' names (AligningTransformer.aligner)
LOG_FLOOR = 1e-9  # attention below this counts as this in the log: a masked-out or underflowed weight stays finite


def alignment_target(links: TokenLinks, indices: Tensor, tgt_len: int, src_len: int) -> Tensor:
    """p of the module doc for a batch: float32 (batch, tgt_len, src_len), row t of pair b spreading 1
    evenly over the source tokens linked to target token t (all zeros without links). `indices`
    (batch,): each row's pair in `links`."""
    rows, ts, ss = [], [], []
    for b, k in enumerate(indices.tolist()):
        pair = links[k]  # (n, 2) (target position, source position)
        rows.append(torch.full((len(pair),), b, dtype=torch.long))
        ts.append(torch.from_numpy(pair[:, 0]).long())
        ss.append(torch.from_numpy(pair[:, 1]).long())
    target = torch.zeros(len(indices), tgt_len, src_len)
    if rows:
        target.index_put_((torch.cat(rows), torch.cat(ts), torch.cat(ss)), torch.tensor(1.0))
    return target / target.sum(-1, keepdim=True).clamp_min(1.0)


def shift_att_target(attention: Tensor, src_lengths: Tensor, tgt_lengths: Tensor) -> Tensor:
    """The `self` supervision: attention (batch, heads, tgt_len, src_len), one layer's every head in
    the training pass -> (batch, tgt_len, src_len) one-hot, row t on the source token that the heads'
    mean at row t + 1 (the step reading token t) weighs most, the source's </s> left out. Rows with
    no next step (</s>) or a source of no tokens are zeros. No gradient flows into the labels."""
    mean = attention.detach().float().mean(1)  # (batch, tgt_len, src_len)
    _, tgt_len, src_len = mean.shape
    columns = torch.arange(src_len, device=mean.device)
    real = columns[None, :] < (src_lengths[:, None] - 1)  # (batch, src_len): tokens, not </s> or padding
    shifted = mean[:, 1:, :].masked_fill(~real[:, None, :], -1.0)  # (batch, tgt_len - 1, src_len)
    best = shifted.argmax(-1)  # (batch, tgt_len - 1)
    steps = torch.arange(tgt_len - 1, device=mean.device)
    labelled = (steps[None, :] < (tgt_lengths[:, None] - 1)) & (src_lengths[:, None] > 1)  # (batch, tgt_len - 1)
    target = torch.zeros_like(mean)
    target[:, :-1, :].scatter_(2, best.unsqueeze(-1), labelled.unsqueeze(-1).float())
    return target


def alignment_loss(attention: Tensor, heads: list[int], target: Tensor) -> Tensor:
    """L_a of the module doc, summed over the batch: attention (batch, heads, tgt_len, src_len) of the
    supervised layer, `heads` the ones trained (their mean), target (batch, tgt_len, src_len)."""
    chosen = attention[:, heads].float().mean(1)  # (batch, tgt_len, src_len)
    return -(target * chosen.clamp_min(LOG_FLOOR).log()).sum()


@dataclass(frozen=True)
class GuidedAlignment:
    """What the trainer needs of `train.alignment` once the model is known: the layer and heads,
    the weight, when it starts, and the links (None for `self`)."""

    layer: int
    heads: list[int]
    weight: float
    start_step: int
    links: TokenLinks | None
    units: Units  # what the supervision's target positions counted (the reading's default units)
    aligner: bool = False  # the model's alignment layer is trained, not `heads` of `layer`

    @property
    def options(self) -> AlignOptions:
        """The reading of the trained heads: argmax (the step that predicts each token, which they were
        trained at) of their mean attention; the alignment layer's heads' mean where it is trained."""
        if self.aligner:
            return AlignOptions(method="argmax", weights=ALIGNMENT_LAYER, tgt_units=self.units)
        return AlignOptions(method="argmax", layer=self.layer,
                            head=self.heads[0] if len(self.heads) == 1 else tuple(self.heads), tgt_units=self.units)


def check_guided(config: Config, *, planned_updates: int | None) -> None:
    """train.alignment checked before anything is written: ConfigError naming the field for a model
    whose heads cannot be trained, a layer or head it does not have, or a start_step past the run's
    `planned_updates` (None: not known, not checked)."""
    guided = config.train.alignment
    if guided is None:
        if config.model.has_alignment_layer:
            raise ConfigError("an alignment layer learns from guided alignment's supervision: add train.alignment "
                              "(supervision: a links file, task or self), or set model.alignment_layer: false",
                              field="model.alignment_layer")
        return
    grid = config.model.attention_grid
    if grid is None:
        raise ConfigError(f"this {config.model.family} model has no attention heads to train (guided alignment needs "
                          "a Transformer, or an RNN with attention)", field="train.alignment")
    layers, heads = grid
    layer = trained_layer(guided, layers)
    if layer >= layers:
        raise ConfigError(f"layer {layer} does not exist: the model has {layers} decoder layer"
                          f"{'s' if layers != 1 else ''} with attention (0..{layers - 1})",
                          field="train.alignment.layer")
    missing = [h for h in guided.heads if h >= heads]
    if missing:
        raise ConfigError(f"head {missing[0]} does not exist: each layer has {heads} head{'s' if heads != 1 else ''} "
                          f"(0..{heads - 1})", field="train.alignment.heads")
    if planned_updates is not None and guided.start_step >= planned_updates:
        raise ConfigError(f"start_step {guided.start_step} is past the run's end (it trains {planned_updates:,} "
                          "updates), so no update would be guided; lower it", field="train.alignment.start_step")


def trained_layer(guided: GuidedAlignmentConfig, layers: int) -> int:
    """The layer `guided` trains in a model of `layers` decoder layers: its own, or the
    second-to-last (Garg et al.; an RNN's one attention)."""
    return guided.layer if guided.layer is not None else max(layers - 2, 0)


def guided_alignment(config: Config, links: TokenLinks | None, corpora: Corpora) -> GuidedAlignment | None:
    """train.alignment as the trainer uses it (checked by check_guided), with the training pairs'
    `links` (None for `self`); None without it."""
    guided = config.train.alignment
    if guided is None:
        return None
    grid = config.model.attention_grid
    assert grid is not None  # check_guided refused the run otherwise
    units: Units = (corpora.train_gold.units if guided.supervision == "task" and corpora.train_gold is not None
                    else guided.units)
    return GuidedAlignment(trained_layer(guided, grid[0]), list(guided.heads), guided.weight, guided.start_step, links,
                           units, config.model.has_alignment_layer)


def clip_groups(model: Any) -> list[list[Tensor]]:
    """The parameters whose gradient norm is clipped together: all of them, and an alignment layer's
    (heed.nn.transformer.alignment_layer) apart, so that its gradients never scale the translator's
    and the translator trains as it would without the layer."""
    translator: list[Tensor] = []
    aligner: list[Tensor] = []
    for name, parameter in model.named_parameters():
        (aligner if name.startswith(ALIGNER_PREFIX) else translator).append(parameter)
    return [translator, aligner] if aligner else [translator]


def guided_loss(model: Any, batch: TargetBatch, guide: GuidedAlignment, target: Tensor | None, *,
                label_smoothing: float) -> tuple[Tensor, Tensor]:
    """(the model's loss plus guide.weight times L_a, L_a alone) of one batch, from one pass: L_a on
    `guide.heads` of `guide.layer`, or with `guide.aligner` on every head of the model's alignment
    layer (heed.nn.transformer.alignment_layer). `target` (batch, tgt_len, src_len): the links'
    supervision; None reads `self`'s labels off the same pass (shift_att_target)."""
    self_labels = target is None
    if guide.aligner:
        aligned = model.loss_with_alignment(batch, label_smoothing=label_smoothing,
                                            attention_layer=guide.layer if self_labels else None)
        out, attention = aligned.loss, aligned.alignment
        heads = list(range(attention.size(1)))
    else:
        out = model.loss(batch, label_smoothing=label_smoothing, attention_layer=guide.layer)
        attention, heads = out.attention, guide.heads
    if target is None:
        assert out.attention is not None
        target = shift_att_target(out.attention, batch.src_lengths, (batch.tgt_out != model.pad_id).sum(1))
    assert attention is not None
    align = alignment_loss(attention, heads, target)
    return out.total + guide.weight * align.to(out.total.dtype), align.detach()


def alignment_reading(model: Any, codec: Codec, dev_pairs: Sequence[Pair], gold: DevGold | None,
                      guide: GuidedAlignment | None, *, device: torch.device,
                      say: Callable[[str], None]) -> dict[str, Any] | None:
    """heed.json's "alignment": the reading `heed align` makes of the trained model by default.

    - With guided alignment: the trained heads; with a dev gold, scored beside the default reading
      and the sweep's best (one line says all three), and replaced by the sweep's best when that
      aligns better by more than TRAINED_MARGIN.
    - Else, with a dev gold and a model whose heads can be read: every reading of the best model's
      attention scored on the dev pairs (explain.forced.sweep), and the best one.
    - With a dev gold, then, how the chosen reading joins a source word's pieces (sum, max) and
      below which share of its row's weight a target unit is left unlinked (null links), each
      measured on the same gold (explain.forced.word_rules): the lowest AER, every unit linked by
      summed pieces on ties. Where that changes the reading, dev_aer is its AER and
      every_unit_linked_dev_aer the AER before.
    None otherwise."""
    if not getattr(model, "has_attention", False) or not isinstance(model, HeadsModel):
        return None
    if gold is None:
        return None if guide is None else {**_fields(guide.options), "trained": True}
    model.eval()
    reading = _best_reading(model, codec, dev_pairs, gold, guide, device=device, say=say)
    options = recorded_options(reading)
    # Then how pieces join and which target units stay unlinked, measured on the same gold for the
    # reading chosen (a gold leaves words unaligned; docs/look-inside.md, section 8).
    rules = word_rules(model, codec, dev_pairs, gold, options, device=device)
    best, aer = rules.best()
    if (best.join, best.null_threshold) == (options.join, options.null_threshold):
        return reading
    plain = rules.counts[(options.join, options.null_threshold)]
    chosen = rules.counts[(best.join, best.null_threshold)]
    say(f"alignment: on the dev gold, {'pieces joined by their max' if best.join == 'max' else 'pieces summed'}"
        + (f" and no link below {best.null_threshold:g} of a row's weight" if best.null_threshold else "")
        + f" align at AER {100 * aer:.1f}% (precision {100 * plain.precision:.1f} -> {100 * chosen.precision:.1f}%, "
          f"recall {100 * plain.recall:.1f} -> {100 * chosen.recall:.1f}%); heed align uses it")
    return {**reading, "join": best.join, "null_threshold": best.null_threshold, "dev_aer": aer,
            "every_unit_linked_dev_aer": plain.aer}


def _best_reading(model: Any, codec: Codec, dev_pairs: Sequence[Pair], gold: DevGold,
                  guide: GuidedAlignment | None, *, device: torch.device,
                  say: Callable[[str], None]) -> dict[str, Any]:
    """The reading (layer, head, method, weights) alignment_reading records, every unit linked."""
    result = sweep(model, codec, [p.src for p in dev_pairs], [p.tgt for p in dev_pairs], gold.sure, gold.possible,
                   units=gold.units, device=device, batch_size=64)
    best, aer = result.best()
    default = result.aer(AlignOptions(tgt_units=gold.units))
    best_reading = {**_fields(replace(best, tgt_units=gold.units)), "dev_aer": aer, "default_dev_aer": default}
    if guide is None:
        say(f"alignment: the best reading on the dev gold is {best.describe(result.head_grid)} "
            f"(AER {100 * aer:.1f}%, the default reading {100 * default:.1f}%); heed align uses it")
        return best_reading
    trained = replace(guide.options, tgt_units=gold.units)
    trained_aer = corpus_aer(model, codec, dev_pairs, gold, device=device, options=trained) or 0.0
    # The evidence decides: the trained heads, unless another reading aligns the dev gold better
    # (`self` teaches the heads shift-att's links, which can be worse than the plain reading's). An
    # alignment layer is there to align: heed align reads it, and the line says how it compares.
    use_trained = guide.aligner or trained_aer <= aer + TRAINED_MARGIN
    what = "the alignment layer" if guide.aligner else f"the trained heads ({trained.describe(result.head_grid)})"
    say(f"alignment: {what} align{'s' if guide.aligner else ''} the dev gold at AER "
        f"{100 * trained_aer:.1f}% (the default reading {100 * default:.1f}%, the best of the sweep "
        f"{100 * aer:.1f}%: {best.describe(result.head_grid)}); heed align uses "
        + ("the alignment layer" if guide.aligner else "the trained heads" if use_trained else "the sweep's best"))
    if not use_trained:
        return best_reading
    return {**_fields(trained), "trained": True, "dev_aer": trained_aer, "default_dev_aer": default}


def _fields(options: AlignOptions) -> dict[str, Any]:
    """An AlignOptions as heed.json records it (explain.align_methods.recorded_options reads it back)."""
    head = list(options.head) if isinstance(options.head, tuple) else options.head
    return {"method": options.method, "layer": options.layer, "head": head, "weights": options.weights,
            "units": options.tgt_units, "join": options.join, "null_threshold": options.null_threshold}
