"""Readings of a Transformer beyond its raw attention, each proven on a tiny model in float64:
ALTI+ against a brute-force computation written from the paper (every term, distance and
composition by loops, the model's forward pass rebuilt from its weights), its rows summing to 1,
rollout of identity attention being the identity, and the logit lens at the last layer being the
model's output."""
from __future__ import annotations

import math

import pytest
import torch

from heed.explain.contributions import contributions
from heed.nn.model_config import ModelConfig
from heed.nn.protocol import AttentionBlock
from heed.nn.transformer.model import build_transformer


def _model(norm: str, *, layers: int = 2, seed: int = 0, **extra):
    torch.manual_seed(seed)
    cfg = ModelConfig.model_validate({"family": "transformer", "layers": layers, "d_model": 8, "heads": 2,
                                      "ff_size": 12, "dropout": 0.0, "attention_dropout": 0.0, "norm": norm, **extra})
    model = build_transformer(cfg, src_vocab_size=15, tgt_vocab_size=17).double().eval()
    with torch.no_grad():  # biases and norms away from their initial 0 and 1, so that each one is exercised
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model


def _batch(pairs):
    """[(src ids, tgt_in ids)] -> right-padded src (batch, S), lengths, tgt_in (batch, T)."""
    s, t = max(len(a) for a, _ in pairs), max(len(b) for _, b in pairs)
    src = torch.tensor([a + [0] * (s - len(a)) for a, _ in pairs])
    tgt = torch.tensor([b + [0] * (t - len(b)) for _, b in pairs])
    return src, torch.tensor([len(a) for a, _ in pairs]), tgt


# ----------------------------------------------------------------------------- brute force


def _layer_norm(x, norm):
    mean = sum(x) / len(x)
    var = sum((v - mean) ** 2 for v in x) / len(x)
    return [(v - mean) / math.sqrt(var + norm.eps) * float(g) + float(b) for v, g, b in zip(x, norm.weight, norm.bias)]


def _vec(t):
    return [float(v) for v in t]


def _add(*vectors):
    return [sum(vs) for vs in zip(*vectors)]


def _l1(x):
    return sum(abs(v) for v in x)


def _matvec(w, x, b=None):
    """w (out, in) tensor, x a list -> list: w x + b."""
    return [sum(float(w[o, i]) * x[i] for i in range(len(x))) + (float(b[o]) if b is not None else 0.0)
            for o in range(w.size(0))]


def _attention_terms(attn, queries, keys, *, causal):
    """Every T_i(x_j) = sum_h alpha_ij^h W_o^h (W_v^h k_j + b_v^h), the weights from scratch.
    queries, keys: lists of vectors (already normed where the model norms them)."""
    d, heads = attn.d_model, attn.heads
    dk = d // heads
    w, b = attn.in_proj_weight, attn.in_proj_bias
    q = [_matvec(w[:d], x, b[:d]) for x in queries]
    k = [_matvec(w[d:2 * d], x, b[d:2 * d]) for x in keys]
    v = [_matvec(w[2 * d:], x, b[2 * d:]) for x in keys]
    wo = attn.out_proj.weight
    terms = [[[0.0] * d for _ in keys] for _ in queries]
    for h in range(heads):
        sl = range(h * dk, (h + 1) * dk)
        for i in range(len(queries)):
            allowed = [j for j in range(len(keys)) if not causal or j <= i]
            scores = {j: sum(q[i][c] * k[j][c] for c in sl) / math.sqrt(dk) for j in allowed}
            top = max(scores.values())
            z = sum(math.exp(s - top) for s in scores.values())
            for j in allowed:
                alpha = math.exp(scores[j] - top) / z
                for o in range(d):
                    terms[i][j][o] += alpha * sum(float(wo[o, c]) * v[j][c] for c in sl)
    return terms


