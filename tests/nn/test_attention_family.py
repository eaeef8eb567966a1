"""The rest of the attention family (Luong et al. 2015): the location score (eq. 8, a_t = softmax(W_a h_t))
and local attention with predictive alignment (local-p, eqs. 9-10), held to what the other scores
promise, plus their own truths: worked examples to check by hand, the window, the config, training."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError
from search_fakes import assert_beam_of_one_equals_greedy
from step_decoding import assert_alone_equals_in_batch, decode_step_by_step
from torch import Tensor

from heed.config import config_from_dict
from heed.errors import ConfigError
from heed.nn.build import ModelConfig, build_model
from heed.nn.masks import lengths_to_mask
from heed.nn.rnn.attention import SCORES, Attention
from heed.nn.rnn.seq2seq import Seq2Seq
from heed.search import DecodeConfig, greedy_search, search

BATCH, SRC_LEN, TGT_LEN = 4, 5, 3
SIZE, VALUE_SIZE = 6, 5
LENGTHS = torch.tensor([5, 3, 1, 0])  # the last row is all padding
EMPTY_ROW = 3
WINDOW = 1  # D: small enough that a 5-token source has positions outside [p_t - D, p_t + D]

# (score, window): location alone, and local-p over every score.
VARIANTS = [("location", None), *((score, WINDOW) for score in SCORES)]
VARIANT_IDS = ["location" if w is None else f"local_{s}" for s, w in VARIANTS]


def make_attention(score: str, window: int | None, dtype: torch.dtype = torch.float64,
                   max_positions: int = SRC_LEN) -> Attention:
    return Attention(score, query_size=SIZE, key_size=SIZE, window=window,
                     max_positions=max_positions if score == "location" else None).to(dtype)


def make_inputs(dtype: torch.dtype = torch.float64, *, one_step: bool = False):
    """query (batch, [tgt_len,] size), keys (batch, src_len, size), values (batch, src_len, value), mask."""
    q_shape = (BATCH, SIZE) if one_step else (BATCH, TGT_LEN, SIZE)
    query = 2 * torch.randn(q_shape, dtype=torch.float64).to(dtype)  # 2x: predicted positions spread out
    keys = torch.randn(BATCH, SRC_LEN, SIZE, dtype=torch.float64).to(dtype)
    values = torch.randn(BATCH, SRC_LEN, VALUE_SIZE, dtype=torch.float64).to(dtype)
    return query, keys, values, lengths_to_mask(LENGTHS, SRC_LEN)


def attend(module: Attention, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor):
    return module(query, module.project_keys(keys), values, mask)


# --- worked examples --------------------------------------------------------------------------------

def test_worked_example_location_score_by_hand() -> None:
    # W_a maps h_t to one score per position: with h_t = [1, 0] the scores are W_a's first column,
    # chosen as [0, ln 2, ln 3, ln 4, ln 100]: exp = [1, 2, 3, 4, 100].
    #   source of 4 tokens + 1 padding: weights = [1, 2, 3, 4, 0] / 10
    #   source of 2 tokens + 3 padding: weights = [1, 2, 0, 0, 0] / 3
    # The keys play no part: different keys give the same weights.
    module = Attention("location", query_size=2, key_size=3, max_positions=5).double()
    with torch.no_grad():
        module.location_proj.weight.copy_(torch.tensor(
            [[0.0, 7], [math.log(2), 7], [math.log(3), 7], [math.log(4), 7], [math.log(100), 7]], dtype=torch.float64))
    query = torch.tensor([[1.0, 0], [1.0, 0]], dtype=torch.float64)  # (batch=2, query=2): one step
    values = torch.arange(30, dtype=torch.float64).view(2, 5, 3)
    mask = lengths_to_mask(torch.tensor([4, 2]), 5)
    by_hand = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0], [1 / 3, 2 / 3, 0, 0, 0]], dtype=torch.float64)
    for keys in (torch.randn(2, 5, 3, dtype=torch.float64), torch.zeros(2, 5, 3, dtype=torch.float64)):
        context, weights = module(query, module.project_keys(keys), values, mask)
        torch.testing.assert_close(weights, by_hand, rtol=0, atol=1e-15)
        torch.testing.assert_close(context, (by_hand.unsqueeze(-1) * values).sum(1), rtol=0, atol=1e-12)


def test_worked_example_local_p_window_and_gaussian_by_hand() -> None:
    # D = 2, so sigma = D/2 = 1 and the Gaussian is exp(-(s - p)^2 / 2). Dot score; the query is
    # [x, 1] and key s is [0, ln c_s], so score_s = ln c_s and align = c_s / (sum of c over the window).
    # W_p = I and v_p = [2, 0], so p_t = S * sigmoid(2 tanh(x)); x = atanh(ln(3) / 2) makes
    # 2 tanh(x) = ln 3 and sigmoid(ln 3) = 3/4, so p_t = 3/4 S.
    # c = [50, 1, 1, 2, 3, 5, 7] for both rows: position 0 scores high, but is outside row 0's window.
    #   row 0, S = 6 (one padding): p = 4.5, window [2.5, 6.5] -> s in {3, 4, 5} (6 is padding)
    #     align = [2, 3, 5] / 10; Gaussian e^{-1.5^2/2}, e^{-0.5^2/2}, e^{-0.5^2/2} = e^-1.125, e^-0.125, e^-0.125
    #     weights = [0, 0, 0, 0.2 e^-1.125, 0.3 e^-0.125, 0.5 e^-0.125, 0]
    #   row 1, S = 2: p = 1.5, window [-0.5, 3.5] -> s in {0, 1} (2, 3 are padding)
    #     align = [50, 1] / 51; Gaussian e^-1.125, e^-0.125
    module = Attention("dot", query_size=2, key_size=2, window=2).double()
    with torch.no_grad():
        module.position_proj.weight.copy_(torch.eye(2))
        module.position_v.weight.copy_(torch.tensor([[2.0, 0.0]], dtype=torch.float64))
    x = math.atanh(math.log(3) / 2)
    query = torch.tensor([[x, 1.0], [x, 1.0]], dtype=torch.float64)  # (batch=2, query=2): one step
    c = torch.tensor([50.0, 1, 1, 2, 3, 5, 7], dtype=torch.float64)
    keys = torch.stack([torch.zeros(7, dtype=torch.float64), c.log()], dim=-1).expand(2, 7, 2)  # (2, 7, 2)
    values = torch.randn(2, 7, 3, dtype=torch.float64)
    mask = lengths_to_mask(torch.tensor([6, 2]), 7)

    p = module.predict_position(query.unsqueeze(1), mask, 7)  # (batch, tgt_len=1)
    torch.testing.assert_close(p, torch.tensor([[4.5], [1.5]], dtype=torch.float64), rtol=0, atol=1e-12)
    far, near = math.exp(-1.125), math.exp(-0.125)
    by_hand = torch.tensor([[0, 0, 0, 0.2 * far, 0.3 * near, 0.5 * near, 0],
                            [50 / 51 * far, 1 / 51 * near, 0, 0, 0, 0, 0]], dtype=torch.float64)
    context, weights = module(query, keys, values, mask)
    torch.testing.assert_close(weights, by_hand, rtol=0, atol=1e-12)
    assert torch.equal(weights[by_hand == 0], torch.zeros(int((by_hand == 0).sum()), dtype=torch.float64))
    torch.testing.assert_close(context, (by_hand.unsqueeze(-1) * values).sum(1), rtol=0, atol=1e-12)


# --- the masking contract -------------------------------------------------------------------------------

@pytest.mark.parametrize("one_step", [False, True], ids=["all_steps", "one_step"])
def test_location_weights_sum_to_one_over_real_tokens_and_are_zero_on_padding(one_step: bool) -> None:
    module = make_attention("location", None)
    query, keys, values, mask = make_inputs(one_step=one_step)
    _context, weights = attend(module, query, keys, values, mask)
    w = weights.unsqueeze(1) if one_step else weights  # (batch, tgt_len, src_len)
    step_mask = mask.unsqueeze(1).expand_as(w)
    assert torch.equal(w[~step_mask], torch.zeros_like(w[~step_mask]))
    assert (w[step_mask] > 0).all()
    sums = w.sum(-1)
    torch.testing.assert_close(sums[LENGTHS > 0], torch.ones_like(sums[LENGTHS > 0]), rtol=0, atol=1e-12)
    assert torch.equal(sums[EMPTY_ROW], torch.zeros_like(sums[EMPTY_ROW]))


def test_location_score_past_its_positions_gives_weight_zero() -> None:
    # W_a scores 3 positions; a 5-token source attends over its first 3 only, and they sum to 1.
    module = make_attention("location", None, max_positions=3)
    query, keys, values, _ = make_inputs()
    mask = torch.ones(BATCH, SRC_LEN, dtype=torch.bool)
    weights = attend(module, query, keys, values, mask).weights
    assert torch.equal(weights[..., 3:], torch.zeros_like(weights[..., 3:]))
    torch.testing.assert_close(weights.sum(-1), torch.ones(BATCH, TGT_LEN, dtype=torch.float64))
    short = attend(module, query, keys[:, :3], values[:, :3], mask[:, :3]).weights
    torch.testing.assert_close(weights[..., :3], short, rtol=0, atol=1e-15)


@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("one_step", [False, True], ids=["all_steps", "one_step"])
def test_local_p_weights_are_zero_outside_the_window_and_follow_the_gaussian_inside(score: str, one_step: bool) -> None:
    window = WINDOW
    module = make_attention(score, window)
    query, keys, values, mask = make_inputs(one_step=one_step)
    steps = query if not one_step else query.unsqueeze(1)  # (batch, tgt_len, size)
    weights = attend(module, query, keys, values, mask).weights
    w = weights if not one_step else weights.unsqueeze(1)  # (batch, tgt_len, src_len)
    p = module.predict_position(steps, mask, SRC_LEN).unsqueeze(-1)  # (batch, tgt_len, 1)
    assert ((p >= 0) & (p <= LENGTHS.view(-1, 1, 1))).all()  # eq. 9: p_t in [0, S]
    offset = torch.arange(SRC_LEN, dtype=torch.float64) - p
    inside = (offset.abs() <= window) & mask.unsqueeze(1)  # (batch, tgt_len, src_len)
    assert not inside.all() and inside[:EMPTY_ROW].any(-1).all()  # the example does have a window to test
    assert torch.equal(w[~inside], torch.zeros_like(w[~inside]))
    assert (w[inside] > 0).all()
    # Inside, weights / Gaussian is the score softmaxed over the window: positive, summing to 1.
    gaussian = torch.exp(-offset.square() / (2 * (window / 2) ** 2))
    align = torch.where(inside, w / gaussian, torch.zeros_like(w))
    torch.testing.assert_close(align.sum(-1)[:EMPTY_ROW], torch.ones(EMPTY_ROW, w.size(1), dtype=torch.float64))
    scores = module.scores(steps, module.project_keys(keys)).masked_fill(~inside, -math.inf)
    torch.testing.assert_close(align[:EMPTY_ROW], torch.softmax(scores, -1)[:EMPTY_ROW], rtol=0, atol=1e-12)


@pytest.mark.parametrize("score,window", VARIANTS, ids=VARIANT_IDS)
def test_changing_keys_or_values_under_padding_changes_nothing(score: str, window: int | None) -> None:
    module = make_attention(score, window)
    query, keys, values, mask = make_inputs()
    before = attend(module, query, keys, values, mask)
    pad = (~mask).unsqueeze(-1)
    after = attend(module, query, torch.where(pad, 1e3 * torch.randn_like(keys), keys),
                   torch.where(pad, 1e3 * torch.randn_like(values), values), mask)
    assert torch.equal(after.weights, before.weights) and torch.equal(after.context, before.context)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("score,window", VARIANTS, ids=VARIANT_IDS)
def test_all_padding_row_gives_zero_weights_and_context_and_finite_gradient(
        score: str, window: int | None, dtype: torch.dtype) -> None:
    # Tensors this small run bf16 without oneDNN, so no cpu_bf16 mark is needed.
    module = make_attention(score, window, dtype)
    query, keys, values, mask = make_inputs(dtype)
    for t in (query, keys, values):
        t.requires_grad_()
    context, weights = attend(module, query, keys, values, mask)
    assert context.dtype == weights.dtype == dtype
    assert torch.isfinite(context).all() and torch.isfinite(weights).all()
    assert torch.equal(weights[EMPTY_ROW], torch.zeros_like(weights[EMPTY_ROW]))
    assert torch.equal(context[EMPTY_ROW], torch.zeros_like(context[EMPTY_ROW]))
    (context.float().pow(2).sum() + (weights.float() * torch.rand(weights.shape)).sum()).backward()
    for t in (query, values, *module.parameters()):
        assert torch.isfinite(t.grad).all(), f"non-finite gradient in {tuple(t.shape)}"
    assert torch.equal(query.grad[EMPTY_ROW], torch.zeros_like(query.grad[EMPTY_ROW]))


@pytest.mark.parametrize("score,window", VARIANTS, ids=VARIANT_IDS)
def test_one_step_calls_agree_with_the_all_steps_call(score: str, window: int | None) -> None:
    module = make_attention(score, window)
    query, keys, values, mask = make_inputs()
    all_steps = attend(module, query, keys, values, mask)
    for t in range(TGT_LEN):
        one = attend(module, query[:, t], keys, values, mask)
        torch.testing.assert_close(one.context, all_steps.context[:, t], rtol=0, atol=1e-12)
        torch.testing.assert_close(one.weights, all_steps.weights[:, t], rtol=0, atol=1e-12)


@pytest.mark.parametrize("score,window", VARIANTS, ids=VARIANT_IDS)
def test_the_fused_kernel_is_never_used_and_context_matches_forward(score: str, window: int | None) -> None:
    module = make_attention(score, window)
    assert not module.fusable  # SDPA knows neither the window nor positions past max_positions
    query, keys, values, mask = make_inputs()
    projected = module.project_keys(keys)
    assert torch.equal(module.context(query, projected, values, mask, fused=True),
                       module(query, projected, values, mask).context)


def test_attention_option_mistakes_are_errors() -> None:
    with pytest.raises(ValueError, match="max_positions"):
        Attention("location", query_size=4, key_size=4)
    with pytest.raises(ValueError, match="max_positions"):
        Attention("general", query_size=4, key_size=4, max_positions=10)
    with pytest.raises(ValueError, match="window"):
        Attention("general", query_size=4, key_size=4, window=0)


# --- in the decoders ----------------------------------------------------------------------------------

SRC_VOCAB, TGT_VOCAB = 11, 13
DEC_LENGTHS = torch.tensor([6, 3, 1, 4])
DEC_SRC_LEN, DEC_TGT_LEN = 7, 5
SMALL = dict(embed_size=6, hidden_size=8, dropout=0.3)

CONFIGS = {
    "luong_feed_location": dict(decoder="luong", attention="location", attention_positions=DEC_SRC_LEN),
    "luong_nofeed_location": dict(decoder="luong", input_feeding=False, attention="location",
                                  attention_positions=DEC_SRC_LEN),
    "bahdanau_location": dict(decoder="bahdanau", attention="location", attention_positions=DEC_SRC_LEN),
    "luong_feed_local_general": dict(decoder="luong", attention_window=1),  # not the fused input-feeding pass
    "luong_nofeed_local_dot": dict(decoder="luong", input_feeding=False, attention="dot", attention_window=2),
    "luong_feed_gru_local_location": dict(decoder="luong", rnn="gru", attention="location",
                                          attention_positions=DEC_SRC_LEN, attention_window=1),
    "bahdanau_local_additive": dict(decoder="bahdanau", attention_window=1),
    # coverage (See et al. 2017, eq. 11): c^t in DecoderState, the teacher-forced pass a step loop
    "luong_feed_coverage": dict(decoder="luong", attention="additive", coverage=True),
    "luong_nofeed_coverage": dict(decoder="luong", input_feeding=False, attention="additive", coverage=True),
    "bahdanau_gru_coverage": dict(decoder="bahdanau", rnn="gru", coverage=True),
    "bahdanau_local_coverage": dict(decoder="bahdanau", attention_window=1, coverage=True),
}


def make_model(**overrides) -> Seq2Seq:
    return build_model(ModelConfig(**{**SMALL, **overrides}), src_vocab_size=SRC_VOCAB,
                       tgt_vocab_size=TGT_VOCAB).double().eval()


def make_batch():
    batch = len(DEC_LENGTHS)
    src = torch.randint(3, SRC_VOCAB, (batch, DEC_SRC_LEN))
    src = src.masked_fill(torch.arange(DEC_SRC_LEN) >= DEC_LENGTHS.unsqueeze(1), 0)
    tgt_in = torch.randint(3, TGT_VOCAB, (batch, DEC_TGT_LEN))
    tgt_in[:, 0] = 1
    return src, tgt_in


@pytest.mark.parametrize("need_attention", [True, False], ids=["weights", "context_only"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_step_by_step_decoding_equals_teacher_forced_pass(name: str, need_attention: bool) -> None:
    model = make_model(**CONFIGS[name])
    src, tgt_in = make_batch()
    with torch.no_grad():
        step_logits, step_attention = decode_step_by_step(model, src, DEC_LENGTHS, tgt_in)
        forced = model(src, DEC_LENGTHS, tgt_in, need_attention=need_attention)
    torch.testing.assert_close(forced.logits, step_logits, rtol=0, atol=1e-10)
    if need_attention:
        torch.testing.assert_close(forced.attention, step_attention, rtol=0, atol=1e-10)
    padding = (torch.arange(DEC_SRC_LEN) >= DEC_LENGTHS.unsqueeze(1)).unsqueeze(1).expand_as(step_attention)
    assert torch.equal(step_attention[padding], torch.zeros_like(step_attention[padding]))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_sentence_decodes_the_same_alone_as_in_a_padded_batch(name: str) -> None:
    model = make_model(**CONFIGS[name])
    src, tgt_in = make_batch()
    assert_alone_equals_in_batch(model, src, DEC_LENGTHS, tgt_in)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_decoding_a_repeated_batch_equals_decoding_the_original_rows(name: str) -> None:
    # Beam search's grouped call: each source's rows attend together, with the source's own length S.
    model = make_model(**CONFIGS[name])
    src, tgt_in = make_batch()
    beam = 3
    with torch.no_grad():
        logits, attention = decode_step_by_step(model, src, DEC_LENGTHS, tgt_in)
        enc = model.encode(src, DEC_LENGTHS).repeat(beam)
        state = model.init_state(enc)
        tokens = tgt_in.repeat_interleave(beam, dim=0)
        for t in range(DEC_TGT_LEN):
            out = model.step(tokens[:, t], state, enc)
            state = out.state
            torch.testing.assert_close(out.logits, logits[:, t].repeat_interleave(beam, dim=0), rtol=0, atol=1e-12)
            torch.testing.assert_close(out.attention, attention[:, t].repeat_interleave(beam, dim=0),
                                       rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_beam_of_one_equals_greedy(name: str) -> None:
    model = make_model(**CONFIGS[name]).float()
    src, _ = make_batch()
    assert_beam_of_one_equals_greedy(model, src, DEC_LENGTHS)


def test_beam_search_runs_with_local_p_and_location_and_finds_the_greedy_path_at_most_as_likely() -> None:
    # A wider beam explores more; its best is at least as likely as greedy's (no penalties).
    for name in ("luong_feed_local_general", "bahdanau_location"):
        model = make_model(**CONFIGS[name]).float()
        src, _ = make_batch()
        greedy = greedy_search(model, src, DEC_LENGTHS, DecodeConfig(max_len_a=0.0, max_len_b=6))
        wide = search(model, src, DEC_LENGTHS, DecodeConfig(beam_size=4, max_len_a=0.0, max_len_b=6))
        for g, hyps in zip(greedy, wide, strict=True):
            assert hyps[0].log_prob >= g.log_prob - 1e-5


def test_default_models_have_no_new_parameters() -> None:
    # Existing checkpoints load unchanged: the options add parameters only when chosen.
    for decoder in ("luong", "bahdanau"):
        names = set(make_model(decoder=decoder).state_dict())
        assert not any("position" in n or "location" in n for n in names)
    local = set(make_model(attention_window=2).state_dict())
    assert {"decoder.attention.position_proj.weight", "decoder.attention.position_v.weight"} <= local
    location = make_model(**CONFIGS["luong_feed_location"]).decoder.attention.location_proj
    assert location.weight.shape == (DEC_SRC_LEN, SMALL["hidden_size"])  # W_a: (max_positions, hidden)


# --- the config ---------------------------------------------------------------------------------------

DATES = {"data": {"task": "dates", "max_src_len": 40}}


def test_a_config_file_takes_the_location_positions_from_data_max_src_len() -> None:
    cfg = config_from_dict({**DATES, "model": {"attention": "location"}})
    assert cfg.model.attention_positions == 41  # 40 tokens + </s>
    given = config_from_dict({**DATES, "model": {"attention": "location", "attention_positions": 12}})
    assert given.model.attention_positions == 12
    # The saved (resolved) config carries the number, so the data section no longer decides it.
    again = config_from_dict({**cfg.model_dump(mode="json"), "data": {"task": "dates", "max_src_len": 7}})
    assert again.model.attention_positions == 41


def test_an_old_config_loads_as_global_attention() -> None:
    cfg = config_from_dict({**DATES, "model": {"decoder": "luong", "attention": "general"}})
    assert cfg.model.attention_window is None and cfg.model.attention_positions is None


@pytest.mark.parametrize("model,field,message", [
    ({"decoder": "plain", "attention_window": 10}, "model.attention_window", "plain decoder has no attention"),
    ({"attention_window": 0}, "model.attention_window", "greater than or equal to 1"),
    ({"attention": "general", "attention_positions": 50}, "model.attention_positions", "location"),
    ({"attention": "location", "attention_positions": 0}, "model.attention_positions", "greater than 0"),
    ({"coverage_loss": 1.0}, "model.coverage_loss", "needs coverage attention"),
    ({"attention": "additive", "coverage_loss": -1.0}, "model.coverage_loss", "greater than or equal to 0"),
    ({"coverage": True}, "model.coverage", "not 'general'"),  # luong's default score
    ({"attention": "dot", "coverage": True, "coverage_loss": 1.0}, "model.coverage", "additive score"),
    ({"decoder": "plain", "attention": "additive", "coverage": True}, "model.coverage", "plain decoder"),
])
def test_config_mistakes_name_the_field(model: dict, field: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        config_from_dict({**DATES, "model": model})
    assert e.value.field == field and message in str(e.value)


def test_model_config_needs_positions_for_the_location_score() -> None:
    with pytest.raises(ValidationError, match="attention_positions"):
        ModelConfig(attention="location")


def test_switching_to_the_plain_decoder_drops_the_location_score_and_its_positions() -> None:
    cfg = config_from_dict({**DATES, "model": {"attention": "location", "attention_positions": 20}},
                           overrides=["model.decoder=plain"])
    assert cfg.model.attention is None and cfg.model.attention_positions is None


# --- training -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("model", [{"attention": "location"}, {"attention": "general", "attention_window": 3},
                                   {"attention": "additive", "coverage": True, "coverage_loss": 1.0}],
                         ids=["location", "local_p", "coverage"])
def test_a_tiny_model_trains_with_falling_loss(model: dict, tmp_path: Path, tiny_config) -> None:
    from heed.checkpoint import load_model_dir
    from heed.train import train

    raw = tiny_config(tmp_path / "out", epochs=1, max_steps=12, log_every=1)
    raw["model"] = {**raw["model"], **model}
    cfg = config_from_dict(raw)
    train(cfg)
    lines = (tmp_path / "out" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    losses = [r["loss"] for r in map(json.loads, lines) if r["kind"] == "train"]
    assert len(losses) == 12 and all(math.isfinite(x) for x in losses)
    assert sum(losses[-3:]) < sum(losses[:3]), losses
    loaded = load_model_dir(tmp_path / "out" / "model")  # the saved config rebuilds the same shapes
    assert loaded.config.model == cfg.model
