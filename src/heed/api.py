"""Translate with a trained model from Python:

    import heed
    t = heed.load("runs/demo")                       # a model dir, or a training output dir
    out = t.translate(["le 3 mars 1998", "1998년 3월 3일"], beam=5)
    out[0].text, out[0].attention.shape              # ('1998-03-03', (11, 15))

`Translation.attention` has one row per output token plus one for the end of sentence, and one
column per source token plus one for the end-of-sentence marker the encoder reads:
shape `(len(tokens) + 1, len(src_tokens) + 1)`; `labels()` gives the matching axis labels.

A source longer than the model's `data.max_src_len` tokens (the longest it trained on) is cut to
that many tokens, and its `Translation.truncated` says how many were dropped: an RNN runs on
longer inputs, but time, memory and the attention matrix grow with the length, and the model
never learnt to translate them anyway.

    t.translate(["Zoltan est là"], replace_unk=True, dictionary="fr-en.dict")  # <unk> -> source word
    a = t.align(["le chat dort"], ["the cat sleeps"])[0]   # forced decoding of a given translation
    a.pharaoh(), a.attention.shape                         # ('0-0 1-1 2-2', (3, 3)), word level
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from pydantic import ValidationError

from heed.align import (
    Link,
    hard_alignment,
    load_dictionary,
    replace_unknowns,
    to_pharaoh,
    word_attention,
)
from heed.checkpoint import load_model_dir
from heed.config import Config, decode_length_problem
from heed.data.batching import collate
from heed.data.corpus import normalize
from heed.data.vocab import EOS, SPECIALS, UNK
from heed.errors import ConfigError, HeedError
from heed.nn.layout import for_decoding
from heed.nn.seq2seq import Seq2Seq
from heed.pipeline import Codec
from heed.runtime import check_bf16, limit_onednn_cache, resolve_device
from heed.search import DecodeConfig, translate_ids

EOS_TOKEN = SPECIALS[EOS]
UNK_TOKEN = SPECIALS[UNK]


@dataclass(frozen=True)
class Translation:
    """One translated sentence.

    text:       the detokenized output
    tokens:     output tokens, without </s>
    src_tokens: the source as the model saw it (tokenized), without </s>
    score:      the search's ranking score (log-probability, after any length/coverage penalty)
    attention:  float32 (len(tokens) + 1, len(src_tokens) + 1): row j is where output j (last row:
                </s>) looked, over the source tokens and the source's </s>; None for a model
                without attention
    truncated:  source tokens dropped beyond the translator's max_src_len (0: all were read)
    """

    text: str
    tokens: list[str]
    src_tokens: list[str]
    score: float
    attention: np.ndarray | None
    truncated: int = 0

    def labels(self) -> tuple[list[str], list[str]]:
        """(source labels, output labels) for the attention matrix's columns and rows."""
        return [*self.src_tokens, EOS_TOKEN], [*self.tokens, EOS_TOKEN]


@dataclass(frozen=True)
class Alignment:
    """Where the model looks while it reads a given translation of a sentence (forced decoding),
    between the sentences' whitespace words, whatever the model's tokens.

    src_words, tgt_words: the (normalized) sentences split at spaces; Pharaoh positions index these
    attention: float32 (len(tgt_words), len(src_words)): the token attention of the teacher-forced
               pass with the </s> row and column dropped, lifted to words by
               `heed.align.word_attention` (source pieces summed, target pieces averaged); rows
               sum to at most 1 (the rest went to the source's </s>)
    links:     the hard alignment `[(i, j), ...]`: for every target word j, the source word i
               with the most weight (Pharaoh order, source first)
    """

    src_words: list[str]
    tgt_words: list[str]
    attention: np.ndarray
    links: list[Link]

    def pharaoh(self) -> str:
        """The links as one Pharaoh line, "0-0 1-2 2-1"."""
        return to_pharaoh(self.links)


