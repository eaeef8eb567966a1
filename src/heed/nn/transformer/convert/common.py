"""What the converters share: reading a Hugging Face directory's files, and the BART-style layer
layout that Marian and M2M-100 both use (separate q, k, v projections, `fc1`/`fc2`,
`self_attn_layer_norm`, `encoder_attn_layer_norm`, `final_layer_norm`) mapped onto heed's layers
(fused `in_proj` [q; k; v], `feed_forward.inner`/`outer`, `self_attn_norm`, `cross_attn_norm`,
`feed_forward_norm`)."""
from __future__ import annotations

import json
import math
import pickle
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from torch import Tensor

from heed.data.codec import Codec
from heed.data.tokenize import PretrainedPieces
from heed.data.vocab import Specials, Vocab
from heed.errors import ModelDirError
from heed.plumbing.files import check_regular, open_regular, reason

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
MAX_JSON_BYTES = 32 << 20  # NLLB's tokenizer.json, the largest JSON file a model has, is 17 MB
SHOWN_CHARS = 40  # the most of a value from a model's files that a message repeats
MISSING_PIECES = 0.05  # the share of a SentencePiece model's pieces its model's vocabulary may lack


@dataclass(frozen=True)
class Converted:
    """A pretrained model in heed's terms.

    model:    the Transformer family's `model:` fields
    weights:  heed's state dict (TransformerSeq2Seq's names and layout)
    codec:    its tokenizers and vocabularies, with the model's own special ids
    decode:   DecodeConfig fields from its generation settings (beam size)
    source:   what was converted, for heed.json ({"architecture": ..., ...})
    alignment: heed.json's "alignment", the heads the model was trained to align with (a Marian
              model trained with guided alignment), or None
    described_by: the file that describes the architecture, for messages (None: config.json)
    """

    model: dict[str, Any]
    weights: dict[str, Tensor]
    codec: Codec
    decode: dict[str, Any] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)
    alignment: dict[str, Any] | None = None
    described_by: Path | None = None


def shown(value: Any) -> str:
    """A value from a model's files as a message shows it: short values as repr, long text cut to
    SHOWN_CHARS, a number too long to print or a container by its size. A message never carries the
    bulk of a file (or its YAML's expansion)."""
    if isinstance(value, str):
        return repr(value) if len(value) <= SHOWN_CHARS else f"{value[:SHOWN_CHARS]!r}... ({len(value):,} characters)"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 18:
        return f"a number of about {math.ceil(value.bit_length() * math.log10(2)):,} digits"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value):,} items"
    if isinstance(value, dict):
        return f"a mapping of {len(value):,} keys"
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}..."


def read_json(path: Path, *, limit: int = MAX_JSON_BYTES) -> dict[str, Any]:
    """A JSON object from `path` (at most `limit` bytes); a ModelDirError naming the file when it is
    missing, too large, nested too deeply, holds a number Python will not read, or is not an object."""
    try:
        with open_regular(path) as f:
            raw = f.read(limit + 1)
    except FileNotFoundError:
        raise ModelDirError(f"{path}: missing") from None
    except OSError as e:
        raise ModelDirError(f"{path}: not readable JSON ({reason(e)})") from None
    if len(raw) > limit:
        raise ModelDirError(f"{path}: larger than {limit >> 20} MiB; not a model's {path.name}")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelDirError(f"{path}: not readable JSON ({e})") from None
    except RecursionError:
        raise ModelDirError(f"{path}: not readable JSON (nested too deeply)") from None
    except ValueError as e:  # Python's limit on the digits of an integer it reads from text
        raise ModelDirError(f"{path}: not readable JSON (a number too long: {str(e).split(';')[0]})") from None
    if not isinstance(data, dict):
        raise ModelDirError(f"{path}: expected a JSON object")
    return data


def _unreadable(path: Path, e: BaseException) -> ModelDirError:
    first = str(e).splitlines()[0] if str(e) else type(e).__name__
    return ModelDirError(f"{path}: unreadable weights ({first}); the file is truncated or damaged, download it again")


def _not_plain(path: Path) -> ModelDirError:
    return ModelDirError(f"{path}: not a plain weights file: it holds pickled Python objects other than tensors, and "
                         "heed will not unpickle them (that could run code); use the model's model.safetensors")


