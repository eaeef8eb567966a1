"""Translate with a trained model from Python:

    import heed
    t = heed.load("runs/demo")                       # a model dir, a training output dir, or a `heed export` dir
    e = heed.load(["runs/a", "runs/b"])              # an ensemble: the mean of their log-probabilities
    out = t.translate(["le 3 mars 1998", "1998년 3월 3일"], beam=5)
    out[0].text, out[0].attention.shape              # ('1998-03-03', (11, 15))

`Translation.attention` has one row per output token plus one for the end of sentence, and one
column per source token plus one for the end-of-sentence marker the encoder reads:
shape `(len(tokens) + 1, len(src_tokens) + 1)`; `labels()` gives the matching axis labels.

A source longer than the model's `data.max_src_len` tokens (the longest it trained on) is cut to
that many tokens, and its `Translation.truncated` says how many were dropped: an RNN runs on
longer inputs, but time, memory and the attention matrix grow with the length, and the model
never learnt to translate them anyway.

    t.translate(["Zoltan est là"], replace_unk=True, dictionary="fr-en.dict")  # <unk> -> source word
    a = t.align(["le chat dort"], ["the cat sleeps"])[0]   # forced decoding of a given translation
    a.pharaoh(), a.attention.shape                         # ('0-0 1-1 2-2', (3, 3)), word level

    t.translate_nbest(["le 3 mars 1998"], beam=5, n_best=3)[0]          # 3 Translations, best first
    t.translate(["le 3 mars 1998"], sampling=True, top_p=0.9, seed=1)    # a sample (reproducible)
    t.translate(["le 3 mars 1998"], prefix=[["2", "0"]])                 # forced to start with "20"
    e = t.explore(["le 3 mars 1998"], beam=3)[0]   # + the beam tree and each step's top tokens
"""
from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from heed import decoding, translations
from heed.checkpoint import find_model_dir, load_model_dir
from heed.config import Config
from heed.data.codec import Codec
from heed.data.units import Units
from heed.data.vocab import EOS, SPECIALS, UNK
from heed.errors import Abandoned, ConfigError, HeedError, ModelDirError  # noqa: F401 (Abandoned: what stopped work raises, heed.api.Abandoned)
from heed.explain.align import Link
from heed.explain.align_methods import ALIGNMENT_LAYER, AlignOptions, recorded_options
from heed.explain.attention_gap import AttentionGap
from heed.explain.forced import SweepResult
from heed.explain.given_pairs import check_given
from heed.explain.pairs import Subject, forced_pairs
from heed.nn.ensemble import Ensemble
from heed.nn.intervention import Intervention, intervening
from heed.nn.protocol import AlignmentLayerModel, Int8Model, SearchModel, TrainableModel, TranslationModel
from heed.plumbing.runtime import check_bf16, check_int8, cpu_int8_products_exact, limit_onednn_cache, resolve_device
from heed.results import MAP_PARTS, Alignment, BeamNode, Exploration, HeadMaps, Translation
from heed.search import DecodeConfig
from heed.search.shortlist import Shortlist, recorded_shortlist

if TYPE_CHECKING:
    from heed.explain.attribution import Attribution, AttributionMethod, Contrast
    from heed.explain.contributions import Reading as ContributionReading
    from heed.explain.contributions import SourceShare
    from heed.explain.logit_lens import LogitLens
    from heed.export.ort import OrtSeq2Seq
    from heed.results import ReadingResult

EOS_TOKEN = SPECIALS[EOS]
UNK_TOKEN = SPECIALS[UNK]


def _load_parts(path: str | os.PathLike[str], *, exported: bool, device: torch.device,
                verify: bool | None) -> tuple[TrainableModel | OrtSeq2Seq, Codec, Config, dict[str, Any] | None]:
    """(model, codec, config, the reading training recorded) of a model directory (loaded onto
    `device`; its heed.json's "alignment", or None) or an exported directory (no reading)."""
    if exported:
        from heed.export.load import load_exported

        return (*load_exported(path, verify=verify), None)
    loaded = load_model_dir(path, device=device, verify=verify)
    return loaded.model, loaded.codec, loaded.config, _recorded_reading(loaded.meta, loaded.directory)


