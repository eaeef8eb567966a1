"""The run's configuration: validated pydantic models (an unknown key anywhere is an error), read from
YAML, with dotted `--set section.field=value` overrides.

Paths. A relative path written in a config file resolves against *that file's directory*, so a
config and its data move together: `configs/x.yaml` naming `../data/train.tsv` means
`data/train.tsv` beside `configs/`. Corpus paths (and `data.prepared`) may instead resolve against
a data root, so one setting points a config at data kept elsewhere; the first given of
  1. `--set data.root=DIR` (against the current directory),
  2. the environment variable HEED_DATA_ROOT (against the current directory),
  3. `data.root:` in the file (against the file's directory),
  4. the file's directory (the rule above).
The environment comes before the file, as a shell's setting overrides a file's default: one
`export HEED_DATA_ROOT=...` points every recipe at a data folder elsewhere.
A path given on the command line (`--set data.train.tsv=...`, `--output-dir`) resolves against the
current directory, like any other argument; so does the default `output_dir` (runs/default). A
loaded config holds absolute paths (and `data.root` null). When heed saves a config (into every
checkpoint and model directory) it writes these paths relative to the saved file, with
`data.root: .`, so the copy still points at the same places, holds no absolute paths, and moves with
its directory; heed reads those copies with `environment=False`, so HEED_DATA_ROOT never moves them.
"""
from __future__ import annotations

import difflib
import os
import stat
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticUndefined

from heed.decode_config import DecodeConfig
from heed.errors import ConfigError
from heed.nn import families, family_config
from heed.nn.model_config import ModelConfig, family_of, without_family_tag
from heed.plumbing import yamlio
from heed.plumbing.files import atomic_write_text, open_regular, open_stream
from heed.plumbing.limits import MAX_THREADS

CORPUS_SPLITS = ("train", "dev", "test")
OUTPUT_DIR = "output_dir"
CORPUS_PATH_KEYS = ("tsv", "src", "tgt", "align")
DATA_ROOT = "data.root"
PREPARED = "data.prepared"  # a directory of data: resolved like a corpus path
DATA_ROOT_ENV = "HEED_DATA_ROOT"
# A caller's completion of a config mapping before validation (config_from_dict's `complete`).
Completion = Callable[[dict[str, Any]], dict[str, Any]]


class _Strict(BaseModel):
    # No NaN or infinity in any number a user gives (`.nan`, `.inf` in YAML, `--set x=inf`).
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


# ----------------------------------------------------------------------------------------- data


class CorpusConfig(_Strict):
    """One corpus: a TSV file (`source<TAB>target`), or two line-aligned files."""

    tsv: Path | None = Field(None, description="a TSV file, source<TAB>target a line (more columns are ignored), "
                             "plain or .gz")
    src: Path | None = Field(None, description="the source side, one sentence a line, plain or .gz")
    tgt: Path | None = Field(None, description="the target side, line-aligned with src")
    align: Path | None = Field(None, description="gold word alignments, a Pharaoh line per pair (i-j sure, i?j "
                               "possible; 0-based whitespace words, source first), read on data.dev only: training "
                               "then reports the dev AER at every evaluation (generated tasks have theirs built in). "
                               "On data.train or data.test it is an error: guided alignment training reads "
                               "train.alignment.supervision, and `heed align --gold` scores a test set")

    @model_validator(mode="after")
    def _one_form(self) -> CorpusConfig:
        if self.tsv is not None and (self.src is not None or self.tgt is not None):
            raise ValueError("give either 'tsv', or 'src' and 'tgt', not both")
        if self.tsv is None and (self.src is None or self.tgt is None):
            raise ValueError("give 'tsv: FILE', or both 'src: FILE' and 'tgt: FILE'")
        return self


class SplitConfig(_Strict):
    """Hold dev and test sentences out of a single training corpus, deterministically.

    Pairs are grouped by source sentence before the split, so a held-out source never also appears
    in training with another translation (Tatoeba repeats sources)."""

    dev: int = Field(1000, ge=0, description="source sentences (with all their translations) held out for dev")
    test: int = Field(1000, ge=0, description="source sentences held out for test")
    seed: int = Field(0, description="which sentences are held out")


class DatesConfig(_Strict):
    """The generated dates task (`heed.data.dates`): dates written many ways -> ISO 8601."""

    n_train: int = Field(20000, gt=0, description="training pairs")
    n_dev: int = Field(500, gt=0, description="dev pairs (dates not in training)")
    n_test: int = Field(1000, gt=0, description="test pairs (dates in neither)")
    seed: int = Field(0, description="the generator's seed")
    languages: list[str] = Field(default_factory=lambda: ["en", "fr", "de", "es", "ko"], min_length=1,
                                 description="languages the dates are written in (CLDR locales: en, fr, de, es, ko)")
    verbose_forms: bool = Field(True, description="also spelled-out forms (\"the fourth of April, twenty forty-one\")")


