"""The model contract (heed.nn.protocol), one suite run for every family and kind: the RNN decoders
(Luong with input feeding, Bahdanau, plain, Bahdanau with coverage) and Transformers (pre-norm with
sinusoidal positions and tied embeddings; post-norm with learned positions), and a third family
made here to show what adding one takes: tests/toy_family/ (a bag of embeddings with attention) and
the one register_family line below, which is all it takes for the toy to be read from a config file,
trained by `heed train` and served by `heed serve` to the explorer (the last test). A new family of
heed's joins by joining search_fakes.MODEL_KINDS. The exported graphs' half of the contract is in
tests/export/test_export.py; an all-padding row of the RNNs' attention (every score, fp32/fp16/bf16) is
tests/nn/test_attention.py::test_all_padding_row_gives_zero_weights_and_context_and_finite_gradient."""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from search_fakes import (
    MODEL_KINDS,
    TRANSFORMERS,
    A,
    B,
    C,
    D,
    one_thread,  # noqa: F401  (an autouse fixture: one torch thread for this module)
    padded_batch,
    teacher_forced,
    tiny_model,
)
from step_decoding import decode_step_by_step

from heed.nn.build import build_model
from heed.nn.families import register_family, unregister_family
from heed.nn.protocol import TensorState, TrainableModel
from heed.nn.transformer.attention import MultiHeadAttention
from heed.search import DecodeConfig, beam_search, greedy_search

BOS = 1

from toy_family.config import ToyConfig
from toy_family.model import build_toy

KINDS = [*MODEL_KINDS, "toy"]


@pytest.fixture(autouse=True)
def _toy_family_registered() -> Iterator[None]:
    register_family("toy", config="toy_family.config:ToyConfig", family="toy_family.family:FAMILY")  # its one line
    yield
    unregister_family("toy")


def model_of(kind: str, **kwargs):
    """A tiny model of any kind in KINDS, in eval mode."""
    if kind != "toy":
        return tiny_model(kind, **kwargs)
    torch.manual_seed(kwargs.get("seed", 0))
    return build_model(ToyConfig(embed_size=8), src_vocab_size=kwargs.get("src_vocab", 10),
                       tgt_vocab_size=kwargs.get("tgt_vocab", 9)).eval()


def targets(batch: int, length: int, vocab: int = 9, seed: int = 2) -> torch.Tensor:
    """tgt_in (batch, length): BOS then real ids 3..vocab-1."""
    gen = torch.Generator().manual_seed(seed)
    tgt = torch.randint(3, vocab, (batch, length), generator=gen)
    tgt[:, 0] = BOS
    return tgt


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_meets_the_protocol(kind: str) -> None:
    model = model_of(kind)
    assert isinstance(model, TrainableModel)
    assert model.family == ("transformer" if kind in TRANSFORMERS else "toy" if kind == "toy" else "rnn")


@pytest.mark.parametrize("kind", KINDS)
def test_step_by_step_decoding_equals_the_teacher_forced_pass(kind: str) -> None:
    model = model_of(kind)
    src, lengths = padded_batch([6, 3, 5])
    tgt_in = targets(3, 5)
    with torch.no_grad():
        forced = model(src, lengths, tgt_in)
        logits, attention = decode_step_by_step(model, src, lengths, tgt_in)
    torch.testing.assert_close(logits, forced.logits, rtol=0, atol=1e-5)
    if kind == "plain":
        assert attention is None and forced.attention is None
    else:
        torch.testing.assert_close(attention, forced.attention, rtol=0, atol=1e-6)
        # the reported attention is a distribution over the real source tokens, zero on padding
        torch.testing.assert_close(attention.sum(-1), torch.ones(3, 5))
        assert (attention[1, :, 3:] == 0).all()


