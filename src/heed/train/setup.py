"""Opening a training run: the output directory checked and locked, the data loaded (and its
tokenizers built or restored), the checkpoint to resume read and checked against the config, the
world and the data. A fresh run creates nothing until its data has loaded. Under torchrun rank 0
opens the run and hands the others its checkpoint and tokenizers.

Fine-tuning: `train.init: DIR` (`heed train CONFIG --init DIR`) starts a run from a model
directory, an imported pretrained translator (heed import) or any model heed trained, on the run's
own corpus.

    a config's mapping + DIR's config.yaml --merge_init--> the run's config: DIR's architecture
        (model:), its tokenizers and vocabularies (data.tokenizer, data.vocab, data.shared_vocab),
        its language pair and decode settings where the config gives none (load_run_config reads
        a run's config so: merge_init completes the mapping before heed.config validates it)
    DIR --init_model--> its codec (the run tokenizes with it: ids stay the model's); the run's
        model then loads DIR's weights

A field the config does give must agree with DIR's (a mismatch is a ConfigError naming it), except
the dropouts, which are training settings a fine-tuning run may change. A resumed run reads DIR's
config again (not its weights: the checkpoint has the run's own). The run's saved config holds
the merged sections, so its model directory loads without DIR. heed.config itself never opens DIR:
reading a config does no I/O of other model directories."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from heed.checkpoint import (
    CONFIG_FILE,
    METRICS_FILE,
    Checkpoint,
    find_model_dir,
    load_checkpoint,
    read_meta,
    resolve_dir,
    verify_files,
)
from heed.config import Config, TrainConfig, config_to_dict, load_config
from heed.data.batching import epoch_rng, kept_indices, plan_batches
from heed.data.codec import Codec, Corpora, Example, load_corpora, open_prepared, write_heldout
from heed.data.corpus import Pair
from heed.data.prepared import PreparedCorpus
from heed.data.supervision import TokenLinks, training_links
from heed.errors import ConfigError, HeedError, ModelDirError
from heed.plumbing.distributed import (
    World,
    run_on_main,
    updates_in,
)
from heed.plumbing.lock import RunLock
from heed.train.alignment import check_guided
from heed.train.resume import (
    check_resumable,
    check_same_data,
    check_same_world,
    codec_files,
    codec_from_files,
    run_fingerprint,
)

# Fields of `model:` a fine-tuning run may set to other values than its init model's.
TRAINING_FIELDS = frozenset({"dropout", "attention_dropout"})
# Fields of `data:` that make the ids: the init model's, whatever the config says.
CODEC_FIELDS = ("tokenizer", "vocab", "shared_vocab")


@dataclass(frozen=True)
class InitModel:
    """The model a fine-tuning run starts from: its directory (whose weights the run's model loads,
    heed.checkpoint.load_weights_into) and its codec, for the run's language pair."""

    directory: Path
    codec: Codec


def _init_config(directory: Path) -> dict[str, Any]:
    try:
        model_dir = find_model_dir(directory)
        return config_to_dict(load_config(model_dir / CONFIG_FILE, environment=False, streams=False))
    except (ModelDirError, ConfigError) as e:
        raise ConfigError(f"{directory}: not a model directory to start from ({e})", field="train.init") from None


def _agrees(given: Any, theirs: Any) -> bool:
    """Whether what a config gives (a value, or a section of some of the fields) says what the
    init model's resolved config says."""
    if isinstance(given, dict) and isinstance(theirs, dict):
        return all(key in theirs and _agrees(value, theirs[key]) for key, value in given.items())
    return bool(given == theirs)


def merge_init(raw: dict[str, Any]) -> dict[str, Any]:
    """A user's config mapping (paths resolved, not validated) with what train.init's model fixes
    filled in (heed.config.config_from_dict's `complete` for a training run's config): its `model:` (but the dropouts the config gives), data.tokenizer, data.vocab and
    data.shared_vocab, the language pair and `decode:` where the config gives none. A field the
    config gives that says otherwise is a ConfigError naming it. `raw` itself without train.init."""
    train = raw.get("train")
    init = train.get("init") if isinstance(train, dict) else None
    if not init or not isinstance(raw.get("model", {}), dict) or not isinstance(raw.get("data", {}), dict):
        return raw  # nothing to fine-tune from, or a section validation refuses anyway
    theirs = _init_config(Path(init))
    model = raw.get("model") or {}
    for field, value in model.items():
        if field not in TRAINING_FIELDS and not _agrees(value, theirs["model"].get(field)):
            raise ConfigError(f"is {value!r} here but {theirs['model'].get(field)!r} in train.init's model ({init}): "
                              "a fine-tuning run keeps the model's architecture; leave it out", field=f"model.{field}")
    raw["model"] = {**theirs["model"], **{f: v for f, v in model.items() if f in TRAINING_FIELDS}}
    data = raw.setdefault("data", {})
    for field in CODEC_FIELDS:
        if field in data and not _agrees(data[field], theirs["data"][field]):
            raise ConfigError(f"differs from train.init's model ({init}), whose tokenizers and vocabularies a "
                              "fine-tuning run reads its corpus with; leave it out", field=f"data.{field}")
        data[field] = theirs["data"][field]
    for field in ("src_lang", "tgt_lang"):
        data[field] = data.get(field) or theirs["data"].get(field)
    raw.setdefault("decode", theirs["decode"])
    return raw


