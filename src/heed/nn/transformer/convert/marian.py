"""OPUS-MT and other Marian models in Hugging Face's layout (`MarianMTModel`, model_type "marian")
-> heed's Transformer, with the same numbers (tests/pretrained/test_pretrained_marian.py checks them against
transformers).

What Marian is, in the family's terms (transformers' modeling_marian.py):
- post-norm layers, LayerNorm(x + Sublayer(x)), and no norm after either stack: `norm: post`;
- the feed-forward activation of config.json (`swish` for OPUS-MT);
- token embeddings times sqrt(d_model) when `scale_embedding`;
- sinusoidal positions from 0, all sines then all cosines: `sinusoid_layout: halves`;
- one table for source, target and output (`share_encoder_decoder_embeddings`,
  `tie_word_embeddings`), or one per side;
- `final_logits_bias` added to the logits: the generator's bias;
- the decoder starts from <pad> (`decoder_start_token_id`), </s> = 0 and <unk> = 1 ends and
  stands in; the vocabulary keeps these ids (heed.data.vocab.Specials), so heed's ids are
  MarianTokenizer's.

The tokenizers are the release's two SentencePiece models, source.spm and target.spm, with the
joint vocab.json (or, with `separate_vocabs`, target_vocab.json for the target side).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from heed.data.codec import Codec
from heed.data.vocab import Vocab
from heed.errors import ModelDirError
from heed.nn.transformer.convert.common import (
    Converted,
    Tensors,
    WeightFile,
    activation_of,
    bart_layers,
    buildable,
    check_pieces,
    count,
    fraction,
    full_vocab,
    generation_defaults,
    read_json,
    read_piece_ids,
    read_spm,
    same_sizes,
    special_ids,
    table_rows,
)

ARCHITECTURE = "MarianMTModel"


def model_fields(config: dict[str, Any], path: Path) -> dict[str, Any]:
    """The Transformer family's `model:` fields for a Marian config.json."""
    return {
        "family": "transformer", **same_sizes(config, path), "d_model": count(config, "d_model", path),
        "norm": "post", "activation": activation_of(config, path),
        "scale_embeddings": bool(config.get("scale_embedding", False)),
        "positions": "sinusoidal", "sinusoid_layout": "halves",
        "share_embeddings": bool(config.get("share_encoder_decoder_embeddings", True)),
        "tie_embeddings": bool(config.get("tie_word_embeddings", True)),
        "dropout": fraction(config, "dropout", 0.1, path),
        "attention_dropout": fraction(config, "attention_dropout", 0.0, path),
    }


def weights(hf: Tensors, model: dict[str, Any], layers: int) -> dict[str, Any]:
    """heed's state dict from a MarianMTModel's tensors."""
    out = {**bart_layers(hf, "model.encoder", "encoder", layers, decoder=False),
           **bart_layers(hf, "model.decoder", "decoder", layers, decoder=True)}
    if model["share_embeddings"]:
        out["decoder.embed.tokens.weight"] = hf.first("model.shared.weight", "model.decoder.embed_tokens.weight",
                                                      "model.encoder.embed_tokens.weight", "lm_head.weight")
    else:
        out["encoder.embed.tokens.weight"] = hf["model.encoder.embed_tokens.weight"]
        out["decoder.embed.tokens.weight"] = hf.first("model.decoder.embed_tokens.weight", "lm_head.weight")
    table = out["decoder.embed.tokens.weight"]
    if not model["tie_embeddings"]:
        out["decoder.generator.weight"] = hf["lm_head.weight"]
    elif "lm_head.weight" in hf and not hf["lm_head.weight"].equal(table):
        raise ModelDirError(f"{hf.where}: lm_head.weight differs from the target embedding, but config.json ties "
                            "them (tie_word_embeddings); the checkpoint and its config disagree")
    bias = hf["final_logits_bias"].reshape(-1) if "final_logits_bias" in hf else table.new_zeros(table.size(0))
    out["decoder.generator.bias"] = bias
    return out


