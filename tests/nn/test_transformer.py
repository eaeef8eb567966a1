"""A Transformer does everything a heed model does, at the level a user meets it: training (resume
exactness, accumulation, prepared corpora, compile, bf16), decoding through heed.load (greedy, beam,
sampling, prefixes, n-best, explore, align), ensembles with an RNN, averaging, export, the server,
and one-line errors for impossible configs. The model contract itself is tests/nn/test_family_contract.py;
the exported graphs, tests/export/test_export.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from model_files import swapped_vocab_copy
from tiny_models import TRANSFORMER

import heed
from heed.checkpoint import load_weights
from heed.config import config_from_dict
from heed.nn.transformer.model import TransformerSeq2Seq
from heed.train import train

SOURCES = ["3 March 1998", "le 4 mai 2001", "1 janvier 2000", "12 May 1999"]


def transformer_raw(tiny_config, output_dir: Path, **train_options) -> dict:
    """The tiny config mapping with a tiny Transformer as its model."""
    return {**tiny_config(output_dir, **train_options), "model": dict(TRANSFORMER)}


def transformer_config(tiny_config, output_dir: Path, **train_options):
    return config_from_dict(transformer_raw(tiny_config, output_dir, **train_options))


def records(output_dir: Path, kind: str) -> list[dict]:
    lines = (output_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def losses(output_dir: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in records(output_dir, "train")]


# ------------------------------------------------------------------------------------ training


def test_a_transformer_trains_and_its_loss_goes_down(transformer_run):
    steps = losses(transformer_run)
    assert steps[-1][1] < steps[0][1] * 0.9  # 0.72 on an Intel Xeon 6/85 after 3 epochs of the tiny corpus
    config = (transformer_run / "model" / "config.yaml").read_text(encoding="utf-8")
    assert "family: transformer" in config and "hidden_size" not in config  # only its family's fields


def test_resume_continues_the_identical_loss_sequence(tmp_path, tiny_config):
    common = {"epochs": 2, "log_every": 1, "eval_every": 5}
    straight = train(transformer_config(tiny_config, tmp_path / "a", **common))
    train(transformer_config(tiny_config, tmp_path / "b", **common, max_steps=4))
    resumed = train(transformer_config(tiny_config, tmp_path / "b", **common), resume=True)
    assert resumed.steps == straight.steps > 4
    assert losses(tmp_path / "b") == losses(tmp_path / "a")


def test_accumulation_prepared_corpora_and_the_warmup_schedule_train(tmp_path, tiny_config, heed_cli):
    result = train(transformer_config(tiny_config, tmp_path / "a", accumulate=2, max_steps=3, log_every=1,
                                      schedule={"name": "warmup", "warmup_steps": 2}))
    assert result.steps == 3
    assert [r["lr"] for r in records(tmp_path / "a", "train")] == pytest.approx([0.005, 0.01, 0.01 * (2 / 3) ** 0.5])
    # a prepared corpus (memory-mapped shards of ids) trains it the same as the text it came from
    text = transformer_raw(tiny_config, tmp_path / "text", max_steps=3, log_every=1)
    prepare_config = tmp_path / "prepare.yaml"
    prepare_config.write_text(json.dumps(text), encoding="utf-8")
    assert heed_cli("prepare", str(prepare_config), "-o", str(tmp_path / "shards")).exit_code == 0
    prepared = dict(text, output_dir=str(tmp_path / "prepared"))
    prepared["data"] = {**{k: v for k, v in text["data"].items() if k != "train"},
                        "prepared": str(tmp_path / "shards")}
    train(config_from_dict(text))
    train(config_from_dict(prepared))
    prepared_losses, text_losses = losses(tmp_path / "prepared"), losses(tmp_path / "text")
    assert [step for step, _ in prepared_losses] == [step for step, _ in text_losses]
    assert [x for _, x in prepared_losses] == pytest.approx([x for _, x in text_losses], rel=1e-6)


def test_compiled_training_gives_eager_losses(tmp_path, tiny_config):
    from heed.plumbing.runtime import compiler_problem

    if compiler_problem() is not None:
        pytest.skip(compiler_problem())
    common = {"max_steps": 3, "log_every": 1}
    raw = transformer_raw(tiny_config, tmp_path / "eager", **common)
    raw["model"].update(dropout=0.0, attention_dropout=0.0)
    train(config_from_dict(raw))
    train(config_from_dict({**raw, "train": {**raw["train"], "compile": True}, "output_dir": str(tmp_path / "c")}))
    assert [x for _, x in losses(tmp_path / "c")] == pytest.approx([x for _, x in losses(tmp_path / "eager")],
                                                                    rel=1e-4)


@pytest.mark.cpu_bf16
def test_bf16_autocast_trains_a_transformer(tmp_path, tiny_config):
    result = train(transformer_config(tiny_config, tmp_path / "a", max_steps=3, log_every=1, bf16=True,
                                      device="cpu"))
    assert result.steps == 3 and all(torch.isfinite(torch.tensor(x)) for _, x in losses(tmp_path / "a"))


# ------------------------------------------------------------------------------------ decoding


def test_heed_load_translates_explores_and_aligns_with_a_transformer(transformer_run):
    translator = heed.load(transformer_run, device="cpu")
    assert isinstance(translator.model, TransformerSeq2Seq)
    greedy = translator.translate(SOURCES)
    beam = translator.translate_nbest(SOURCES, beam=3, n_best=3)
    assert len(greedy) == len(beam) == 4 and all(len(n) == 3 for n in beam)
    for hyps in beam:
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
    for t in greedy:  # one attention row per output token and EOS, a distribution over the source
        assert t.attention.shape[0] == len(t.tokens) + 1
        assert torch.allclose(torch.as_tensor(t.attention).sum(-1), torch.ones(t.attention.shape[0]), atol=1e-5)
    sampled = translator.translate_nbest(SOURCES[:1], sampling=True, n_best=2, seed=3)
    assert len(sampled[0]) == 2
    forced = translator.translate(SOURCES[:1], prefix=["19"])[0]
    assert forced.text.startswith("19")
    explored = translator.explore(SOURCES[:1], beam=3)[0]
    assert explored.beam is not None and len(explored.hypotheses) >= 1
    links = translator.align(["le 3 mars 1998"], ["1998-03-03"])[0]
    assert links.links


def test_an_rnn_and_a_transformer_ensemble(trained_run, transformer_run):
    from heed.nn.ensemble import Ensemble, mean_log_probs

    pair = heed.load([trained_run, transformer_run], device="cpu")
    assert isinstance(pair.model, Ensemble)
    got = pair.translate(SOURCES[:1])[0]
    rnn, transformer = (heed.load(p, device="cpu") for p in (trained_run, transformer_run))
    codec = rnn.codec
    src = torch.tensor([codec.encode_src(SOURCES[0]) + [2]])
    ids = codec.tgt_vocab.encode(got.tokens)
    tgt_in, tgt_out = torch.tensor([[1, *ids]]), torch.tensor([[*ids, 2]])
    with torch.no_grad():
        logits = [t.model(src, torch.tensor([src.size(1)]), tgt_in).logits for t in (rnn, transformer)]
    expected = mean_log_probs(logits).log_softmax(-1).gather(2, tgt_out.unsqueeze(2)).sum().item()
    assert got.log_prob == pytest.approx(expected, abs=1e-4)


def test_checkpoints_of_a_transformer_average(transformer_run, tmp_path, heed_cli):
    recent = sorted((transformer_run / "checkpoints").glob("step-*"))
    assert len(recent) == 2
    result = heed_cli("average", *map(str, recent), "-o", str(tmp_path / "avg"))
    assert result.exit_code == 0, result.stderr
    assert heed.load(tmp_path / "avg", device="cpu").translate(SOURCES[:1])[0].text is not None


def test_an_exported_transformer_translates_like_pytorch_and_int8_still_decodes(transformer_run, tmp_path, heed_cli):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    for args, name in ((), "onnx"), (("--int8",), "int8"):
        result = heed_cli("export", str(transformer_run), "-o", str(tmp_path / name), *args)
        assert result.exit_code == 0, result.stderr
    torch_model = heed.load(transformer_run, device="cpu")
    exported = heed.load(tmp_path / "onnx")
    for a, b in zip(torch_model.translate_nbest(SOURCES, beam=3, n_best=2),
                    exported.translate_nbest(SOURCES, beam=3, n_best=2)):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert all(abs(x.score - y.score) < 1e-4 for x, y in zip(a, b))
    int8 = heed.load(tmp_path / "int8").translate(SOURCES)
    assert len(int8) == 4
    manifest = json.loads((tmp_path / "onnx" / "manifest.json").read_text(encoding="utf-8"))
    step = manifest["graphs"]["decoder_step.onnx"]
    assert "self_keys.1" in step["inputs"] and "self_values.1_out" in step["outputs"]


def test_the_server_serves_a_transformer(transformer_run):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from heed.serve.app import create_app

    with TestClient(create_app({"t": heed.load(transformer_run, device="cpu")})) as client:
        entry = client.get("/v1/models").json()["models"][0]
        assert entry["family"] == "transformer" and entry["attention"] == "transformer"
        response = client.post("/v1/translate", json={"model": "t", "sentences": SOURCES[:2], "attention": True})
        assert response.status_code == 200, response.text


# ------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("model,setting,fragments", [
    ({"family": "transformer"}, ("--set", "model.d_model=30", "--set", "model.heads=4"),
     ("model.heads", "d_model 30 is not divisible by heads 4")),
    (None, ("--set", "model.layers=2"), ("model", "'layers' is a field of family transformer, not rnn",
                                         "set model.family: transformer")),
    (None, ("--set", "model.family=transformer"),
     ("model", "'embed_size', 'hidden_size', 'input_feeding' are fields of family rnn, not transformer")),
    ({"family": "transformer"}, ("--set", "model.copy=true"), ("model", "'copy' is not supported by the transformer")),
    ({"family": "transformer", "attention": "location"}, (), ("model", ("'attention' is a field of family rnn, not "
                                                                       "transformer; remove it"))),
    ({"family": "transformer", "share_embeddings": True}, (),
     ("model.share_embeddings", "needs one vocabulary for both; set data.shared_vocab: true")),
    ({"family": "transformer"}, ("--set", "data.shared_vocab=true", "--set", "data.tokenizer.src.kind=word"),
     ("data", "tokenizer.src (word, vocab_size 8000) and tokenizer.tgt (char, vocab_size 8000) differ")),
])
def test_impossible_transformer_configs_are_one_line_naming_the_field(tmp_path, tiny_config, heed_cli,
                                                                    assert_user_error, model, setting, fragments):
    path = tmp_path / "config.yaml"
    raw = tiny_config(tmp_path / "out")
    if model is not None:
        raw["model"] = model
    path.write_text(json.dumps(raw), encoding="utf-8")
    result = heed_cli("train", str(path), *setting)
    assert_user_error(result, *fragments)
    assert not (tmp_path / "out").exists()


def test_one_vocabulary_and_one_embedding_table_serve_both_sides(tmp_path, tiny_config, heed_cli):
    """data.shared_vocab trains one tokenizer and vocabulary on both sides; model.share_embeddings
    makes the encoder read the target embedding (tied to the output layer: one table, three uses),
    stored once; the model trains, reloads, exports and translates the same from its directory."""
    raw = transformer_raw(tiny_config, tmp_path / "out", epochs=2)
    raw["data"]["shared_vocab"] = True
    raw["model"]["share_embeddings"] = True
    result = train(config_from_dict(raw))
    directory = result.model_dir
    assert (directory / "src.vocab.json").read_bytes() == (directory / "tgt.vocab.json").read_bytes()
    translator = heed.load(tmp_path / "out", device="cpu")
    codec, model = translator.codec, translator.model
    assert {"M", "-", "0"} <= set(codec.tgt_vocab.tokens)  # source letters and target digits in one vocabulary
    assert model.encoder.embed.table().weight is model.decoder.embed.tokens.weight is model.decoder.generator.weight
    stored = load_weights(directory / "model.safetensors")
    assert not [name for name in stored if name.startswith("encoder.embed.tokens")]
    assert len(translator.translate(SOURCES)) == 4
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    assert heed_cli("export", str(tmp_path / "out"), "-o", str(tmp_path / "onnx")).exit_code == 0
    exported = heed.load(tmp_path / "onnx")
    assert [h.tokens for h in exported.translate(SOURCES)] == [h.tokens for h in translator.translate(SOURCES)]


def test_heed_prepare_builds_the_same_shared_vocabulary_as_training(tiny_config, tmp_path):
    from heed.data.codec import Codec, load_corpora
    from heed.data.prepare import build_codec

    raw = transformer_raw(tiny_config, tmp_path / "out")
    raw["data"]["shared_vocab"] = True
    raw["data"]["tokenizer"] = {"src": {"kind": "unigram", "vocab_size": 90}, "tgt": {"kind": "unigram", "vocab_size": 90}}
    config = config_from_dict(raw)
    pairs = load_corpora(config.data).train
    trained, prepared = Codec.build(pairs, config.data), build_codec(iter(pairs), config, sample_pairs=10**6)
    assert trained.src_vocab.tokens == trained.tgt_vocab.tokens == prepared.src_vocab.tokens == prepared.tgt_vocab.tokens
    assert trained.src_tokenizer is trained.tgt_tokenizer and prepared.src_tokenizer is prepared.tgt_tokenizer
    assert trained.src_tokens(pairs[0].tgt) == prepared.tgt_tokens(pairs[0].tgt)


def test_an_ensemble_of_models_with_different_target_vocabularies_is_one_line(transformer_run, trained_run, tmp_path,
                                                                             heed_cli, assert_user_error):
    other = swapped_vocab_copy(transformer_run / "model", tmp_path / "other")
    result = heed_cli("translate", str(trained_run), str(other), input="3 March 1998\n")
    assert_user_error(result, str(other))


# ---------------------------------------------------------------------------- learned positions


def test_learned_positions_shorter_than_the_data_are_refused_at_training(tmp_path, tiny_config, heed_cli,
                                                                         assert_user_error):
    raw = transformer_raw(tiny_config, tmp_path / "run", max_steps=1)
    raw["model"].update(positions="learned", max_positions=8)
    config = tmp_path / "learned.yaml"
    config.write_text(json.dumps(raw), encoding="utf-8")
    result = heed_cli("train", str(config))
    assert_user_error(result, "model.max_positions", "is 8", "101 positions")
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_a_model_with_fewer_learned_positions_than_its_max_src_len_truncates_with_a_warning(
        tmp_path, tiny_config, heed_cli, write_lines):
    from model_files import rehash

    raw = transformer_raw(tiny_config, tmp_path / "run", max_steps=2)
    raw["model"].update(positions="learned", max_positions=41)
    raw["data"].update(max_src_len=40, max_tgt_len=40)
    train(config_from_dict(raw))
    model = tmp_path / "run" / "model"
    # as a model saved before heed checked this: its config lets sources of 100 tokens in
    text = (model / "config.yaml").read_text(encoding="utf-8").replace("max_src_len: 40", "max_src_len: 100")
    (model / "config.yaml").write_text(text, encoding="utf-8")
    rehash(model)
    translator = heed.load(str(model))
    assert translator.max_src_len == 40
    long = "le 3 mars 1998, le 4 mai 2001, le 5 juin 1950, le 6 juil 1999"  # 61 characters
    assert translator.translate([long])[0].truncated == 21
    source = write_lines(tmp_path / "src.txt", ["3 mars 1998", long])
    result = heed_cli("translate", str(model), "-i", str(source))
    assert result.exit_code == 0, result.output
    assert f"{source}: line 2 is longer than the model's max_src_len (40 tokens)" in result.stderr
