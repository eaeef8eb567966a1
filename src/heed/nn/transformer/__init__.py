"""The Transformer family (Vaswani et al. 2017): multi-head attention on heed's masked softmax,
pre- or post-norm layers, sinusoidal or learned positions, tied embeddings, a key/value cache."""
from heed.nn.transformer.model import AttentionMaps, TransformerEncoded, TransformerSeq2Seq, build_transformer

__all__ = ["AttentionMaps", "TransformerEncoded", "TransformerSeq2Seq", "build_transformer"]
