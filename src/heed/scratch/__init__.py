"""heed.scratch: the attention seq2seq built from scratch in NumPy (no torch), in the style of
"Deep Learning from Scratch 2", ch. 8, but exact: it computes what heed's PyTorch twin computes,
and its gradients match torch autograd and central differences.

Layers (`params`, `grads`, `forward`, `backward`) live in `layers`, `attention` and `transformer`
(layer norm and multi-head attention, every head's weights); the model in
`model`; Adam and clipping in `optim`; gradient checks in `gradcheck`; torch <-> NumPy weights in
`bridge` (the only module that touches torch, lazily); training on the dates task in `train`
(`python -m heed.scratch --help`).
"""
from heed.scratch.attention import (
    AdditiveAttention,
    AdditiveScore,
    Attention,
    AttentionWeight,
    TimeAttention,
    WeightSum,
)
from heed.scratch.functions import lengths_to_mask, masked_softmax
from heed.scratch.layers import (
    LSTM,
    Affine,
    Embedding,
    Softmax,
    SoftmaxWithLoss,
    Tanh,
    TimeAffine,
    TimeEmbedding,
    TimeLSTM,
)
from heed.scratch.model import AttentionSeq2seq, Generated
from heed.scratch.optim import Adam, clip_grads
from heed.scratch.transformer import LayerNorm, MultiHeadAttention

__all__ = [
    "LSTM",
    "Adam",
    "AdditiveAttention",
    "AdditiveScore",
    "Affine",
    "Attention",
    "AttentionSeq2seq",
    "AttentionWeight",
    "Embedding",
    "Generated",
    "LayerNorm",
    "MultiHeadAttention",
    "Softmax",
    "SoftmaxWithLoss",
    "Tanh",
    "TimeAffine",
    "TimeAttention",
    "TimeEmbedding",
    "TimeLSTM",
    "WeightSum",
    "clip_grads",
    "lengths_to_mask",
    "masked_softmax",
]