class Translator:
    """A trained model with its tokenizers and vocabularies, ready to translate.

    `bf16=True` decodes in bfloat16: the weights are cast once, the matrix products run in bf16
    under autocast and the log-probabilities search ranks are computed in float32. It pays where
    the products are large: batches of a subword model on a GPU or on a CPU with AMX (beam 5,
    batch 64 on the Multi30k model of bench/compare: 1.4x on one CPU core, dev BLEU 13.4 vs 13.5).
    For batch 1, for small models and on CPUs without AMX it is slower (bench/RESULTS.md).

    The translator owns `model`: it is cast, moved and put in eval mode in place, and on the CPU
    its decoder's weights are stored column-major (heed.nn.layout; same values)."""

    def __init__(self, model: Seq2Seq, codec: Codec, config: Config, *, device: torch.device,
                 bf16: bool = False) -> None:
        if bf16:
            check_bf16(device, what="--bf16")
        limit_onednn_cache(bf16)
        self.model = (model.to(torch.bfloat16) if bf16 else model).to(device).eval()
        if device.type == "cpu":
            for_decoding(self.model.decoder)  # few rows a step: the faster GEMM layout there
        self.codec = codec
        self.config = config
        self.device = device
        self.bf16 = bf16

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, device: str = "auto", bf16: bool = False) -> "Translator":
        """Load a model directory, or the `model/` inside a training output directory.
        `device`: "auto" (CUDA if available), "cpu" or "cuda"; `bf16`: decode in bfloat16."""
        torch_device = resolve_device(device, field="device")
        loaded = load_model_dir(path, device=torch_device)
        return cls(loaded.model, loaded.codec, loaded.config, device=torch_device, bf16=bf16)

    def _precision(self) -> contextlib.AbstractContextManager:
        """bf16 autocast for a bf16 translator (float32 inputs such as fresh states meet bf16 weights)."""
        if self.bf16:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    @property
    def max_src_len(self) -> int:
        """The longest source, in tokens, that `translate` reads: the model's `data.max_src_len`."""
        return self.config.data.max_src_len

    @property
    def decode_config(self) -> DecodeConfig:
        """The decoding settings saved with the model (`decode:` in its config)."""
        return self.config.decode

    def translate(self, texts: Sequence[str], *, beam: int | None = None, batch_size: int = 64,
                  replace_unk: bool = False,
                  dictionary: Mapping[str, str] | str | os.PathLike[str] | None = None,
                  **decode: Any) -> list[Translation]:
        """Translate `texts` (in input order). `beam`: beam size (default: the model's config);
        other `decode` keywords override `DecodeConfig` fields (length_penalty=, max_len_b=, ...).
        Sentences are batched longest first and put back in input order; an empty (or blank) text
        gives an empty translation without running the model. A source longer than `max_src_len`
        tokens is cut to its first `max_src_len` (`Translation.truncated` counts the rest).

        `replace_unk`: each `<unk>` output token becomes the source token it attended to most
        (`heed.align.replace_unknowns`; Luong et al. 2015b), translated by `dictionary` (a
        mapping, or a `src<TAB>tgt` file) where it has an entry, copied otherwise. `tokens`,
        `text` and the attention labels then show the replacements. A dictionary implies
        `replace_unk`."""
        if isinstance(texts, str):
            raise TypeError("translate() takes a list of sentences; wrap a single one in a list")
        cfg = self._decode_config(beam, decode)
        table = self._dictionary(dictionary)
        replace_unk = replace_unk or table is not None
        if replace_unk and not self.model.has_attention:
            raise HeedError("this model has no attention, so nothing says which source word an <unk> stands "
                            "for; translate without unknown-word replacement")
        full = [self.codec.src_tokens(t) for t in texts]
        src_tokens = [toks[: self.max_src_len] for toks in full]
        todo = [i for i, toks in enumerate(src_tokens) if toks]
        with self._precision():
            hyps = translate_ids(self.model, [self.codec.src_vocab.encode(src_tokens[i]) for i in todo], cfg,
                                 device=self.device, batch_size=batch_size)
        out = [Translation("", [], [], 0.0, None if not self.model.has_attention else np.zeros((1, 1), np.float32))
               for _ in texts]
        for i, nbest in zip(todo, hyps):
            best = nbest[0]
            tokens, text = self.codec.decode_tgt(best.tokens)
            attention = None if best.attention is None else best.attention.float().numpy()
            if replace_unk and UNK_TOKEN in tokens:
                assert attention is not None
                # Rows: output tokens without </s>; columns: source tokens without </s>.
                tokens = replace_unknowns(tokens, src_tokens[i], attention[: len(tokens), : len(src_tokens[i])],
                                          unk=UNK_TOKEN, dictionary=table)
                text = self.codec.tgt_tokenizer.detokenize(tokens)
            out[i] = Translation(text, tokens, src_tokens[i], float(best.score), attention,
                                 len(full[i]) - len(src_tokens[i]))
        return out

    @staticmethod
    def _dictionary(dictionary: Mapping[str, str] | str | os.PathLike[str] | None) -> dict[str, str] | None:
        if dictionary is None:
            return None
        return dict(dictionary) if isinstance(dictionary, Mapping) else load_dictionary(dictionary)

    def align(self, src_texts: Sequence[str], tgt_texts: Sequence[str], *, batch_size: int = 64) -> list[Alignment]:
        """Word alignments of given translations: `tgt_texts[k]` is fed to the decoder as if it
        were the model's own output (teacher forcing, one pass per batch), and the attention of
        that pass, lifted to whitespace words, gives each target word's source word.

        Sentences are batched longest source first and put back in input order. An empty source
        or target gives an alignment with no links without running the model."""
        if isinstance(src_texts, str) or isinstance(tgt_texts, str):
            raise TypeError("align() takes lists of sentences; wrap a single one in a list")
        if len(src_texts) != len(tgt_texts):
            raise HeedError(f"{len(src_texts)} source sentences but {len(tgt_texts)} translations; "
                            "give one translation per source")
        if not self.model.has_attention:
            raise HeedError("this model has no attention, so it has no alignments; use a model with attention")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        src_tokens = [self.codec.src_tokens(t) for t in src_texts]
        tgt_tokens = [self.codec.tgt_tokens(t) for t in tgt_texts]
        examples = [(self.codec.src_vocab.encode(s), self.codec.tgt_vocab.encode(t))
                    for s, t in zip(src_tokens, tgt_tokens)]
        todo = sorted((k for k, (s, t) in enumerate(examples) if s and t), key=lambda k: -len(examples[k][0]))
        token_attention: dict[int, np.ndarray] = {}
        with torch.inference_mode(), self._precision():
            for start in range(0, len(todo), batch_size):
                group = todo[start : start + batch_size]
                batch = collate([examples[k] for k in group], group).to(self.device)
                weights = self.model(batch.src, batch.src_lengths, batch.tgt_in).attention  # (batch, tgt_len, src_len)
                assert weights is not None
                weights = weights.float().cpu().numpy()
                for row, k in enumerate(group):
                    # Drop the </s> row (predicting the end) and the source's </s> column.
                    token_attention[k] = weights[row, : len(examples[k][1]), : len(examples[k][0])]
        out = []
        for k, (src, tgt) in enumerate(zip(src_texts, tgt_texts)):
            src_words, tgt_words = normalize(src).split(), normalize(tgt).split()
            if k not in token_attention:
                out.append(Alignment(src_words, tgt_words, np.zeros((len(tgt_words), len(src_words)), np.float32), []))
                continue
            src_ids = self.codec.src_tokenizer.word_ids(src_tokens[k])
            tgt_ids = self.codec.tgt_tokenizer.word_ids(tgt_tokens[k])
            matrix = word_attention(token_attention[k], src_ids, tgt_ids)  # (tgt_words, src_words)
            assert matrix.shape == (len(tgt_words), len(src_words)), (matrix.shape, src_words, tgt_words)
            out.append(Alignment(src_words, tgt_words, matrix.astype(np.float32), hard_alignment(matrix)))
        return out

    def __call__(self, text: str, **kwargs: Any) -> str:
        """Translate one sentence; returns the text."""
        return self.translate([text], **kwargs)[0].text

    def _decode_config(self, beam: int | None, overrides: dict[str, Any]) -> DecodeConfig:
        update = dict(overrides)
        if beam is not None:
            update["beam_size"] = beam
            update.setdefault("n_best", min(self.config.decode.n_best, beam))
        if not update:
            return self.config.decode
        try:
            cfg = DecodeConfig.model_validate({**self.config.decode.model_dump(), **update})
        except ValidationError as e:
            err = e.errors(include_url=False)[0]
            field = ".".join(str(p) for p in err["loc"]) or None
            raise ConfigError(err["msg"].removeprefix("Value error, "), field=f"decode.{field}" if field else "decode") from None
        problem = decode_length_problem(cfg)
        if problem is not None:
            raise ConfigError(problem, field="decode.max_len_b")
        return cfg


__all__ = ["Alignment", "Translation", "Translator"]