class NamesConfig(_Strict):
    """The generated names task (`heed.data.names`): sentences about invented people, English ->
    French, the names passing through; dev and test names never occur in training. Made for copy
    attention (model.copy) with word tokenization (data.tokenizer.src.kind and tgt.kind: word)."""

    n_train: int = Field(5000, gt=0, description="training pairs")
    n_dev: int = Field(200, gt=0, description="dev pairs")
    n_test: int = Field(500, gt=0, description="test pairs")
    seed: int = Field(0, description="the generator's seed")
    train_names: int = Field(500, ge=2, description="invented names in training")
    heldout_names: int = Field(200, ge=2, description="other invented names, for dev and for test each")


class TokenizerConfig(_Strict):
    """How one side is split into tokens."""

    kind: Literal["char", "word", "bpe", "unigram", "sentencepiece"] = Field(
        "char", description="characters, whitespace words, a SentencePiece model trained on the corpus (bpe, "
                            "unigram), or an imported model's own (sentencepiece: heed import writes it)")
    vocab_size: int = Field(8000, gt=0, description="sentencepiece vocabulary size (bpe and unigram)")


class TokenizersConfig(_Strict):
    """The source side's and the target side's tokenizer."""

    src: TokenizerConfig = Field(default_factory=TokenizerConfig, description="the source side's")
    tgt: TokenizerConfig = Field(default_factory=TokenizerConfig, description="the target side's")


class VocabConfig(_Strict):
    """Which tokens get an id (the others are <unk>)."""

    min_freq: int = Field(1, ge=1, description="tokens seen fewer times in training are <unk>")
    max_size: int | None = Field(None, gt=0, description="keep the most frequent this many; null = all")


class DataConfig(_Strict):
    """Where the sentence pairs come from and how they become batches.

    Either a generated task, `task: dates` or `task: names` (with its `dates:` or `names:`
    settings), or a `train:` corpus with `dev:` and
    `test:` corpora or a `split:` that holds them out of `train`."""

    task: Literal["dates", "names"] | None = Field(None, description="a generated task instead of corpora")
    dates: DatesConfig = Field(default_factory=DatesConfig, description="task: dates' settings")
    names: NamesConfig = Field(default_factory=NamesConfig, description="task: names' settings")
    root: Path | None = Field(None, description="the folder relative corpus paths in the config file resolve "
                              f"against, unless ${DATA_ROOT_ENV} is set; null = the config file's folder")
    train: CorpusConfig | None = Field(None, description="the training corpus")
    dev: CorpusConfig | None = Field(None, description="the dev corpus: evaluated during training, picks the best "
                                     "checkpoint")
    test: CorpusConfig | None = Field(None, description="the test corpus: scored once, by the best model, at the end")
    split: SplitConfig | None = Field(None, description="hold dev and test out of 'train' instead")
    reverse: bool = Field(False, description="swap source and target of every corpus")
    src_lang: str | None = Field(None, description="a many-language model's source language (an imported M2M-100 "
                                                   "or NLLB model's code, e.g. eng_Latn): every source starts with "
                                                   "its token")
    tgt_lang: str | None = Field(None, description="a many-language model's target language: every output starts "
                                                   "with its token")
    tokenizer: TokenizersConfig = Field(default_factory=TokenizersConfig, description="how sentences become tokens")
    vocab: VocabConfig = Field(default_factory=VocabConfig, description="which tokens get ids")
    shared_vocab: bool = Field(False, description="one tokenizer and one vocabulary for both sides, trained on "
                               "both (tokenizer.src and tokenizer.tgt must then agree); lets a Transformer share "
                               "its embeddings (model.share_embeddings)")
    max_src_len: int = Field(100, gt=0, description="longer training pairs are dropped (in tokens)")
    max_tgt_len: int = Field(100, gt=0, description="longer training pairs are dropped (in tokens)")
    batch_tokens: int = Field(4000, gt=0, description="source + target tokens per batch, padding included")
    max_sentences: int | None = Field(None, gt=0, description="sentence pairs per batch at most; null = no limit")
    prepared: Path | None = Field(None, description="a directory written by `heed prepare`: training pairs as "
                                  "token ids in shards, instead of a 'train' corpus (heed.data.prepared)")
    pool_sentences: int = Field(1_000_000, gt=0, description="with 'prepared': pairs read, shuffled and bucketed "
                                "together; at least the corpus size gives exactly the batches of raw text")

    @property
    def describes_pretrained(self) -> bool:
        """An imported model's data section: its own tokenizers and no corpus (heed import)."""
        return self.tokenizer.src.kind == self.tokenizer.tgt.kind == "sentencepiece" and self.task is None \
            and self.train is None and self.prepared is None

    @model_validator(mode="after")
    def _one_source(self) -> DataConfig:
        if self.task is not None:
            given = [name for name in (*CORPUS_SPLITS, "split", "prepared") if getattr(self, name) is not None]
            if given:
                raise ValueError(f"task '{self.task}' generates its data; remove '{given[0]}' or set task: null")
            if self.reverse:
                raise ValueError(f"'reverse' applies to corpora, not to task '{self.task}'")
        elif self.prepared is not None:
            if self.train is not None:
                raise ValueError("'prepared' (made by heed prepare) and 'train' are two sources of training pairs; "
                                 "keep one (data.prepared or data.train)")
            if self.split is not None:
                raise ValueError("'split' holds dev and test out of 'train' in memory; with 'prepared', give 'dev' "
                                 "and 'test' corpora instead")
        elif self.train is None and not self.describes_pretrained:
            raise ValueError("no data: set 'task: dates', or give a 'train:' corpus ({tsv: FILE} or {src:, tgt:}), "
                             "or a 'prepared:' directory")
        for name in ("train", "test"):
            corpus = getattr(self, name)
            if corpus is not None and corpus.align is not None:
                raise ValueError(f"{name}.align: gold alignments are read for the dev corpus only (data.dev.align); "
                                 f"score {name} alignments with `heed align --gold`")
        if self.split is not None and (self.dev is not None or self.test is not None):
            raise ValueError("'split' holds dev and test out of 'train'; remove it or remove 'dev'/'test'")
        if self.shared_vocab and self.tokenizer.src != self.tokenizer.tgt:
            raise ValueError("shared_vocab trains one tokenizer for both sides, but tokenizer.src "
                             f"({self.tokenizer.src.kind}, vocab_size {self.tokenizer.src.vocab_size}) and tokenizer.tgt "
                             f"({self.tokenizer.tgt.kind}, vocab_size {self.tokenizer.tgt.vocab_size}) differ; "
                             "make them the same")
        return self


