"""The JSON shapes of the server's API, as pydantic models: requests are validated by them and
responses documented by them in the OpenAPI schema (`/docs`, `/openapi.json`).

The decoding options of a translate request are built from `heed.search.DecodeConfig`, the one
home of their defaults and limits: every field optional, None = the model's own setting.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, create_model

from heed.decode_config import DecodeConfig
from heed.plumbing.limits import MAX_ATTRIBUTION_STEPS, MAX_LENS_TOP


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _optional_decode_fields() -> dict[str, Any]:
    """Every DecodeConfig field as an optional request field with the same limits."""
    fields: dict[str, Any] = {}
    for name, info in DecodeConfig.model_fields.items():
        # the field's type with its constraints (Annotated[type, *metadata]), the tuple spelt out for Python 3.10
        typed = (info.annotation, *info.metadata)
        annotation = Annotated[typed] if info.metadata else info.annotation
        # Optional[...], not `| None`: an annotation built at run time from a field's type, whichever
        # typing form that is (`|` is defined on classes, not on every form typing has)
        fields[name] = (Optional[annotation],  # noqa: UP045
                        Field(None, description=(info.description or name) + " (default: the model's decode config)"))
    return fields


class _Pair(_Strict):
    src_lang: str | None = Field(None, description="a many-language model's source language (an imported M2M-100 "
                                                      "or NLLB model's code: fr, fra_Latn; default: the model's)")
    tgt_lang: str | None = Field(None, description="a many-language model's target language (default: the "
                                                      "model's)")


def _decode_options() -> Any:
    """The model of every decode option, made at run time from DecodeConfig (so to a type checker
    it is Any: it cannot know the fields)."""
    return create_model("DecodeOptions", __base__=_Pair, **_optional_decode_fields())


DecodeOptions = _decode_options()
DECODE_FIELDS = tuple(DecodeConfig.model_fields)


class TranslateRequest(DecodeOptions):  # type: ignore[misc, valid-type]  # a base made at run time
    """Sentences to translate, with any decoding option."""

    model: str | None = Field(None, description="a loaded model's name (GET /v1/models); may be left out "
                                                   "when one model is loaded")
    sentences: list[str] = Field(..., description="source sentences, non-blank, at most --max-chars each "
                                                  "and --max-sentences in all")
    replace_unk: bool = Field(False, description="replace each <unk> output token by the source token it "
                                                 "attended to most")
    prefix: list[str | list[str] | None] | None = Field(
        None, description="per sentence, the output's forced start: a target text or a list of target tokens "
                          "(null: none); the search continues after it")
    attention: bool = Field(True, description="return each hypothesis' attention matrix and word alignment")
    trace: bool = Field(False, description="also return each step's top tokens (`steps`) and, for beam "
                                           "search, the search tree (`beam`)")
    alternatives: int = Field(5, ge=1, le=50, description="with trace: top tokens per output step")
    intervention: Literal["uniform", "permute", "drop_top"] | None = Field(
        None, description="decode with every attention over the source replaced: uniform weights, the weights "
                          "permuted among the source tokens, or the top-weighted token dropped (heed faithfulness); "
                          "a PyTorch model only")
    intervention_seed: int = Field(0, ge=0, description="with intervention permute: the seed of the orders")
    explain: list[Literal["source_share"]] = Field(
        [], description="source_share: each hypothesis' ALTI+ source share, per token and for the sentence (how much "
                        "of each prediction came from the source rather than the output so far; a Transformer model "
                        "directory; one teacher-forced pass per hypothesis)")


class AlignRequest(_Pair):
    """Given translations to align with their sources (forced decoding), read as heed align reads them."""

    model: str | None = None
    sources: list[str]
    targets: list[str]
    method: Literal["argmax", "shift"] = Field("argmax", description="argmax: link each target word by the step "
                                               "that predicts it; shift: by the step that reads it (shift-att)")
    weights: Literal["attention", "value_norm", "rollout", "alti", "alignment_layer"] = Field(
        "attention", description="the attention as it is, weighed by value norms, rolled out through the layers, or "
                                 "ALTI+ contributions (all but attention: a Transformer model directory), or the "
                                 "weights of the model's alignment layer (model.alignment_layer; the default for a "
                                 "model that has one)")
    layer: Annotated[int, Field(ge=0)] | Literal["mean"] | None = Field(
        None, description="the decoder layer read (default: the last), or mean")
    tgt_units: Literal["words", "chars"] = Field("words", description="target positions: whitespace words, or "
                                                 "characters (spaces left out)")
    join: Literal["sum", "max"] = Field("sum", description="how a source word's pieces join: summed, or their largest")
    null_threshold: float = Field(0.0, ge=0.0, le=1.0, allow_inf_nan=False,
                                  description="leave a target unit unlinked when its best source word holds less than "
                                              "this share of its row's weight on the source (null links; 0 links "
                                              "every unit)")
    aligner: Literal["model", "priors", "both"] = Field(
        "model", description="whose links: the model's reading, eflomal on these pairs alone with the statistical "
                             "priors the model directory records (heed data priors), or both joined (the attention "
                             "returned is the model's either way)")
    one_way: bool = Field(False, description="read this model alone, even where its directory records the other "
                                             "direction (heed train --both-directions): by default the links of a "
                                             "model one of a pair are its own joined with its reverse's, as heed "
                                             "align does (with aligner model and tgt_units words)")


class LensRequest(_Pair):
    """The logit lens: each decoder layer read through the output layer (a Transformer model directory)."""

    model: str | None = None
    sources: list[str]
    targets: list[str | list[str]] = Field(description="per source, a translation: a text or its tokens")
    top: int = Field(5, ge=1, le=MAX_LENS_TOP, description="tokens per layer and position")


class LensOut(BaseModel):
    src_tokens: list[str]
    tgt_tokens: list[str]
    top_tokens: list[list[list[str]]] = Field(description="[layer][row] the likeliest tokens, rows: tgt_tokens, </s>")
    top_probs: list[list[list[float]]]
    target_probs: list[list[float]] = Field(description="(layers, len(tgt_tokens) + 1) the real token's probability")
    target_ranks: list[list[int]]


class LensResponse(BaseModel):
    model: str
    results: list[LensOut]


class AttributeRequest(_Pair):
    """Sentences whose outputs to attribute to their inputs (Captum; heed[explain] on the server)."""

    model: str | None = None
    sentences: list[str]
    targets: list[str | list[str]] | None = Field(
        None, description="translations to explain, one per sentence, as texts or tokens (default: the model's own)")
    method: Literal["integrated_gradients", "grad_x_input"] = "integrated_gradients"
    steps: int = Field(50, ge=1, le=MAX_ATTRIBUTION_STEPS, description="integrated gradients' integration points")


class AttributionOut(BaseModel):
    src_tokens: list[str]
    tgt_tokens: list[str]
    prefix_tokens: list[str]
    method: str
    steps: int | None
    baseline: str
    source: list[list[float]] = Field(description="(len(tgt_tokens) + 1) x (len(src_tokens) + 1), </s> last")
    prefix: list[list[float]] = Field(description="(len(tgt_tokens) + 1) x len(prefix_tokens)")
    attention: list[list[float]] | None
    log_probs: list[float]
    delta: list[float] | None = Field(description="integrated gradients' completeness gap per output token")
    agreement: list[float] | None = Field(description="per output token, Spearman's rank correlation of "
                                                         "attention and |attribution| over the source")


class AttributeResponse(BaseModel):
    model: str
    attributions: list[AttributionOut]


class HeadsRequest(_Pair):
    """Every head of every layer while the model reads given translations (teacher forcing)."""

    model: str | None = None
    sources: list[str]
    targets: list[str | list[str]] = Field(description="per source, a translation: a text or its tokens")
    parts: list[Literal["cross", "encoder", "decoder"]] = Field(["cross"], description="which maps; a "
                                                                "Transformer's self-attention on request")


class HeadMapsOut(BaseModel):
    src_tokens: list[str]
    tgt_tokens: list[str]
    cross: list[list[list[list[float]]]] = Field(description="(layers, heads, len(tgt_tokens) + 1, "
                                                             "len(src_tokens) + 1)")
    encoder: list[list[list[list[float]]]] | None = None
    decoder: list[list[list[list[float]]]] | None = None


class HeadsResponse(BaseModel):
    model: str
    results: list[HeadMapsOut]


class WordAlignment(BaseModel):
    src_words: list[str]
    tgt_words: list[str]
    links: list[tuple[int, int]] = Field(description="(source word, target word) pairs, Pharaoh order")


class SourceShareOut(BaseModel):
    sentence: float = Field(description="the mean of per_token")
    per_token: list[float] = Field(description="each prediction's source share: tokens, then </s>")


class HypothesisOut(BaseModel):
    text: str
    tokens: list[str]
    score: float | None = Field(description="the ranking score: log-probability after length/coverage "
                                               "penalties; null where the constraints (min_len, n-gram blocking) "
                                               "left no allowed token, so the output was cut")
    log_prob: float | None
    attention: list[list[float]] | None = Field(
        None, description="(len(tokens) + 1) rows (the last: </s>) x (len(src_tokens) + 1) columns (the last: "
                          "</s>); null for a model without attention")
    alignment: WordAlignment | None = None
    node: int | None = Field(None, description="with trace and beam search: its finished node in `beam`")
    source_share: SourceShareOut | None = Field(None, description="with explain source_share")


class Alternative(BaseModel):
    token: str
    log_prob: float


class BeamNodeOut(BaseModel):
    id: int
    parent: int | None
    step: int
    token: str
    log_prob: float = Field(description="cumulative")
    score: float
    status: Literal["root", "kept", "finished", "pruned"]


class BeamTreeOut(BaseModel):
    nodes: list[BeamNodeOut]


class SentenceResult(BaseModel):
    source: str
    src_tokens: list[str]
    truncated: int = Field(description="source tokens dropped beyond the model's max_src_len")
    hypotheses: list[HypothesisOut] = Field(description="the n-best list, best first")
    steps: list[list[Alternative]] | None = Field(
        None, description="with trace: per output position of the best hypothesis (its tokens, then </s>), the "
                          "model's top tokens there given the tokens before")
    beam: BeamTreeOut | None = None


class TranslateResponse(BaseModel):
    model: str
    decode: dict[str, Any] = Field(description="the decoding options used (a sampling seed included)")
    results: list[SentenceResult]


@dataclass(frozen=True)
class TranslateResults:
    """A translate request's answer before it is JSON (POST /v1/translate encodes it; the compat APIs
    read it as it is): the model's name, the decoding it ran, and one result per sentence, as
    TranslateResponse's `results` (JSON-ready dicts of SentenceResult's shape)."""

    model: str
    decode: DecodeConfig
    results: list[dict[str, Any]]


class AlignResult(BaseModel):
    src_words: list[str]
    tgt_words: list[str]
    attention: list[list[float]] = Field(description="(len(tgt_words), len(src_words))")
    links: list[tuple[int, int]]
    pharaoh: str


class AlignResponse(BaseModel):
    model: str
    aligner: Literal["model", "priors", "both"] = Field("model", description="whose links these are (the request's "
                                                                             "aligner)")
    symmetrized: Literal["intersect", "union", "grow-diag-final"] | None = Field(
        None, description="how the links join the model's with its recorded reverse model's (heed.pair.json), or "
                          "null: the model's alone")
    results: list[AlignResult]


class ModelInfo(BaseModel):
    name: str
    family: str = Field("rnn", description="the model family: rnn or transformer")
    attention: str = Field(description="the model's attention in its family's word (an RNN's decoder, a "
                                       "transformer's last decoder layer's cross-attention, mean over heads), or "
                                       "none")
    parameters: int
    src_vocab: int
    tgt_vocab: int
    max_src_len: int
    languages: list[str] = Field(description="a many-language model's language codes (for src_lang and tgt_lang); "
                                             "empty for others")
    decode: dict[str, Any]
    config: dict[str, Any] = Field(description="the resolved training config saved with the model, without a path "
                                               "(its corpora, output directory, train.init, ...: the server's own "
                                               "files); data.src_lang and data.tgt_lang: a many-language model's "
                                               "default pair, null where requests must give theirs")
    metrics: dict[str, Any] | None = Field(None, description="the last dev and test lines of its training log")
    runtime: Literal["pytorch", "onnx", "ctranslate2", "ensemble"] = Field(
        "pytorch", description="what runs it: a model directory (pytorch), an export, or an ensemble")
    gives: dict[str, bool] = Field(default_factory=dict,
                                   description="what it can show: tree (the beam tree and step alternatives), "
                                               "heads (every head of every layer), attribution, intervention, "
                                               "contributions (rollout, ALTI+, source share, logit lens)")


class ModelsResponse(BaseModel):
    models: list[ModelInfo]


class Health(BaseModel):
    status: Literal["ok"]
    models: list[str]
    queued: int = Field(description="sentences waiting for the decoder")


class ErrorBody(BaseModel):
    status: int
    message: str
    field: str | None = Field(None, description="the request field at fault, e.g. sentences[2]")


class ErrorResponse(BaseModel):
    error: ErrorBody


# ------------------------------------------------------------------- /v1/explain/{reading}
class ExplainRequest(_Pair):
    """Given translations read by a reading (heed.explain.readings): each reading's request is this
    with its options' fields (reading_request)."""

    model: str | None = Field(None, description="a loaded model's name (GET /v1/models); may be left out "
                                                   "when one model is loaded")
    sources: list[str] = Field(description="source sentences, non-blank, at most --max-chars each and "
                                           "--max-sentences in all")
    targets: list[str | list[str]] | None = Field(
        None, description="per source, the translation the model reads as its output (forced decoding): a text or "
                          "its tokens (default: the model's own translation, searched with its decode config)")