class WeightFile:
    """A checkpoint's weight file: model.safetensors, else pytorch_model.bin (read with weights_only:
    no code runs). `shapes` reads the tensors' names and shapes without their data (safetensors'
    header; the .bin memory-mapped), so that sizes a config claims are checked against what the
    weights hold before anything of that size is made; `tensors` reads them. A missing, truncated or
    damaged file, or a pickle that is more than tensors, is a ModelDirError naming it."""

    def __init__(self, directory: Path) -> None:
        found = [directory / name for name in WEIGHT_FILES if (directory / name).exists()]
        if not found:
            raise ModelDirError(f"{directory}: no weights ({' or '.join(WEIGHT_FILES)})")
        self.path = found[0]
        self._state: dict[str, Tensor] | None = None
        self._shapes: dict[str, tuple[int, ...]] | None = None

    def shapes(self) -> dict[str, tuple[int, ...]]:
        if self._shapes is None:
            if self.path.name.endswith(".safetensors"):
                try:
                    check_regular(self.path)
                    with safe_open(str(self.path), "pt") as f:
                        self._shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118  # safetensors' safe_open is not iterable
                except (SafetensorError, OSError, RuntimeError, ValueError) as e:
                    raise _unreadable(self.path, e) from None
            else:
                self._shapes = {name: tuple(t.shape) for name, t in self._load().items()}
        return self._shapes

    def tensors(self) -> dict[str, Tensor]:
        if self.path.name.endswith(".safetensors"):
            try:
                check_regular(self.path)
                return load_file(str(self.path))
            except (SafetensorError, OSError, RuntimeError, ValueError) as e:
                raise _unreadable(self.path, e) from None
        return self._load()

    def _load(self) -> dict[str, Tensor]:
        """The .bin's state dict, memory-mapped (its shapes cost nothing), once."""
        if self._state is not None:
            return self._state
        try:
            check_regular(self.path)
            try:
                state = torch.load(self.path, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as e:
                if "mmap" not in str(e):
                    raise
                state = torch.load(self.path, map_location="cpu", weights_only=True)  # the legacy format: no mmap
        except pickle.UnpicklingError:
            raise _not_plain(self.path) from None
        except (OSError, RuntimeError, EOFError, ValueError) as e:
            raise _unreadable(self.path, e) from None
        if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
            raise ModelDirError(f"{self.path}: not a state dict of tensors")
        self._state = state
        return state


def table_rows(weights: WeightFile, names: tuple[str, ...], width: int, size: int, field_name: str,
               config: Path) -> None:
    """Check config.json's vocabulary size `size` (its `field_name`) against the embedding table the
    weights hold (the first of `names` present): (size, width). A ModelDirError naming both when
    they differ, before a vocabulary of that size is made."""
    shapes = weights.shapes()
    name = next((n for n in names if n in shapes), None)
    if name is None:
        raise ModelDirError(f"{weights.path}: the weights lack {names[0]}; not a complete checkpoint of this "
                            "architecture")
    if shapes[name] != (size, width):
        raise ModelDirError(f"{config}: {field_name} {size:,} and d_model {width}, but {weights.path.name}'s {name} is "
                            f"{' x '.join(map(str, shapes[name])) or 'a scalar'}; the config is not this checkpoint's")


def read_spm(directory: Path, name: str, what: str, languages: dict[str, str] | None = None) -> PretrainedPieces:
    """The SentencePiece model `directory/name` as a PretrainedPieces tokenizer (with a
    many-language model's `languages`); a ModelDirError naming the file, and saying `what` the
    model's tokenizer is, when it is missing or not a SentencePiece model."""
    path = directory / name
    try:
        check_regular(path)
        model = path.read_bytes()
    except FileNotFoundError:
        raise ModelDirError(f"{path}: missing; {what}") from None
    except OSError as e:
        raise ModelDirError(f"{path}: cannot read: {reason(e)}") from None
    try:
        return PretrainedPieces(model, languages)
    except RuntimeError as e:
        empty = "empty" in str(e)
        raise ModelDirError(f"{path}: not a SentencePiece model{' (it has no pieces)' if empty else ''}") from None


def check_pieces(pieces: PretrainedPieces, vocab: Vocab, spm_path: Path, vocab_path: Path) -> None:
    """A ModelDirError when more than MISSING_PIECES of the SentencePiece model's pieces are not in
    the model's vocabulary: the tokenizer is another model's, and every text it splits would read as
    <unk>. (A release's vocabulary holds every piece of its SentencePiece models.)"""
    texts = pieces.text_pieces()
    known = set(vocab.tokens)
    missing = sum(1 for piece in texts if piece not in known)
    if missing > MISSING_PIECES * len(texts):
        raise ModelDirError(f"{spm_path}: {missing:,} of its {len(texts):,} pieces are not in {vocab_path.name}; "
                            "the SentencePiece model is not this model's")


def special_ids(config: dict[str, Any], size: int, unk: int, path: Path) -> Specials:
    """The model's special ids: config.json's pad, decoder start (heed's bos) and eos, and `unk`;
    a ModelDirError naming config.json for one that is not an id below `size`."""
    ids: dict[str, int] = {}
    for name, key in (("pad", "pad_token_id"), ("bos", "decoder_start_token_id"), ("eos", "eos_token_id")):
        i = config.get(key)
        if type(i) is not int or not 0 <= i < size:
            raise ModelDirError(f"{path}: {name} id {shown(i)} is not an id of the vocabulary")
        ids[name] = i
    return Specials(unk=unk, **ids)


def read_piece_ids(path: Path, size: int) -> dict[int, str]:
    """A vocab.json, {piece: id}, as {id: piece}; a ModelDirError naming it, and the entry by its
    place (never its text: the file may not be the model's), for an id that is not a distinct whole
    number below `size` (the embedding's rows)."""
    by_id: dict[int, str] = {}
    for place, (piece, i) in enumerate(read_json(path).items(), 1):
        if type(i) is not int or not 0 <= i < size or i in by_id:
            raise ModelDirError(f"{path}: entry {place:,}'s id is not a whole number below the model's vocabulary "
                                f"size {size}, or repeats another's; ids must be distinct")
        by_id[i] = piece
    return by_id


def full_vocab(by_id: dict[int, str], size: int, specials: Specials, path: Path) -> Vocab:
    """A Vocab of `size` ids from {id: token}; ids the files leave out (the embedding has rows no
    token uses) get placeholder names no text produces."""
    for i, token in by_id.items():
        if not 0 <= i < size:
            raise ModelDirError(f"{path}: token {shown(token)} has id {i}, past the model's vocabulary of {size}")
    seen: set[str] = set()
    for token in by_id.values():
        if token in seen:
            raise ModelDirError(f"{path}: token {shown(token)} has two ids; a vocabulary's tokens are distinct")
        seen.add(token)
    tokens = [by_id.get(i, f"<unused {i}>") for i in range(size)]
    try:
        return Vocab(tokens, specials)
    except ValueError as e:
        raise ModelDirError(f"{path}: {e}") from None


class Tensors:
    """A checkpoint's tensors, taken by name (from a dict, or a mapping that reads each when taken);
    a missing one, or one holding NaN or infinity, is a ModelDirError naming it and the file."""

    def __init__(self, tensors: Mapping[str, Tensor], where: Path) -> None:
        self._tensors, self.where = tensors, where

    def __contains__(self, name: str) -> bool:
        return name in self._tensors

    def __getitem__(self, name: str) -> Tensor:
        try:
            value = self._tensors[name].float()
        except KeyError:
            raise ModelDirError(f"{self.where}: the weights lack {name}; not a complete checkpoint of this "
                                "architecture") from None
        if not bool(torch.isfinite(value).all()):  # every later command would refuse them: say so now, and which
            raise ModelDirError(f"{self.where}: {name} holds NaN or infinite values; the checkpoint is damaged")
        return value

    def first(self, *names: str) -> Tensor:
        """The first of `names` present (a tied table is saved under one of its names)."""
        for name in names:
            if name in self._tensors:
                return self[name]
        return self[names[0]]


def _attention(out: dict[str, Tensor], hf: Tensors, source: str, target: str) -> None:
    """q_proj, k_proj, v_proj, out_proj -> in_proj_weight [q; k; v] (3 d, d), in_proj_bias, out_proj."""
    out[f"{target}.in_proj_weight"] = torch.cat([hf[f"{source}.{p}_proj.weight"] for p in "qkv"])
    out[f"{target}.in_proj_bias"] = torch.cat([hf[f"{source}.{p}_proj.bias"] for p in "qkv"])
    out[f"{target}.out_proj.weight"] = hf[f"{source}.out_proj.weight"]
    out[f"{target}.out_proj.bias"] = hf[f"{source}.out_proj.bias"]


def _norm(out: dict[str, Tensor], hf: Tensors, source: str, target: str) -> None:
    out[f"{target}.weight"], out[f"{target}.bias"] = hf[f"{source}.weight"], hf[f"{source}.bias"]


def bart_layers(hf: Tensors, source: str, target: str, layers: int, *, decoder: bool) -> dict[str, Tensor]:
    """Every layer of one stack, BART-style names under `source` ("model.encoder") -> heed's under
    `target` ("encoder")."""
    out: dict[str, Tensor] = {}
    for i in range(layers):
        s, t = f"{source}.layers.{i}", f"{target}.layers.{i}"
        _attention(out, hf, f"{s}.self_attn", f"{t}.self_attn")
        _norm(out, hf, f"{s}.self_attn_layer_norm", f"{t}.self_attn_norm")
        if decoder:
            _attention(out, hf, f"{s}.encoder_attn", f"{t}.cross_attn")
            _norm(out, hf, f"{s}.encoder_attn_layer_norm", f"{t}.cross_attn_norm")
        for hf_name, heed_name in (("fc1", "inner"), ("fc2", "outer")):
            out[f"{t}.feed_forward.{heed_name}.weight"] = hf[f"{s}.{hf_name}.weight"]
            out[f"{t}.feed_forward.{heed_name}.bias"] = hf[f"{s}.{hf_name}.bias"]
        _norm(out, hf, f"{s}.final_layer_norm", f"{t}.feed_forward_norm")
    return out


ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "gelu_fast": "gelu_tanh", "swish": "swish", "silu": "swish"}


