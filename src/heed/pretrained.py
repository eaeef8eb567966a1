"""`heed import`: a pretrained translator (a Hugging Face model directory, a Marian release, or a
hub id `hf:ORG/NAME`) becomes an ordinary heed model directory, which every heed command takes.

    hf:ORG/NAME --heed.hub--> heed's hub cache (HF_ENDPOINT, the token, HF_HUB_OFFLINE)
    DIR: config.json --model_type--> the family's converter (heed.nn.transformer.convert)
    DIR: a native release (Marian's .npz) --Family.releases--> its converter
        --> Converted(model fields, weights, codec) --> a built model with those weights
        --> heed.checkpoint.save_model_dir: safetensors, config.yaml, tokenizers, heed.json
            (sha256 of every file, and "pretrained": where it came from and at which revision)

Nothing is written before the whole model converted and loaded into heed's Transformer, and the
output directory is swapped in whole: a failed import leaves no half-written directory.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from heed.errors import ConfigError, HeedError, ModelDirError, OutputError

HUB_PREFIX = "hf:"
# What an import reads from a hub repository: the config, the weights (safetensors first) and the
# tokenizer's files; not the TensorFlow, Flax or Rust weights that many repositories also hold.
HUB_FILES = ("config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json",
             "vocab.json", "target_vocab.json", "source.spm", "target.spm", "sentencepiece.bpe.model", "tokenizer.json",
             "model.safetensors", "pytorch_model.bin")


def is_hub_id(source: str) -> bool:
    return source.startswith(HUB_PREFIX)


def parse_hub_id(source: str, revision: str | None = None) -> tuple[str, str | None]:
    """"hf:ORG/NAME[@REVISION]" -> (ORG/NAME, the revision: `revision` if given, else the one after @)."""
    repo, _, named = source[len(HUB_PREFIX):].partition("@")
    return repo, revision or named or None


def hub_files(available: set[str]) -> list[str]:
    """The files of HUB_FILES a hub repository with files `available` has, safetensors weights
    rather than pytorch_model.bin when it has both."""
    return [name for name in HUB_FILES if name in available
            and not (name == "pytorch_model.bin" and "model.safetensors" in available)]


def hub_download(repo: str, *, revision: str | None = None) -> tuple[Path, str]:
    """(local directory, commit) of hub repository `repo` ("ORG/NAME") at `revision` (a branch, tag
    or commit; the default branch when None), through heed's own hub client (heed.hub): HF_ENDPOINT,
    the token (HF_TOKEN or `hf auth login`'s) and offline mode (HF_HUB_OFFLINE=1: the cache only),
    into heed's cache (a second import reads it). Only HUB_FILES are fetched."""
    from heed import hub

    snapshot = hub.download(repo, revision, hub_files, cache_root=cache_root())
    return snapshot.directory, snapshot.commit


def convert_directory(directory: Path) -> Any:
    """A Hugging Face model directory -> heed.nn.transformer.convert.Converted, by config.json's
    model_type (or a native release a family recognises, such as Marian's .npz); a ModelDirError in
    one line for an architecture no family converts."""
    from heed.nn.families import families
    from heed.nn.transformer.convert.common import read_json

    if not directory.is_dir():
        raise ModelDirError(f"{directory}: no such directory; give a Hugging Face model directory (with "
                            "config.json), a Marian release (.npz, vocab.yml, source.spm, target.spm) or a hub id "
                            "hf:ORG/NAME")
    if not (directory / "config.json").exists():
        for family in families().values():
            for release, recognises in family.releases.items():
                if recognises(directory):
                    return family.converters[release](directory, None)
    config = read_json(directory / "config.json")
    kind = config.get("model_type") if isinstance(config, dict) else None
    converters = {name: convert for family in families().values() for name, convert in family.converters.items()}
    if not isinstance(kind, str) or kind not in converters:
        architectures = config.get("architectures") if isinstance(config, dict) else None
        names = [a for a in architectures if isinstance(a, str)] if isinstance(architectures, list) else []
        named = ", ".join(a[:60] for a in names[:3]) or "unnamed"
        shown = kind[:60] if isinstance(kind, str) else None
        raise ModelDirError(f"{directory / 'config.json'}: model_type {shown!r} ({named}) is not an architecture heed "
                            f"converts; heed imports {', '.join(sorted(converters))}")
    return converters[kind](directory, config)


def import_model(source: str | os.PathLike[str], output: str | os.PathLike[str], *,
                 revision: str | None = None, src_lang: str | None = None, tgt_lang: str | None = None) -> Path:
    """`heed import`: write the heed model directory `output` for `source`, a local Hugging Face
    directory, a Marian release directory or `hf:ORG/NAME` (at `revision`). Returns `output`.
    `output` may be a new path, an empty directory or an earlier heed model directory (replaced
    whole); anything else is refused.
    `src_lang`, `tgt_lang`: a many-language model's default pair (its config's data.src_lang and
    data.tgt_lang), checked against its languages before anything is written."""
    pair = {"src_lang": src_lang, "tgt_lang": tgt_lang}
    from heed.checkpoint import META_FILE

    out = Path(output)
    if out.exists() and not (out.is_dir() and (not any(out.iterdir()) or (out / META_FILE).exists())):
        raise OutputError("exists and is not a heed model directory; choose another -o or remove it", path=out)
    source = str(source)
    if is_hub_id(source):
        repo, revision = parse_hub_id(source, revision)
        directory, commit = hub_download(repo, revision=revision)
        return write_imported(directory, out, {"source": f"{HUB_PREFIX}{repo}", "revision": commit}, **pair)
    if revision is not None:
        raise HeedError("--revision chooses a commit of a hub model (hf:ORG/NAME); a local directory has none")
    return write_imported(Path(source), out, {"source": str(Path(source).resolve())}, **pair)


def write_imported(directory: Path, out: Path, origin: dict[str, str], *, src_lang: str | None = None,
                   tgt_lang: str | None = None) -> Path:
    """Convert the Hugging Face directory (or native release) `directory` and write it as the heed
    model directory `out`, swapped in whole once the weights have loaded; heed.json's "pretrained" records `origin`,
    the config a many-language model's default pair."""
    from heed.checkpoint import save_model_dir
    from heed.config import config_from_dict
    from heed.nn.build import build_model

    converted = convert_directory(directory)
    described = converted.described_by or directory / "config.json"
    converted.codec.with_languages(src_lang, tgt_lang)  # a code the model lacks is refused before any work
    data = {"tokenizer": {"src": {"kind": "sentencepiece"}, "tgt": {"kind": "sentencepiece"}},
            "shared_vocab": converted.codec.src_vocab is converted.codec.tgt_vocab,
            "src_lang": src_lang, "tgt_lang": tgt_lang}
    try:
        config = config_from_dict({"data": data, "model": converted.model, "decode": converted.decode,
                                   "output_dir": str(out)}, environment=False)
    except ConfigError as e:  # sizes the family refuses (its width not divisible by the heads, say)
        raise ModelDirError(f"{described}: describes a model heed cannot build: {e}") from None
    codec = converted.codec
    model = build_model(config.model, src_vocab_size=len(codec.src_vocab), tgt_vocab_size=len(codec.tgt_vocab),
                        **codec.special_ids())
    try:
        model.load_state_dict(converted.weights, strict=True)
    except RuntimeError as e:
        lines = str(e).splitlines()
        raise ModelDirError(f"{directory}: the weights do not fit the model {described.name} describes "
                            f"({(lines[1] if len(lines) > 1 else lines[0]).strip()})") from None
    info = {"pretrained": {**origin, **converted.source},
            **({"alignment": converted.alignment} if converted.alignment else {})}
    return save_model_dir(out, model=model, config=config, codec=codec, info=info)


def cache_root() -> Path:
    """heed's cache: $HEED_CACHE, else ~/.cache/heed. hub/ holds downloads, pretrained/ conversions."""
    return Path(os.environ.get("HEED_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "heed"))


def cache_dir() -> Path:
    """Where `imported` keeps hub models converted for heed."""
    return cache_root() / "pretrained"


def imported(source: str) -> Path:
    """The heed model directory of hub model `source` ("hf:ORG/NAME[@REVISION]"), converted once
    per commit into cache_dir() and read from there afterwards (heed.load("hf:...") uses it)."""
    repo, revision = parse_hub_id(source)
    directory, commit = hub_download(repo, revision=revision)  # checks the id before it names a path
    target = cache_dir() / repo.replace("/", "--") / commit
    if (target / "heed.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    return write_imported(directory, target, {"source": f"{HUB_PREFIX}{repo}", "revision": commit})
