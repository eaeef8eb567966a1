"""Dev evaluation during training: the teacher-forced loss and greedy translations of the held-out
pairs (scored by heed.evaluate). The dev AER and the attention entropy a run also records come from
heed.explain (forced.corpus_aer, history.attention_entropy)."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from heed.config import DataConfig
from heed.data.batching import Batch, token_batches
from heed.data.codec import Codec, Example
from heed.data.corpus import Pair
from heed.data.vocab import Specials
from heed.decode_config import DecodeConfig
from heed.evaluate import Scores
from heed.nn.protocol import TrainableModel
from heed.search import translate_ids


@dataclass(frozen=True)
class DevResult:
    loss: float  # mean negative log-likelihood per target token (no label smoothing)
    scores: Scores  # of greedy translations

    def metric(self, name: str) -> float:
        return self.loss if name == "loss" else getattr(self.scores, name)


def dev_batches(examples: Sequence[Example], data: DataConfig, specials: Specials) -> list[Batch]:
    """The dev examples in the training's batch sizes, in order (no shuffling), with the
    vocabulary's special ids."""
    return token_batches(examples, batch_tokens=data.batch_tokens, max_sentences=data.max_sentences, shuffle=False,
                         specials=specials)


def dev_loss(model: TrainableModel, batches: Iterable[Batch]) -> float:
    """Mean NLL per target token (no label smoothing), teacher-forced over `batches` (on the model's device)."""
    model.eval()
    total, tokens = 0.0, 0
    with torch.inference_mode():
        for batch in batches:
            total += float(model.loss(batch).cross_entropy)
            tokens += batch.num_tgt_tokens
    return total / max(tokens, 1)


def decode_pairs(model: TrainableModel, codec: Codec, pairs: Sequence[Pair], cfg: DecodeConfig, *,
                 device: torch.device, seed: int) -> list[str]:
    """The 1-best translation of each pair's source, as text ("" where the search found none). A
    sampling config without a seed samples with `seed`: dev scores must be reproducible, so that a
    resumed run stays exact."""
    model.eval()
    if cfg.sampling and cfg.seed is None:
        cfg = cfg.model_copy(update={"seed": seed})
    sources = [codec.src_tokens(p.src) for p in pairs]
    frame = codec.target_frame()  # a many-language model's target language token, forced first
    decoded = translate_ids(model, [codec.src_ids(s) for s in sources], cfg, device=device,
                            prefixes=[frame] * len(sources) if frame else None, free_prefix=len(frame))
    return [codec.decode_tgt(d.hypotheses[0].tokens, s)[1] if d.hypotheses else "" for d, s in zip(decoded, sources)]
