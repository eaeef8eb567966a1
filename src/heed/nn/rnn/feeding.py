"""The teacher-forced pass of a Luong decoder with input feeding, written out by hand.

Input feeding makes step t read h~_{t-1}, so training must loop over target steps. Left to
autograd, every step records ~30 small ops and replays them backwards one by one; this module
runs the same recurrence as one autograd node instead:

- forward: per step one GEMM per LSTM layer (the embedding's share of layer 0 is one GEMM over
  all steps, done before), the cell, dot-product attention, and h~ = tanh(W_c [h; c]);
- backward: back through time with only the recurrent GEMMs and a dozen element-wise ops per
  step inside the loop; the element-wise derivative factors are computed once for all steps
  before it, and every weight gradient is one large GEMM over all steps after it.

Same numbers as `LuongDecoder`'s step loop (tests/nn/test_feeding.py pins values and gradients
in float64). `compute_dtype=torch.bfloat16` runs the GEMMs in bf16 (autocast's choice for matrix
products) while the cell state, softmax and every saved activation stay in float32.

Shapes: T target steps, B batch, H hidden, L layers, S source length, D value size. Inside, the
gates are ordered (o, i, f, g), not PyTorch's (i, f, g, o): the three sigmoids are then one
slice and the three gates that the cell's gradient flows into are another
(`LuongDecoder.forward_fused` permutes the weights' rows to match: GATE_ORDER).
"""
from __future__ import annotations

import torch
from torch import Tensor


def gate_order(hidden: int, device: torch.device | None = None) -> Tensor:
    """Row indices that take an LSTM weight from PyTorch's gate order (i, f, g, o) to (o, i, f, g)."""
    h = hidden
    return torch.cat([torch.arange(3 * h, 4 * h), torch.arange(0, 2 * h), torch.arange(2 * h, 3 * h)]).to(device)


