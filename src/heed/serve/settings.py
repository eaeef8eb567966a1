"""What the server's routers share, below them all: its settings (every limit and the batching, each
a `heed serve` option) and the refusal a handler raises. heed.serve.app and compat/ import these
(compat builds on app's handler, so app cannot be what its pieces import)."""
from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, Field


class ServeSettings(BaseModel):
    """The server's limits and batching; each is a `heed serve` option."""

    max_sentences: int = Field(64, ge=1, description="sentences per request")
    max_chars: int = Field(1000, ge=1, description="characters per sentence")
    max_body: int = Field(1 << 20, ge=1024, description="request body bytes")
    max_queue: int = Field(1024, ge=1, description="sentences waiting for the decoder; more get 503")
    timeout: float = Field(30.0, gt=0, description="seconds per request, queue and decoding included; then 504")
    batch_wait_ms: float = Field(5.0, ge=0, description="how long the decoder gathers requests into a batch")
    batch_sentences: int = Field(64, ge=1, description="sentences of one batch at most")
    batching: bool = Field(True, description="gather concurrent requests into one batch (off: one at a time)")
    max_beam: int = Field(64, ge=1, description="beam size (and samples per sentence) at most")
    max_output: int = Field(1024, ge=1, description="output tokens a sentence may be allowed at most: "
                                                     "floor(max_len_a * the model's max_src_len + max_len_b), "
                                                     "and a forced prefix's tokens")
    max_work: int = Field(1 << 18, ge=1, description="decoder rows x steps a request may ask for at most: per "
                                                     "sentence, the beam (or samples) times its longest output "
                                                     "(its own max length, or its prefix); a teacher-forced pass "
                                                     "its target's tokens, and each reading its passes (attribution: "
                                                     "a pass per output token and integration point; the logit lens: "
                                                     "a pass per layer; the source share: a pass per hypothesis)")
    max_weights: int = Field(1 << 21, ge=1, description="attention weights a request may read at most: layers x "
                                                        "heads x (target x source, and source x source and target x "
                                                        "target for the self-attention parts read), summed over its "
                                                        "sentences: /v1/heads' maps, and every part of every pass of "
                                                        "ALTI+, rollout and value norms (the source share, /v1/align's "
                                                        "weights)")
    max_answer: int = Field(1 << 22, ge=1, description="numbers (and tokens) a request's answer may hold at most, "
                                                       "counted before it runs: attention matrices, attributions, "
                                                       "the logit lens' lists, head maps (about 10-20 bytes of JSON "
                                                       "each)")
    slice_work: int = Field(1 << 12, ge=1, description="decoder rows x steps a request is given per turn of the "
                                                       "decoder: a costlier request is decoded a slice at a time, "
                                                       "with the other requests' batches between its slices "
                                                       "(the readings: attribution, head maps, the logit lens, ALTI+ and "
                                                       "the source share: a sentence a turn)")
    read_timeout: float = Field(10.0, gt=0, description="seconds a client may take to send a whole request "
                                                        "(headers and body); a slower one is disconnected")
    cors_origins: tuple[str, ...] = Field(("*",), description="web origins whose pages may call the LibreTranslate "
                                                          "and DeepL APIs from a browser (CORS): '*' any, as "
                                                          "LibreTranslate allows by default; none: no cross-origin "
                                                          "call. heed's own /v1 API allows none")


class ApiError(Exception):
    """A request the server refuses: becomes {"error": {...}} with `status`."""

    def __init__(self, status: int, message: str, field: str | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.field, self.headers = status, message, field, dict(headers or {})


__all__ = ["ApiError", "ServeSettings"]
