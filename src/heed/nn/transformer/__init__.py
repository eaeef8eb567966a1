"""The Transformer family (Vaswani et al. 2017): multi-head attention on heed's masked softmax,
pre- or post-norm layers, sinusoidal or learned positions, tied embeddings, a key/value cache.

    config  TransformerConfig (`model:` with family: transformer; torch-free)
    model   TransformerSeq2Seq and build_transformer; layers, attention; onnx, ct2 (its exports)
    alignment_layer  AligningTransformer: the full-context alignment layer (Garg et al. 2019),
                     used only to align; the family's builder
"""
