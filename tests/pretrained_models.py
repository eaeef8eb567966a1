"""Tiny pretrained models that `transformers` builds, with random weights, for the import tests:
a Marian directory as Hugging Face writes it (config.json, model.safetensors, source.spm,
target.spm, vocab.json, tokenizer_config.json), and the real sentences they translate.

The SentencePiece models are trained here on real text (Tatoeba, where the shared data is on this
machine; else the dates task's sentences), with SentencePiece's defaults as Marian's are (nmt_nfkc
normalisation, <unk> <s> </s> as ids 0-2), and the joint vocab.json is built as OPUS-MT's are:
</s> = 0, <unk> = 1, the pieces of both models, <pad> last."""
from __future__ import annotations

import io
import json
import os
import shutil
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml


def shared_data() -> Path | None:
    """The shared corpora's folder: $HEED_DATA_ROOT, or ../shared/data beside the checkout, or /work/shared/data."""
    for candidate in (os.environ.get("HEED_DATA_ROOT"), Path(__file__).resolve().parents[2] / "shared" / "data",
                      "/work/shared/data"):
        if candidate and (Path(candidate) / "tatoeba-fra-eng" / "fra.txt").is_file():
            return Path(candidate)
    return None


def teacher_forced(translator, src_ids: list[int], tgt_ids: list[int]):
    """(log-probabilities (len(tgt_ids) + 1, vocab), the ids they predict (tgt_ids then </s>)):
    one teacher-forced pass of `translator`'s PyTorch model over one pair of ids."""
    import torch

    from heed.data.batching import collate, specials_of

    batch = collate([(src_ids, tgt_ids)], [0], specials_of(translator.model))
    with torch.inference_mode():
        logits = translator.model(batch.src, batch.src_lengths, batch.tgt_in).logits[0]
    return logits.log_softmax(-1), batch.tgt_out[0]


def assert_teacher_forced_like_hugging_face(hf, tokenizer, translator, fr: list[str], en: list[str]):
    """heed's teacher-forced log-probabilities of the (fr, en) pairs equal those of the Hugging Face
    model `hf` (within 1e-4), and its targets equal the tokenizer's labels; returns heed's batch."""
    import torch

    from heed.data.batching import collate, specials_of

    batch = tokenizer(fr, text_target=en, return_tensors="pt", padding=True)
    with torch.no_grad():
        expected = torch.log_softmax(hf(**batch).logits, dim=-1)  # (batch, tgt_len, vocab)
    codec, model = translator.codec, translator.model
    examples = [(codec.encode_src(s), codec.tgt_ids(codec.tgt_tokens(t), [])) for s, t in zip(fr, en)]
    ours = collate(examples, list(range(len(examples))), specials_of(model))
    with torch.no_grad():
        got = torch.log_softmax(model(ours.src, ours.src_lengths, ours.tgt_in).logits, dim=-1)
    steps = got.size(1)
    assert ours.tgt_out.equal(batch["labels"][:, :steps].masked_fill(~ours.tgt_mask, model.pad_id))
    assert float((got - expected[:, :steps]).abs()[ours.tgt_mask].max()) < 1e-4
    return ours


