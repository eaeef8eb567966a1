"""A Marian release as OPUS-MT publishes it (a zip of `*.npz` weights, `*.vocab.yml`, `source.spm`,
`target.spm` and `decoder.yml`) -> heed's Transformer, the same model transformers' own conversion
of the release gives (tests/test_pretrained_marian_npz.py checks both, and CTranslate2's reading
of the same file).

The .npz holds the training options as YAML under "special:model.yml" and the weights under
Marian's names, every matrix (in, out):
- `Wemb` (one table: `tied-embeddings-all`), else `encoder_Wemb` and `decoder_Wemb`;
- per layer `{encoder,decoder}_l{i}_self_W{q,k,v,o}` / `_b*`, the decoder's `_context_*`, the
  feed-forward `_ffn_W1`, `_b1`, `_W2`, `_b2`, and each sublayer's norm `..._Wo_ln_{scale,bias}`
  (`_ffn_ffn_ln_*` for the feed-forward; with a `_pre` suffix in a pre-norm model, whose stacks end
  in `{encoder,decoder}_top_ln_*`);
- `decoder_ff_logit_out_b`, the logits' bias, and `decoder_ff_logit_out_Wt` unless the output
  shares the target table.
Marian starts decoding from a zero embedding. As transformers' conversion does, the vocabulary
gains `<pad>` as its last id with a zero row: decoding starts from it, and heed's ids stay
MarianTokenizer's. Unlike that conversion (which gives it a logit of 0, in every softmax), <pad>'s
logit bias is PAD_LOGIT_BIAS, so the probabilities are Marian's own. Positions are sinusoidal,
all sines then all cosines (`sinusoid_layout: halves`).
decoder.yml gives the beam size and `normalize` (log P / |Y|^normalize)."""
from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from heed.data.codec import Codec
from heed.data.vocab import Specials, Vocab
from heed.errors import ModelDirError
from heed.nn.transformer.convert.common import Converted, Tensors, read_spm
from heed.plumbing.files import check_regular, reason

ARCHITECTURE = "Marian transformer (.npz)"
CONFIG_KEY = "special:model.yml"
# Marian's "gelu" is x * sigmoid(1.702 x), not the erf GELU heed's Transformer has: refused.
ACTIVATIONS = {"swish": "swish", "relu": "relu"}
PAD = "<pad>"
PAD_LOGIT_BIAS = -1e4  # exp(-1e4) is 0 in float32 and bf16: <pad> takes no share of any softmax


def is_release(directory: Path) -> bool:
    """Whether `directory` looks like a Marian release: a decoder.yml, or .npz weights."""
    return (directory / "decoder.yml").is_file() or any(directory.glob("*.npz"))