def _shortlist(path: str | os.PathLike[str], codec: Codec, *, exported: bool) -> Shortlist | None:
    """The vocabulary shortlist a model directory records (heed.search.shortlist), checked; None for
    none, and for an export (a CTranslate2 export carries it as its vocabulary map)."""
    if exported:
        return None
    directory = find_model_dir(path)
    return recorded_shortlist(directory, codec)


def _recorded_reading(meta: dict[str, Any], directory: Path) -> dict[str, Any] | None:
    """heed.json's "alignment" (heed.train records the heads guided alignment trained, or else the
    best reading on the dev gold), checked: a ModelDirError naming the entry when it is not one heed
    wrote. None when there is none."""
    reading = meta.get("alignment")
    if reading is None:
        return None
    try:
        recorded_options(reading)
        trained = reading.get("trained", False)
        if not isinstance(trained, bool):
            # caught below with the entry's other defects, all worded as one ModelDirError
            raise ValueError("trained must be true or false")  # noqa: TRY004
        # a dev sweep's reading always has its rates; trained heads have them only where there was a gold
        rates = [reading[key] if not trained else reading.get(key) for key in ("dev_aer", "default_dev_aer")]
        if not all((trained and rate is None) or (isinstance(rate, (int, float)) and 0 <= rate <= 1) for rate in rates):
            raise ValueError("dev_aer and default_dev_aer must be rates in [0, 1]")
    except (TypeError, KeyError, ValueError) as e:
        raise ModelDirError(f"{directory / 'heed.json'}: \"alignment\" is not the reading heed records ({e}); "
                            "remove the entry to align the default way") from None
    return reading


def _ready(model: TrainableModel | OrtSeq2Seq, *, device: torch.device, bf16: bool, int8: bool = False) -> Any:
    """The model as Translator decodes with it: a PyTorch model cast to bf16 or its products made
    int8 (if asked), moved to `device`, in eval mode, its decoder's weights column-major on the CPU;
    an exported model as it is, after checking it is asked for nothing it cannot do."""
    if bf16 and int8:
        raise HeedError("--int8 and --bf16 are two precisions for the same products; choose one")
    if not isinstance(model, torch.nn.Module):  # an exported model (heed.export.ort): ONNX Runtime on the CPU
        if int8:
            raise HeedError("--int8: an exported model runs in the precision it was exported in; export it with "
                            "`heed export --int8`, or decode the model directory with --int8")
        if bf16 or device.type != "cpu":
            raise HeedError("an exported model runs on the CPU in the precision it was exported in; "
                            "drop --bf16 and --device cuda (or translate with the model directory)")
        return model
    if bf16:
        check_bf16(device, what="--bf16")
    if int8:
        check_int8(device, what="--int8")
        if not isinstance(model, Int8Model):
            raise HeedError(f"--int8: a model of the {getattr(model, 'family', '?')!r} family has no int8 path; "
                            "decode in float32 (leave --int8 off)")
    limit_onednn_cache(bf16)
    ready = cast("TrainableModel", (model.to(torch.bfloat16) if bf16 else model).to(device).eval())
    if int8:
        # activations in 7 bits where the CPU's int8 pair sums saturate (heed.nn.int8)
        cast("Int8Model", ready).to_int8(reduce_range=not cpu_int8_products_exact())
    if device.type == "cpu":
        ready.for_decoding()  # few rows a step: the faster GEMM layout there
    return ready