def init_model(config: Config) -> InitModel | None:
    """train.init's directory, its files checked against their sha256, and its codec with the run's
    data.src_lang and data.tgt_lang (`config` is what merge_init made); None without train.init."""
    if config.train.init is None:
        return None
    directory = find_model_dir(config.train.init)
    verify_files(directory, read_meta(directory))
    return InitModel(directory, Codec.load(directory, data=config.data, copy=config.model.copy))


def load_run_config(path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> Config:
    """A training run's config (`heed train`, `heed prepare`): heed.config.load_config with
    train.init's model merged in before validation (merge_init)."""
    return load_config(path, overrides, complete=merge_init)


def run_updates(batches_per_epoch: int, train: TrainConfig, world: World) -> int:
    """The updates a run of `train.epochs` epochs of `batches_per_epoch` global batches makes, at
    most `train.max_steps`."""
    updates = train.epochs * updates_in(batches_per_epoch, world=world, accumulate=train.accumulate)
    return updates if train.max_steps is None else min(updates, train.max_steps)


@dataclass
class RunData:
    codec: Codec
    train: list[Example] | PreparedCorpus  # shards on disk, read by batch, with data.prepared
    dev_pairs: list[Pair]
    dev: list[Example]
    test_pairs: list[Pair]
    dropped: int
    corpora: Corpora
    train_links: TokenLinks | None = None  # guided alignment's links of each `train` example, in its order
    init: InitModel | None = None  # a fresh fine-tuning run's start (train.init): whose weights it loads


class RunSetup:
    """What `Trainer` opens before it trains (see the module doc): `open(run)` -> (the checkpoint to
    resume or None, the data's fingerprint, the data)."""

    def __init__(self, config: Config, *, resume: bool, allow_data_change: bool, world: World,
                 console: Console | None) -> None:
        self.config, self.resume, self.allow_data_change, self.world, self.console = (
            config, resume, allow_data_change, world, console)
        self.output_dir = Path(config.output_dir)
        self.ckpt_dir = self.output_dir / "checkpoints"
        self.model_dir = self.output_dir / "model"

    def _open_run(self, run: contextlib.ExitStack) -> tuple[Checkpoint | None, dict[str, Any], RunData]:
        """Check the output directory, load the data, lock the directory for the rest of `run`, and
        return the checkpoint to resume (None for a fresh run), the data's fingerprint and the data.
        A fresh run creates the directory only once its data has loaded, so a mistake leaves nothing
        behind; it refuses a directory that holds a run."""
        if self.output_dir.exists() and not self.output_dir.is_dir():
            raise HeedError(f"output_dir {self.output_dir} is a file; choose a directory")
        if self.resume:
            if resolve_dir(self.ckpt_dir / "last") is None:
                raise HeedError(f"{self.output_dir}: no checkpoint to resume from (no {self.ckpt_dir / 'last'}); "
                                "start without --resume")
            self._lock(run)
            checkpoint = load_checkpoint(self.ckpt_dir / "last")
            check_resumable(checkpoint.config, self.config, checkpoint.directory)
            check_same_world(checkpoint.trainer.world_size, self.world.size, checkpoint.directory)
            data = self._load_data(Codec.load(checkpoint.directory, data=checkpoint.config.data,
                                              copy=checkpoint.config.model.copy))
            fingerprint = run_fingerprint(self.config)
            if checkpoint.trainer.data is not None and not self.allow_data_change:
                check_same_data(checkpoint.trainer.data, fingerprint, self.config.data)
            self._write_heldout(data)
            return checkpoint, fingerprint, data
        self._refuse_a_run()  # before the data loads, which may take minutes
        check_guided(self.config, planned_updates=None)
        init = init_model(self.config)
        data = self._load_data(None if init is None else init.codec)
        data.init = init
        check_guided(self.config, planned_updates=self._planned_updates(data))
        fingerprint = run_fingerprint(self.config)
        try:
            self.output_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise HeedError(f"output_dir {self.output_dir}: cannot create it ({e.strerror or e})") from None
        self._lock(run)
        self._refuse_a_run()  # again under the lock: another run may have written one meanwhile
        (self.output_dir / METRICS_FILE).unlink(missing_ok=True)
        self._write_heldout(data)
        return None, fingerprint, data

    def open(self, run: contextlib.ExitStack) -> tuple[Checkpoint | None, dict[str, Any], RunData]:
        """`_open_run` on rank 0 (the one that touches the output directory); under torchrun the
        other ranks get its checkpoint and tokenizers/vocabularies (so a node without the output
        directory can join) and read the corpus themselves."""
        if not self.world.is_distributed:
            return self._open_run(run)

        opened: list[RunData] = []  # rank 0's data, which stays on rank 0

        def open_on_main() -> tuple[Checkpoint | None, dict[str, Any], dict[str, bytes]]:
            checkpoint, fingerprint, data = self._open_run(run)
            opened.append(data)
            return checkpoint, fingerprint, codec_files(data.codec)

        checkpoint, fingerprint, files = run_on_main(open_on_main, self.world)
        data = opened[0] if opened else self._load_data(codec_from_files(files, self.config.data))
        return checkpoint, fingerprint, data

    def _write_heldout(self, data: RunData) -> None:
        """With `data.split`, the held-out dev and test sentences exist only in memory: write them
        to OUTPUT_DIR/data/{dev,test}.{src,tgt} so `heed evaluate` and `compare` can use them.
        The split is deterministic, so a resumed run writes the same files."""
        if self.config.data.split is None:
            return
        written = write_heldout(data.corpora, self.output_dir / "data")
        if written and self.console is not None:
            self.console.print(f"held-out sentences: {self.output_dir / 'data'} "
                               f"({', '.join(sorted(p.name for p in written.values()))})", markup=False)

    def _refuse_a_run(self) -> None:
        if resolve_dir(self.ckpt_dir / "last") is not None or resolve_dir(self.model_dir) is not None:
            raise HeedError(f"{self.output_dir}: holds a training run already; resume it with --resume, "
                            "or choose another --output-dir")

    def _lock(self, run: contextlib.ExitStack) -> None:
        lock = run.enter_context(RunLock(self.output_dir))
        if lock.note is not None and self.console is not None:
            self.console.print(f"[yellow]{escape(lock.note)}[/]")

    def _load_data(self, codec: Codec | None) -> RunData:
        cfg = self.config.data
        corpora = load_corpora(cfg, progress=self._reading)
        train: list[Example] | PreparedCorpus
        links: TokenLinks | None = None
        if cfg.prepared is not None:
            # sha256 of every shard, once per run: seconds for millions of pairs, against a flipped bit
            # silently training on wrong ids (heed.data.prepared)
            train, prepared_codec = open_prepared(cfg, verify_hashes=True)
            if codec is not None and (difference := codec.difference(prepared_codec)) is not None:
                raise ConfigError(f"its {difference} differs from train.init's model ({self.config.train.init}); "
                                  "prepare the corpus with that model's tokenizers", field="data.prepared")
            codec = codec or prepared_codec
            dropped = train.dropped
        else:
            if codec is None:
                codec = Codec.build(corpora.train, cfg, warn=self._warn, copy=self.config.model.copy)
            examples = codec.encode_pairs(corpora.train)
            keep = kept_indices(examples, max_src_len=cfg.max_src_len, max_tgt_len=cfg.max_tgt_len)
            train, dropped = [examples[k] for k in keep], len(examples) - len(keep)
            links = training_links(cfg, self.config.train.alignment, corpora, codec, keep)
        if not train:
            raise ConfigError(f"every training pair is longer than max_src_len={cfg.max_src_len} or "
                              f"max_tgt_len={cfg.max_tgt_len} tokens; raise them", field="data")
        return RunData(codec, train, corpora.dev, codec.encode_pairs(corpora.dev), corpora.test, dropped, corpora,
                       links)

    def _planned_updates(self, data: RunData) -> int:
        """The updates the run will make, as the trainer counts them (the first epoch's batches)."""
        t, d = self.config.train, self.config.data
        if isinstance(data.train, PreparedCorpus):
            batches = len(data.train.batches(batch_tokens=d.batch_tokens, max_sentences=d.max_sentences, seed=t.seed,
                                             epoch=0, pool_sentences=d.pool_sentences))
        else:
            batches = len(plan_batches([len(s) for s, _ in data.train], [len(t_) for _, t_ in data.train],
                                       batch_tokens=d.batch_tokens, max_sentences=d.max_sentences, shuffle=True,
                                       rng=epoch_rng(t.seed, 0)))
        return run_updates(batches, t, self.world)

    def _reading(self, what: str, pairs: int) -> None:
        if self.console is not None:
            self.console.print(f"reading {escape(what)}: {pairs:,} pairs", highlight=False)

    def _warn(self, message: str) -> None:
        if self.console is not None:
            self.console.print(f"[yellow]warning:[/] {escape(message)}")