# ---------------------------------------------------------------------------------------- train


class ScheduleConfig(_Strict):
    """Learning-rate schedule.

    - constant: `train.lr` throughout;
    - plateau: multiply the rate by `factor` when the dev metric (`early_stopping.metric`) has not
      improved for `patience` evaluations in a row, never below `min_lr`;
    - warmup: rise linearly to `train.lr` over `warmup_steps`, then `decay: inverse_sqrt`
      (lr * sqrt(warmup_steps / step), Vaswani et al. 2017, eq. 3) or `decay: none` (stay)."""

    name: Literal["constant", "plateau", "warmup"] = Field("constant", description="the schedule (above)")
    factor: float = Field(0.5, gt=0.0, lt=1.0, description="plateau: the rate is multiplied by this")
    patience: int = Field(1, ge=0, description="plateau: evaluations without improvement before lowering")
    min_lr: float = Field(1e-5, ge=0.0, description="plateau: the rate never goes below this")
    warmup_steps: int = Field(1000, gt=0, description="warmup: updates of the linear rise")
    decay: Literal["inverse_sqrt", "none"] = Field("inverse_sqrt", description="warmup: what follows the rise")

    _OWNERS: ClassVar[dict[str, str]] = {"factor": "plateau", "patience": "plateau", "min_lr": "plateau",
                                         "warmup_steps": "warmup", "decay": "warmup"}

    @model_validator(mode="after")
    def _fields_of_name(self) -> ScheduleConfig:
        for field in sorted(self.model_fields_set):
            owner = self._OWNERS.get(field)
            if owner is not None and owner != self.name:
                raise ValueError(f"'{field}' belongs to schedule '{owner}', not '{self.name}'")
        return self

    @model_serializer(mode="wrap")
    def _only_own_fields(self, handler: Any) -> dict[str, Any]:
        """Saved configs list only the chosen schedule's settings (and so load back)."""
        data = handler(self)
        return {k: v for k, v in data.items() if self._OWNERS.get(k, self.name) == self.name}


class EarlyStoppingConfig(_Strict):
    """The dev metric that picks the best checkpoint, drives the plateau schedule and stops training."""

    metric: Literal["bleu", "exact_match", "loss"] = Field("bleu", description="the dev metric (loss: lower is "
                                                           "better; the others: higher)")
    patience: int | None = Field(5, ge=1, description="evaluations without improvement before stopping; null = never")
    target: float | None = Field(None, description="stop as soon as the metric reaches this (e.g. 100 for exact_match)")




SUPERVISION = "train.alignment.supervision"  # a file of links, resolved like a corpus path
SUPERVISION_WORDS = ("self", "task")  # the supervisions that are not files