def _yaml(path: Path) -> Any:
    """A YAML file read with every scalar a string (a vocabulary's `yes`, `null` or `1` are pieces)."""
    try:
        check_regular(path)
        with open(path, encoding="utf-8") as f:
            return yaml.load(f, Loader=yaml.BaseLoader)  # noqa: S506 - BaseLoader builds only str, list, dict
    except FileNotFoundError:
        raise ModelDirError(f"{path}: missing") from None
    except OSError as e:
        raise ModelDirError(f"{path}: cannot read: {reason(e)}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ModelDirError(f"{path}: not readable YAML ({str(e).splitlines()[0]})") from None


def release_files(directory: Path) -> tuple[Path, list[Path], dict[str, Any]]:
    """(the .npz, the vocabulary files [source, target], decoder.yml's settings) of a release:
    decoder.yml names them; without it, the directory's one .npz and one *.yml vocabulary."""
    decoder = directory / "decoder.yml"
    if decoder.is_file():
        settings = _yaml(decoder)
        models, vocabs = (settings.get("models"), settings.get("vocabs")) if isinstance(settings, dict) else (0, 0)
        if not isinstance(models, list) or not models or not isinstance(vocabs, list) or len(vocabs) < 2:
            raise ModelDirError(f"{decoder}: expected `models:` (the .npz) and `vocabs:` (source and target .yml)")
        if len(models) > 1:
            raise ModelDirError(f"{decoder}: names {len(models)} models (an ensemble); import each .npz on its own "
                                "and give heed the directories together")
        return directory / models[0], [directory / vocabs[0], directory / vocabs[-1]], settings
    weights = sorted(directory.glob("*.npz"))
    vocab = sorted(p for p in directory.glob("*.yml") if "vocab" in p.name)
    if len(weights) != 1 or len(vocab) != 1:
        raise ModelDirError(f"{directory}: {len(weights)} .npz and {len(vocab)} vocabulary .yml files and no "
                            "decoder.yml to say which to use; a Marian release has one of each, or a decoder.yml")
    return weights[0], [vocab[0], vocab[0]], {}


def read_npz(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The release's weights and its training options ("special:model.yml"); a ModelDirError naming
    the file when it is truncated, damaged or not Marian's."""
    try:
        check_regular(path)
        with np.load(path, allow_pickle=False) as f:
            arrays = {name: f[name] for name in f.files}
    except FileNotFoundError:
        raise ModelDirError(f"{path}: missing") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise ModelDirError(f"{path}: unreadable weights ({str(e).splitlines()[0] if str(e) else type(e).__name__}); "
                            "the file is truncated or damaged, download it again") from None
    if CONFIG_KEY not in arrays:
        raise ModelDirError(f"{path}: has no {CONFIG_KEY!r}; not a Marian model")
    try:
        options = yaml.safe_load(arrays.pop(CONFIG_KEY).tobytes().rstrip(b"\0").decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError):
        options = None
    if not isinstance(options, dict):
        raise ModelDirError(f"{path}: its {CONFIG_KEY!r} is not Marian's options")
    return arrays, options


def read_vocab_yml(path: Path) -> list[str]:
    """A Marian vocabulary ({piece: id}) as its pieces in id order; ids must be 0 .. n - 1."""
    entries = _yaml(path)
    if not isinstance(entries, dict) or not entries:
        raise ModelDirError(f"{path}: not a Marian vocabulary (a YAML map of piece: id)")
    by_id: dict[int, str] = {}
    for piece, value in entries.items():
        i = int(value) if isinstance(value, str) and value.isdigit() else -1
        if not 0 <= i < len(entries) or i in by_id:
            raise ModelDirError(f"{path}: {piece!r} has id {value!r}: ids must be distinct, 0 to {len(entries) - 1}")
        by_id[i] = piece
    return [by_id[i] for i in range(len(by_id))]


def model_fields(options: dict[str, Any], path: Path) -> dict[str, Any]:
    """The Transformer family's `model:` fields for Marian's training options; a ModelDirError
    naming the option heed's Transformer cannot hold."""
    def option(name: str, default: Any = None) -> Any:
        return options.get(name, default)

    def refuse(what: str) -> ModelDirError:
        return ModelDirError(f"{path}: {what}; heed's Transformer cannot hold this model")

    decoder = option("transformer-decoder-autoreg", "self-attention")
    if option("type") not in ("transformer", None) or decoder != "self-attention":
        raise refuse(f"type {option('type')!r} with a {decoder!r} decoder is not a Transformer")
    if option("enc-depth") != option("dec-depth"):
        raise refuse(f"enc-depth {option('enc-depth')} and dec-depth {option('dec-depth')} differ")
    if option("transformer-dim-ffn") != option("transformer-decoder-dim-ffn", option("transformer-dim-ffn")) or \
            option("transformer-ffn-depth", 2) != 2 or option("transformer-decoder-ffn-depth", 2) not in (0, 2):
        raise refuse("its encoder and decoder feed-forward networks differ in size or depth")
    activation = option("transformer-ffn-activation", "swish")
    if activation not in ACTIVATIONS:
        raise refuse(f"transformer-ffn-activation {activation!r} is not one heed has ({', '.join(ACTIVATIONS)}; "
                     "Marian's gelu is its sigmoid approximation)")
    layout = (option("transformer-preprocess", ""), option("transformer-postprocess", "dan"),
              option("transformer-postprocess-top", ""))
    if layout not in (("", "dan", ""), ("n", "da", "n")):
        raise refuse(f"transformer-preprocess/postprocess/postprocess-top {layout} is neither post-norm ('', dan, '') "
                     "nor pre-norm (n, da, n)")
    if "n" in str(option("transformer-postprocess-emb", "d")):
        raise refuse("a norm after the embeddings (transformer-postprocess-emb n)")
    if option("transformer-train-position-embeddings", False):
        raise refuse("learned positions (transformer-train-position-embeddings)")
    sizes = {"layers": option("enc-depth"), "heads": option("transformer-heads"), "d_model": option("dim-emb"),
             "ff_size": option("transformer-dim-ffn")}
    for name, value in sizes.items():
        if type(value) is not int or value < 1:
            raise ModelDirError(f"{path}: its {name} ({value!r}) is not a positive whole number")
    every = bool(option("tied-embeddings-all", False))
    return {
        "family": "transformer", **sizes, "norm": "pre" if layout[0] == "n" else "post",
        "activation": ACTIVATIONS[activation], "scale_embeddings": True, "positions": "sinusoidal",
        "sinusoid_layout": "halves", "share_embeddings": every or bool(option("tied-embeddings-src", False)),
        "tie_embeddings": every or bool(option("tied-embeddings", False)),
        "dropout": float(option("transformer-dropout", 0.1) or 0.0),
        "attention_dropout": float(option("transformer-dropout-attention", 0.0) or 0.0),
    }


def _take(w: Tensors, name: str, *, linear: bool = False) -> torch.Tensor:
    """The array `name` as float32: a matrix transposed to torch's (out, in) with `linear` (Marian
    keeps (in, out)), a (1, n) bias or norm flattened."""
    value = w[name]
    if linear:
        return value.t().contiguous()
    return value.reshape(-1) if value.dim() == 2 and value.size(0) == 1 else value


def _layers(w: Tensors, stack: str, layers: int, pre: bool) -> dict[str, torch.Tensor]:
    """One stack's layers, Marian's names -> heed's."""
    suffix = "_pre" if pre else ""
    out: dict[str, torch.Tensor] = {}
    parts = [("self", "self_attn", "self_attn_norm")]
    if stack == "decoder":
        parts.append(("context", "cross_attn", "cross_attn_norm"))
    for i in range(layers):
        s, t = f"{stack}_l{i + 1}", f"{stack}.layers.{i}"
        for marian, attention, norm in parts:
            out[f"{t}.{attention}.in_proj_weight"] = torch.cat([_take(w, f"{s}_{marian}_W{p}", linear=True)
                                                                 for p in "qkv"])
            out[f"{t}.{attention}.in_proj_bias"] = torch.cat([_take(w, f"{s}_{marian}_b{p}") for p in "qkv"])
            out[f"{t}.{attention}.out_proj.weight"] = _take(w, f"{s}_{marian}_Wo", linear=True)
            out[f"{t}.{attention}.out_proj.bias"] = _take(w, f"{s}_{marian}_bo")
            out[f"{t}.{norm}.weight"] = _take(w, f"{s}_{marian}_Wo_ln_scale{suffix}")
            out[f"{t}.{norm}.bias"] = _take(w, f"{s}_{marian}_Wo_ln_bias{suffix}")
        for k, heed_name in (("1", "inner"), ("2", "outer")):
            out[f"{t}.feed_forward.{heed_name}.weight"] = _take(w, f"{s}_ffn_W{k}", linear=True)
            out[f"{t}.feed_forward.{heed_name}.bias"] = _take(w, f"{s}_ffn_b{k}")
        out[f"{t}.feed_forward_norm.weight"] = _take(w, f"{s}_ffn_ffn_ln_scale{suffix}")
        out[f"{t}.feed_forward_norm.bias"] = _take(w, f"{s}_ffn_ffn_ln_bias{suffix}")
    if pre:
        out[f"{stack}.norm.weight"] = _take(w, f"{stack}_top_ln_scale")
        out[f"{stack}.norm.bias"] = _take(w, f"{stack}_top_ln_bias")
    return out


def _with_pad(table: torch.Tensor) -> torch.Tensor:
    """(vocab, d) -> (vocab + 1, d): <pad>'s zero row last, Marian's zero start embedding."""
    return torch.cat([table, table.new_zeros(1, table.size(1))])


def weights(w: Tensors, model: dict[str, Any]) -> dict[str, torch.Tensor]:
    """heed's state dict from a release's arrays."""
    pre = model["norm"] == "pre"
    out = {**_layers(w, "encoder", model["layers"], pre), **_layers(w, "decoder", model["layers"], pre)}
    if model["share_embeddings"]:
        out["decoder.embed.tokens.weight"] = _with_pad(w.first("Wemb", "decoder_Wemb"))
    else:
        out["encoder.embed.tokens.weight"] = _with_pad(_take(w, "encoder_Wemb"))
        out["decoder.embed.tokens.weight"] = _with_pad(_take(w, "decoder_Wemb"))
    if not model["tie_embeddings"]:
        out["decoder.generator.weight"] = _with_pad(_take(w, "decoder_ff_logit_out_Wt"))
    bias = _take(w, "decoder_ff_logit_out_b")
    out["decoder.generator.bias"] = torch.cat([bias, bias.new_full((1,), PAD_LOGIT_BIAS)])
    return out


def _vocab(path: Path, rows: int, where: Path) -> Vocab:
    """A vocabulary file plus <pad> as its last id (the embedding's `rows` + 1)."""
    pieces = read_vocab_yml(path)
    if len(pieces) != rows:
        raise ModelDirError(f"{path}: {len(pieces)} pieces, but {where.name}'s embedding has {rows} rows; the "
                            "vocabulary is not this model's")
    for needed in ("</s>", "<unk>"):
        if needed not in pieces:
            raise ModelDirError(f"{path}: has no {needed}; not a Marian vocabulary")
    tokens = [*pieces, PAD]
    pad = len(pieces)
    return Vocab(tokens, Specials(pad=pad, bos=pad, eos=pieces.index("</s>"), unk=pieces.index("<unk>")))


def _decode(settings: dict[str, Any]) -> dict[str, Any]:
    """DecodeConfig fields from decoder.yml: beam-size, and normalize as the power length norm."""
    decode: dict[str, Any] = {"length_norm": "power", "length_penalty": 1.0}
    for key, field, cast in (("beam-size", "beam_size", int), ("normalize", "length_penalty", float)):
        try:
            value = cast(settings[key])
        except (KeyError, TypeError, ValueError):
            continue
        if (field == "beam_size" and 1 <= value <= 64) or (field == "length_penalty" and 0.0 <= value <= 10.0):
            decode[field] = value
    return decode


def convert(directory: Path, _config: dict[str, Any] | None = None) -> Converted:
    """A Marian release directory -> heed's Transformer (see the module doc)."""
    npz, (src_yml, tgt_yml), settings = release_files(directory)
    what = "a Marian release's tokenizer is its source.spm and target.spm"
    src_spm, tgt_spm = read_spm(directory, "source.spm", what), read_spm(directory, "target.spm", what)
    arrays, options = read_npz(npz)
    model = model_fields(options, npz)
    w = Tensors({name: torch.from_numpy(array) for name, array in arrays.items()}, npz)
    state = weights(w, model)
    src_rows = state["decoder.embed.tokens.weight" if model["share_embeddings"] else "encoder.embed.tokens.weight"]
    src_vocab = _vocab(src_yml, src_rows.size(0) - 1, npz)
    tgt_rows = state["decoder.embed.tokens.weight"].size(0) - 1
    tgt_vocab = src_vocab if src_yml == tgt_yml else _vocab(tgt_yml, tgt_rows, npz)
    if model["share_embeddings"] and src_vocab.tokens != tgt_vocab.tokens:
        raise ModelDirError(f"{npz}: one table for both sides, but {src_yml.name} and {tgt_yml.name} differ")
    return Converted(model, state, Codec(src_spm, tgt_spm, src_vocab, tgt_vocab), _decode(settings),
                     {"architecture": ARCHITECTURE, "weights": npz.name}, alignment=trained_reading(options, model),
                     described_by=npz)


def trained_reading(options: dict[str, Any], model: dict[str, Any]) -> dict[str, Any] | None:
    """heed.json's "alignment" for a model Marian trained with guided alignment (OPUS-MT's
    "transformer-align"): the first head of `transformer-guided-alignment-layer`'s cross-attention
    (1-based, or "last"), which is the head Marian supervises, read at the step predicting each
    token (argmax); None without guided alignment or for a layer it does not name."""
    if str(options.get("guided-alignment", "none")) in ("none", ""):
        return None
    layer = str(options.get("transformer-guided-alignment-layer", "last"))
    index = model["layers"] - 1 if layer == "last" else int(layer) - 1 if layer.isdigit() else -1
    if not 0 <= index < model["layers"]:
        return None
    return {"method": "argmax", "layer": index, "head": [0], "weights": "attention", "units": "words", "trained": True}