class InputFeedingLSTM(torch.autograd.Function):
    """gx (T, B, 4H): layer 0's gate input from the embeddings, biases included;
    h0, c0 (L, B, H); feed0 (B, H) = h~_{-1}; keys (B, S, H) projected keys, scores = scale * h_t . k;
    values (B, S, D); pad bool (B, S), True = padding; w_c (H, H + D) over [h; context];
    drop (L-1, T, B, H) scaled dropout masks between layers, or None;
    layers: w_rec_0 (4H, 2H) over [h~_{t-1}; h_{t-1}], then per upper layer w_rec_l (4H, 2H) over
    [h^{l-1}_t; h^l_{t-1}] and its bias (4H,). Every gate dimension in the order (o, i, f, g).
    Returns h~ (T, B, H) and the attention weights (T, B, S)."""

    @staticmethod
    def forward(ctx, gx: Tensor, h0: Tensor, c0: Tensor, feed0: Tensor, keys: Tensor, values: Tensor,
                pad: Tensor, w_c: Tensor, drop: Tensor | None, scale: float, compute_dtype: torch.dtype | None,
                *layers: Tensor) -> tuple[Tensor, Tensor]:
        T, B, G = gx.shape
        H, L = G // 4, h0.size(0)
        mm_dtype = compute_dtype or gx.dtype
        w_rec = [layers[0].to(mm_dtype)] + [layers[2 * k - 1].to(mm_dtype) for k in range(1, L)]
        biases = [None] + [layers[2 * k] for k in range(1, L)]
        w_c_mm = w_c.to(mm_dtype)
        mixed = mm_dtype != gx.dtype

        # An all-padding row (never in heed's batches, which always hold EOS) would softmax to NaN:
        # its scores are left unmasked and its weights cleared after, as masked_softmax does.
        empty_rows = pad.all(dim=1, keepdim=True)  # (B, 1)
        has_empty = bool(empty_rows.any())
        if has_empty:
            pad = pad & ~empty_rows
            keep = (~empty_rows).to(gx.dtype)  # (B, 1)

        Z = gx.new_empty(L, T, B, 2 * H, dtype=mm_dtype)  # each layer's GEMM input [below; h_prev]
        gates = gx.new_empty(L, T, B, G)  # activated o, i, f, g
        cells = gx.new_empty(L, T + 1, B, H)  # c_t at t + 1; c0 at 0
        tanh_c = torch.empty_like(cells[:, 1:])
        U = gx.new_empty(T, B, H + values.size(2), dtype=mm_dtype)  # [h_top; context]
        HT = gx.new_empty(T, B, H)
        cells[:, 0] = c0
        h = list(h0.unbind(0))
        feed, weights = feed0, []
        for t in range(T):
            below = feed
            for k in range(L):
                z = Z[k, t]
                z[:, :H] = below
                z[:, H:] = h[k]
                g = gates[k, t]
                add = gx[t] if k == 0 else biases[k]
                assert add is not None  # layer 0 adds gx, the others their bias
                if mixed:
                    torch.add(add, torch.mm(z, w_rec[k].t()), out=g)
                else:
                    torch.addmm(add, z, w_rec[k].t(), out=g)
                g[:, :3 * H].sigmoid_()  # o, i, f
                g[:, 3 * H:].tanh_()  # g
                c = cells[k, t + 1]
                torch.mul(g[:, 2 * H:3 * H], cells[k, t], out=c).addcmul_(g[:, H:2 * H], g[:, 3 * H:])
                h[k] = g[:, :H] * torch.tanh(c, out=tanh_c[k, t])  # (B, H)
                below = h[k] if drop is None or k == L - 1 else h[k] * drop[k, t]
            query = h[L - 1].unsqueeze(1)  # (B, 1, H)
            scores = torch.bmm(query, keys.transpose(1, 2)).squeeze(1)  # (B, S)
            if scale != 1.0:
                scores.mul_(scale)
            a = torch.softmax(scores.masked_fill_(pad, float("-inf")), dim=1)
            if has_empty:
                a.mul_(keep)
            weights.append(a)
            U[t, :, :H] = h[L - 1]
            U[t, :, H:] = torch.bmm(a.unsqueeze(1), values).squeeze(1)  # context (B, D)
            feed = torch.tanh(torch.mm(U[t], w_c_mm.t()), out=HT[t])  # h~_t (B, H), Luong eq. 5
        A = torch.stack(weights)  # (T, B, S)
        ctx.save_for_backward(Z, gates, cells, tanh_c, U, A, HT, keys, values, w_c_mm, drop, *w_rec)
        ctx.scale, ctx.num_layers = scale, L
        return HT, A

    @staticmethod
    def backward(ctx, dHT: Tensor | None, dA: Tensor | None):
        Z, gates, cells, tanh_c, U, A, HT, keys, values, w_c, drop, *w_rec = ctx.saved_tensors
        L, scale = ctx.num_layers, ctx.scale
        T, B, G = gates.shape[1:]
        H, dtype, mm_dtype = G // 4, HT.dtype, w_c.dtype
        mixed = mm_dtype != dtype

        def mm(a: Tensor, b: Tensor) -> Tensor:  # a GEMM in the compute dtype, the result in float
            return torch.mm(a.to(mm_dtype), b).to(dtype)

        # The element-wise derivatives, once for every step. With c_t = f c_{t-1} + i g and
        # h_t = o tanh(c_t), a gate's pre-activation gradient is (dh or dc_t) times `factor`:
        o, i, f, g = gates.split(H, dim=-1)  # each (L, T, B, H)
        sigmoids = gates[..., :3 * H]
        slope = sigmoids - sigmoids * sigmoids  # sigmoid' of o, i, f
        factor = torch.empty_like(gates)
        torch.mul(tanh_c, slope[..., :H], out=factor[..., :H])  # o  (times dh)
        torch.mul(g, slope[..., H:2 * H], out=factor[..., H:2 * H])  # i  (times dc)
        torch.mul(cells[:, :-1], slope[..., 2 * H:], out=factor[..., 2 * H:3 * H])  # f  (times dc)
        torch.mul(i, 1 - g * g, out=factor[..., 3 * H:])  # g  (times dc)
        dc_from_dh = o * (1 - tanh_c * tanh_c)  # (L, T, B, H)
        dtanh_ht = 1 - HT * HT  # (T, B, H)

        dG = torch.empty_like(gates)  # gate pre-activation gradients
        dPre = torch.empty_like(HT)  # gradient of W_c [h; c] (before tanh)
        dU = HT.new_empty(T, B, U.size(2))  # gradient of [h_top; context]
        dS = torch.empty_like(A)  # gradient of the scores
        dh = [HT.new_zeros(B, H) for _ in range(L)]  # into h^l_t from step t + 1
        dc = [HT.new_zeros(B, H) for _ in range(L)]
        dfeed = HT.new_zeros(B, H)
        for t in range(T - 1, -1, -1):
            d_ht = dfeed if dHT is None else dHT[t] + dfeed
            dpre = torch.mul(d_ht, dtanh_ht[t], out=dPre[t])
            du = dU[t]  # (B, H + D)
            if mixed:
                du.copy_(mm(dpre, w_c))
            else:
                torch.mm(dpre, w_c, out=du)
            da = torch.bmm(du[:, H:].unsqueeze(1), values.transpose(1, 2)).squeeze(1)  # (B, S)
            if dA is not None:
                da += dA[t]
            ds = torch._softmax_backward_data(da, A[t], 1, A.dtype, grad_input=dS[t])
            if scale != 1.0:
                ds.mul_(scale)
            # into h_top: from W_c, from step t + 1, and through the scores
            d_below = torch.baddbmm((du[:, :H] + dh[L - 1]).unsqueeze(1), ds.unsqueeze(1), keys).squeeze(1)
            for k in range(L - 1, -1, -1):
                dcell = torch.addcmul(dc[k], d_below, dc_from_dh[k, t])  # (B, H)
                d = dG[k, t]
                torch.mul(d_below, factor[k, t, :, :H], out=d[:, :H])
                torch.mul(dcell.unsqueeze(1), factor[k, t, :, H:].view(B, 3, H), out=d[:, H:].view(B, 3, H))
                dc[k] = dcell * f[k, t]
                dz = mm(d, w_rec[k])  # (B, 2H): [below; h_prev]
                dh[k] = dz[:, H:]
                if k == 0:
                    dfeed = dz[:, :H]
                else:
                    d_from_above = dz[:, :H] if drop is None else dz[:, :H] * drop[k - 1, t]
                    d_below = d_from_above + dh[k - 1]

        def flat(x: Tensor) -> Tensor:
            return x.reshape(-1, x.size(-1))

        def weight_grad(d_out: Tensor, inputs: Tensor) -> Tensor:  # sum over steps of d_out^T inputs
            return (flat(d_out).to(mm_dtype).t() @ flat(inputs)).to(dtype)

        d_layers = [weight_grad(dG[0], Z[0])]
        for k in range(1, L):
            d_layers += [weight_grad(dG[k], Z[k]), dG[k].sum((0, 1))]
        d_w_c = weight_grad(dPre, U)
        d_values = torch.bmm(A.permute(1, 2, 0), dU[:, :, H:].transpose(0, 1))  # (B, S, D)
        d_keys = torch.bmm(dS.permute(1, 2, 0), U[:, :, :H].to(dtype).transpose(0, 1))  # (B, S, H)
        return (dG[0], torch.stack(dh), torch.stack(dc), dfeed, d_keys, d_values, None, d_w_c,
                None, None, None, *d_layers)