def count(config: dict[str, Any], key: str, path: Path) -> int:
    """config.json's `key`, a positive integer; a ModelDirError naming it otherwise."""
    value = config.get(key)
    if type(value) is not int or value < 1:
        raise ModelDirError(f"{path}: {key} is {shown(value)}, not a positive whole number"
                            if key in config else f"{path}: lacks {key}; not a complete config of this architecture")
    return value


def buildable(model: dict[str, Any], path: Path) -> dict[str, Any]:
    """`model` (the Transformer family's `model:` fields a converter made of `path`), checked by the
    family's config before any size in it is used to check or make anything; a ModelDirError naming
    `path` and the field heed cannot build (d_model not divisible by heads, say)."""
    from pydantic import ValidationError

    from heed.nn.transformer.config import TransformerConfig

    try:
        TransformerConfig(**model)
    except ValidationError as e:
        error = e.errors()[0]
        field_name = ".".join(map(str, error["loc"]))
        message = str(error["msg"]).removeprefix("Value error, ")
        raise ModelDirError(f"{path}: describes a model heed cannot build: "
                            f"{f'model.{field_name}: ' if field_name else ''}{message}") from None
    return model


def same_sizes(config: dict[str, Any], path: Path) -> dict[str, int]:
    """layers, heads and ff_size, which heed's Transformer has once for both stacks; a
    ModelDirError naming the field where the encoder's and the decoder's differ."""
    sizes = {}
    for heed_name, hf_name in (("layers", "layers"), ("heads", "attention_heads"), ("ff_size", "ffn_dim")):
        enc, dec = count(config, f"encoder_{hf_name}", path), count(config, f"decoder_{hf_name}", path)
        if enc != dec:
            raise ModelDirError(f"{path}: encoder_{hf_name} {enc} and decoder_{hf_name} {dec}: heed's Transformer has "
                                f"the same {heed_name} on both sides, so it cannot hold this model")
        sizes[heed_name] = enc
    return sizes


