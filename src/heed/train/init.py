"""Fine-tuning: `train.init: DIR` (`heed train CONFIG --init DIR`) starts a run from a model
directory, an imported pretrained translator (heed import) or any model heed trained, on the run's
own corpus.

    a config's mapping + DIR's config.yaml --merge_init--> the run's config: DIR's architecture
        (model:), its tokenizers and vocabularies (data.tokenizer, data.vocab, data.shared_vocab),
        its language pair and decode settings where the config gives none (heed.config.
        config_from_dict merges a user's config so, before validating it)
    DIR --init_model--> its codec (the run tokenizes with it: ids stay the model's); the run's
        model then loads DIR's weights

A field the config does give must agree with DIR's (a mismatch is a ConfigError naming it), except
the dropouts, which are training settings a fine-tuning run may change. A resumed run reads DIR's
config again (not its weights: the checkpoint has the run's own). The run's saved config holds
the merged sections, so its model directory loads without DIR.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from heed.config import Config, config_to_dict
from heed.data.codec import Codec
from heed.errors import ConfigError, ModelDirError

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
    from heed.checkpoint import CONFIG_FILE, find_model_dir
    from heed.config import load_config

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
    filled in: its `model:` (but the dropouts the config gives), data.tokenizer, data.vocab and
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
    from heed.checkpoint import find_model_dir, read_meta, verify_files

    directory = find_model_dir(config.train.init)
    verify_files(directory, read_meta(directory))
    return InitModel(directory, Codec.load(directory, data=config.data, copy=config.model.copy))


__all__ = ["InitModel", "init_model", "merge_init"]
