"""Translate with a trained model from Python:

    import heed
    t = heed.load("runs/demo")                       # a model dir, or a training output dir
    out = t.translate(["le 3 mars 1998", "1998년 3월 3일"], beam=5)
    out[0].text, out[0].attention.shape              # ('1998-03-03', (11, 15))

`Translation.attention` has one row per output token plus one for the end of sentence, and one
column per source token plus one for the end-of-sentence marker the encoder reads:
shape `(len(tokens) + 1, len(src_tokens) + 1)`; `labels()` gives the matching axis labels.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from pydantic import ValidationError

from heed.checkpoint import load_model_dir
from heed.config import Config
from heed.data.vocab import EOS, SPECIALS
from heed.errors import ConfigError
from heed.nn.seq2seq import Seq2Seq
from heed.pipeline import Codec
from heed.search import DecodeConfig
from heed.train import resolve_device, translate_ids

EOS_TOKEN = SPECIALS[EOS]


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
    """

    text: str
    tokens: list[str]
    src_tokens: list[str]
    score: float
    attention: np.ndarray | None

    def labels(self) -> tuple[list[str], list[str]]:
        """(source labels, output labels) for the attention matrix's columns and rows."""
        return [*self.src_tokens, EOS_TOKEN], [*self.tokens, EOS_TOKEN]


class Translator:
    """A trained model with its tokenizers and vocabularies, ready to translate."""

    def __init__(self, model: Seq2Seq, codec: Codec, config: Config, *, device: torch.device) -> None:
        self.model = model.to(device).eval()
        self.codec = codec
        self.config = config
        self.device = device

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, device: str = "auto") -> "Translator":
        """Load a model directory, or the `model/` inside a training output directory.
        `device`: "auto" (CUDA if available), "cpu" or "cuda"."""
        torch_device = resolve_device(device)
        loaded = load_model_dir(path, device=torch_device)
        return cls(loaded.model, loaded.codec, loaded.config, device=torch_device)

    @property
    def decode_config(self) -> DecodeConfig:
        """The decoding settings saved with the model (`decode:` in its config)."""
        return self.config.decode

    def translate(self, texts: Sequence[str], *, beam: int | None = None, batch_size: int = 64,
                  **decode: Any) -> list[Translation]:
        """Translate `texts` (in input order). `beam`: beam size (default: the model's config);
        other `decode` keywords override `DecodeConfig` fields (length_penalty=, max_len_b=, ...).
        Sentences are batched longest first and put back in input order; an empty (or blank) text
        gives an empty translation without running the model."""
        if isinstance(texts, str):
            raise TypeError("translate() takes a list of sentences; wrap a single one in a list")
        cfg = self._decode_config(beam, decode)
        src_tokens = [self.codec.src_tokens(t) for t in texts]
        todo = [i for i, toks in enumerate(src_tokens) if toks]
        hyps = translate_ids(self.model, [self.codec.src_vocab.encode(src_tokens[i]) for i in todo], cfg,
                             device=self.device, batch_size=batch_size)
        out = [Translation("", [], [], 0.0, None if not self.model.has_attention else np.zeros((1, 1), np.float32))
               for _ in texts]
        for i, nbest in zip(todo, hyps):
            best = nbest[0]
            tokens, text = self.codec.decode_tgt(best.tokens)
            attention = None if best.attention is None else best.attention.float().numpy()
            out[i] = Translation(text, tokens, src_tokens[i], float(best.score), attention)
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
            return DecodeConfig.model_validate({**self.config.decode.model_dump(), **update})
        except ValidationError as e:
            err = e.errors(include_url=False)[0]
            field = ".".join(str(p) for p in err["loc"]) or None
            raise ConfigError(err["msg"].removeprefix("Value error, "), field=f"decode.{field}" if field else "decode") from None


__all__ = ["Translation", "Translator"]
