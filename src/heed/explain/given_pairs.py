"""What is read off given sentence pairs, the model reading each translation as its own output
(teacher forcing), over the model alone (model, codec, device; never heed.api's Translator): word
alignments (`align_pairs`) and the AER of every reading (`align_sweep`), how far two models'
attention is apart (`attention_gap_of`), every head of every layer (`attention_layers`),
attribution and its contrastive form (`attribute`, `contrast`), source shares (`source_shares`) and
the logit lens (`logit_lens`). heed.api.Translator's methods of the same names call these with its
model, codec and device, having decoded the model's own translations where none are given."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from heed.data.codec import Codec
from heed.data.corpus import normalize
from heed.data.units import Units, unit_count
from heed.data.vocab import BOS, SPECIALS
from heed.errors import HeedError
from heed.explain.align import Link
from heed.explain.align_methods import AlignOptions, check_selection
from heed.explain.attention_gap import AttentionGap, attention_gap
from heed.explain.forced import SweepResult, attention_shape, forced_attention, links_of, sweep
from heed.explain.pairs import Stoppable, Subject, check_texts, forced_pairs, known_target_ids, precision
from heed.nn.protocol import AttributableModel, ContributionModel, HeadsModel, SelfAttentionModel
from heed.results import MAP_PARTS, Alignment, HeadMaps, Labelled, ReadingResult

if TYPE_CHECKING:
    from heed.explain.attribution import Attribution, AttributionMethod, Contrast
    from heed.explain.contributions import Reading, SourceShare
    from heed.explain.logit_lens import LogitLens
    from heed.results import Translation

LENS_BATCH = 8  # sentences a logit-lens pass reads at once: each layer's logits are (batch, tgt_len, vocab)


def align_pairs(
    model: Any,
    codec: Codec,
    device: torch.device,
    src_texts: Sequence[str],
    tgt_texts: Sequence[str],
    *,
    options: AlignOptions | None = None,
    batch_size: int = 64,
    stop: Callable[[], bool] | None = None,
) -> list[Alignment]:
    """Word alignments of given translations: `tgt_texts[k]` is fed to the decoder as if it
    were the model's own output (teacher forcing, one pass per batch), and the attention of
    that pass, lifted to whitespace words, gives each target word's source word.

    `options` (heed.explain.align_methods.AlignOptions): the method (argmax, or shift-att), the layer
    and head (default: the model's alignment layer, the mean of its heads) and the target units
    (words, or characters). A layer or head of its own needs a PyTorch model, not an ensemble
    or an export. Sentences are batched longest source first and put back in input order. An
    empty source or target gives an alignment with no links without running the model."""
    options = options or AlignOptions()
    check_align_inputs(model, src_texts, tgt_texts, batch_size)
    heads = not options.default_attention
    layers, n_heads, default_layer = attention_shape(model) if heads else (1, 1, 0)
    try:
        check_selection(options, layers, n_heads)
    except ValueError as e:
        raise HeedError(str(e)) from None
    reader = model if stop is None else Stoppable(model, stop)
    out: list[Alignment | None] = [None] * len(src_texts)
    try:
        for k, pair in forced_attention(
            reader,
            codec,
            src_texts,
            tgt_texts,
            device=device,
            batch_size=batch_size,
            heads=heads,
            weights=options.weights,
            context=lambda: precision(model, device),
        ):
            src_words, tgt_words = normalize(src_texts[k]).split(), normalize(tgt_texts[k]).split()
            if pair is None:
                units = unit_count(tgt_texts[k], options.tgt_units)
                out[k] = Alignment(src_words, tgt_words, np.zeros((units, len(src_words)), np.float32), [])
                continue
            maps = pair.unit_maps(codec, tgt_texts[k], options.tgt_units)
            matrix, links = links_of(pair, maps, options, default_layer)
            out[k] = Alignment(src_words, tgt_words, matrix.astype(np.float32), links)
    except ValueError as e:  # a selection the model lacks, or tokens that do not spell their characters
        raise HeedError(str(e)) from None
    return [a for a in out if a is not None]


def align_sweep(
    model: Any,
    codec: Codec,
    device: torch.device,
    src_texts: Sequence[str],
    tgt_texts: Sequence[str],
    sure: Sequence[set[Link]],
    possible: Sequence[set[Link]],
    *,
    tgt_units: Units = "words",
    batch_size: int = 64,
) -> SweepResult:
    """AER against gold links (`sure[k]`, `possible[k]` for pair k) of every way to read an
    alignment off this model: argmax and shift-att, for every decoder layer and their mean,
    every head and their mean (heed.explain.forced.SweepResult), with the diagonal baseline. An
    ensemble or an exported model has one reading per method: its reported attention."""
    check_align_inputs(model, src_texts, tgt_texts, batch_size)
    if not len(sure) == len(possible) == len(src_texts):
        raise HeedError(f"{len(src_texts)} sentence pairs but {len(sure)} gold alignments; give one per pair")
    try:
        return sweep(
            model,
            codec,
            src_texts,
            tgt_texts,
            sure,
            possible,
            units=tgt_units,
            device=device,
            batch_size=batch_size,
            context=lambda: precision(model, device),
        )
    except ValueError as e:
        raise HeedError(str(e)) from None


def attention_gap_of(
    mine: Subject,
    other: Subject,
    src_texts: Sequence[str],
    tgt_texts: Sequence[str],
    *,
    batch_size: int = 64,
) -> AttentionGap:
    """How far `other`'s attention is from `mine`'s when both read `tgt_texts[k]` as their output
    for `src_texts[k]` (heed.explain.attention_gap): e.g. an int8 export's beside the float32 model
    it was exported from. Each side's reported attention (a Transformer's last decoder layer, heads
    averaged); the two must share tokenizers and vocabularies."""
    check_align_inputs(mine.model, src_texts, tgt_texts, batch_size)
    if not other.model.has_attention:
        raise HeedError("the other model has no attention to compare; use a model with attention")
    difference = mine.codec.difference(other.codec)
    if difference is not None:
        raise HeedError(
            f"the two models' {difference} differ; their attention can only be compared cell by cell "
            "over the same tokens (an export of the same model, another checkpoint of its run)"
        )
    try:
        return attention_gap(
            forced_matrices(*mine, src_texts, tgt_texts, batch_size),
            forced_matrices(*other, src_texts, tgt_texts, batch_size),
        )
    except ValueError as e:
        raise HeedError(str(e)) from None


def forced_matrices(
    model: Any, codec: Codec, device: torch.device, src_texts: Sequence[str], tgt_texts: Sequence[str], batch_size: int
) -> list[np.ndarray | None]:
    """Each pair's reported attention (tgt_len + 1, src_len) under teacher forcing, None for an
    empty side."""
    out: list[np.ndarray | None] = [None] * len(src_texts)
    for k, pair in forced_attention(
        model,
        codec,
        src_texts,
        tgt_texts,
        device=device,
        batch_size=batch_size,
        heads=False,
        context=lambda: precision(model, device),
    ):
        if pair is not None:
            out[k] = pair.attention[0, 0]
    return out


def attention_layers(
    model: Any,
    codec: Codec,
    device: torch.device,
    src_texts: Sequence[str],
    tgt_texts: Sequence[str | Sequence[str]],
    *,
    parts: Sequence[str] = ("cross",),
    batch_size: int = 64,
    max_src_len: int | None = None,
) -> list[HeadMaps]:
    """Every head of every layer while the model reads `tgt_texts[k]` (a text, or its tokens) as
    its output for `src_texts[k]` (teacher forcing): the cross-attention, and with `parts`
    naming "encoder" and/or "decoder" a Transformer's self-attention maps too (an RNN has none:
    None). A PyTorch model only (an ensemble or an export gives its averaged attention alone).
    Sources are cut to `max_src_len` tokens."""
    unknown = [p for p in parts if p not in MAP_PARTS]
    if unknown:
        raise HeedError(f"unknown attention part {unknown[0]!r}; choose from {', '.join(MAP_PARTS)}")
    if not isinstance(model, HeadsModel):
        raise HeedError(
            "this model gives only its averaged attention (an ensemble, an exported model, or a family without "
            "per-head maps); "
            "every layer and head needs a PyTorch model directory of a family with them"
        )
    if isinstance(src_texts, str) or isinstance(tgt_texts, str) or len(src_texts) != len(tgt_texts):
        raise HeedError("attention_layers() takes two lists of the same length: sources and their translations")
    pairs = forced_pairs(codec, src_texts, tgt_texts, max_src_len=max_src_len, empty="there is no attention to show")
    selfs = bool({"encoder", "decoder"} & set(parts)) and isinstance(model, SelfAttentionModel)
    out: list[HeadMaps] = []
    with torch.inference_mode(), precision(model, device):
        for group, batch in pairs.batches(model, device, batch_size):
            if selfs:
                maps = model.attention_maps(batch.src, batch.src_lengths, batch.tgt_in)  # type: ignore[attr-defined]
                cross, encoder, decoder = (
                    m.transpose(1, 2).float().cpu().numpy() for m in (maps.cross, maps.encoder, maps.decoder)
                )  # (L, H, B, ., .)
            else:
                cross = model.attention_heads(batch.src, batch.src_lengths, batch.tgt_in).float().cpu().numpy()
                encoder = decoder = None
            for row, k in enumerate(group):
                s, t = pairs.sizes(k)
                out.append(HeadMaps(
                    pairs.src_tokens[k],
                    pairs.tgt_tokens[k],
                    cross[:, :, row, :t, :s],
                    encoder[:, :, row, :s, :s] if encoder is not None and "encoder" in parts else None,
                    decoder[:, :, row, :t, :t] if decoder is not None and "decoder" in parts else None,
                ))
    return out


def attribute(
    model: Any,
    codec: Codec,
    device: torch.device,
    src_texts: Sequence[str],
    tgt_texts: Sequence[str | Sequence[str]],
    *,
    method: AttributionMethod = "integrated_gradients",
    steps: int = 50,
    stop: Callable[[], bool] | None = None,
    max_src_len: int | None = None,
) -> list[Attribution]:
    """Attribution of every output token to the source tokens and the output before it
    (heed.explain.attribution; Captum, `pip install 'heed-nmt[explain]'`), beside the attention.

    `tgt_texts`: the translations to explain (texts, or their tokens), read as the model's own
    output (teacher forcing). `method`: "integrated_gradients" (`steps` Gauss-Legendre points from
    the zero-embedding baseline; `Attribution.delta` is its completeness gap) or "grad_x_input".
    One backward pass per output token (times `steps` for integrated gradients), sentence by
    sentence, in float32: an exported model, an ensemble and a bf16 model are refused. `stop`:
    asked before every pass of the model (an output token's batch of integration points is one);
    once it is true the work raises Abandoned (the server stops a request past its time limit)."""
    from heed.explain.attribution import Attribution, attribute_ids

    if isinstance(src_texts, str) or isinstance(tgt_texts, str):
        raise TypeError("attribute() takes lists of sentences; wrap a single one in a list")
    check_attribution(model, method, steps)
    pairs = forced_pairs(codec, src_texts, tgt_texts, max_src_len=max_src_len, empty="there is nothing to attribute to")
    reader = model if stop is None else Stoppable(model, stop)
    out = []
    for src, tokens, (src_ids, tgt_ids) in zip(pairs.src_tokens, pairs.tgt_tokens, pairs.examples):
        source, prefix, log_probs, delta, attention = attribute_ids(
            reader, src_ids, tgt_ids, method=method, steps=steps, device=device
        )
        out.append(
            Attribution(
                src,
                tokens,
                [SPECIALS[BOS], *tokens],
                method,
                steps if method == "integrated_gradients" else None,
                source,
                prefix,
                attention,
                log_probs,
                delta,
            )
        )
    return out


def check_attribution(model: Any, method: str, steps: int) -> None:
    """HeedError for an attribution this model cannot run: an unknown method, steps out of range, a
    model without gradients (an export, an ensemble), or bf16 weights."""
    from heed.explain.attribution import METHODS
    from heed.plumbing.limits import MAX_ATTRIBUTION_STEPS

    if method not in METHODS:
        raise HeedError(f"unknown attribution method {method!r}; choose one of {', '.join(METHODS)}")
    if not 1 <= steps <= MAX_ATTRIBUTION_STEPS:
        raise HeedError(f"steps must be 1 to {MAX_ATTRIBUTION_STEPS}, got {steps}")
    if not isinstance(model, AttributableModel):
        raise HeedError(
            "attribution needs gradients, which an exported model or an ensemble does not give; "
            "attribute with a PyTorch model directory"
        )
    if any(p.dtype == torch.bfloat16 for p in model.parameters()):  # type: ignore[attr-defined]
        raise HeedError("attribution runs in float32; load the model without bf16")


def check_given(src_texts: Sequence[str], tgt_texts: Sequence[Any] | None) -> None:
    """A TypeError for a single text where a list is due, a HeedError for a text no sentence can
    hold or for translations not one per source (None: the model's own, to be decoded)."""
    if isinstance(src_texts, str) or isinstance(tgt_texts, str):
        raise TypeError("this takes lists of sentences; wrap a single one in a list")
    check_texts(src_texts, "src_texts")
    if tgt_texts is not None and len(tgt_texts) != len(src_texts):
        raise HeedError(
            f"{len(src_texts)} source sentences but {len(tgt_texts)} translations; give one translation per source"
        )


def needs_contributions(model: Any, what: str) -> None:
    """A HeedError saying `what` needs a ContributionModel, unless `model` is one."""
    if not isinstance(model, ContributionModel):
        raise HeedError(f"{what} reads every attention block of the encoder and the decoder, which a Transformer "
                        "model directory gives (an RNN, an ensemble or an exported model does not)")


def check_source_share(model: Any, reading: str) -> None:
    """A HeedError for a reading source_shares does not know, or a model it cannot read."""
    from heed.explain.contributions import READINGS

    if reading not in READINGS:
        raise HeedError(f"unknown reading {reading!r}; choose one of {', '.join(READINGS)}")
    needs_contributions(model, "the source share")


def source_shares(
    model: Any,
    codec: Codec,
    device: torch.device,
    src_texts: Sequence[str],
    tgt_texts: Sequence[str | Sequence[str]],
    *,
    reading: Reading = "alti",
    batch_size: int = 64,
    max_src_len: int | None = None,
) -> list[SourceShare]:
    """Each prediction's source share against its target-prefix share at the last decoder layer
    (heed.explain.contributions: ALTI+, or rollout), while the model reads `tgt_texts[k]` (a text,
    or its tokens) as its output for `src_texts[k]`. A low share marks a token produced mostly from
    the output so far rather than from the source (Xu et al. 2023 flag hallucinations so). A
    Transformer model directory only."""
    from heed.explain.contributions import SourceShare, contributions

    check_source_share(model, reading)
    check_given(src_texts, tgt_texts)
    pairs = forced_pairs(codec, src_texts, tgt_texts, max_src_len=max_src_len, empty="there is no source to share")
    out: list[SourceShare] = []
    with torch.inference_mode(), precision(model, device):
        for group, batch in pairs.batches(model, device, batch_size):
            shares = contributions(model, batch.src, batch.src_lengths, batch.tgt_in, reading=reading)
            source, prefix = shares.source[-1].cpu().numpy(), shares.target[-1].cpu().numpy()
            for row, k in enumerate(group):
                s, t = pairs.sizes(k)
                out.append(SourceShare(pairs.src_tokens[k], list(pairs.tgt_tokens[k]), source[row, :t, :s].sum(-1),
                                       source[row, :t, :s], prefix[row, :t, :t], reading))
    return out


def nbest_source_shares(model: Any, codec: Codec, device: torch.device, sources: Sequence[str],
                        nbests: Sequence[Sequence[Translation]], *,
                        max_src_len: int | None = None) -> list[list[SourceShare | None]]:
    """Each n-best list's hypotheses' source shares (source_shares, one teacher-forced pass over
    every hypothesis), per source; None for every hypothesis of a blank source (nothing to share)."""
    pairs = [(k, n) for k, nbest in enumerate(nbests) for n in range(len(nbest)) if sources[k].strip()]
    shares = source_shares(model, codec, device, [sources[k] for k, _ in pairs],
                           [nbests[k][n].tokens for k, n in pairs], max_src_len=max_src_len)
    out: list[list[SourceShare | None]] = [[None] * len(nbest) for nbest in nbests]
    for (k, n), share in zip(pairs, shares):
        out[k][n] = share
    return out


def check_lens(model: Any, top: int) -> None:
    """A HeedError for a `top` out of range, or a model the logit lens cannot read."""
    from heed.plumbing.limits import MAX_LENS_TOP

    if not 1 <= top <= MAX_LENS_TOP:
        raise HeedError(f"top must be 1 to {MAX_LENS_TOP}, got {top}")
    needs_contributions(model, "the logit lens")


def logit_lens(
    model: Any,
    codec: Codec,
    device: torch.device,
    src_texts: Sequence[str],
    tgt_texts: Sequence[str | Sequence[str]],
    *,
    top: int = 5,
    max_src_len: int | None = None,
) -> list[LogitLens]:
    """What each decoder layer would predict were it the last, at every output position, while the
    model reads `tgt_texts[k]` (a text, or its tokens) as its output (heed.explain.logit_lens). A
    Transformer model directory only."""
    from heed.explain.logit_lens import LogitLens, lens

    check_lens(model, top)
    check_given(src_texts, tgt_texts)
    pairs = forced_pairs(codec, src_texts, tgt_texts, max_src_len=max_src_len, empty="there is nothing to read")
    vocab = codec.tgt_vocab
    out: list[LogitLens] = []
    with torch.inference_mode(), precision(model, device):
        for group, batch in pairs.batches(model, device, LENS_BATCH):
            ids, probs, gold, ranks = (x.cpu().numpy() for x in lens(
                model, batch.src, batch.src_lengths, batch.tgt_in, batch.tgt_out, top=min(top, len(vocab))))
            for row, k in enumerate(group):
                _, t = pairs.sizes(k)
                words = [[[vocab.lookup(int(i)) for i in ids[layer, row, j]] for j in range(t)]
                         for layer in range(len(ids))]
                out.append(LogitLens(pairs.src_tokens[k], list(pairs.tgt_tokens[k]), words, probs[:, row, :t],
                                     gold[:, row, :t], ranks[:, row, :t]))
    return out


def contrast(
    model: Any,
    codec: Codec,
    device: torch.device,
    src_texts: Sequence[str],
    contrasts: Sequence[str | Sequence[str]],
    outputs: Sequence[str | Sequence[str]],
    *,
    method: AttributionMethod = "integrated_gradients",
    steps: int = 50,
    max_src_len: int | None = None,
) -> list[Contrast]:
    """Why the model gives `outputs[k]` and not `contrasts[k]` for `src_texts[k]`: each source
    token's attribution to the difference of the two outputs' log-probabilities
    (heed.explain.attribution.Contrast; Captum). A PyTorch model directory in float32; the
    contrast must be spelt in the model's target vocabulary."""
    from heed.explain.attribution import Contrast, contrast_ids

    check_contrast(model, src_texts, contrasts, method, steps)
    check_given(src_texts, outputs)
    pairs = forced_pairs(codec, src_texts, outputs, max_src_len=max_src_len, empty="there is nothing to attribute to")
    contrast_tokens = [codec.tgt_tokens(c) if isinstance(c, str) else list(c) for c in contrasts]
    for k, text in enumerate(contrasts):
        if isinstance(text, str) and not text.strip():
            raise HeedError(f"contrasts[{k}] is empty: give the other output to contrast with")
    contrast_ids_ = [known_target_ids(codec, t, s, f"contrasts[{k}]")
                     for k, (s, t) in enumerate(zip(pairs.src_tokens, contrast_tokens))]
    out = []
    for k, (src_ids, output_ids) in enumerate(pairs.examples):
        source, lp_out, lp_contrast, delta = contrast_ids(model, src_ids, output_ids, contrast_ids_[k],
                                                          method=method, steps=steps, device=device)
        out.append(Contrast(pairs.src_tokens[k], list(pairs.tgt_tokens[k]), contrast_tokens[k], method,
                            steps if method == "integrated_gradients" else None, source, lp_out, lp_contrast, delta))
    return out


def check_contrast(model: Any, src_texts: Sequence[str], contrasts: Sequence[Any], method: str, steps: int) -> None:
    """A HeedError for a contrast this model cannot run, or contrasts not one per source."""
    check_attribution(model, method, steps)
    if isinstance(contrasts, str) or len(contrasts) != len(src_texts):
        raise HeedError(f"{len(src_texts)} source sentences but {1 if isinstance(contrasts, str) else len(contrasts)} "
                        "contrasts; give one alternative output per source")


def check_align_inputs(model: Any, src_texts: Sequence[str], tgt_texts: Sequence[str], batch_size: int) -> None:
    if isinstance(src_texts, str) or isinstance(tgt_texts, str):
        raise TypeError("align() takes lists of sentences; wrap a single one in a list")
    if len(src_texts) != len(tgt_texts):
        raise HeedError(
            f"{len(src_texts)} source sentences but {len(tgt_texts)} translations; give one translation per source"
        )
    check_texts(src_texts, "src_texts")
    check_texts(tgt_texts, "tgt_texts")
    if not model.has_attention:
        raise HeedError("this model has no attention, so it has no alignments; use a model with attention")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")


# ------------------------------------------------------------- as readings (heed.explain.readings)
# Each wraps its function above into ReadingResults: run(model, codec, device, src_texts, tgt_texts,
# options, *, max_src_len) -> list[ReadingResult].


def heads_reading(model: Any, codec: Codec, device: torch.device, src_texts: Sequence[str],
                  tgt_texts: Sequence[str | Sequence[str]], options: Any, *,
                  max_src_len: int | None = None) -> list[ReadingResult]:
    """attention_layers' cross-attention: (layer, head, target, source)."""
    return [ReadingResult("heads", m.src_tokens, m.tgt_tokens, ("layer", "head", "target", "source"), m.cross)
            for m in attention_layers(model, codec, device, src_texts, tgt_texts, max_src_len=max_src_len)]


def source_share_reading(model: Any, codec: Codec, device: torch.device, src_texts: Sequence[str],
                         tgt_texts: Sequence[str | Sequence[str]], options: Any, *,
                         max_src_len: int | None = None) -> list[ReadingResult]:
    """source_shares: each source token's share of each prediction (target, source); extras
    per_token (target,) and prefix (target, prefix)."""
    shares = source_shares(model, codec, device, src_texts, tgt_texts, reading=options.method, max_src_len=max_src_len)
    return [ReadingResult("source_share", s.src_tokens, s.tgt_tokens, ("target", "source"), s.source,
                          {"per_token": Labelled(("target",), s.per_token),
                           "prefix": Labelled(("target", "prefix"), s.prefix)}) for s in shares]


def logit_lens_reading(model: Any, codec: Codec, device: torch.device, src_texts: Sequence[str],
                       tgt_texts: Sequence[str | Sequence[str]], options: Any, *,
                       max_src_len: int | None = None) -> list[ReadingResult]:
    """logit_lens: the probability each layer gives the real token (layer, target); extras
    top_tokens and top_probs (layer, target, top), target_ranks (layer, target)."""
    return [ReadingResult("logit_lens", r.src_tokens, r.tgt_tokens, ("layer", "target"), r.target_probs,
                          {"top_tokens": Labelled(("layer", "target", "top"), np.array(r.top_tokens, dtype=object)),
                           "top_probs": Labelled(("layer", "target", "top"), r.top_probs),
                           "target_ranks": Labelled(("layer", "target"), r.target_ranks)})
            for r in logit_lens(model, codec, device, src_texts, tgt_texts, top=options.top, max_src_len=max_src_len)]


def attribution_reading(model: Any, codec: Codec, device: torch.device, src_texts: Sequence[str],
                        tgt_texts: Sequence[str | Sequence[str]], options: Any, *,
                        max_src_len: int | None = None) -> list[ReadingResult]:
    """attribute: each source token's attribution to each output token's log-probability
    (target, source); extras prefix (target, prefix), log_probs (target,), and delta (target,) and
    attention (target, source) where there are."""
    out = []
    for a in attribute(model, codec, device, src_texts, tgt_texts, method=options.method, steps=options.steps,
                       max_src_len=max_src_len):
        extras = {"prefix": Labelled(("target", "prefix"), a.prefix), "log_probs": Labelled(("target",), a.log_probs)}
        if a.delta is not None:
            extras["delta"] = Labelled(("target",), a.delta)
        if a.attention is not None:
            extras["attention"] = Labelled(("target", "source"), a.attention)
        out.append(ReadingResult("attribution", a.src_tokens, a.tgt_tokens, ("target", "source"), a.source, extras))
    return out