_READING_REQUESTS: dict[int, tuple[Any, type[BaseModel]]] = {}


def reading_request(reading: Any) -> type[BaseModel]:
    """ExplainRequest with the fields of `reading.options` (a heed.explain.readings.Reading), made
    once per reading: its name in the OpenAPI schema is Explain + the reading's, CamelCased, + Request."""
    made = _READING_REQUESTS.get(id(reading))
    if made is not None and made[0] is reading:
        return made[1]
    fields: dict[str, Any] = {}
    for name, info in reading.options.model_fields.items():
        # the field's type with its constraints (Annotated[type, *metadata]), the tuple spelt out for Python 3.10
        typed = (info.annotation, *info.metadata)
        annotation = Annotated[typed] if info.metadata else info.annotation
        fields[name] = (annotation, Field(info.default, description=info.description))
    title = "".join(part.capitalize() for part in reading.name.split("_"))
    model = create_model(f"Explain{title}Request", __base__=ExplainRequest, __doc__=reading.summary[:1].upper() +
                         reading.summary[1:] + f" (a model that is {reading.a_model()}).", **fields)
    _READING_REQUESTS[id(reading)] = (reading, model)
    return model


class LabelledOut(BaseModel):
    dims: list[str] = Field(description="the axes' names: layer, head, target (tgt_tokens, then </s>), source "
                                        "(src_tokens, then </s>), prefix (<s>, then tgt_tokens), top")
    values: Any = Field(description="nested lists, one level per axis")


class ReadingOut(LabelledOut):
    reading: str
    src_tokens: list[str]
    tgt_tokens: list[str]
    extras: dict[str, LabelledOut] = Field(default_factory=dict, description="what the reading gives besides, "
                                                                             "labelled alike")


class ExplainResponse(BaseModel):
    model: str
    reading: str
    results: list[ReadingOut]