def _alti_block(attn, norm, pre, stream, keys_stream, *, causal, cross):
    """One block from scratch: (output stream, contributions per row over keys (+ own for cross))."""
    queries = [_layer_norm(x, norm) for x in stream] if pre else stream
    keys = keys_stream if cross else queries
    terms = _attention_terms(attn, queries, keys, causal=causal)
    bias = _vec(attn.out_proj.bias)
    out, shares = [], []
    for i, x in enumerate(stream):
        row = [list(t) for t in terms[i]]
        if cross:
            row.append(list(x))
        else:
            row[i] = _add(row[i], x)
        z = _add(*row, bias)
        if pre:
            y = z
        else:
            y = _layer_norm(z, norm)
            mean = sum(z) / len(z)
            std = math.sqrt(sum((v - mean) ** 2 for v in z) / len(z) + norm.eps)
            row = [[(t[o] - sum(t) / len(t)) / std * float(norm.weight[o]) for o in range(len(t))] for t in row]
        c = [max(0.0, _l1(y) - _l1([a - b for a, b in zip(y, t)])) for t in row]
        total = sum(c)
        out.append(y)
        shares.append([v / total for v in c])
    return out, shares


def _feed_forward(layer, pre, stream):
    out = []
    for x in stream:
        h = _layer_norm(x, layer.feed_forward_norm) if pre else x
        inner = [max(0.0, v) for v in _matvec(layer.feed_forward.inner.weight, h, layer.feed_forward.inner.bias)]
        y = _add(x, _matvec(layer.feed_forward.outer.weight, inner, layer.feed_forward.outer.bias))
        out.append(y if pre else _layer_norm(y, layer.feed_forward_norm))
    return out


def _embed(embed, ids):
    pe = embed.positions(torch.arange(len(ids)))
    return [_add([float(v) * embed.scale for v in embed.table().weight[t]], _vec(pe[p])) for p, t in enumerate(ids)]


def _brute_alti(model, src_ids, tgt_in):
    """ALTI+ of one unpadded pair by loops: (source (layers, T, S), target (layers, T, T))."""
    pre = model.encoder.layers[0].pre
    x = _embed(model.encoder.embed, src_ids)
    S, T = len(src_ids), len(tgt_in)
    E = [[1.0 if i == j else 0.0 for j in range(S)] for i in range(S)]
    for layer in model.encoder.layers:
        x, c = _alti_block(layer.self_attn, layer.self_attn_norm, pre, x, None, causal=False, cross=False)
        E = [[sum(c[i][k] * E[k][j] for k in range(S)) for j in range(S)] for i in range(S)]
        x = _feed_forward(layer, pre, x)
    memory = [_layer_norm(v, model.encoder.norm) for v in x] if pre else x
    y = _embed(model.decoder.embed, tgt_in)
    Dt = [[1.0 if i == j else 0.0 for j in range(T)] for i in range(T)]
    Ds = [[0.0] * S for _ in range(T)]
    out_s, out_t = [], []
    for layer in model.decoder.layers:
        y, c = _alti_block(layer.self_attn, layer.self_attn_norm, pre, y, None, causal=True, cross=False)
        Dt = [[sum(c[i][k] * Dt[k][j] for k in range(T)) for j in range(T)] for i in range(T)]
        Ds = [[sum(c[i][k] * Ds[k][j] for k in range(T)) for j in range(S)] for i in range(T)]
        y, c = _alti_block(layer.cross_attn, layer.cross_attn_norm, pre, y, memory, causal=False, cross=True)
        Dt = [[c[i][S] * Dt[i][j] for j in range(T)] for i in range(T)]
        Ds = [[c[i][S] * Ds[i][j] + sum(c[i][k] * E[k][j] for k in range(S)) for j in range(S)] for i in range(T)]
        y = _feed_forward(layer, pre, y)
        out_s.append(Ds)
        out_t.append(Dt)
    return torch.tensor(out_s, dtype=torch.float64), torch.tensor(out_t, dtype=torch.float64)


# ----------------------------------------------------------------------------- ALTI+