class GuidedAlignmentConfig(_Strict):
    """Guided alignment training (Garg et al. 2019): the cross-entropy between the chosen heads'
    attention (their mean, at the step that predicts each target token) and links from an aligner,
    added to the loss with `weight`, normalised per target token like the translation loss. The
    model then aligns as it translates, and `heed align` reads the trained heads by default.

    supervision:
    - a Pharaoh file (`i-j` links between 0-based whitespace words, source first), one line per
      pair of data.train as written (before `reverse` and `split`): any aligner's output, e.g.
      `heed align --external eflomal`;
    - `task`: the generated task's own links (dates, names);
    - `self`: the model's own shift-att from `start_step` on (Chen et al. 2020's Shift-AET): the
      layer's head mean, read at the step *after* each token, supervises the chosen heads at the
      step that predicts it, so the alignment is there at decoding time."""

    supervision: Path | Literal["self", "task"] = Field(
        description="a Pharaoh file of links line-aligned with data.train, 'task' (a generated task's own "
                    "links) or 'self' (the model's own shift-att)")
    units: Literal["words", "chars"] = Field("words", description="what the file's target positions count: "
                                             "whitespace words, or characters without the spaces")
    layer: int | None = Field(None, ge=0, description="the decoder layer whose heads are trained (0-based); "
                              "null = the second-to-last of a Transformer (Garg et al.), an RNN's one attention")
    heads: list[Annotated[int, Field(ge=0)]] = Field(default_factory=lambda: [0], min_length=1,
                                                     description="the heads of that layer whose mean attention "
                                                     "is trained (0-based; an RNN has head 0)")
    weight: float = Field(0.05, gt=0.0, description="the alignment loss's weight beside the translation loss "
                          "(lambda; Garg et al. use 0.05)")
    start_step: int = Field(0, ge=0, description="updates of plain training before the alignment loss starts "
                            "('self' needs the attention formed first)")

    @model_validator(mode="after")
    def _heads_once(self) -> GuidedAlignmentConfig:
        if len(set(self.heads)) != len(self.heads):
            raise ValueError(f"heads {self.heads} name a head twice")
        if self.units == "chars" and not isinstance(self.supervision, Path):
            raise ValueError("units describes a supervision file; 'task' and 'self' bring their own")
        return self


class TrainConfig(_Strict):
    seed: int = Field(1, ge=0, le=2**63 - 1, description="seeds torch's generators (0 to 2^63 - 1)")
    epochs: int = Field(10, gt=0, description="passes over the training data at most")
    max_steps: int | None = Field(None, gt=0, description="stop after this many updates (whichever comes first)")
    max_minutes: float | None = Field(None, gt=0, description="stop once this run has trained this long "
                                      "(wall clock, evaluations included; counted afresh on resume)")
    init: Path | None = Field(None, description="fine-tune: start from this model directory (an imported pretrained "
                                                "translator, or any heed model) with its weights, architecture, "
                                                "tokenizers and vocabularies")
    optimizer: Literal["adam"] = Field("adam", description="the optimizer (Adam, fused where torch has it)")
    lr: float = Field(1e-3, gt=0.0, description="the learning rate (the peak, with a warmup schedule)")
    betas: tuple[Annotated[float, Field(ge=0.0, lt=1.0)], Annotated[float, Field(ge=0.0, lt=1.0)]] = Field(
        (0.9, 0.999), description="Adam's beta1 and beta2, each in [0, 1)")
    weight_decay: float = Field(0.0, ge=0.0, description="Adam's L2 penalty")
    clip: float | None = Field(1.0, gt=0.0, description="max gradient norm; null = no clipping")
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig, description="the learning-rate schedule")
    label_smoothing: float = Field(0.1, ge=0.0, lt=1.0, description="the share of probability spread over the "
                                   "vocabulary in the loss (Szegedy et al. 2016)")
    early_stopping: EarlyStoppingConfig = Field(default_factory=EarlyStoppingConfig,
                                                description="the dev metric, and when it stops training")
    eval_every: int | None = Field(None, gt=0, description="evaluate every N updates; null = once per epoch")
    keep_checkpoints: int = Field(0, ge=0, le=1000, description="also keep the weights of the last N evaluations "
                                  "as checkpoints/step-NNNNNNN model directories, for `heed average` (Vaswani "
                                  "et al. 2017 average the last 5); 0 = keep only last and best")
    log_every: int = Field(50, gt=0, description="a log line (loss, lr, tokens/s) every N updates")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto = CUDA when there is a GPU")
    bf16: bool | None = Field(None, description="bf16 autocast, float32 weights; null = on CUDA GPUs with bf16")
    threads: int | None = Field(None, gt=0, le=MAX_THREADS, description="torch CPU threads; null = torch's default")
    accumulate: int = Field(1, gt=0, description="batches whose gradients are summed into one update (per "
                            "process); the loss is normalised by the update's target tokens, so k batches "
                            "make one update as one batch k times the size would")
    backend: Literal["auto", "gloo", "nccl"] = Field("auto", description="torch.distributed backend under "
                                                     "torchrun; auto = nccl on CUDA GPUs, gloo on the CPU")
    compile: bool = Field(False, description="torch.compile (inductor) the decoder's teacher-forced pass, compiled "
                          "again for each new target length; it pays only on long runs with few target lengths "
                          "(figures: bench/RESULTS.md, \"torch.compile for training\"); eager, with one line "
                          "saying so, where no C++ compiler is found")
    alignment: GuidedAlignmentConfig | None = Field(None, description="guided alignment training: supervise "
                                                    "chosen attention heads with word links (above); null = none")