def _vocab(path: Path, size: int, config: dict[str, Any]) -> Vocab:
    """vocab.json {piece: id} -> a Vocab with the model's ids, `size` of them (the embedding's rows)."""
    by_id = read_piece_ids(path, size)
    unk = next((i for i, piece in by_id.items() if piece == "<unk>"), None)
    if unk is None:
        raise ModelDirError(f"{path}: has no <unk>; not a Marian vocabulary")
    return full_vocab(by_id, size, special_ids(config, size, unk, path.parent / "config.json"), path)


# The weights' tables whose rows are config.json's vocab_size (the first present), and decoder_vocab_size's
SHARED_TABLES = ("model.shared.weight", "model.decoder.embed_tokens.weight", "model.encoder.embed_tokens.weight",
                 "lm_head.weight")
SOURCE_TABLES = ("model.encoder.embed_tokens.weight",)
TARGET_TABLES = ("model.decoder.embed_tokens.weight", "lm_head.weight")


def codec(directory: Path, config: dict[str, Any], model: dict[str, Any], weights: WeightFile | None = None) -> Codec:
    """The two SentencePiece models and the vocabularies, their sizes checked against the `weights`'
    tables (when given) before a vocabulary of that size is made, and each SentencePiece model
    against its vocabulary."""
    settings = read_json(directory / "tokenizer_config.json") if (directory / "tokenizer_config.json").exists() else {}
    path = directory / "config.json"
    src_size = count(config, "vocab_size", path)
    tgt_size = src_size
    if not model["share_embeddings"] and config.get("decoder_vocab_size") is not None:
        tgt_size = count(config, "decoder_vocab_size", path)
    if weights is not None and model["share_embeddings"]:
        table_rows(weights, SHARED_TABLES, model["d_model"], src_size, "vocab_size", path)
    elif weights is not None:
        table_rows(weights, SOURCE_TABLES, model["d_model"], src_size, "vocab_size", path)
        table_rows(weights, TARGET_TABLES, model["d_model"], tgt_size, "decoder_vocab_size", path)
    src_vocab = _vocab(directory / "vocab.json", src_size, config)
    tgt_vocab = src_vocab
    if settings.get("separate_vocabs"):
        tgt_vocab = _vocab(directory / "target_vocab.json", tgt_size, config)
    elif tgt_size != src_size:
        raise ModelDirError(f"{directory / 'config.json'}: decoder_vocab_size {tgt_size} but one vocab.json of "
                            f"{src_size} for both sides")
    if (src_vocab.specials.pad, src_vocab.specials.eos) != (tgt_vocab.specials.pad, tgt_vocab.specials.eos):
        raise ModelDirError(f"{directory}: the source and target vocabularies give <pad> or </s> different ids")
    what = "a Marian model's tokenizer is its source.spm and target.spm"
    src_spm, tgt_spm = read_spm(directory, "source.spm", what), read_spm(directory, "target.spm", what)
    check_pieces(src_spm, src_vocab, directory / "source.spm", directory / "vocab.json")
    check_pieces(tgt_spm, tgt_vocab, directory / "target.spm",
                 directory / ("target_vocab.json" if tgt_vocab is not src_vocab else "vocab.json"))
    return Codec(src_spm, tgt_spm, src_vocab, tgt_vocab)


def convert(directory: Path, config: dict[str, Any]) -> Converted:
    """A Hugging Face Marian directory (config.json, model.safetensors or pytorch_model.bin,
    source.spm, target.spm, vocab.json) -> heed's Transformer."""
    path = directory / "config.json"
    model = buildable(model_fields(config, path), path)
    weight_file = WeightFile(directory)
    text = codec(directory, config, model, weight_file)  # first: a missing tokenizer file fails before the weights load
    hf = Tensors(weight_file.tensors(), directory)
    return Converted(model, weights(hf, model, model["layers"]), text, generation_defaults(directory, config),
                     {"architecture": ARCHITECTURE})