def activation_of(config: dict[str, Any], path: Path) -> str:
    name = config.get("activation_function", "relu")
    if not isinstance(name, str) or name not in ACTIVATIONS:
        raise ModelDirError(f"{path}: activation_function {shown(name)} is not one heed's Transformer has "
                            f"({', '.join(sorted(ACTIVATIONS))})")
    return ACTIVATIONS[name]


def fraction(config: dict[str, Any], key: str, default: float, path: Path) -> float:
    """config.json's `key` (a dropout), a number from 0 to 1 (`default` when absent); a ModelDirError
    naming it otherwise."""
    value = config.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ModelDirError(f"{path}: {key} is {shown(value)}, not a number from 0 to 1")
    return float(value)


def generation_defaults(directory: Path, config: dict[str, Any]) -> dict[str, Any]:
    """DecodeConfig fields for the search the model's own generation settings ask for
    (generation_config.json, else config.json): its beam size, Hugging Face's length
    normalisation, log P / |Y|^length_penalty (default 1.0), and its stop: `early_stopping: true`
    ends a sentence once num_beams hypotheses finished (stopping "beam"; false and "never", heed's
    exact stop, the default)."""
    path = directory / "generation_config.json"
    settings = read_json(path) if path.exists() else config
    beams = settings.get("num_beams")
    alpha = settings.get("length_penalty", 1.0)
    decode: dict[str, Any] = {"length_norm": "power"}
    if isinstance(beams, int) and 1 <= beams <= 64:
        decode["beam_size"] = beams
    if isinstance(alpha, (int, float)) and 0.0 <= alpha <= 10.0:
        decode["length_penalty"] = float(alpha)
    if settings.get("early_stopping") is True:
        decode["stopping"] = "beam"
    return decode
