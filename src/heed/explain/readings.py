"""The reading registry: every reading of a model that the command line (`heed explain READING`),
the server (`POST /v1/explain/{reading}`) and Python (`Translator.explain`) offer, each generated
from its entry here alone.

A reading is a module of heed.explain with a function

    run(model, codec, device, src_texts, tgt_texts, options, *, max_src_len=None) -> list[ReadingResult]

over the model alone (never heed.api's Translator): one heed.results.ReadingResult per pair, the
model reading `tgt_texts[k]` (a text, or its tokens) as its output for `src_texts[k]`. Its entry
names it, the protocol of heed.nn.protocol the model must be (the one refusal, `refusal`, says so),
its options as one frozen pydantic model (the flags, the request fields and the keywords), and what
a pair costs (heed.plumbing.limits.PairCost, which the server bounds). A new reading is its module
and one `register(Reading(...))` line. Torch-free to import: runs are named "module:function" and
loaded when first run; protocols are named and looked up in heed.nn.protocol when a model is checked.
"""
from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from heed.errors import HeedError
from heed.plumbing.limits import (
    ALL_PARTS,
    MAX_ATTRIBUTION_STEPS,
    MAX_LENS_TOP,
    PairCost,
    attention_weights,
    attribution_work,
    forced_work,
    lens_work,
)

if TYPE_CHECKING:
    from heed.results import ReadingResult


class Options(BaseModel):
    """A reading's options: frozen (a value that travels whole, hashable so the server can batch by
    it), unknown names refused, numbers finite. Each field's description is its flag's help.

    `per_pair` names the fields that hold one value per sentence pair (contrast's other outputs):
    a tuple as long as the sources, cut with them wherever the pairs are read a part at a time
    (`for_pairs`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    per_pair: ClassVar[tuple[str, ...]] = ()

    def for_pairs(self, pairs: slice) -> Options:
        """These options for the sentence pairs `pairs` of those they were given for."""
        if not self.per_pair:
            return self
        return self.model_copy(update={name: getattr(self, name)[pairs] for name in self.per_pair})


class NoOptions(Options):
    """A reading that takes no options."""


@dataclass(frozen=True)
class PairSize:
    """One pair as a cost function sees it: tokens each side without </s>, and the model's
    (decoder layers, heads per layer); (1, 1) for a model without heads of its own."""

    src_len: int
    tgt_len: int
    layers: int
    heads: int


@dataclass(frozen=True)
class Reading:
    """One reading (module doc).

    name:    its name: the command `heed explain NAME`, the route /v1/explain/NAME
    needs:   the heed.nn.protocol protocol the model must be, by name ("HeadsModel")
    options: its Options model
    run:     its function, or "module:function" to import when first run
    cost:    (PairSize, options) -> PairCost of one pair
    summary: one line: what it gives (the command's and the route's help)
    """

    name: str
    needs: str
    options: type[Options]
    run: Callable[..., list[ReadingResult]] | str
    cost: Callable[[PairSize, Any], PairCost]
    summary: str

    def protocol(self) -> type:
        import heed.nn.protocol

        return getattr(heed.nn.protocol, self.needs)

    def runner(self) -> Callable[..., list[ReadingResult]]:
        if callable(self.run):
            return self.run
        module, _, function = self.run.partition(":")
        return getattr(importlib.import_module(module), function)

    def a_model(self) -> str:
        """The protocol it needs with its article: "a HeadsModel", "an AttributableModel"."""
        return f"{'an' if self.needs[:1] in 'AEIOU' else 'a'} {self.needs}"

    def refusal(self, model: Any) -> str | None:
        """The one line a model that is not what this reading needs is refused with; None for one that is."""
        protocol = self.protocol()
        if isinstance(model, protocol):
            return None
        first = re.split(r"(?<! al)\. |: ", " ".join((protocol.__doc__ or self.needs).split()))[0].rstrip(".")
        what = first[:1].lower() + first[1:]
        return (f"the reading {self.name!r} needs {self.a_model()} ({what}), and this model "
                f"({type(model).__name__}) is not one")

    def parse(self, options: Options | Mapping[str, Any] | None) -> Options:
        """`options` as this reading's Options; a HeedError naming the option for a wrong one."""
        if isinstance(options, self.options):
            return options
        try:
            return self.options.model_validate(dict(options or {}))
        except ValidationError as e:
            error = e.errors(include_url=False)[0]
            where = ".".join(str(p) for p in error["loc"]) or "options"
            raise HeedError(f"{self.name}: {where}: {error['msg'].removeprefix('Value error, ')}") from None