# ---------------------------------------------------------------------------------------- whole


class Config(_Strict):
    """A whole run: what to train on, the model, how to train it, how to decode, where to write."""

    data: DataConfig = Field(description="the sentence pairs (required)")
    model: ModelConfig = Field(default_factory=ModelConfig, description="the architecture: one family's config, "  # type: ignore[arg-type]
                                                                        "by model.family")
    train: TrainConfig = Field(default_factory=TrainConfig, description="the training loop")
    decode: DecodeConfig = Field(default_factory=DecodeConfig, description="decoding: the dev and test scores, and "
                                 "the model's defaults for translate and serve")
    output_dir: Path = Field(Path("runs/default"), description="where checkpoints, metrics.jsonl and model/ go")

    @model_validator(mode="before")
    @classmethod
    def _model_completed_from_data(cls, data: Any) -> Any:
        """The model's family completes `model:` from the `data:` section before validation (e.g.
        the RNN's location score takes its positions from data.max_src_len):
        heed.nn.family_config.FamilyConfig.complete."""
        if not (isinstance(data, dict) and isinstance(data.get("model"), dict)):
            return data
        name = family_of(data["model"])
        if name not in families.FAMILIES:
            return data  # the union's error names model.family
        family = family_config.config_class(name)
        section = data.get("data")
        if isinstance(section, dict):  # with its defaults, as the family reads it
            section = {**{name: info.default for name, info in DataConfig.model_fields.items()
                          if info.default is not PydanticUndefined}, **section}
        return {**data, "model": family.complete(data["model"], section)}

    @model_validator(mode="after")
    def _supervision_fits_data(self) -> Config:
        guided, data = self.train.alignment, self.data
        if guided is None:
            return self
        if guided.supervision == "task" and data.task is None:
            raise ValueError("train.alignment.supervision 'task' takes a generated task's own links (data.task: "
                             "dates or names); for a corpus give a Pharaoh file of its links, or 'self'")
        if isinstance(guided.supervision, Path):
            if data.task is not None:
                raise ValueError(f"train.alignment.supervision: task '{data.task}' generates its pairs and their "
                                 "links; use supervision: task")
            if data.prepared is not None:
                raise ValueError("train.alignment.supervision: a file of links is read beside the corpus text "
                                 "(data.train); prepared shards hold no links, so train from data.train, or use "
                                 "supervision: self")
        return self


def positions_problem(config: Config) -> str | None:
    """Why a Transformer with learned positions cannot train on `config`'s data, or None: the
    encoder reads a source and its </s>, the decoder <s> and the target, so the longest pair the data
    keeps (`data.max_src_len`, `data.max_tgt_len`) needs one position more than its tokens, and a
    position past the table would silently reuse its last row."""
    limit, data = config.model.position_limit, config.data
    need = max(data.max_src_len, data.max_tgt_len) + 1
    if limit is None or need <= limit:
        return None
    return (f"model.max_positions is {limit}, but data.max_src_len {data.max_src_len} and "
            f"data.max_tgt_len {data.max_tgt_len} keep pairs that need {need} positions (their tokens and "
            f"</s> or <s>); raise model.max_positions to {need}, or lower both to {limit - 1}")


def decode_length_problem(decode: DecodeConfig) -> str | None:
    """Why `decode` can never emit a token, or None. max_len = floor(a * src_len + b) (heed.search.scoring);
    with a = 0 and b = 0 it is 0 for every source, so every translation would be silently empty."""
    if decode.max_len_a == 0 and decode.max_len_b < 1:
        return (f"max_len_b {decode.max_len_b} with max_len_a 0 allows no output token, so every translation "
                "would be empty; set max_len_b >= 1 (max output tokens = floor(max_len_a * src_len + max_len_b))")
    return None


# ------------------------------------------------------------------------------- load and save