@cache
def tatoeba(start: int, count: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(French, English) sentences start .. start + count of Tatoeba, or of the dates task where the
    shared data is not on this machine."""
    root = shared_data()
    if root is None:
        from heed.data.dates import generate_dates_aligned

        splits, _ = generate_dates_aligned(n_train=start + count, n_dev=1, n_test=1, seed=0, languages=("fr",),
                                           verbose_forms=True)
        pairs = splits.train[start:start + count]
        return tuple(p.src for p in pairs), tuple(p.tgt for p in pairs)
    with open(root / "tatoeba-fra-eng" / "fra.txt", encoding="utf-8") as f:
        lines = [line.rstrip("\n").split("\t") for _, line in zip(range(start + count), f)][start:]
    return tuple(line[1] for line in lines), tuple(line[0] for line in lines)


def multi30k(count: int) -> tuple[list[str], list[str]] | None:
    """(German, English) sentences of Multi30k's training set, or None without the shared data."""
    root = shared_data()
    if root is None or not (root / "multi30k" / "train.de").is_file():
        return None
    sides = []
    for lang in ("de", "en"):
        with open(root / "multi30k" / f"train.{lang}", encoding="utf-8") as f:
            sides.append([line.rstrip("\n") for _, line in zip(range(count), f)])
    return sides[0], sides[1]


def train_spm(texts: list[str], path: Path, vocab_size: int) -> list[str]:
    """A unigram SentencePiece model with SentencePiece's defaults, written to `path`; its pieces."""
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=model, vocab_size=vocab_size,
                                   model_type="unigram", num_threads=1, minloglevel=2)
    path.write_bytes(model.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


def marian_tokenizer_files(directory: Path, src_texts: list[str], tgt_texts: list[str], *,
                           vocab_size: int = 300) -> dict[str, int]:
    """source.spm, target.spm and the joint vocab.json ({piece: id}) in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    src = train_spm(src_texts, directory / "source.spm", vocab_size)
    tgt = train_spm(tgt_texts, directory / "target.spm", vocab_size)
    pieces = ["</s>", "<unk>", *dict.fromkeys(src[3:] + tgt[3:]), "<pad>"]
    vocab = {piece: i for i, piece in enumerate(pieces)}
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    return vocab


def make_marian(directory: Path, *, activation: str = "swish", shared: bool = True, eos_bias: float = 4.5,
                seed: int = 0) -> Path:
    """A tiny random MarianMTModel (2 + 2 layers of 32, 4 heads) with its tokenizer, saved by
    transformers into `directory`. The logits bias is random and favours </s> by `eos_bias`, so
    that outputs end at many lengths (a random model's otherwise run to the limit)."""
    import torch

    transformers = pytest.importorskip("transformers")
    fr, en = tatoeba(0, 3000)
    vocab = marian_tokenizer_files(directory, list(fr), list(en))
    transformers.MarianTokenizer(str(directory / "source.spm"), str(directory / "target.spm"),
                                 str(directory / "vocab.json")).save_pretrained(directory)
    pad = len(vocab) - 1
    config = transformers.MarianConfig(
        vocab_size=len(vocab), d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, activation_function=activation,
        scale_embedding=True, pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad,
        max_position_embeddings=256, share_encoder_decoder_embeddings=shared, init_std=0.2, dropout=0.0)
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_(0.0, 1.0)
        model.final_logits_bias[0, 0] = eos_bias
    model.save_pretrained(directory)
    return directory


def train_bpe_spm(texts: list[str], path: Path, vocab_size: int) -> list[str]:
    """A BPE SentencePiece model (as M2M-100's and NLLB's sentencepiece.bpe.model are) written to `path`; its pieces."""
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=model, vocab_size=vocab_size,
                                   model_type="bpe", num_threads=1, minloglevel=2)
    path.write_bytes(model.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


def m2m100_tokenizer(directory: Path, kind: str, texts: list[str], *, vocab_size: int = 400):
    """The tokenizer files of an M2M-100 (vocab.json, `__fr__` language tokens) or an NLLB (tokenizer.json,
    `fra_Latn` language tokens) model in `directory`, over a BPE model trained on `texts`; transformers'
    tokenizer of them, set to French -> English."""
    transformers = pytest.importorskip("transformers")
    directory.mkdir(parents=True, exist_ok=True)
    pieces = train_bpe_spm(texts, directory / "sentencepiece.bpe.model", vocab_size)
    if kind == "m2m100":
        vocab = {piece: i for i, piece in enumerate(["<s>", "<pad>", "</s>", "<unk>", *pieces[3:]])}
        (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        tokenizer = transformers.M2M100Tokenizer(str(directory / "vocab.json"),
                                                 str(directory / "sentencepiece.bpe.model"), src_lang="fr",
                                                 tgt_lang="en")
    else:
        from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

        tokenizer = transformers.NllbTokenizer.from_pretrained(str(directory), src_lang="fra_Latn",
                                                               tgt_lang="eng_Latn",
                                                               additional_special_tokens=FAIRSEQ_LANGUAGE_CODES)
    tokenizer.save_pretrained(directory)
    return tokenizer


def make_m2m100(directory: Path, kind: str = "m2m100", *, seed: int = 0, eos_bias: float = 4.5,
                init_std: float = 0.5) -> Path:
    """A tiny random M2M100ForConditionalGeneration (2 + 2 pre-norm layers of 32, 4 heads, one tied
    table) with an M2M-100 or NLLB tokenizer (`kind`), saved by transformers into `directory`. The
    decoder's last norm is biased towards the </s> embedding by `eos_bias`, so that outputs end at
    many lengths."""
    import torch

    transformers = pytest.importorskip("transformers")
    fr, en = tatoeba(0, 3000)
    tokenizer = m2m100_tokenizer(directory, kind, list(fr) + list(en))
    size = max(tokenizer.convert_tokens_to_ids(["__zu__" if kind == "m2m100" else "zul_Latn"]) +
               [len(tokenizer)]) + (9 if kind == "m2m100" else 0)  # M2M-100 keeps 8 made-up words after its languages
    config = transformers.M2M100Config(
        vocab_size=size, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, activation_function="relu",
        scale_embedding=True, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
        max_position_embeddings=256, init_std=init_std, dropout=0.0, encoder_layerdrop=0.0, decoder_layerdrop=0.0)
    torch.manual_seed(seed)
    model = transformers.M2M100ForConditionalGeneration(config).eval()
    with torch.no_grad():
        eos = model.model.shared.weight[2]
        model.model.decoder.layer_norm.bias.add_(eos_bias * eos / eos.norm())
    model.save_pretrained(directory)
    return directory


# ---------------------------------------------------------------- Marian releases (.npz)

MARIAN_OPTIONS = {
    "type": "transformer", "enc-depth": 2, "dec-depth": 2, "dim-emb": 32, "transformer-heads": 4,
    "transformer-dim-ffn": 64, "transformer-ffn-depth": 2, "transformer-ffn-activation": "swish",
    "transformer-preprocess": "", "transformer-postprocess": "dan", "transformer-postprocess-emb": "d",
    "transformer-postprocess-top": "", "transformer-decoder-autoreg": "self-attention",
    "transformer-no-projection": False, "tied-embeddings-all": True, "transformer-dropout": 0.1,
    "guided-alignment": "corpus.align", "transformer-guided-alignment-layer": "last",
}


def write_release(directory: Path, arrays: dict[str, np.ndarray], options: dict, pieces: list[str],
                  spm: Path, *, decoder_yml: bool = True) -> Path:
    """A Marian release in `directory`: model.npz (the arrays and "special:model.yml", a
    NUL-terminated YAML string as Marian writes it), vocab.yml {piece: id}, source.spm and
    target.spm (copied from `spm`'s directory) and decoder.yml."""
    directory.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(options, sort_keys=False).encode() + b"\0"
    np.savez(directory / "model.npz", **arrays, **{"special:model.yml": np.frombuffer(text, dtype=np.int8)})
    (directory / "vocab.yml").write_text(yaml.safe_dump({p: i for i, p in enumerate(pieces)}, allow_unicode=True,
                                                        sort_keys=False), encoding="utf-8")
    for name in ("source.spm", "target.spm"):
        shutil.copy(spm / name, directory / name)
    if decoder_yml:
        (directory / "decoder.yml").write_text(yaml.safe_dump({
            "models": ["model.npz"], "vocabs": ["vocab.yml", "vocab.yml"], "beam-size": 4, "normalize": 0.6,
            "word-penalty": 0, "relative-paths": True}), encoding="utf-8")
    return directory


def marian_arrays(hf_state: dict[str, Any], layers: int) -> dict[str, np.ndarray]:
    """A MarianMTModel's state dict (one table, <pad> its last row) in Marian's names and layout."""
    a = {k: v.detach().float().numpy() for k, v in hf_state.items()}
    out = {"Wemb": a["model.shared.weight"][:-1], "decoder_ff_logit_out_b": a["final_logits_bias"][:, :-1]}
    for stack in ("encoder", "decoder"):
        for i in range(layers):
            s, m = f"model.{stack}.layers.{i}", f"{stack}_l{i + 1}"
            parts = [("self_attn", "self", "self_attn_layer_norm")]
            if stack == "decoder":
                parts.append(("encoder_attn", "context", "encoder_attn_layer_norm"))
            for hf, marian, norm in parts:
                for p in "qkv":
                    out[f"{m}_{marian}_W{p}"] = a[f"{s}.{hf}.{p}_proj.weight"].T
                    out[f"{m}_{marian}_b{p}"] = a[f"{s}.{hf}.{p}_proj.bias"][None]
                out[f"{m}_{marian}_Wo"] = a[f"{s}.{hf}.out_proj.weight"].T
                out[f"{m}_{marian}_bo"] = a[f"{s}.{hf}.out_proj.bias"][None]
                out[f"{m}_{marian}_Wo_ln_scale"] = a[f"{s}.{norm}.weight"][None]
                out[f"{m}_{marian}_Wo_ln_bias"] = a[f"{s}.{norm}.bias"][None]
            for k in "12":
                out[f"{m}_ffn_W{k}"] = a[f"{s}.fc{k}.weight"].T
                out[f"{m}_ffn_b{k}"] = a[f"{s}.fc{k}.bias"][None]
            out[f"{m}_ffn_ffn_ln_scale"] = a[f"{s}.final_layer_norm.weight"][None]
            out[f"{m}_ffn_ffn_ln_bias"] = a[f"{s}.final_layer_norm.bias"][None]
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


def release_parts(hf_dir: Path) -> tuple[dict[str, np.ndarray], list[str]]:
    """(Marian's arrays, the vocabulary's pieces) of make_marian's model `hf_dir`; the pieces
    without <pad> (its last id), which a Marian vocabulary does not have."""
    from safetensors.torch import load_file

    vocab = json.loads((hf_dir / "vocab.json").read_text(encoding="utf-8"))
    pieces = sorted(vocab, key=vocab.get)
    assert pieces[-1] == "<pad>"
    return marian_arrays(load_file(str(hf_dir / "model.safetensors")), 2), pieces[:-1]


def make_marian_release(directory: Path, hf_dir: Path) -> Path:
    """A Marian release in `directory` of the Hugging Face Marian model `hf_dir` (make_marian's)."""
    arrays, pieces = release_parts(hf_dir)
    return write_release(directory, arrays, MARIAN_OPTIONS, pieces, hf_dir)
