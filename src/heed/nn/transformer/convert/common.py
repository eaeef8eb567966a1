"""What the converters share: reading a Hugging Face directory's files, and the BART-style layer
layout that Marian and M2M-100 both use (separate q, k, v projections, `fc1`/`fc2`,
`self_attn_layer_norm`, `encoder_attn_layer_norm`, `final_layer_norm`) mapped onto heed's layers
(fused `in_proj` [q; k; v], `feed_forward.inner`/`outer`, `self_attn_norm`, `cross_attn_norm`,
`feed_forward_norm`)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor

from heed.data.codec import Codec
from heed.data.tokenize import PretrainedPieces
from heed.data.vocab import Specials, Vocab
from heed.errors import ModelDirError
from heed.plumbing.files import check_regular, reason

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


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


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from `path`; a ModelDirError naming the file when it is missing or not one."""
    try:
        check_regular(path)
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise ModelDirError(f"{path}: missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelDirError(f"{path}: not readable JSON ({reason(e) if isinstance(e, OSError) else e})") from None
    if not isinstance(data, dict):
        raise ModelDirError(f"{path}: expected a JSON object")
    return data


def read_weights(directory: Path) -> dict[str, Tensor]:
    """The checkpoint's tensors: model.safetensors, else pytorch_model.bin (read with
    weights_only: no code runs). A missing, truncated or damaged file is a ModelDirError naming it."""
    for name in WEIGHT_FILES:
        path = directory / name
        if not path.exists():
            continue
        try:
            check_regular(path)
            if name.endswith(".safetensors"):
                return load_file(str(path))
            state = torch.load(path, map_location="cpu", weights_only=True)
        except (SafetensorError, OSError, RuntimeError, EOFError, ValueError) as e:
            raise ModelDirError(f"{path}: unreadable weights ({str(e).splitlines()[0] if str(e) else type(e).__name__}"
                                "); the file is truncated or damaged, download it again") from None
        if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
            raise ModelDirError(f"{path}: not a state dict of tensors")
        return state
    raise ModelDirError(f"{directory}: no weights ({' or '.join(WEIGHT_FILES)})")


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
    except RuntimeError:
        raise ModelDirError(f"{path}: not a SentencePiece model") from None


def special_ids(config: dict[str, Any], size: int, unk: int, path: Path) -> Specials:
    """The model's special ids: config.json's pad, decoder start (heed's bos) and eos, and `unk`;
    a ModelDirError naming config.json for one that is not an id below `size`."""
    ids = {name: config.get(key) for name, key in (("pad", "pad_token_id"), ("bos", "decoder_start_token_id"),
                                                    ("eos", "eos_token_id"))}
    for name, i in ids.items():
        if not isinstance(i, int) or not 0 <= i < size:
            raise ModelDirError(f"{path}: {name} id {i!r} is not an id of the vocabulary")
    return Specials(unk=unk, **ids)


def read_piece_ids(path: Path, size: int) -> dict[int, str]:
    """A vocab.json, {piece: id}, as {id: piece}; a ModelDirError naming it for an id that is not a
    distinct whole number below `size` (the embedding's rows)."""
    by_id: dict[int, str] = {}
    for piece, i in read_json(path).items():
        if type(i) is not int or not 0 <= i < size or i in by_id:
            raise ModelDirError(f"{path}: {piece!r} has id {i!r}: ids must be distinct and below the model's "
                                f"vocabulary size {size}")
        by_id[i] = piece
    return by_id


def full_vocab(by_id: dict[int, str], size: int, specials: Specials, path: Path) -> Vocab:
    """A Vocab of `size` ids from {id: token}; ids the files leave out (the embedding has rows no
    token uses) get placeholder names no text produces."""
    for i in by_id:
        if not 0 <= i < size:
            raise ModelDirError(f"{path}: token {by_id[i]!r} has id {i}, past the model's vocabulary of {size}")
    tokens = [by_id.get(i, f"<unused {i}>") for i in range(size)]
    try:
        return Vocab(tokens, specials)
    except ValueError as e:
        raise ModelDirError(f"{path}: {e}") from None


class Tensors:
    """A checkpoint's tensors, taken by name; a missing one is a ModelDirError naming it and the file."""

    def __init__(self, tensors: dict[str, Tensor], where: Path) -> None:
        self._tensors, self.where = tensors, where

    def __contains__(self, name: str) -> bool:
        return name in self._tensors

    def __getitem__(self, name: str) -> Tensor:
        try:
            return self._tensors[name].float()
        except KeyError:
            raise ModelDirError(f"{self.where}: the weights lack {name}; not a complete checkpoint of this "
                                "architecture") from None

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
        raise ModelDirError(f"{path}: {key} is {value!r}, not a positive whole number"
                            if key in config else f"{path}: lacks {key}; not a complete config of this architecture")
    return value


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
    if name not in ACTIVATIONS:
        raise ModelDirError(f"{path}: activation_function {name!r} is not one heed's Transformer has "
                            f"({', '.join(sorted(ACTIVATIONS))})")
    return ACTIVATIONS[name]


def generation_defaults(directory: Path, config: dict[str, Any]) -> dict[str, Any]:
    """DecodeConfig fields for the search the model's own generation settings ask for
    (generation_config.json, else config.json): its beam size, and Hugging Face's length
    normalisation, log P / |Y|^length_penalty (default 1.0)."""
    path = directory / "generation_config.json"
    settings = read_json(path) if path.exists() else config
    beams = settings.get("num_beams")
    alpha = settings.get("length_penalty", 1.0)
    decode: dict[str, Any] = {"length_norm": "power"}
    if isinstance(beams, int) and 1 <= beams <= 64:
        decode["beam_size"] = beams
    if isinstance(alpha, (int, float)) and 0.0 <= alpha <= 10.0:
        decode["length_penalty"] = float(alpha)
    return decode