def load_config(path: str | os.PathLike[str], overrides: Sequence[str] = (), *, environment: bool = True,
                streams: bool = True, complete: Completion | None = None) -> Config:
    """Read a YAML config, apply `section.field=value` overrides, validate. `environment=False`
    ignores HEED_DATA_ROOT (for the configs heed saved itself, whose paths are relative to them).
    A user's config may come through a pipe or a named pipe; with `streams=False` (a model
    directory's, which heed wrote) anything but a regular file is refused. `complete`: see
    config_from_dict.

    Raises ConfigError naming the file (or `--set`) and the dotted field."""
    path = Path(path)
    try:
        # A pipe or FIFO is read too (`heed train <(sed ... base.yaml)`); a device is refused
        with (open_stream(path, devices=False) if streams else open_regular(path)) as f:
            streamed = not stat.S_ISREG(os.fstat(f.fileno()).st_mode)
            text = yamlio.read_capped(f).decode("utf-8")
    except yamlio.TooLargeError as e:
        raise ConfigError(str(e), path=path) from None
    except FileNotFoundError:
        raise ConfigError("no such config file", path=path) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, expected a YAML config file", path=path) from None
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text; save the config as UTF-8", path=path) from None
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror or e}", path=path) from None
    try:
        raw = yamlio.parse(text)
    except yamlio.YamlError as e:
        raise ConfigError(str(e), path=path) from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"expected a mapping of sections (data:, model:, ...), got {type(raw).__name__}", path=path)
    # a streamed config's relative paths are the current directory's (/dev/fd/63's folder means nothing)
    base_dir = Path.cwd() if streamed else path.parent
    return config_from_dict(raw, source=path, base_dir=base_dir, overrides=overrides, environment=environment,
                            complete=complete)


def config_from_dict(raw: dict[str, Any], *, source: str | os.PathLike[str] | None = None,
                     base_dir: str | os.PathLike[str] = ".", overrides: Sequence[str] = (),
                     environment: bool = True, complete: Completion | None = None) -> Config:
    """Validate a config mapping. Relative corpus paths in `raw` resolve against its data root
    (`data_root`), output_dir against `base_dir`; paths in `overrides` against the current directory.
    The config returned holds absolute corpus paths and `data.root` None: the root has done its work.
    `complete`: the caller's completion of the mapping (paths resolved, overrides applied) before
    it is validated; a ConfigError it raises names the file, or `--set` where the field was set
    there. Training's (heed.train.setup.merge_init) fills in what train.init's model fixes; reading
    a config by itself opens no other model directory."""
    parsed = [parse_override(item) for item in overrides]
    base = Path(base_dir)
    raw = _resolve_paths(_deep_copy(raw), base, data_root(raw, base, dict(parsed), environment=environment))
    for key, value in parsed:
        _set_dotted(raw, key, value)
    overridden = [key for key, _ in parsed]
    if complete is not None:
        try:
            raw = complete(raw)
        except ConfigError as e:
            raise ConfigError(e.message, field=e.field, path="--set" if e.field in overridden else source) from None
    try:
        config = Config.model_validate(raw)
    except ValidationError as e:
        raise _config_error(e, source=source, overridden=overridden) from None
    config.data.root = None
    if config.model.copy and config.data.prepared is not None:
        # Prepared shards keep source ids of the source vocabulary, where every unknown word is one
        # <unk>: the words a copy model copies are gone (heed.data.extended needs the source text).
        raise ConfigError("copy attention needs the source words, and a prepared corpus keeps only their ids; "
                          "train a copy model on raw text (data.train)", field="model.copy",
                          path="--set" if any(k in ("model", "model.copy", "data", "data.prepared") for k in overridden)
                          else source)
    clash = config.model.data_problem(config.data)  # the model's family's rules about the data
    if clash is not None:
        field, message = clash
        raise ConfigError(message, field=field, path="--set" if any(k.split(".")[0] in ("model", "data")
                                                                   for k in overridden) else source)
    problem = decode_length_problem(config.decode)
    if problem is not None:
        from_override = any(key in ("decode", "decode.max_len_a", "decode.max_len_b") for key in overridden)
        raise ConfigError(problem, field="decode.max_len_b", path="--set" if from_override else source)
    return config


def parse_override(item: str) -> tuple[str, Any]:
    """`train.epochs=20` -> ("train.epochs", 20). The value is a YAML scalar (or flow
    mapping/list: `data.train={tsv: x.tsv}`). Raises ConfigError for an unknown field."""
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"expected FIELD=VALUE (e.g. train.epochs=20), got '{item}'", path="--set")
    _check_field(key)
    try:
        value = yamlio.parse(text) if text.strip() else None
    except yamlio.YamlError as e:
        raise ConfigError(f"cannot parse value '{text}' ({e.problem})", field=key, path="--set") from None
    if (_is_corpus_path(key) or key in (OUTPUT_DIR, DATA_ROOT, PREPARED)) and isinstance(value, str) or key == SUPERVISION and isinstance(value, str) and value not in SUPERVISION_WORDS:
        value = os.path.abspath(value)
    elif key.count(".") == 1 and key.split(".")[0] == "data" and key.split(".")[1] in CORPUS_SPLITS \
            and isinstance(value, dict):
        value = {k: os.path.abspath(v) if k in CORPUS_PATH_KEYS and isinstance(v, str) else v
                 for k, v in value.items()}
    return key, value


