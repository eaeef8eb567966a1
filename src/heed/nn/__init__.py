"""PyTorch attention core and RNN encoder-decoder models."""
