"""M2M-100 and NLLB-200 in Hugging Face's layout (`M2M100ForConditionalGeneration`, model_type
"m2m_100") -> heed's Transformer, with the same numbers (tests/pretrained/test_pretrained_m2m100.py checks
them against transformers).

What M2M-100 is, in the family's terms (transformers' modeling_m2m_100.py):
- pre-norm layers, x + Sublayer(LayerNorm(x)), and a LayerNorm after each stack: `norm: pre`;
- relu (config.json's `activation_function`), embeddings times sqrt(d_model) (`scale_embedding`);
- fairseq's sinusoidal positions: all sines then all cosines, frequencies 10000^(-i/(d/2-1)), the
  first token at position 2 (after fairseq's padding index): `sinusoid_layout: fairseq`;
- one table for source, target and output, no output bias;
- the decoder starts from </s> (`decoder_start_token_id`), and its first output is forced to the
  target language's token (generate's `forced_bos_token_id`); every source starts with its own
  language's token and ends with </s>.

The languages (heed.data.tokenize.PretrainedPieces.languages) and the vocabulary come from the
tokenizer's files:
- M2M-100 (`M2M100Tokenizer`): vocab.json {piece: id} over sentencepiece.bpe.model's pieces, then
  a token `__xx__` per language of the `language_codes` list tokenizer_config.json names;
- NLLB (`NllbTokenizer`): tokenizer.json's vocabulary and its added tokens (the languages'
  `fra_Latn` codes at their ids), over the same SentencePiece model.
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
    shown,
    special_ids,
    table_rows,
)

ARCHITECTURE = "M2M100ForConditionalGeneration"
SPM_FILE = "sentencepiece.bpe.model"
FAIRSEQ_PAD = 1  # fairseq's positions count from its padding index; M2M-100's is 1

# M2M100Tokenizer's language lists (transformers' tokenization_m2m_100.py): language i of the list
# tokenizer_config.json's `language_codes` names has the token __code__ and id len(vocab.json) + i.
M2M100_LANGUAGES = {
    "m2m100": ["af", "am", "ar", "ast", "az", "ba", "be", "bg", "bn", "br", "bs", "ca", "ceb", "cs", "cy", "da", "de", "el", "en", "es", "et", "fa", "ff", "fi", "fr", "fy", "ga", "gd", "gl", "gu", "ha", "he", "hi", "hr", "ht", "hu", "hy", "id", "ig", "ilo", "is", "it", "ja", "jv", "ka", "kk", "km", "kn", "ko", "lb", "lg", "ln", "lo", "lt", "lv", "mg", "mk", "ml", "mn", "mr", "ms", "my", "ne", "nl", "no", "ns", "oc", "or", "pa", "pl", "ps", "pt", "ro", "ru", "sd", "si", "sk", "sl", "so", "sq", "sr", "ss", "su", "sv", "sw", "ta", "th", "tl", "tn", "tr", "uk", "ur", "uz", "vi", "wo", "xh", "yi", "yo", "zh", "zu"],
    "wmt21": ["en", "ha", "is", "ja", "cs", "ru", "zh", "de"],
}
NOT_LANGUAGES = frozenset({"<s>", "<pad>", "</s>", "<unk>", "<mask>"})


def model_fields(config: dict[str, Any], path: Path) -> dict[str, Any]:
    """The Transformer family's `model:` fields for an M2M-100 config.json."""
    if config.get("pad_token_id", FAIRSEQ_PAD) != FAIRSEQ_PAD:
        raise ModelDirError(f"{path}: pad_token_id {shown(config.get('pad_token_id'))}; M2M-100's positions count from "
                            f"its padding id, which heed knows as {FAIRSEQ_PAD}")
    return {
        "family": "transformer", **same_sizes(config, path), "d_model": count(config, "d_model", path),
        "norm": "pre", "activation": activation_of(config, path),
        "scale_embeddings": bool(config.get("scale_embedding", True)),
        "positions": "sinusoidal", "sinusoid_layout": "fairseq",
        "share_embeddings": True, "tie_embeddings": bool(config.get("tie_word_embeddings", True)),
        "dropout": fraction(config, "dropout", 0.1, path),
        "attention_dropout": fraction(config, "attention_dropout", 0.0, path),
    }


def weights(hf: Tensors, model: dict[str, Any], layers: int) -> dict[str, Any]:
    """heed's state dict from an M2M100ForConditionalGeneration's tensors."""
    out = {**bart_layers(hf, "model.encoder", "encoder", layers, decoder=False),
           **bart_layers(hf, "model.decoder", "decoder", layers, decoder=True)}
    for stack in ("encoder", "decoder"):
        out[f"{stack}.norm.weight"] = hf[f"model.{stack}.layer_norm.weight"]
        out[f"{stack}.norm.bias"] = hf[f"model.{stack}.layer_norm.bias"]
    table = hf.first("model.shared.weight", "model.decoder.embed_tokens.weight", "model.encoder.embed_tokens.weight",
                     "lm_head.weight")
    out["decoder.embed.tokens.weight"] = table
    if not model["tie_embeddings"]:
        out["decoder.generator.weight"] = hf["lm_head.weight"]
    elif "lm_head.weight" in hf and not hf["lm_head.weight"].equal(table):
        raise ModelDirError(f"{hf.where}: lm_head.weight differs from the embedding, but config.json ties them "
                            "(tie_word_embeddings); the checkpoint and its config disagree")
    out["decoder.generator.bias"] = table.new_zeros(table.size(0))  # M2M-100's output layer has no bias
    return out