PAIRS = [([5, 6, 7, 8, 2], [1, 9, 10, 11]), ([3, 12, 2], [1, 4, 13, 14, 15, 16])]


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_alti_plus_equals_its_brute_force_computation_with_padding_in_the_batch(norm):
    model = _model(norm)
    src, lengths, tgt_in = _batch(PAIRS)
    with torch.no_grad():
        got = contributions(model, src, lengths, tgt_in, reading="alti")
    for row, (s, t) in enumerate(PAIRS):
        with torch.no_grad():
            source, target = _brute_alti(model, s, t)
        assert got.source[:, row, :len(t), :len(s)] == pytest.approx(source, abs=1e-10)
        assert got.target[:, row, :len(t), :len(t)] == pytest.approx(target, abs=1e-10)
        assert got.source[:, row, :len(t), len(s):].abs().sum() == 0  # no share from padding
    assert got.source.shape == (2, 2, 6, 5) and got.target.shape == (2, 2, 6, 6)


@pytest.mark.parametrize("reading", ["alti", "rollout"])
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_every_prediction_s_contributions_sum_to_one_and_skip_the_future(reading, norm):
    model = _model(norm, layers=3, seed=4)
    src, lengths, tgt_in = _batch(PAIRS)
    with torch.no_grad():
        got = contributions(model, src, lengths, tgt_in, reading=reading)
    for row, (s, t) in enumerate(PAIRS):
        total = got.source[:, row, :len(t)].sum(-1) + got.target[:, row, :len(t)].sum(-1)  # (layers, T)
        assert total == pytest.approx(torch.ones_like(total), abs=1e-12)
        future = torch.ones(len(t), len(t), dtype=torch.bool).triu(1)
        assert got.target[:, row, :len(t), :len(t)][:, future].abs().max() == 0  # a row reads no later token
        share = got.source_share()[:, row, :len(t)]
        assert ((share >= 0) & (share < 1)).all() and share.max() > 0.05  # ALTI may clamp a term to 0
        aligned = got.alignment()[:, row, :len(t), :len(s)]
        expected = (share > 0).double()  # a row with no source share has no alignment
        assert aligned.sum(-1) == pytest.approx(expected, abs=1e-12)


class _IdentityModel:
    """Shows blocks whose every head attends to its own position (the cross-attention to the source
    token at the same position): rollout must then be the identity."""

    def __init__(self, n: int, layers: int, heads: int = 3, d: int = 4) -> None:
        self.n, self.layers, self.heads, self.d = n, layers, heads, d

    def parameters(self):
        yield torch.zeros(1, dtype=torch.float64)

    def attention_blocks(self, src, src_lengths, tgt_in, visit):
        eye = torch.eye(self.n, dtype=torch.float64).expand(1, self.heads, self.n, self.n)
        zeros = torch.zeros(1, self.n, self.d, dtype=torch.float64)
        values = torch.randn(1, self.heads, self.n, self.d, dtype=torch.float64)
        parts = ["encoder"] * self.layers + ["decoder", "cross"] * self.layers
        for k, part in enumerate(parts):
            visit(AttentionBlock(part, k, eye, values, torch.zeros(self.d, dtype=torch.float64), zeros, None, zeros))


def test_rollout_of_identity_attention_is_the_identity():
    got = contributions(_IdentityModel(n=5, layers=3), None, None, None, reading="rollout")
    eye = torch.eye(5, dtype=torch.float64)
    assert got.encoder[0] == pytest.approx(eye, abs=0)
    for layer in range(3):
        assert got.alignment()[layer, 0] == pytest.approx(eye, abs=1e-15)
        # the residual keeps half of the target stream at each cross-attention: 1/2, 1/4, 1/8
        assert got.target[layer, 0] == pytest.approx(eye * 0.5 ** (layer + 1), abs=1e-15)
        assert got.source_share()[layer, 0] == pytest.approx(torch.full((5,), 1 - 0.5 ** (layer + 1),
                                                                        dtype=torch.float64))


def test_rollout_mixes_half_the_heads_mean_attention_with_the_residual():
    """One encoder and one decoder layer by hand: E = (A + I) / 2, D_s = (C E) / 2 after the
    self-attention (A_d + I) / 2 leaves no source share to mix."""
    model = _model("pre", layers=1)
    src, lengths, tgt_in = _batch(PAIRS[:1])
    with torch.no_grad():
        maps = model.attention_maps(src, lengths, tgt_in)
        got = contributions(model, src, lengths, tgt_in, reading="rollout")
    a_enc, a_cross = maps.encoder[0, 0].mean(0), maps.cross[0, 0].mean(0)
    eye = torch.eye(a_enc.size(0), dtype=torch.float64)
    expected_e = 0.5 * a_enc + 0.5 * eye
    assert got.encoder[0] == pytest.approx(expected_e, abs=1e-12)
    assert got.source[0, 0] == pytest.approx(0.5 * a_cross @ expected_e, abs=1e-12)


