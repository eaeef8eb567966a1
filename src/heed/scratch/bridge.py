"""Copy weights between heed's PyTorch model and its NumPy twin `AttentionSeq2seq`, both ways.

The twin is `build_model(twin_config(...))`: a Luong decoder without input feeding, score "dot",
"general" or "additive" (any attention_hidden), a one-layer unidirectional LSTM encoder and decoder, bridge "copy". Names and layouts
are the same on both sides, with one exception: scratch's LSTM has one bias `*.rnn.bias`, which is
torch's `bias_ih_l0 + bias_hh_l0` (the two only ever appear summed).

torch is imported inside the functions: the rest of heed.scratch imports only NumPy.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from heed.scratch.model import SCORES, AttentionSeq2seq

if TYPE_CHECKING:
    from heed.nn.rnn.config import RNNConfig
    from heed.nn.rnn.seq2seq import Seq2Seq

_SUMMED_BIASES = {
    "encoder.rnn.bias": ("encoder.rnn.bias_ih_l0", "encoder.rnn.bias_hh_l0"),
    "decoder.rnn.bias": ("decoder.rnn.bias_ih_l0", "decoder.rnn.bias_hh_l0"),
}


class BridgeError(ValueError):
    """The torch model is not the scratch model's twin (architecture, config or shapes differ)."""


def twin_config(model: AttentionSeq2seq) -> RNNConfig:
    """The heed.nn model config whose `build_model` has exactly the scratch model's computation."""
    from heed.nn.rnn.config import RNNConfig

    return RNNConfig(decoder="luong", input_feeding=False, attention=model.score, rnn="lstm",
                       bidirectional=False, bridge="copy", encoder_layers=1, decoder_layers=1,
                    dropout=0.0, embed_size=model.embed_size, hidden_size=model.hidden_size,
                    attention_hidden=model.attention_hidden)


def _torch_name_map(model: AttentionSeq2seq) -> list[str]:
    """torch's state_dict names the scratch model's weights correspond to."""
    names: list[str] = []
    for name in model.names:
        names.extend(_SUMMED_BIASES.get(name, (name,)))
    return names


def _check_twin(torch_model: Any) -> tuple[str, int, int, int, int, int | None]:
    """Raise BridgeError unless torch_model has the twin's architecture;
    return (score, src_vocab, tgt_vocab, embed, hidden, attention_hidden (additive only, else None))."""
    from torch import nn

    from heed.nn.rnn.decoder import LuongDecoder
    from heed.nn.rnn.seq2seq import Seq2Seq

    fix = ("build it with ModelConfig(decoder='luong', input_feeding=False, attention='dot', 'general' or 'additive', "
           "rnn='lstm', bidirectional=False, encoder_layers=1, decoder_layers=1, bridge='copy')")
    problems = []
    if not isinstance(torch_model, Seq2Seq):
        raise BridgeError(f"expected a heed.nn Seq2Seq, got {type(torch_model).__name__}; {fix}")
    enc, dec = torch_model.encoder, torch_model.decoder
    if not isinstance(enc.rnn, nn.LSTM) or enc.rnn.num_layers != 1 or enc.rnn.bidirectional:
        problems.append(f"encoder must be a 1-layer unidirectional LSTM, got {enc.rnn}")
    if torch_model.bridge.kind != "copy":
        problems.append(f"bridge must be 'copy', got {torch_model.bridge.kind!r}")
    if not isinstance(dec, LuongDecoder):
        problems.append(f"decoder must be LuongDecoder, got {type(dec).__name__}")
    else:
        if dec.input_feeding:
            problems.append("decoder must have input_feeding=False")
        if not isinstance(dec.rnn, nn.LSTM) or dec.rnn.num_layers != 1:
            problems.append(f"decoder must be a 1-layer LSTM, got {dec.rnn}")
        if dec.attention.score not in SCORES:
            problems.append(f"attention score must be one of {', '.join(SCORES)}, got {dec.attention.score!r}")
        if dec.attention.window is not None:
            problems.append(f"attention must be global (window None), got window {dec.attention.window}")
        if dec.coverage:
            problems.append("attention must have no coverage (the scratch engine has no coverage vector)")
    if problems:
        raise BridgeError("torch model is not a scratch twin: " + "; ".join(problems) + f". To fix, {fix}")
    score = dec.attention.score
    attention_hidden = dec.attention.v.in_features if score == "additive" else None  # v_a (1, attn)
    return (score, enc.embedding.num_embeddings, dec.embedding.num_embeddings,
            enc.embedding.embedding_dim, enc.rnn.hidden_size, attention_hidden)