class Translator:
    """A trained model with its tokenizers and vocabularies, ready to translate.

    `bf16=True` decodes in bfloat16: the weights are cast once, the matrix products run in bf16
    under autocast and the log-probabilities search ranks are computed in float32. It pays where
    the products are large: batches of a subword model on a GPU, at times on a CPU with AMX. For
    batch 1, for small models and on CPUs without AMX it is slower (the figures, with their CPUs:
    bench/RESULTS.md, "bf16 decoding").

    `int8=True` decodes on the CPU with dynamic int8 products (heed.nn.int8): every matrix product
    with a weight (a Transformer's attention projections, feed-forward layers and output layer; an
    RNN's linear layers, its LSTM cells staying float32) multiplies int8 weights, one scale per
    output row, by activations quantized at each call. Its outputs may differ from float32's; what
    it costs in quality and gains in speed: bench/RESULTS.md, "int8 decoding".

    The translator owns `model`: it is cast, moved and put in eval mode in place, and on the CPU
    its decoder's weights are stored column-major (heed.nn.layout; same values). An exported model
    (heed.export.ort.OrtSeq2Seq, from `Translator.load` of a `heed export` directory) is used as it is.
    An ensemble (heed.nn.ensemble.Ensemble, from `Translator.load` of several paths) has each of its
    models made ready so."""

    def __init__(self, model: TrainableModel | OrtSeq2Seq | Ensemble, codec: Codec, config: Config, *,
                 device: torch.device, bf16: bool = False, int8: bool = False,
                 recorded_reading: dict[str, Any] | None = None) -> None:
        if isinstance(model, Ensemble):
            members = [_ready(cast("TrainableModel | OrtSeq2Seq", m), device=device, bf16=bf16, int8=int8)
                       for m in model.members]
            # an Ensemble's search states are its own (EnsembleState), which search only hands back to it
            self.model: TranslationModel = cast("TranslationModel", Ensemble(members))
        else:
            self.model = _ready(model, device=device, bf16=bf16, int8=int8)
        self.codec = codec
        self.config = config
        self.device = device
        self.bf16 = bf16
        self.int8 = int8
        # The reading of the attention training recorded (heed.json's "alignment", written by
        # heed.train), or None: the heads guided alignment trained ("trained": true), or else the
        # reading that aligned best with the dev gold. `heed align` uses it unless told another
        # (AlignOptions fields, and the dev AER beside the default reading's where there was a gold).
        self.recorded_reading = recorded_reading
        # The vocabulary shortlist its model directory records (`heed data shortlist`), which a search
        # with DecodeConfig.shortlist uses; None for none (set by `load`).
        self.shortlist: Shortlist | None = None

    @classmethod
    def load(cls, path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *, device: str = "auto",
             bf16: bool = False, int8: bool = False, verify: bool | None = None, src_lang: str | None = None,
             tgt_lang: str | None = None) -> Translator:
        """Load a model directory, or the `model/` inside a training output directory, or a directory
        `heed export` wrote (run by ONNX Runtime on the CPU; `device` "auto" means the CPU there), or
        a pretrained model on the Hugging Face hub, "hf:ORG/NAME[@REVISION]" (imported once into
        heed's cache, as `heed import` would: heed.pretrained.imported).
        `device`: "auto" (CUDA if available), "cpu" or "cuda"; `bf16`: decode in bfloat16; `int8`:
        decode with dynamic int8 products on the CPU ("auto" then means the CPU);
        `verify`: check every file's sha256 first (default: yes, unless HEED_VERIFY=0);
        `src_lang`, `tgt_lang`: a many-language model's pair (`with_languages`).

        Several paths (a list) make an ensemble (heed.nn.ensemble): every step decodes with the mean of
        the models' log-probabilities, and its attention is their mean attention. The models must
        share their tokenizers and vocabularies, source and target (a HeedError names the first that
        differs); they may differ in anything else (architecture, size, exported or not). The
        ensemble translates with the first model's decode config and reads sources up to the
        smallest of the models' `data.max_src_len`."""
        paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
        if not paths:
            raise HeedError("no model given; give a model directory (or several, for an ensemble)")
        from heed.export.onnx import is_exported_dir
        from heed.pretrained import imported, is_hub_id

        paths = [imported(str(p)) if is_hub_id(str(p)) else p for p in paths]

        exported = [is_exported_dir(p) for p in paths]
        if int8 and device != "auto":  # before the device is looked for: the refusal is the same without CUDA
            check_int8(torch.device(device.partition(":")[0] if device.startswith("cuda") else device),
                       what="--int8")
        # An exported model runs on the CPU, and so does int8, so "auto" means the CPU for them.
        torch_device = resolve_device("cpu" if device == "auto" and (any(exported) or int8) else device,
                                      field="device")
        parts = [_load_parts(p, exported=e, device=torch_device, verify=verify) for p, e in zip(paths, exported)]
        if len(parts) == 1:
            model, codec, config, reading = parts[0]
            translator = cls(model, codec, config, device=torch_device, bf16=bf16, int8=int8,
                             recorded_reading=reading)
            translator.shortlist = _shortlist(paths[0], codec, exported=exported[0])
            return translator.with_languages(src_lang, tgt_lang)
        (_, codec, config, _), first = parts[0], paths[0]
        for p, (_, other, _, _) in zip(paths[1:], parts[1:]):
            difference = codec.difference(other)
            if difference is not None:
                raise HeedError(f"{p}: {difference} differs from {first}'s; the models of an ensemble must share "
                                "their tokenizers and vocabularies (train them on the same data and data settings)")
        shortest = min(c.data.max_src_len for _, _, c, _ in parts)
        config = config.model_copy(update={"data": config.data.model_copy(update={"max_src_len": shortest})})
        ensemble = cls(Ensemble([cast("SearchModel", m) for m, _, _, _ in parts]), codec, config, device=torch_device,
                       bf16=bf16, int8=int8)
        return ensemble.with_languages(src_lang, tgt_lang)

    def with_languages(self, src_lang: str | None, tgt_lang: str | None) -> Translator:
        """This translator (the same model, not copied) reading `src_lang` and writing `tgt_lang`,
        codes of a many-language model's `languages` (an imported M2M-100 or NLLB model: "fr",
        "fra_Latn"); None keeps the model's own (its config's data.src_lang, data.tgt_lang). Its
        sources then start with their language's token, and every output with the target's,
        forced and scored 0, as Hugging Face's forced_bos_token_id does. A HeedError names a code
        the model lacks, and any code given to a model without language tokens (OPUS-MT)."""
        if src_lang is None and tgt_lang is None:
            return self
        other = copy.copy(self)
        other.codec = self.codec.with_languages(src_lang, tgt_lang)
        pair = {k: v for k, v in (("src_lang", src_lang), ("tgt_lang", tgt_lang)) if v is not None}
        other.config = self.config.model_copy(update={"data": self.config.data.model_copy(update=pair)})
        return other

    @property
    def languages(self) -> list[str]:
        """The language codes of a many-language model; empty for a model of one pair."""
        return self.codec.languages

    @property
    def max_src_len(self) -> int:
        """The longest source, in tokens, that `translate` reads: the model's `data.max_src_len`, or
        fewer where a Transformer learned fewer positions (`model.max_positions`, one for </s>)."""
        return translations.source_limit(self.config)

    @property
    def decode_config(self) -> DecodeConfig:
        """The decoding settings saved with the model (`decode:` in its config)."""
        return self.config.decode

    def translate(self, texts: Sequence[str], *, beam: int | None = None, batch_size: int = 64,
                  replace_unk: bool = False,
                  dictionary: Mapping[str, str] | str | os.PathLike[str] | None = None,
                  prefix: Sequence[str | Sequence[str] | None] | None = None,
                  decode: DecodeConfig | None = None, **options: Any) -> list[Translation]:
        """Translate `texts` (in input order): the best hypothesis of each. How to decode: `decode`, a
        whole DecodeConfig (what the CLI and the server pass), or else the model's own with `beam`
        (beam size) and `options` overriding DecodeConfig fields (n_best=, length_penalty=, min_len=,
        sampling=, top_p=, seed=, ...), checked once.
        Sentences are batched longest first and put back in input order; an empty (or blank) text
        gives an empty translation without running the model. A source longer than `max_src_len`
        tokens is cut to its first `max_src_len` (`Translation.truncated` counts the rest).

        `replace_unk`: each `<unk>` output token becomes the source token it attended to most
        (`heed.explain.align.replace_unknowns`; Luong et al. 2015b), translated by `dictionary` (a
        mapping, or a `src<TAB>tgt` file) where it has an entry, copied otherwise. `tokens`,
        `text` and the attention labels then show the replacements. A dictionary implies
        `replace_unk`.

        `prefix`: per text, the output's forced start: a target-side text (tokenized like a
        reference) or a list of target tokens; None for no prefix. The search continues after it.

        `sampling=True` draws instead of searching (temperature=, top_k=, top_p=); without a
        `seed=` a fresh one is drawn, so give one to reproduce a sample."""
        return [nbest[0] for nbest in self.translate_nbest(texts, beam=beam, batch_size=batch_size,
                                                            replace_unk=replace_unk, dictionary=dictionary,
                                                            prefix=prefix, decode=decode, **options)]

    def translate_nbest(self, texts: Sequence[str], *, beam: int | None = None, batch_size: int = 64,
                        replace_unk: bool = False,
                        dictionary: Mapping[str, str] | str | os.PathLike[str] | None = None,
                        prefix: Sequence[str | Sequence[str] | None] | None = None,
                        stop: Callable[[], bool] | None = None, decode: DecodeConfig | None = None,
                        attention: bool = True, **options: Any) -> list[list[Translation]]:
        """As `translate`, but every sentence's n-best list (`n_best=` hypotheses, best first; fewer
        only where the constraints leave fewer). An empty text gives one empty Translation; one the
        constraints leave no finished hypothesis gives an empty Translation scored -inf.

        `stop`: asked before every search step; once it is true the search raises Abandoned (the
        server stops the work of a request that timed out). `attention=False`: the caller reads no
        Translation.attention, which a CTranslate2 export then does not compute (a third of its time)."""
        cfg = decoding.chosen(self.config.decode, decode, beam, options, tgt_vocab_size=len(self.codec.tgt_vocab))
        runs = translations.decode(self.subject, texts, cfg, max_src_len=self.max_src_len, batch_size=batch_size,
                                   replace_unk=replace_unk, dictionary=dictionary, prefix=prefix, stop=stop,
                                   shortlist=self.shortlist, attention=attention)
        return [nbest for nbest, _ in runs]

    def explore(self, texts: Sequence[str], *, beam: int | None = None, alternatives: int = 5,
                batch_size: int = 64, replace_unk: bool = False,
                prefix: Sequence[str | Sequence[str] | None] | None = None,
                stop: Callable[[], bool] | None = None, decode: DecodeConfig | None = None,
                **options: Any) -> list[Exploration]:
        """Translate `texts` and keep what a person needs to see how: the n-best list, the beam
        search tree, each output step's `alternatives` most likely tokens and the word alignments.
        Takes `translate`'s options; costs more (a host copy per search step and one teacher-forced
        pass), so use `translate` to translate."""
        if alternatives < 1:
            raise HeedError(f"alternatives must be at least 1, got {alternatives}")
        cfg = decoding.chosen(self.config.decode, decode, beam, options, tgt_vocab_size=len(self.codec.tgt_vocab))
        runs = translations.decode(self.subject, texts, cfg, max_src_len=self.max_src_len, batch_size=batch_size,
                                   replace_unk=replace_unk, prefix=prefix, trace=True, stop=stop)
        best = [nbest[0] for nbest, _ in runs]
        steps = translations.step_alternatives(self.subject, best, alternatives, batch_size=batch_size, stop=stop)
        out = []
        for (nbest, decoded), alts in zip(runs, steps):
            tree = None if decoded is None else decoded.tree
            beam_nodes = None if tree is None else translations.beam_nodes(self.codec, tree, nbest[0].src_tokens)
            nodes: list[int | None] = [None] * len(nbest) if decoded is None else [h.node for h in decoded.hypotheses]
            alignments = [translations.word_alignment(self.codec, t) for t in nbest]
            out.append(Exploration(nbest, alts, beam_nodes, nodes, alignments))
        return out

    def default_reading(self, tgt_units: Units = "words") -> tuple[AlignOptions, str]:
        """How `heed align` reads this model when no reading is asked for, and why (for messages):
        the reading its training recorded (its alignment layer or the heads guided alignment trained,
        or the best on its dev gold), else its alignment layer where it has one, else the rule measured for its kind of model (heed.nn.protocol.MeasuredReading:
        docs/look-inside.md, section 8), else the attention as reported (an ensemble, an export)."""
        if self.recorded_reading is not None:
            reading = self.recorded_reading
            scored = (f"AER {100 * reading['dev_aer']:.1f}% against the default's "
                      f"{100 * reading['default_dev_aer']:.1f}%" if reading.get("dev_aer") is not None else "")
            options = recorded_options(reading, tgt_units)
            trained = "the alignment layer" if options.weights == ALIGNMENT_LAYER else "the heads"
            why = (f"{trained} guided alignment trained{' (dev ' + scored + ')' if scored else ''}"
                   if reading.get("trained") else f"the best on the dev gold at training ({scored})")
            return options, why
        if isinstance(self.model, AlignmentLayerModel):
            return (AlignOptions(weights=ALIGNMENT_LAYER, tgt_units=tgt_units),
                    "the model's alignment layer (model.alignment_layer)")
        measured = getattr(self.model, "measured_reading", None)
        if measured is None:
            return AlignOptions(tgt_units=tgt_units), "the attention the model reports"
        options = AlignOptions(method=measured.method, layer=measured.layer, weights=measured.weights,
                               tgt_units=tgt_units)
        return options, f"the rule measured for {measured.kind} (docs/look-inside.md, section 8)"

    def align(self, src_texts: Sequence[str], tgt_texts: Sequence[str], *, options: AlignOptions | None = None,
              batch_size: int = 64, stop: Callable[[], bool] | None = None) -> list[Alignment]:
        """Word alignments of given translations, read off the attention while the model reads each
        as its own output (heed.explain.given_pairs.align_pairs, which says how)."""
        from heed.explain.given_pairs import align_pairs

        return align_pairs(*self.subject, src_texts, tgt_texts, options=options, batch_size=batch_size, stop=stop)

    def align_sweep(self, src_texts: Sequence[str], tgt_texts: Sequence[str], sure: Sequence[set[Link]],
                    possible: Sequence[set[Link]], *, tgt_units: Units = "words", batch_size: int = 64) -> SweepResult:
        """AER against gold links of every way to read an alignment off this model
        (heed.explain.given_pairs.align_sweep)."""
        from heed.explain.given_pairs import align_sweep

        return align_sweep(*self.subject, src_texts, tgt_texts, sure, possible, tgt_units=tgt_units,
                           batch_size=batch_size)

    def attention_gap(self, other: Translator, src_texts: Sequence[str], tgt_texts: Sequence[str], *,
                      batch_size: int = 64) -> AttentionGap:
        """How far `other`'s attention is from this translator's on the same pairs, e.g. an int8
        export's beside its float32 model (heed.explain.given_pairs.attention_gap_of)."""
        from heed.explain.given_pairs import attention_gap_of

        return attention_gap_of(self.subject, other.subject, src_texts, tgt_texts, batch_size=batch_size)

    def attention_layers(self, src_texts: Sequence[str], tgt_texts: Sequence[str | Sequence[str]], *,
                         parts: Sequence[str] = ("cross",)) -> list[HeadMaps]:
        """Every head of every layer while the model reads each translation as its own output: the
        cross-attention, and the self-attention `parts` asked (the reading `heads`, heed.explain.heads)."""
        unknown = [p for p in parts if p not in MAP_PARTS]
        if unknown:
            raise HeedError(f"unknown attention part {unknown[0]!r}; choose from {', '.join(MAP_PARTS)}")
        if isinstance(src_texts, str) or isinstance(tgt_texts, str) or len(src_texts) != len(tgt_texts):
            raise HeedError("attention_layers() takes two lists of the same length: sources and their translations")
        selfs = tuple(p for p in dict.fromkeys(parts) if p != "cross")
        return [HeadMaps.of(r) for r in self.explain("heads", src_texts, tgt_texts, self_attention=selfs)]

    @contextlib.contextmanager
    def intervening(self, intervention: Intervention | None) -> Iterator[None]:
        """Within, every decoding and teacher-forced pass of this translator runs with its attention
        over the source replaced (heed.nn.intervention: uniform, permute, drop_top):

            with t.intervening(Intervention("permute", seed=1)):
                t.translate(["le 3 mars 1998"])

        Needs PyTorch models (an exported model's attention is inside its graph)."""
        if intervention is not None and not runs_torch(self.model):
            raise HeedError("an attention intervention changes PyTorch's attention; an exported model's is inside "
                            "its ONNX graph: use the model directory")
        with intervening(intervention):
            yield

    def attribute(self, src_texts: Sequence[str], tgt_texts: Sequence[str | Sequence[str]] | None = None, *,
                  method: AttributionMethod = "integrated_gradients", steps: int = 50,
                  stop: Callable[[], bool] | None = None) -> list[Attribution]:
        """Attribution of every output token to the source tokens and the output before it, beside
        the attention (the reading `attribution`, heed.explain.attribution; Captum, `pip install
        'heed-nmt[explain]'`). `stop`: asked before every pass; once it is true the work raises Abandoned."""
        from heed.explain.attribution import as_attribution

        results = self.explain("attribution", src_texts, tgt_texts, stop=stop, method=method, steps=steps)
        return [as_attribution(r, method, steps) for r in results]

    def contrast(self, src_texts: Sequence[str], contrasts: Sequence[str | Sequence[str]],
                 tgt_texts: Sequence[str | Sequence[str]] | None = None, *,
                 method: AttributionMethod = "integrated_gradients", steps: int = 50) -> list[Contrast]:
        """Why this output and not `contrasts[k]`: each source token's attribution to the difference
        of the two outputs' log-probabilities (the reading `contrast`, heed.explain.contrast; Captum)."""
        from heed.explain.contrast import as_contrast

        if isinstance(contrasts, str):
            raise HeedError(f"{len(src_texts)} source sentences but 1 contrasts; give one alternative output per source")
        others = tuple(c if isinstance(c, str) else tuple(c) for c in contrasts)
        results = self.explain("contrast", src_texts, tgt_texts, contrasts=others, method=method, steps=steps)
        return [as_contrast(r, method, steps) for r in results]

    def source_share(self, src_texts: Sequence[str], tgt_texts: Sequence[str | Sequence[str]] | None = None, *,
                     reading: ContributionReading = "alti") -> list[SourceShare]:
        """Each prediction's source share against its target-prefix share, by ALTI+ (or rollout) at the
        last decoder layer (the reading `source_share`, heed.explain.source_share); a Transformer model directory."""
        from heed.explain.source_share import as_source_share

        return [as_source_share(r, reading) for r in self.explain("source_share", src_texts, tgt_texts, method=reading)]

    def logit_lens(self, src_texts: Sequence[str], tgt_texts: Sequence[str | Sequence[str]] | None = None, *,
                   top: int = 5) -> list[LogitLens]:
        """Each decoder layer's likeliest tokens at every output position, read through the output
        layer (the reading `logit_lens`, heed.explain.logit_lens); a Transformer model directory."""
        from heed.explain.logit_lens import as_logit_lens

        return [as_logit_lens(r) for r in self.explain("logit_lens", src_texts, tgt_texts, top=top)]

    @property
    def subject(self) -> Subject:
        """(model, codec, device): what heed.explain reads, without this facade."""
        return Subject(self.model, self.codec, self.device)

    def explain(self, name: str, src_texts: Sequence[str], tgt_texts: Sequence[str | Sequence[str]] | None = None,
                *, stop: Callable[[], bool] | None = None, **options: Any) -> list[ReadingResult]:
        """The reading `name` of heed.explain.readings (READINGS: heads, value_norms, rollout, alti,
        source_share, logit_lens, attribution, contrast, ...) while the model reads `tgt_texts[k]` (a
        text, or its tokens; default: its own translation) as its output for `src_texts[k]`;
        `options`: the reading's options by name. One heed.results.ReadingResult per pair. `stop`:
        asked before every search step and pass; once it is true the work raises Abandoned."""
        from heed.explain.readings import check, check_per_pair, explain

        parsed = check(name, self.model).parse(options)  # a model or an option refused before anything is decoded
        check_given(src_texts, tgt_texts)
        check_per_pair(parsed, len(src_texts))
        targets = _own_or_given(self, src_texts, tgt_texts, stop=stop)
        return explain(name, *self.subject, src_texts, targets, parsed, max_src_len=self.max_src_len, stop=stop)

    def forced_pairs(self, src_texts: Sequence[str], tgt_texts: Sequence[str | Sequence[str]], *,
                     empty: str) -> tuple[list[list[str]], list[list[str]], list[tuple[list[int], list[int]]]]:
        """Sentence pairs ready for a teacher-forced pass: (source tokens as the model reads them,
        cut to max_src_len; target tokens, from a text tokenized as a reference or given as tokens;
        their (source ids, target ids)). A HeedError names `src_texts[k]` for an empty source
        (`empty` says why that matters), `src_texts[k]` / `tgt_texts[k]` for a text no sentence
        can hold, and `tgt_texts[k]` for a target token the model does not know (as a prefix's)."""
        pairs = forced_pairs(self.codec, src_texts, tgt_texts, max_src_len=self.max_src_len, empty=empty)
        return pairs.src_tokens, pairs.tgt_tokens, pairs.examples

    def __call__(self, text: str, **kwargs: Any) -> str:
        """Translate one sentence; returns the text."""
        return self.translate([text], **kwargs)[0].text

    def resolve_decode(self, overrides: Mapping[str, Any] | None = None, *, beam: int | None = None) -> DecodeConfig:
        """The model's decode config with `overrides` (DecodeConfig fields, by their names) and a beam
        size asked for by itself (`beam`: beam_size, and n_best at most it unless n_best is given)
        applied, and, for sampling without a seed, a fresh seed (so the config says how to draw the
        same again). A bad value is a ConfigError naming `decode.FIELD` (heed.decoding)."""
        return decoding.resolve(self.config.decode, overrides, beam=beam, tgt_vocab_size=len(self.codec.tgt_vocab))


def _own_or_given(translator: Translator, src_texts: Sequence[str], tgt_texts: Sequence[str | Sequence[str]] | None,
                  *, stop: Callable[[], bool] | None = None) -> Sequence[str | Sequence[str]]:
    """The translations a reading reads: `tgt_texts` (one per source, checked by check_given), or the
    model's own (as tokens; the search asks `stop` as translate_nbest does)."""
    if tgt_texts is None:
        return [nbest[0].tokens for nbest in translator.translate_nbest(src_texts, stop=stop)]
    return tgt_texts


def runs_torch(model: Any) -> bool:
    """Whether `model` (or every member of an ensemble) is a PyTorch model."""
    if isinstance(model, Ensemble):
        return all(isinstance(m, torch.nn.Module) for m in model.members)
    return isinstance(model, torch.nn.Module)




__all__ = ["Alignment", "BeamNode", "Exploration", "HeadMaps", "Translation", "Translator"]