# ----------------------------------------------------------------------------- the blocks themselves


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_each_attention_block_is_the_sum_of_its_terms(norm):
    """What the readings rely on: a block's output is residual + sum_h sum_j weights values + bias,
    normalised after the sum for post-norm."""
    model = _model(norm)
    src, lengths, tgt_in = _batch(PAIRS)
    blocks = []
    with torch.no_grad():
        model.attention_blocks(src, lengths, tgt_in, blocks.append)
        logits = model(src, lengths, tgt_in).logits
        states = model.decoder_states(src, lengths, tgt_in)
        read = model.read_out(states[-1])
    assert [(b.part, b.layer) for b in blocks] == [("encoder", 0), ("encoder", 1), ("decoder", 0), ("cross", 0),
                                                   ("decoder", 1), ("cross", 1)]
    for b in blocks:
        with torch.no_grad():
            total = b.residual + torch.einsum("bhqk,bhkd->bqd", b.weights, b.values) + b.bias
            expected = total if b.norm is None else b.norm(total)
        assert b.output == pytest.approx(expected, abs=1e-12), (b.part, b.layer)
        assert (b.norm is None) == (norm == "pre")
    assert read == pytest.approx(logits, abs=1e-12)  # the logit lens at the last layer is the output


# ----------------------------------------------------------------------------- through a Translator


def test_source_share_and_the_logit_lens_of_a_trained_transformer(transformer_run):
    """Translator.source_share gives each prediction's ALTI+ source share (its row of the last layer's
    contributions), the sentence's the mean; Translator.logit_lens at the last layer is the model's
    own distribution: the top token its argmax, the real token's probability its probability."""
    from heed.api import Translator
    from heed.data.batching import collate, specials_of

    translator = Translator.load(transformer_run)
    sources = ["3 mars 1998", "le 12 juin 2004"]
    outputs = translator.translate(sources)
    shares = translator.source_share(sources)
    lenses = translator.logit_lens(sources, top=3)
    for k, (out, share, lensed) in enumerate(zip(outputs, shares, lenses)):
        assert share.tgt_tokens == out.tokens == lensed.tgt_tokens
        t, s = len(out.tokens) + 1, len(out.src_tokens) + 1
        assert share.source.shape == (t, s) and share.prefix.shape == (t, t) and share.per_token.shape == (t,)
        assert share.per_token + share.prefix.sum(1) == pytest.approx(torch.ones(t).numpy(), abs=1e-5)
        assert share.sentence == pytest.approx(share.per_token.mean())
        ids = translator.codec.src_ids(out.src_tokens), translator.codec.tgt_ids(out.tokens, out.src_tokens)
        batch = collate([ids], [0], specials_of(translator.model))
        with torch.no_grad():
            log_probs = torch.log_softmax(translator.model(batch.src, batch.src_lengths, batch.tgt_in).logits, -1)[0]
        gold = log_probs.gather(-1, batch.tgt_out[0, :, None])[:, 0].exp().numpy()
        assert lensed.target_probs[-1] == pytest.approx(gold, abs=1e-5)
        vocab = translator.codec.tgt_vocab
        assert [row[0] for row in lensed.top_tokens[-1]] == [vocab.lookup(int(i)) for i in log_probs.argmax(-1)]
        assert lensed.top_probs[-1, :, 0] == pytest.approx(log_probs.max(-1).values.exp().numpy(), abs=1e-5)
        assert lensed.top_probs.shape == (translator.model.layers, t, 3)
        ranks = (log_probs > log_probs.gather(-1, batch.tgt_out[0, :, None])).sum(-1).numpy()
        assert lensed.target_ranks[-1].tolist() == ranks.tolist()
    given = translator.source_share(sources, [o.text for o in outputs])
    assert given[0].per_token == pytest.approx(shares[0].per_token)