READINGS: dict[str, Reading] = {}


def register(reading: Reading) -> Reading:
    """Add `reading` to the registry (its name must be new); returns it."""
    if reading.name in READINGS:
        raise ValueError(f"a reading named {reading.name!r} is registered already")
    if not reading.name.replace("_", "").isalnum() or not reading.name.islower():
        raise ValueError(f"a reading's name is lower-case letters, digits and _: {reading.name!r}")
    READINGS[reading.name] = reading
    return reading


def unregister(name: str) -> None:
    READINGS.pop(name, None)


def get(name: str) -> Reading:
    """The reading named `name`; a HeedError listing the readings for another name."""
    if name not in READINGS:
        raise HeedError(f"no reading named {name!r}; readings: {', '.join(READINGS)}")
    return READINGS[name]


def check(name: str, model: Any) -> Reading:
    """The reading `name`, after refusing (a HeedError, one line) a model that is not what it needs."""
    reading = get(name)
    refused = reading.refusal(model)
    if refused is not None:
        raise HeedError(refused)
    return reading


def check_per_pair(options: Options, pairs: int) -> None:
    """A HeedError naming a per-pair option (Options.per_pair) that does not hold one value per pair."""
    for field in options.per_pair:
        given = len(getattr(options, field))
        if given != pairs:
            raise HeedError(f"{pairs} source sentence{'s' if pairs != 1 else ''} but {given} {field}; give one per "
                            "source")


def explain(name: str, model: Any, codec: Any, device: Any, src_texts: Sequence[str],
            tgt_texts: Sequence[str | Sequence[str]] | None, options: Options | Mapping[str, Any] | None = None, *,
            max_src_len: int | None = None, stop: Callable[[], bool] | None = None) -> list[ReadingResult]:
    """Run the reading `name` on the model: one ReadingResult per pair. `tgt_texts` are the
    translations to read (heed.api.Translator.explain reads the model's own where they are None);
    `stop`: asked before every pass, Abandoned once it is true."""
    reading = check(name, model)
    parsed = reading.parse(options)
    if tgt_texts is None:
        raise HeedError(f"{name} reads given translations: give tgt_texts (Translator.explain reads the model's own)")
    check_per_pair(parsed, len(src_texts))
    if stop is not None:
        from heed.explain.pairs import Stoppable

        model = Stoppable(model, stop)
    return reading.runner()(model, codec, device, src_texts, tgt_texts, parsed, max_src_len=max_src_len)


# ------------------------------------------------------------------------------- the readings


class HeadsOptions(Options):
    self_attention: tuple[Literal["encoder", "decoder"], ...] = Field(
        (), description="a Transformer's self-attention maps besides the cross-attention: encoder, decoder "
                        "(extras of the same names)")


class SourceShareOptions(Options):
    method: Literal["alti", "rollout"] = Field("alti", description="ALTI+ (Ferrando et al. 2022b) or attention "
                                                                    "rollout (Abnar & Zuidema 2020)")


class LensOptions(Options):
    top: int = Field(5, ge=1, le=MAX_LENS_TOP, description=f"tokens kept per layer and position (1 to {MAX_LENS_TOP})")


class AttributionOptions(Options):
    method: Literal["integrated_gradients", "grad_x_input"] = Field(
        "integrated_gradients", description="integrated gradients (from the zero embedding) or gradient x input")
    steps: int = Field(50, ge=1, le=MAX_ATTRIBUTION_STEPS, description="integrated gradients' integration points "
                                                                       f"(1 to {MAX_ATTRIBUTION_STEPS})")


class ContrastOptions(AttributionOptions):
    per_pair: ClassVar[tuple[str, ...]] = ("contrasts",)
    contrasts: tuple[str | tuple[str, ...], ...] = Field(
        ..., description="per source, the other output to contrast with: a text (or its tokens)")