def config_to_dict(config: Config, *, relative_to: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Plain data (YAML/JSON-able). With `relative_to`, corpus paths and output_dir become relative
    to that directory, and `data.root` is "." where there are corpus paths: they resolve against the
    saved file's folder (read it back with `load_config(..., environment=False)`)."""
    data = config.model_dump(mode="json")
    if relative_to is not None:
        base = Path(relative_to).absolute()

        def rel(path: str) -> str:
            return Path(os.path.relpath(os.path.abspath(path), base)).as_posix()

        for split in CORPUS_SPLITS:
            corpus = data["data"].get(split)
            for key in CORPUS_PATH_KEYS:
                if corpus and corpus.get(key) is not None:
                    corpus[key] = rel(corpus[key])
                    data["data"]["root"] = "."
        if data["data"].get("prepared") is not None:
            data["data"]["prepared"] = rel(data["data"]["prepared"])
            data["data"]["root"] = "."
        guided = data["train"].get("alignment")
        if guided and guided["supervision"] not in SUPERVISION_WORDS:
            guided["supervision"] = rel(guided["supervision"])
            data["data"]["root"] = "."
        data[OUTPUT_DIR] = rel(data[OUTPUT_DIR])
    return data


def save_config(config: Config, path: str | os.PathLike[str]) -> None:
    """Write the resolved config as YAML (atomically); paths relative to the file."""
    path = Path(path)
    data = config_to_dict(config, relative_to=path.parent)
    header = "# heed resolved config: defaults filled in, overrides applied; paths relative to this file\n"
    text = header + yamlio.dump(data)
    atomic_write_text(path, text)


# ------------------------------------------------------------------------------------- helpers


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value


def _is_corpus_path(key: str) -> bool:
    parts = key.split(".")
    return len(parts) == 3 and parts[0] == "data" and parts[1] in CORPUS_SPLITS and parts[2] in CORPUS_PATH_KEYS


def data_root(raw: dict[str, Any], base: Path, overrides: dict[str, Any] | None = None, *,
              environment: bool = True) -> Path:
    """The folder the relative corpus paths of config mapping `raw` (read from a file in folder
    `base`) resolve against, the first given of: `--set data.root=DIR` (in `overrides`, already
    absolute), $HEED_DATA_ROOT (against the current directory; only with `environment`), the file's
    `data.root` (against `base`; `--set data.root=null` skips it), and `base` itself."""
    overrides = overrides or {}
    if isinstance(overrides.get(DATA_ROOT), str):
        return Path(overrides[DATA_ROOT])
    env = os.environ.get(DATA_ROOT_ENV) if environment else None
    if env:
        return Path(os.path.abspath(env))
    data = raw.get("data")
    given = data.get("root") if isinstance(data, dict) and DATA_ROOT not in overrides else None
    if isinstance(given, str) and given:
        return Path(os.path.abspath(base / given))
    return base


def _resolve_paths(raw: dict[str, Any], base: Path, root: Path) -> dict[str, Any]:
    """Relative corpus paths (and a guided alignment's supervision file) in `raw` made absolute
    against `root`, and output_dir and train.init against `base`."""
    output_dir = raw.get(OUTPUT_DIR)
    if isinstance(output_dir, str) and not os.path.isabs(output_dir):
        raw[OUTPUT_DIR] = os.path.abspath(base / output_dir)
    train = raw.get("train")
    init = train.get("init") if isinstance(train, dict) else None
    if isinstance(train, dict) and isinstance(init, str) and not os.path.isabs(init):  # a model directory, beside the config like output_dir
        train["init"] = os.path.abspath(base / init)
    guided = train.get("alignment") if isinstance(train, dict) else None
    if isinstance(guided, dict):
        supervision = guided.get("supervision")
        if isinstance(supervision, str) and supervision not in SUPERVISION_WORDS and not os.path.isabs(supervision):
            guided["supervision"] = os.path.abspath(root / supervision)
    data = raw.get("data")
    if isinstance(data, dict):
        prepared = data.get("prepared")
        if isinstance(prepared, str) and not os.path.isabs(prepared):
            data["prepared"] = os.path.abspath(root / prepared)
        for split in CORPUS_SPLITS:
            corpus = data.get(split)
            if isinstance(corpus, dict):
                for key in CORPUS_PATH_KEYS:
                    value = corpus.get(key)
                    if isinstance(value, str) and not os.path.isabs(value):
                        corpus[key] = os.path.abspath(root / value)
    return raw


def _set_dotted(raw: dict[str, Any], key: str, value: Any) -> None:
    node = raw
    parts = key.split(".")
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            raise ConfigError(f"'{'.'.join(parts[:i + 1])}' is not a section, cannot set a field inside it",
                              field=key, path="--set")
        node = child
    node[parts[-1]] = value


class _AnyFamily:
    """`model:` before its family is known: the fields of every family registered now
    (heed.nn.families), for naming unknown keys and suggesting known ones."""

    @property
    def model_fields(self) -> dict[str, Any]:
        return {name: info for family in family_config.config_classes().values()
                for name, info in family.model_fields.items()}


def _model_class(annotation: Any) -> Any:
    """The pydantic model inside an annotation such as `X`, `X | None`, `Optional[X]` (for `model:`,
    _AnyFamily)."""
    if annotation is ModelConfig:
        return _AnyFamily()
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _model_class(arg)
            if found is not None:
                return found
    return None


def _model_at(parts: Sequence[str | int]) -> Any:
    """The config model class found by walking field names `parts` down from Config."""
    cls: Any = Config
    for part in parts:
        if cls is None or not isinstance(part, str) or part not in cls.model_fields:
            return None
        cls = _model_class(cls.model_fields[part].annotation)
    return cls


def _homes(name: str) -> list[str]:
    """Dotted sections of the schema that have a field `name` ("" for the top level)."""
    found: list[str] = []

    def walk(cls: Any, prefix: str) -> None:
        if name in cls.model_fields:
            found.append(prefix)
        for field, info in cls.model_fields.items():
            child = _model_class(info.annotation)
            if child is not None:
                walk(child, f"{prefix}.{field}" if prefix else field)

    walk(Config, "")
    return found


def _unknown_field_message(cls: Any, name: str) -> str:
    homes = _homes(name)
    if homes:
        # The right key in the wrong section (`train.reverse`, `data.train: {reverse: ...}`): say where
        # it goes, which a spelling suggestion from this section cannot.
        names = [f"'{home}'" if home else "the top level" for home in homes]
        if len(names) == 1:
            dotted = f"{homes[0]}.{name}" if homes[0] else name
            return f"unknown field here; '{name}' belongs under {names[0]} ({dotted})"
        return f"unknown field here; '{name}' belongs under {', '.join(names[:-1])} or {names[-1]}"
    close = difflib.get_close_matches(name, list(cls.model_fields), n=1, cutoff=0.6)
    hint = f" (did you mean '{close[0]}'?)" if close else f" (known: {', '.join(cls.model_fields)})"
    return f"unknown field{hint}"


def _check_field(key: str) -> None:
    """Raise ConfigError unless `key` names a field of the config schema."""
    parts = key.split(".")
    for i, part in enumerate(parts):
        cls = _model_at(parts[:i])
        if cls is None:
            return  # inside a free-form value (a list or mapping): validation will judge it
        if part not in cls.model_fields:
            raise ConfigError(_unknown_field_message(cls, part), field=".".join(parts[: i + 1]), path="--set")


def _dotted(loc: Sequence[str | int]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _config_error(error: ValidationError, *, source: str | os.PathLike[str] | None,
                  overridden: Sequence[str]) -> ConfigError:
    errors = error.errors(include_url=False)
    # A misspelt key also makes the key it meant "missing": name the misspelling first.
    errors.sort(key=lambda e: e["type"] != "extra_forbidden")
    first = errors[0]
    loc, family = list(first["loc"]), None
    if loc[:1] == ["model"]:  # validated as one family's config: name the field as the user wrote it
        loc, family = without_family_tag(loc, at=1)
    if first["type"] == "unknown_family":
        loc = [*loc, "family"]
    field = _dotted(loc) or None
    if first["type"] == "extra_forbidden":
        cls = family if family is not None and len(loc) == 2 else _model_at(loc[:-1])
        message = _unknown_field_message(cls, str(loc[-1])) if cls is not None else "unknown field"
    elif first["type"] == "missing":
        message = "required field is missing"
    else:
        message = first["msg"]
        for prefix in ("Value error, ", "Assertion failed, "):
            message = message.removeprefix(prefix)
        message = message[:1].lower() + message[1:]
        if "input" in first and not isinstance(first["input"], (dict, list)) and first["type"] != "value_error":
            message += f" (got {first['input']!r})"
    from_override = any(field and (field == key or field.startswith(key + ".")) for key in overridden)
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    where = "--set" if from_override else source
    return ConfigError(message, field=field, path=where)