@pytest.mark.parametrize("kind", KINDS)
def test_decoding_with_the_state_cache_equals_recomputing_every_prefix(kind: str) -> None:
    """Step t with the state (a Transformer's key/value cache) gives what a fresh pass over the
    whole prefix gives at its last position: the cache holds exactly what recomputing would."""
    model = model_of(kind)
    src, lengths = padded_batch([6, 2])
    tgt_in = targets(2, 6)
    with torch.no_grad():
        cached, _ = decode_step_by_step(model, src, lengths, tgt_in)
        for t in range(1, tgt_in.size(1) + 1):
            fresh = model(src, lengths, tgt_in[:, :t]).logits[:, -1]  # (batch, vocab) no state carried
            torch.testing.assert_close(cached[:, t - 1], fresh, rtol=0, atol=1e-5)


def test_the_transformer_state_is_its_key_value_cache_by_name() -> None:
    model = tiny_model("transformer")
    src, lengths = padded_batch([6, 2])
    with torch.no_grad():
        enc = model.encode(src, lengths)
        state = model.init_state(enc.repeat(3))  # 2 sources x 3 beams
        assert isinstance(state, TensorState)
        assert sorted(state.tensors) == ["self_keys.0", "self_keys.1", "self_values.0", "self_values.1"]
        assert tuple(state["self_keys.0"].shape) == (6, 4, 0, 4)  # (rows, heads, steps, d_k)
        out = model.step(torch.full((6,), BOS), state, enc.repeat(3))
        out = model.step(torch.tensor([3, 4, 5, 6, 7, 8]), out.state, enc.repeat(3))
    assert tuple(out.state["self_values.1"].shape) == (6, 4, 2, 4)
    picked = out.state.select(torch.tensor([5, 0]))
    torch.testing.assert_close(picked["self_keys.1"], out.state["self_keys.1"][[5, 0]])
    # the cross-attention keys and values stay one copy per source, whatever the beam
    assert enc.repeat(3).memory[0][0] is enc.memory[0][0]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_sentence_decodes_the_same_alone_as_in_a_padded_batch(kind: str, beam_size: int) -> None:
    model = model_of(kind)
    src, lengths = padded_batch([7, 2, 5, 4])
    cfg = DecodeConfig(beam_size=beam_size, max_len_a=1.0, max_len_b=3)
    with torch.no_grad():
        batch = beam_search(model, src, lengths, cfg)
        for b, n in enumerate(lengths.tolist()):
            alone = beam_search(model, src[b:b + 1, :n], lengths[b:b + 1], cfg)[0]
            assert [h.tokens for h in alone] == [h.tokens for h in batch[b]]
            for x, y in zip(alone, batch[b]):
                assert x.score == pytest.approx(y.score, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_beam_one_equals_greedy(kind: str) -> None:
    model = model_of(kind)
    src, lengths = padded_batch([6, 3, 5, 1])
    cfg = DecodeConfig(max_len_a=1.0, max_len_b=2)
    with torch.no_grad():
        greedy = greedy_search(model, src, lengths, cfg)
        beam = beam_search(model, src, lengths, cfg.model_copy(update={"beam_size": 1}))
    for g, b in zip(greedy, beam):
        assert b[0].tokens == g.tokens
        assert b[0].log_prob == pytest.approx(g.log_prob, rel=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_a_beam_as_wide_as_all_prefixes_equals_brute_force(kind: str) -> None:
    # Real tokens A..D (4), at most 3: 1 + 4 + 16 + 64 = 85 outputs, every one kept by a beam of 85.
    model = model_of(kind, tgt_vocab=7)
    src, lengths = padded_batch([4])
    cfg = DecodeConfig(beam_size=85, n_best=85, max_len_a=0.0, max_len_b=3, min_len=0, length_penalty=0.6)
    outputs = [list(seq) for n in range(4) for seq in itertools.product([A, B, C, D], repeat=n)]
    log_probs, _ = teacher_forced(model, src, 4, outputs)
    brute = {tuple(out): lp / ((5 + len(out) + 1) / 6) ** 0.6 for out, lp in zip(outputs, log_probs.tolist())}
    with torch.no_grad():
        everything = beam_search(model, src, lengths, cfg)[0]
    assert sorted(tuple(h.tokens) for h in everything) == sorted(brute)
    for h in everything:
        assert h.score == pytest.approx(brute[tuple(h.tokens)], rel=1e-4)
    assert tuple(everything[0].tokens) == max(brute, key=brute.get)


DTYPES = [torch.float32, torch.float16, pytest.param(torch.bfloat16, marks=pytest.mark.cpu_bf16)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("need_weights", [True, False], ids=["weights", "fused"])
def test_an_all_padding_row_gives_zeros_in_multi_head_attention(dtype: torch.dtype, need_weights: bool) -> None:
    attention = MultiHeadAttention(8, 2).eval()
    q, k, v = (torch.randn(2, 2, 3, 4, dtype=dtype) for _ in range(3))  # (batch, heads, len, d_k)
    mask = torch.tensor([[True, True, False], [False, False, False]])[:, None, None, :]  # row 1: nothing real
    with torch.no_grad():
        attention = attention.to(dtype)
        out = attention.attend(q, k, v, mask, need_weights=need_weights)
        bias = attention.out_proj.bias  # a zero context leaves W_o's bias alone
    assert not out.context.isnan().any()
    torch.testing.assert_close(out.context[1], bias.expand(3, 8))
    if need_weights:
        assert (out.weights[1] == 0).all() and (out.weights[0, :, :, 2] == 0).all()


def test_the_fused_path_leaves_backends_to_torch_on_the_cpu_and_never_takes_cudnns_on_cuda() -> None:
    # cuDNN's SDPA builds a graph for each new shape: 360 ms a training step on an H100 in bf16
    # against 34 without it (bench/RESULTS.md), and token-bucketed batches are all new shapes.
    from torch.nn.attention import SDPBackend

    from heed.nn.transformer import attention

    assert attention.sdpa_backends(torch.zeros(1)) is None
    cuda = torch.cuda.is_available()
    allowed = attention.sdpa_backends(torch.zeros(1, device="cuda")) if cuda else attention._SHAPE_FREE_BACKENDS
    assert SDPBackend.CUDNN_ATTENTION not in allowed
    assert {SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH} <= set(allowed)


@pytest.mark.parametrize("kind", [k for k in MODEL_KINDS if k in TRANSFORMERS])
def test_every_head_of_every_layer_is_there_and_the_step_reports_the_last_layers_mean(kind: str) -> None:
    model = model_of(kind)
    src, lengths = padded_batch([6, 3])
    tgt_in = targets(2, 4)
    with torch.no_grad():
        maps = model.attention_maps(src, lengths, tgt_in)
        forced = model(src, lengths, tgt_in)
    assert tuple(maps.encoder.shape) == (2, 2, 4, 6, 6)  # (layers, batch, heads, src_len, src_len)
    assert tuple(maps.decoder.shape) == (2, 2, 4, 4, 4)
    assert tuple(maps.cross.shape) == (2, 2, 4, 4, 6)
    assert (maps.decoder.triu(1) == 0).all()  # causal: no position sees a later one
    assert (maps.cross[:, 1, :, :, 3:] == 0).all() and (maps.encoder[:, 1, :, :, 3:] == 0).all()
    torch.testing.assert_close(maps.cross[-1].mean(1), forced.attention)


def test_fused_and_explicit_multi_head_attention_agree() -> None:
    attention = MultiHeadAttention(16, 4).eval()
    x = torch.randn(3, 5, 16)
    mask = torch.tensor([[True] * 5, [True] * 2 + [False] * 3, [True] * 4 + [False]])[:, None, None, :]
    with torch.no_grad():
        q, k, v = attention.project_all(x)
        for causal in (False, True):
            explicit = attention.attend(q, k, v, mask, causal=causal, need_weights=True)
            fused = attention.attend(q, k, v, mask, causal=causal, need_weights=False)
            torch.testing.assert_close(fused.context, explicit.context, rtol=0, atol=1e-6)


def test_a_family_is_its_registry_line_and_the_rest_of_heed_reads_it_from_there() -> None:
    """The toy family, registered above and nowhere else, is read from `model:`, built, described and
    sized through the registry, and refused in one line by an export it has no graphs for."""
    from heed.errors import ConfigError
    from heed.export.onnx import family_graphs
    from heed.nn.build import check_size
    from heed.nn.families import family
    from heed.nn.model_config import ModelConfig

    cfg = ModelConfig(family="toy", embed_size=8)
    assert type(cfg) is ToyConfig and isinstance(cfg, ModelConfig) and cfg == ToyConfig(embed_size=8)
    assert (cfg.kind, cfg.copy) == ("toy", False)  # FamilyConfig's: the toy declares neither
    model = model_of("toy")
    assert model.num_parameters() == sum(p.numel() for p in model.parameters()) == check_size(
        cfg, lambda: build_toy(cfg, src_vocab_size=10, tgt_vocab_size=9, pad_id=0, bos_id=1, eos_id=2, unk_id=3),
        vocab=(10, 9))
    assert family("toy").describe(cfg) == "toy, embeddings of 8"
    with pytest.raises(ConfigError, match="the toy family has no ONNX graphs"):
        family_graphs(cfg)


def test_config_reading_knows_a_family_from_its_registration_and_forgets_it_after() -> None:
    """`model.family: toy` reads as the toy's config while it is registered, its errors located as
    the user wrote them; before and after, it is an unknown family, and the message names the others."""
    from heed.config import config_from_dict
    from heed.errors import ConfigError

    def read(model: dict[str, Any]) -> Any:
        return config_from_dict({"data": {"task": "dates"}, "model": model}).model

    assert read({"family": "toy", "embed_size": 4}) == ToyConfig(embed_size=4)
    with pytest.raises(ConfigError) as e:
        read({"family": "toy", "embed_size": 0})
    assert str(e.value) == "field 'model.embed_size': input should be greater than 0 (got 0)"
    with pytest.raises(ConfigError) as e:
        read({"family": "toy", "hidden_size": 4})
    assert str(e.value) == ("field 'model': 'hidden_size' is a field of family rnn, not toy; remove it or set "
                            "model.family: rnn")
    with pytest.raises(ConfigError) as e:  # a field two families have belongs to the first registered
        read({"family": "transformer", "embed_size": 4})
    assert str(e.value).startswith("field 'model': 'embed_size' is a field of family rnn, not transformer")
    with pytest.raises(ConfigError) as e:
        read({"family": "nope"})
    assert str(e.value) == "field 'model.family': unknown model family; choose rnn or transformer or toy"
    unregister_family("toy")
    with pytest.raises(ConfigError) as e:
        read({"family": "toy", "embed_size": 4})
    assert str(e.value) == "field 'model.family': unknown model family; choose rnn or transformer"


def test_a_name_registered_twice_must_name_the_same_family() -> None:
    register_family("toy", config="toy_family.config:ToyConfig", family="toy_family.family:FAMILY")  # again: nothing
    with pytest.raises(ValueError, match="'toy' is registered already"):
        register_family("toy", config="toy_family.config:ToyConfig", family="elsewhere:FAMILY")
    with pytest.raises(ValueError, match="not an import path"):
        register_family("other", config="toy_family.config.ToyConfig", family="toy_family.family:FAMILY")


def test_building_a_model_loads_no_converter_of_pretrained_checkpoints() -> None:
    """The Transformer's importers (Marian, M2M-100, a Marian release) load when an import asks for one."""
    import subprocess
    import sys

    code = ("import sys; from heed.nn.build import ModelConfig, build_model; "
            "build_model(ModelConfig(family='transformer', d_model=8, heads=2, ff_size=8, layers=1), "
            "src_vocab_size=9, tgt_vocab_size=9); "
            "print(sorted(m for m in sys.modules if m.startswith('heed.nn.transformer.convert.')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
    from heed.nn.families import family

    assert sorted(family("transformer").converters) == ["m2m_100", "marian", "marian-npz"]
    assert family("transformer").releases["marian-npz"].__module__ == "heed.nn.transformer.convert.marian_npz"


def test_the_toy_family_trains_from_yaml_and_is_served_to_the_explorer(
        tiny_config: Callable[..., dict[str, Any]], tmp_path: Path) -> None:
    """From the config file to the explorer's calls, through `heed train` and `heed serve`'s app:
    what the toy gives (its attention, the beam tree, alignments) comes back; what it cannot give
    (every head of every layer, the logit lens, attribution, readings through every layer, source
    shares) is a 422 saying why in one line, never a 500."""
    pytest.importorskip("fastapi", reason="heed-nmt[serve] is not installed")
    import yaml
    from cli_helpers import invoke
    from fastapi.testclient import TestClient

    from heed.api import Translator
    from heed.serve.app import ServeSettings, create_app, last_metrics

    config = {**tiny_config(tmp_path / "out", epochs=1), "model": {"family": "toy", "embed_size": 8}}
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    trained = invoke("train", path, "--no-progress")
    assert trained.exit_code == 0, trained.output
    directory = tmp_path / "out" / "model"
    translator = Translator.load(directory, device="cpu")
    assert type(translator.config.model) is ToyConfig
    app = create_app({"toy": translator}, ServeSettings(max_sentences=8, max_chars=80, max_body=64 * 1024,
                                                        max_queue=20, timeout=60.0),
                     metrics={"toy": last_metrics(directory)})
    source, target = "le 5 mai 2001", "2001-05-05"
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/health").json()["models"] == ["toy"]
        [info] = client.get("/v1/models").json()["models"]
        assert (info["family"], info["attention"]) == ("toy", "toy")  # FamilyConfig.kind: the family's name
        assert info["config"]["model"] == {"family": "toy", "copy": False, "embed_size": 8}
        assert info["gives"]["heads"] is False and info["gives"]["contributions"] is False

        reply = client.post("/v1/translate", json={"sentences": [source], "attention": True})
        assert reply.status_code == 200, reply.text
        [result] = reply.json()["results"]
        want = translator.translate_nbest([source])[0]
        assert [h["tokens"] for h in result["hypotheses"]] == [t.tokens for t in want]
        for h in result["hypotheses"]:  # each step's weights: over the source and its </s>, summing to 1
            attention = np.array(h["attention"])
            assert attention.shape == (len(h["tokens"]) + 1, len(result["src_tokens"]) + 1)
            np.testing.assert_allclose(attention.sum(axis=1), 1.0, atol=1e-5)

        reply = client.post("/v1/translate", json={"sentences": [source], "beam_size": 3, "n_best": 2, "trace": True,
                                                   "alternatives": 4})
        assert reply.status_code == 200, reply.text
        [result] = reply.json()["results"]
        nodes = {n["id"]: n for n in result["beam"]["nodes"]}
        for h in result["hypotheses"]:  # the tree's finished leaves spell the hypotheses
            path, node = [], nodes[h["node"]]
            while node["parent"] is not None:
                path.append(node["token"])
                node = nodes[node["parent"]]
            assert path[::-1] == [*h["tokens"], "</s>"]
        assert all(len(step) == 4 for step in result["steps"])

        reply = client.post("/v1/align", json={"sources": [source], "targets": [target]})
        assert reply.status_code == 200, reply.text
        got, want_links = reply.json()["results"][0], translator.align([source], [target])[0]
        assert got["pharaoh"] == want_links.pharaoh() and got["tgt_words"] == [target]
        np.testing.assert_allclose(np.array(got["attention"]), want_links.attention, atol=1e-6)

        for route, body in (("/v1/heads", {"sources": [source], "targets": [target]}),
                            ("/v1/lens", {"sources": [source], "targets": [target]}),
                            ("/v1/attribute", {"sentences": [source]}),
                            ("/v1/align", {"sources": [source], "targets": [target], "weights": "alti"}),
                            ("/v1/translate", {"sentences": [source], "explain": ["source_share"]})):
            reply = client.post(route, json=body)
            assert reply.status_code == 422, (route, reply.status_code, reply.text)
            error = reply.json()["error"]
            assert error["message"] and "\n" not in error["message"], (route, error)