def _maps_cost(size: PairSize, options: Any) -> PairCost:
    """A teacher-forced pass; every head's cross-attention read and returned (and the
    self-attention maps `options.self_attention` asks for, heads')."""
    parts = ("cross", *getattr(options, "self_attention", ()))
    weights = attention_weights(size.src_len, size.tgt_len, size.layers, size.heads, parts)
    return PairCost(forced_work(size.tgt_len), weights, weights + size.src_len + size.tgt_len)


def _contributions_cost(size: PairSize, options: Any, *, layers: int | None = None) -> PairCost:
    """A teacher-forced pass weighing every attention of every layer and head; the answer: the
    source and prefix shares of `layers` decoder layers (default: all)."""
    s, t = size.src_len + 1, size.tgt_len + 1
    shown = size.layers if layers is None else layers
    return PairCost(forced_work(size.tgt_len), attention_weights(size.src_len, size.tgt_len, size.layers, size.heads,
                                                                 ALL_PARTS),
                    shown * t * (s + t + 1) + size.src_len + size.tgt_len)


def _lens_cost(size: PairSize, options: Any) -> PairCost:
    t = size.tgt_len + 1
    return PairCost(lens_work(size.tgt_len, size.layers), 0,
                    size.src_len + size.tgt_len + size.layers * t * (2 * options.top + 2))


def _attribution_cost(size: PairSize, options: Any) -> PairCost:
    points = options.steps if options.method == "integrated_gradients" else 1
    s, t = size.src_len, size.tgt_len
    return PairCost(attribution_work(t, points), 0, s + 2 * t + (t + 1) * (2 * (s + 1) + (t + 1) + 4))


def _contrast_cost(size: PairSize, options: Any) -> PairCost:
    """Both outputs read at every point, forward and backward: the other output counted at its
    longest, a token per character (a token spells at least one)."""
    points = options.steps if options.method == "integrated_gradients" else 1
    other = max((len(c) for c in options.contrasts), default=0)
    return PairCost(points * (forced_work(size.tgt_len) + forced_work(other)), 0, size.src_len + other + 8)


def _source_share_cost(size: PairSize, options: Any) -> PairCost:
    return _contributions_cost(size, options, layers=1)


register(Reading("heads", "HeadsModel", HeadsOptions, "heed.explain.heads:heads", _maps_cost,
                 "every head of every decoder layer's attention over the source"))
register(Reading("value_norms", "ValueNormModel", NoOptions, "heed.explain.heads:value_norms", _maps_cost,
                 "every head's attention weighed by the norm of what each source token adds (Kobayashi et al. 2020)"))
register(Reading("rollout", "ContributionModel", NoOptions, "heed.explain.contributions:rollout", _contributions_cost,
                 "each source token's share of each prediction by attention rollout, per decoder layer"))
register(Reading("alti", "ContributionModel", NoOptions, "heed.explain.contributions:alti", _contributions_cost,
                 "each source token's share of each prediction by ALTI+, per decoder layer"))
register(Reading("source_share", "ContributionModel", SourceShareOptions, "heed.explain.source_share:source_share",
                 _source_share_cost, "each prediction's source share at the last decoder layer, and each source "
                                     "token's part in it"))
register(Reading("logit_lens", "ContributionModel", LensOptions, "heed.explain.logit_lens:logit_lens", _lens_cost,
                 "each decoder layer read through the output layer: the real token's probability, the top tokens"))
register(Reading("attribution", "AttributableModel", AttributionOptions, "heed.explain.attribution:attribution",
                 _attribution_cost, "each source token's attribution to each output token's log-probability (Captum)"))
register(Reading("contrast", "AttributableModel", ContrastOptions, "heed.explain.contrast:contrast", _contrast_cost,
                 "why this output and not another: each source token's attribution to the difference of their "
                 "log-probabilities (Captum)"))

__all__ = ["READINGS", "AttributionOptions", "ContrastOptions", "HeadsOptions", "LensOptions", "NoOptions", "Options",
           "PairSize", "Reading", "SourceShareOptions", "check", "check_per_pair", "explain", "get", "register",
           "unregister"]
