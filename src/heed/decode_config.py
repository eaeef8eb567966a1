"""How to decode: `DecodeConfig`, the one home of search's defaults and limits.

Plain pydantic, no torch: the config (heed.config), the command line and the server read it without
loading the model code. heed.search runs it.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_BEAM = 256  # rows = batch * beam: 1,000,000 reached 7.4 GB before its first step
MAX_OUTPUT_TOKENS = 4096  # a model that never emits EOS stops here, whatever max_len_a and max_len_b say


class DecodeConfig(BaseModel):
    """How to decode. The one home of search's defaults. Frozen: a value that travels whole from the
    config, the command line or a request to the search (a change is `model_copy(update=...)`), and
    hashable, so the server batches requests by it."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    beam_size: int = Field(1, ge=1, le=MAX_BEAM, description="beam size; 1 = greedy")
    n_best: int = Field(1, ge=1, description="hypotheses returned per sentence, at most beam_size")
    length_penalty: float = Field(0.0, ge=0.0, le=10.0, description="length penalty alpha (the form: length_norm); "
                                                                    "0 = off")
    length_norm: Literal["gnmt", "power"] = Field(
        "gnmt", description="what length_penalty divides a hypothesis' log-probability by: gnmt ((5 + |Y|) / 6)^alpha "
                            "(Wu et al. 2016), or power |Y|^alpha (fairseq's and Hugging Face's); |Y| counts </s>")
    stopping: Literal["exact", "beam"] = Field(
        "exact", description="when a sentence's beam search ends: exact, once no live beam can beat its n_best "
                             "(the result of searching to the length limit); beam, once beam_size hypotheses have "
                             "finished (fairseq's, Marian's, CTranslate2's and Hugging Face's early_stopping=True "
                             "rule): faster, at times another output with a length penalty")
    coverage_penalty: float = Field(0.0, ge=0.0, le=10.0, description="coverage penalty: GNMT beta; 0 = off; "
                                                                      "needs attention")
    # 1, not 0: an empty translation of a non-empty source is never what a user wants, yet a beam
    # can end at step 0 when EOS is each beam's best first token (seen on Multi30k at beam 5).
    min_len: int = Field(1, ge=0, description="output tokens before EOS is allowed (EOS not counted); "
                                               "0 allows an empty output")
    max_len_a: float = Field(2.0, ge=0.0, le=MAX_OUTPUT_TOKENS,
                             description="max output tokens = floor(a * src_len + b), EOS not counted, and at "
                                         f"most {MAX_OUTPUT_TOKENS}; this sets a")
    max_len_b: int = Field(10, ge=0, le=MAX_OUTPUT_TOKENS, description="b of max_len_a's formula")
    no_repeat_ngram: int = Field(0, ge=0, description="forbid repeating any n-gram of this size; 0 = off")
    forbid_unk: bool = Field(False, description="never emit <unk>: a copy model copies the source word instead, "
                                                "any other model writes its next most likely token")
    shortlist: bool = Field(False, description="search only the target pieces the model's vocabulary shortlist "
                                               "lists for the batch's sources (`heed data shortlist`): faster, "
                                               "and at times another output")
    sampling: bool = Field(False, description="draw n_best samples per sentence instead of searching "
                                              "(beam_size must be 1)")
    temperature: float = Field(1.0, gt=0.0, description="with sampling: divide the logits by this; < 1 is sharper")
    top_k: int = Field(0, ge=0, description="with sampling: draw from the k most likely tokens only; 0 = all")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="with sampling: draw from the smallest set of tokens "
                                                          "whose probability reaches p (nucleus); 1 = all")
    seed: int | None = Field(None, ge=0, le=2**63 - 1,
                             description="with sampling: the random seed; the same seed and source give the same "
                                         "samples in any batch (None: a fresh seed)")

    @model_validator(mode="after")
    def _check(self) -> DecodeConfig:
        if self.sampling:
            if self.beam_size != 1:
                raise ValueError(f"sampling draws n_best samples instead of a beam search; set beam_size to 1 "
                                 f"(it is {self.beam_size})")
        elif self.n_best > self.beam_size:
            raise ValueError(f"n_best ({self.n_best}) cannot exceed beam_size ({self.beam_size})")
        return self


__all__ = ["MAX_BEAM", "MAX_OUTPUT_TOKENS", "DecodeConfig"]