def _check_shapes(model: AttentionSeq2seq, state: dict[str, Any]) -> None:
    expected = _torch_name_map(model)
    missing = sorted(set(expected) - set(state))
    extra = sorted(set(state) - set(expected))
    if missing or extra:
        raise BridgeError(f"parameter names differ: torch lacks {missing or 'nothing'}, "
                          f"torch has extra {extra or 'nothing'}")
    for name, param in model.named_params().items():
        for torch_name in _SUMMED_BIASES.get(name, (name,)):
            shape = tuple(state[torch_name].shape)
            if shape != param.shape:
                raise BridgeError(f"{torch_name}: torch shape {shape} != scratch shape {param.shape}")


def load_from_torch(model: AttentionSeq2seq, torch_model: Seq2Seq) -> AttentionSeq2seq:
    """Copy torch_model's weights into `model` (in place, converted to model.dtype); return model."""
    score, *_ = _check_twin(torch_model)
    if score != model.score:
        raise BridgeError(f"attention score differs: torch {score!r}, scratch {model.score!r}")
    state = {k: v.detach().cpu() for k, v in torch_model.state_dict().items()}
    _check_shapes(model, state)
    for name, param in model.named_params().items():
        if name in _SUMMED_BIASES:
            ih, hh = _SUMMED_BIASES[name]
            # Summed in scratch's dtype, as the check in load_into_torch recomputes it.
            param[...] = state[ih].numpy().astype(model.dtype) + state[hh].numpy().astype(model.dtype)
        else:
            param[...] = state[name].numpy()
    return model


def torch_to_scratch(torch_model: Seq2Seq, *, dtype: type = np.float64) -> AttentionSeq2seq:
    """A new scratch model with torch_model's architecture and weights."""
    score, src_vocab, tgt_vocab, embed, hidden, attention_hidden = _check_twin(torch_model)
    model = AttentionSeq2seq(src_vocab, tgt_vocab, embed_size=embed, hidden_size=hidden, score=score,
                             attention_hidden=attention_hidden,
                             dtype=dtype, rng=0, pad_id=torch_model.pad_id, bos_id=torch_model.bos_id,
                             eos_id=torch_model.eos_id)
    return load_from_torch(model, torch_model)


def load_into_torch(model: AttentionSeq2seq, torch_model: Seq2Seq) -> Seq2Seq:
    """Copy `model`'s weights into torch_model (in place, in torch_model's dtype); return torch_model.

    A summed LSTM bias is split by keeping torch's bias_hh_l0 and putting the rest in bias_ih_l0;
    when torch's pair already sums to it (a round trip), both are left exactly as they are.
    """
    import torch

    score, *_ = _check_twin(torch_model)
    if score != model.score:
        raise BridgeError(f"attention score differs: torch {score!r}, scratch {model.score!r}")
    params = dict(torch_model.named_parameters())
    _check_shapes(model, params)
    with torch.no_grad():
        for name, value in model.named_params().items():
            if name in _SUMMED_BIASES:
                ih, hh = (params[n] for n in _SUMMED_BIASES[name])
                current = ih.cpu().numpy().astype(model.dtype) + hh.cpu().numpy().astype(model.dtype)
                if np.array_equal(current, value):
                    continue
                rest = value.astype(np.float64) - hh.detach().cpu().double().numpy()
                ih.copy_(torch.from_numpy(rest))
            else:
                params[name].copy_(torch.from_numpy(np.ascontiguousarray(value)))
    return torch_model


def scratch_to_torch(model: AttentionSeq2seq, torch_model: Seq2Seq | None = None) -> Seq2Seq:
    """Copy `model` into torch_model, or into a new twin built by heed.nn.build (in model's dtype)."""
    if torch_model is None:
        import torch

        from heed.nn.build import build_model
        from heed.nn.rnn.seq2seq import Seq2Seq

        built = build_model(twin_config(model), src_vocab_size=model.src_vocab_size,
                            tgt_vocab_size=model.tgt_vocab_size, pad_id=model.pad_id,
                            bos_id=model.bos_id, eos_id=model.eos_id)
        assert isinstance(built, Seq2Seq)  # twin_config is an RNN's
        torch_model = built
        torch_model.to({np.dtype(np.float64): torch.float64, np.dtype(np.float32): torch.float32}[model.dtype])
    return load_into_torch(model, torch_model)