def _m2m100_tokens(directory: Path, settings: dict[str, Any], size: int) -> tuple[dict[int, str], dict[str, str]]:
    """M2M100Tokenizer's ({id: token}, {language code: token})."""
    by_id = read_piece_ids(directory / "vocab.json", size)
    listed = settings.get("language_codes", "m2m100")
    if not isinstance(listed, str) or listed not in M2M100_LANGUAGES:
        raise ModelDirError(f"{directory / 'tokenizer_config.json'}: language_codes {shown(listed)} is not a list "
                            f"M2M-100 has ({', '.join(M2M100_LANGUAGES)})")
    languages = {code: f"__{code}__" for code in M2M100_LANGUAGES[listed]}
    first = len(by_id)
    for i, token in enumerate(languages.values()):
        by_id[first + i] = token
    return by_id, languages


def _nllb_tokens(directory: Path, size: int) -> tuple[dict[int, str], dict[str, str]]:
    """NllbTokenizer's ({id: token}, {language code: token}) from tokenizer.json: its vocabulary,
    and its added tokens (the specials, <mask> and one per language) at their ids."""
    path = directory / "tokenizer.json"
    if not path.exists():
        raise ModelDirError(f"{path}: missing; an NLLB model's vocabulary is its tokenizer.json (with "
                            f"{SPM_FILE}), and an M2M-100 model's its vocab.json")
    data = read_json(path)
    model = data.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, list):  # a Unigram model: [[piece, score], ...], the id is the place
        vocab = {entry[0]: i for i, entry in enumerate(vocab)
                 if isinstance(entry, list) and entry and isinstance(entry[0], str)}
    added = data.get("added_tokens")
    if not isinstance(vocab, dict) or not isinstance(added, list):
        raise ModelDirError(f"{path}: no model vocabulary and added_tokens; not a tokenizer.json of transformers'")
    by_id: dict[int, str] = {}
    for piece, i in vocab.items():
        if type(i) is int and 0 <= i < size:
            by_id[i] = piece
    languages = {}
    for entry in added:
        token, i = (entry.get("content"), entry.get("id")) if isinstance(entry, dict) else (None, None)
        if not isinstance(token, str) or type(i) is not int or not 0 <= i < size:
            raise ModelDirError(f"{path}: added token {shown(entry)} is not a token with an id below the model's "
                                f"vocabulary size {size}")
        by_id[i] = token
        if token not in NOT_LANGUAGES:
            languages[token] = token
    return by_id, languages


TABLES = ("model.shared.weight", "model.decoder.embed_tokens.weight", "model.encoder.embed_tokens.weight",
          "lm_head.weight")  # the one table whose rows are config.json's vocab_size (the first present)


def codec(directory: Path, config: dict[str, Any], d_model: int, weights: WeightFile) -> Codec:
    """The model's one SentencePiece model and vocabulary, for both sides, with its languages; the
    vocabulary's size checked against the weights' table before a vocabulary of that size is made,
    and the SentencePiece model against the vocabulary."""
    settings_path = directory / "tokenizer_config.json"
    settings = read_json(settings_path) if settings_path.exists() else {}
    size = count(config, "vocab_size", directory / "config.json")
    table_rows(weights, TABLES, d_model, size, "vocab_size", directory / "config.json")
    if (directory / "vocab.json").exists():
        by_id, languages = _m2m100_tokens(directory, settings, size)
    else:
        by_id, languages = _nllb_tokens(directory, size)
    unk = next((i for i, token in by_id.items() if token == "<unk>"), None)
    if unk is None or not languages:
        raise ModelDirError(f"{directory}: the vocabulary has no <unk>" if unk is None else
                            f"{directory}: the tokenizer files name no language tokens; not an M2M-100 or NLLB model")
    vocab: Vocab = full_vocab(by_id, size, special_ids(config, size, unk, directory / "config.json"), directory)
    pieces = read_spm(directory, SPM_FILE, "an M2M-100 or NLLB model's tokenizer is its sentencepiece.bpe.model",
                      languages)
    check_pieces(pieces, vocab, directory / SPM_FILE,
                 directory / ("vocab.json" if (directory / "vocab.json").exists() else "tokenizer.json"))
    return Codec(pieces, pieces, vocab, vocab)


def convert(directory: Path, config: dict[str, Any]) -> Converted:
    """A Hugging Face M2M-100 or NLLB directory (config.json, model.safetensors or pytorch_model.bin,
    sentencepiece.bpe.model, and vocab.json or tokenizer.json) -> heed's Transformer."""
    path = directory / "config.json"
    model = buildable(model_fields(config, path), path)
    weight_file = WeightFile(directory)
    text = codec(directory, config, model["d_model"], weight_file)  # a bad tokenizer fails before the weights load
    hf = Tensors(weight_file.tensors(), directory)
    architecture = "NLLB" if not (directory / "vocab.json").exists() else "M2M-100"
    return Converted(model, weights(hf, model, model["layers"]), text, generation_defaults(directory, config),
                     {"architecture": ARCHITECTURE, "tokenizer": architecture})
