"""heed.export: every decoder kind exports to ONNX and decodes under ONNX Runtime as under PyTorch;
the exported directory loads through heed.load / the CLI; its manifest guards against changed
files, newer formats and a missing onnxruntime."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from served_exports import served_beside_pytorch

import heed
from heed.checkpoint import load_model_dir, save_model_dir
from heed.errors import HeedError, ModelDirError
from heed.export.load import load_exported
from heed.export.onnx import ENCODER_FILE, MANIFEST_FILE, STEP_FILE, export_model, sha256
from heed.export.ort import OrtSeq2Seq
from heed.nn.build import ModelConfig, build_model
from heed.nn.rnn.attention import SCORES
from heed.nn.rnn.config import RNNConfig
from heed.search import DecodeConfig, search

KINDS = {
    "luong-feeding": dict(decoder="luong", input_feeding=True),
    "luong-plain-rnn": dict(decoder="luong", input_feeding=False),
    "luong-dot": dict(decoder="luong", attention="dot"),
    "luong-scaled_dot": dict(decoder="luong", attention="scaled_dot"),
    "luong-cosine": dict(decoder="luong", attention="cosine"),
    "luong-additive": dict(decoder="luong", attention="additive", attention_hidden=12),
    "bahdanau": dict(decoder="bahdanau"),
    "bahdanau-general": dict(decoder="bahdanau", attention="general"),
    "plain": dict(decoder="plain"),
    "luong-gru": dict(decoder="luong", rnn="gru"),
    "bahdanau-gru": dict(decoder="bahdanau", rnn="gru"),
    "plain-gru": dict(decoder="plain", rnn="gru"),
    "luong-2-layers": dict(decoder="luong", encoder_layers=2, decoder_layers=2),
    "bahdanau-gru-2-layers-linear-bridge": dict(decoder="bahdanau", rnn="gru", encoder_layers=2,
                                                decoder_layers=2, bridge="linear"),
    "luong-unidirectional-zeros-bridge": dict(decoder="luong", bidirectional=False, bridge="zeros"),
}
# Scores and options added to heed.nn.rnn.attention after the ones above, where this heed has them:
# location (Luong eq. 8) scores positions up to attention_positions (the sources here are shorter,
# as Translator's max_src_len cut guarantees), local-p attends in a window around a predicted p_t.
if "location" in SCORES:
    KINDS["luong-location"] = dict(decoder="luong", attention="location", attention_positions=12)
if "attention_window" in RNNConfig.model_fields:
    KINDS["luong-local-p"] = dict(decoder="luong", attention_window=2)
    KINDS["bahdanau-gru-local-p"] = dict(decoder="bahdanau", rnn="gru", attention_window=3)
if "coverage" in RNNConfig.model_fields:  # the step graph carries c^t as a state input and output
    KINDS["luong-coverage"] = dict(decoder="luong", attention="additive", coverage=True, coverage_loss=1.0)
    KINDS["bahdanau-gru-coverage"] = dict(decoder="bahdanau", rnn="gru", coverage=True)
# The Transformer: its step graph takes and returns every layer's key/value cache by name.
KINDS["transformer"] = dict(family="transformer")
KINDS["transformer-post-learned-untied"] = dict(family="transformer", norm="post", positions="learned",
                                                tie_embeddings=False)


@pytest.fixture(scope="module")
def base(trained_run):
    """The tiny trained model's directory contents (config, codec), to dress random models in."""
    return load_model_dir(trained_run)


def _random_model_dir(base, directory: Path, seed: int = 0, **spec) -> Path:
    """A model directory holding a randomly initialised model of this architecture: random
    weights make long, varied outputs, a harder test than a trained model's short ones."""
    torch.manual_seed(seed)
    sizes = dict(d_model=16, heads=4, layers=2, ff_size=24) if spec.get("family") == "transformer" else \
        dict(embed_size=8, hidden_size=16)
    model_cfg = ModelConfig(dropout=0.0, **sizes, **spec)
    model = build_model(model_cfg, src_vocab_size=len(base.codec.src_vocab), tgt_vocab_size=len(base.codec.tgt_vocab))
    return save_model_dir(directory, model=model, config=base.config.model_copy(update={"model": model_cfg}),
                          codec=base.codec)


def _sources(base, batch: int = 5, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """A padded batch of random sources ending in EOS, of different lengths (one of length 1)."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([9, 4, 1, 7, 6][:batch])
    src = torch.randint(4, len(base.codec.src_vocab), (batch, int(lengths.max())), generator=gen)
    src[torch.arange(src.size(1)) >= lengths[:, None]] = 0
    src[torch.arange(batch), lengths - 1] = 2
    return src, lengths


def _assert_same_hypotheses(expected, got, *, attention: bool) -> None:
    assert len(expected) == len(got)
    for nbest_a, nbest_b in zip(expected, got):
        assert [h.tokens for h in nbest_a] == [h.tokens for h in nbest_b]
        for a, b in zip(nbest_a, nbest_b):
            assert abs(a.score - b.score) < 1e-4 and abs(a.log_prob - b.log_prob) < 1e-4
            if attention:
                torch.testing.assert_close(a.attention, b.attention, atol=1e-5, rtol=0)
            else:
                assert a.attention is None and b.attention is None


@pytest.mark.parametrize("name", list(KINDS))
def test_every_decoder_kind_exports_and_decodes_like_pytorch(base, tmp_path, name):
    model_dir = _random_model_dir(base, tmp_path / "model", **KINDS[name])
    export_model(model_dir, tmp_path / "onnx")
    exported, _, _ = load_exported(tmp_path / "onnx")
    model = load_model_dir(model_dir).model
    src, lengths = _sources(base)
    # min_len 3: a random model may end at once; this makes every search run several steps
    for cfg in (DecodeConfig(beam_size=1, min_len=3, max_len_a=0.0, max_len_b=10),
                DecodeConfig(beam_size=4, n_best=3, min_len=3, max_len_a=0.0, max_len_b=10)):
        with torch.inference_mode():
            expected = search(model, src, lengths, cfg)
            got = search(exported, src, lengths, cfg)
        _assert_same_hypotheses(expected, got, attention=model.has_attention)


@pytest.mark.parametrize("name", ["luong-feeding", "bahdanau-gru", "plain", "luong-coverage", "transformer"])
def test_penalties_sampling_and_prefixes_run_unchanged_over_the_exported_model(base, tmp_path, name):
    from heed.search import Prefix

    model_dir = _random_model_dir(base, tmp_path / "model", **KINDS[name])
    export_model(model_dir, tmp_path / "onnx")
    exported, _, _ = load_exported(tmp_path / "onnx")
    model = load_model_dir(model_dir).model
    src, lengths = _sources(base)
    coverage = 0.2 if model.has_attention else 0.0
    configs = [DecodeConfig(beam_size=3, n_best=2, length_penalty=0.6, coverage_penalty=coverage, max_len_a=0.0,
                            max_len_b=9, no_repeat_ngram=2, min_len=3),
               DecodeConfig(sampling=True, n_best=3, top_p=0.9, temperature=0.7, seed=5, max_len_a=0.0, max_len_b=9)]
    prefix = Prefix.of([[5, 6], [], [7], [5], []], pad_id=0)
    for cfg in configs:
        with torch.inference_mode():
            _assert_same_hypotheses(search(model, src, lengths, cfg, prefix=prefix),
                                    search(exported, src, lengths, cfg, prefix=prefix), attention=model.has_attention)


@pytest.mark.parametrize("name", ["luong-feeding", "transformer"])
def test_the_teacher_forced_pass_steps_to_pytorchs_logits_and_attention(base, tmp_path, name):
    model_dir = _random_model_dir(base, tmp_path / "model", **KINDS[name])
    export_model(model_dir, tmp_path / "onnx")
    exported, _, _ = load_exported(tmp_path / "onnx")
    model = load_model_dir(model_dir).model
    src, lengths = _sources(base)
    tgt_in = torch.randint(3, len(base.codec.tgt_vocab), (src.size(0), 6))
    tgt_in[:, 0] = 1
    with torch.inference_mode():
        expected, got = model(src, lengths, tgt_in), exported(src, lengths, tgt_in)
    torch.testing.assert_close(got.logits, expected.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.attention, expected.attention, atol=1e-6, rtol=0)


def test_the_manifest_pins_version_opset_config_and_every_files_sha256(base, tmp_path):
    model_dir = _random_model_dir(base, tmp_path / "model", **KINDS["bahdanau"])
    out = export_model(model_dir, tmp_path / "onnx")
    manifest = json.loads((out / MANIFEST_FILE).read_text())
    assert manifest["heed_version"] == heed.__version__ and manifest["kind"] == "onnx"
    assert manifest["model"] == load_model_dir(model_dir).config.model.model_dump(mode="json")
    on_disk = sorted(p.name for p in out.iterdir() if p.name != MANIFEST_FILE)
    assert sorted(manifest["files"]) == on_disk
    assert {ENCODER_FILE, STEP_FILE, "config.yaml", "tokenizers.json", "src.vocab.json", "tgt.vocab.json"} <= set(on_disk)
    for name, digest in manifest["files"].items():
        assert sha256(out / name) == digest
    for name in (ENCODER_FILE, STEP_FILE):
        graph = onnx.load(str(out / name))
        onnx.checker.check_model(graph, full_check=True)
        assert any(o.domain in ("", "ai.onnx") and o.version == manifest["opset"] for o in graph.opset_import)
    # the step graph's batch (rows) and source length are symbolic, not the sizes it was traced with
    step = onnx.load(str(out / STEP_FILE))
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in step.graph.input}
    assert dims["prev_tokens"] == ["rows"] and dims["states"][:2] == ["batch", "src_len"]


def test_int8_quantizes_the_weights_and_still_decodes(base, tmp_path, trained_run):
    float_dir = export_model(trained_run, tmp_path / "float")
    int8_dir = export_model(trained_run, tmp_path / "int8", int8=True)
    step = onnx.load(str(int8_dir / STEP_FILE))
    assert any("Integer" in n.op_type or "DynamicQuantize" in n.op_type for n in step.graph.node)
    assert json.loads((int8_dir / MANIFEST_FILE).read_text())["int8"] is True
    assert heed.load(str(int8_dir)).model.int8 and not heed.load(str(float_dir)).model.int8
    src, lengths = _sources(base)
    with torch.inference_mode():
        hyps = search(load_exported(int8_dir)[0], src, lengths, DecodeConfig(beam_size=3, max_len_b=8))
    assert len(hyps) == 5 and all(nbest for nbest in hyps)


def test_heed_load_of_an_exported_dir_translates_aligns_and_explores_like_pytorch(trained_run, tiny_corpus, tmp_path):
    out = export_model(trained_run, tmp_path / "onnx")
    exported, torch_model = heed.load(str(out)), heed.load(str(trained_run), device="cpu")
    assert isinstance(exported.model, OrtSeq2Seq)
    sources = tiny_corpus["test_src"].read_text().splitlines()[:12] + [""]
    for beam in (1, 4):
        a = torch_model.translate_nbest(sources, beam=beam, n_best=beam)
        b = exported.translate_nbest(sources, beam=beam, n_best=beam)
        assert [[t.text for t in n] for n in a] == [[t.text for t in n] for n in b]
        assert all(abs(x.score - y.score) < 1e-4 for n, m in zip(a, b) for x, y in zip(n, m))
    pairs = ["le 3 mars 1998", "1998-03-03"]
    assert exported.align([pairs[0]], [pairs[1]])[0].links == torch_model.align([pairs[0]], [pairs[1]])[0].links
    e, t = exported.explore(sources[:2], beam=3)[0], torch_model.explore(sources[:2], beam=3)[0]
    assert [[tok for tok, _ in s] for s in e.steps] == [[tok for tok, _ in s] for s in t.steps]
    assert len(e.beam) == len(t.beam)


def test_exported_translation_follows_torchs_thread_count(trained_run, tmp_path):
    from heed.plumbing.runtime import torch_threads

    translator = heed.load(str(export_model(trained_run, tmp_path / "onnx")))
    with torch_threads(1):
        one = translator.translate(["le 3 mars 1998"])[0].text
    with torch_threads(2):
        two = translator.translate(["le 3 mars 1998"])[0].text
    assert one == two and {1, 2} <= set(translator.model._sessions)


# ----------------------------------------------------------------------------------- the command line


def test_cli_round_trip_train_export_translate_gives_pytorchs_text(tiny_config, tiny_corpus, tmp_path, heed_cli):
    from heed.plumbing import yamlio

    config = tmp_path / "tiny.yaml"
    config.write_text(yamlio.dump(tiny_config(tmp_path / "run", epochs=2)))
    assert heed_cli("train", config).exit_code == 0
    result = heed_cli("export", tmp_path / "run", "-o", tmp_path / "onnx")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "onnx" / MANIFEST_FILE).is_file()
    for beam in ("1", "3"):
        from_torch = heed_cli("translate", tmp_path / "run", "--input", tiny_corpus["test_src"], "--beam", beam,
                              "--device", "cpu")
        from_onnx = heed_cli("translate", tmp_path / "onnx", "--input", tiny_corpus["test_src"], "--beam", beam)
        assert from_torch.exit_code == 0 and from_onnx.exit_code == 0, from_onnx.output
        assert from_onnx.stdout == from_torch.stdout and from_onnx.stdout.count("\n") == 20
    scores = [heed_cli("evaluate", d, "--src", tiny_corpus["test_src"], "--ref", tiny_corpus["test_ref"],
                       "--device", "cpu").stdout for d in (tmp_path / "run", tmp_path / "onnx")]
    assert scores[0] == scores[1] and "BLEU" in scores[0]


def test_exporting_something_that_is_not_a_model_dir_is_one_line(tmp_path, heed_cli, assert_user_error):
    (tmp_path / "notes.txt").write_text("hello\n")
    assert_user_error(heed_cli("export", tmp_path, "-o", tmp_path / "out"), "not a heed model directory")
    assert_user_error(heed_cli("export", tmp_path / "missing", "-o", tmp_path / "out"), "no such model directory")
    assert not (tmp_path / "out").exists()


def test_a_graph_changed_after_export_is_refused_by_sha256(trained_run, tmp_path, heed_cli, assert_user_error):
    out = export_model(trained_run, tmp_path / "onnx")
    with open(out / STEP_FILE, "r+b") as f:
        f.seek(-4, 2)
        f.write(b"\x00\x01\x02\x03")
    assert_user_error(heed_cli("translate", out, input="le 3 mars 1998\n"), STEP_FILE, "sha256 does not match",
                      "export the model again")
    with pytest.raises(ModelDirError, match="sha256"):
        heed.load(str(out))


def test_a_manifest_from_a_newer_heed_is_refused(trained_run, tmp_path, heed_cli, assert_user_error):
    out = export_model(trained_run, tmp_path / "onnx")
    manifest = json.loads((out / MANIFEST_FILE).read_text())
    manifest["heed_version"] = "99.0.0"
    (out / MANIFEST_FILE).write_text(json.dumps(manifest))
    assert_user_error(heed_cli("translate", out, input="le 3 mars 1998\n"), "heed 99.0.0", "newer than this heed",
                      "upgrade heed")
    manifest["heed_version"], manifest["format"] = heed.__version__, 2
    (out / MANIFEST_FILE).write_text(json.dumps(manifest))
    assert_user_error(heed_cli("evaluate", out, "--src", out / "config.yaml", "--ref", out / "config.yaml"),
                      "newer than this heed")


def test_without_onnxruntime_the_message_says_how_to_install_it(trained_run, tmp_path, heed_cli, assert_user_error,
                                                                 monkeypatch):
    out = export_model(trained_run, tmp_path / "onnx")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` raises ImportError
    hints = ("pip install 'heed-nmt[onnx]'", "pip install -e '.[onnx]'")  # from the index, from a clone
    assert_user_error(heed_cli("translate", out, input="le 3 mars 1998\n"), "onnxruntime", *hints)
    assert_user_error(heed_cli("export", trained_run, "-o", tmp_path / "q", "--int8"), *hints)
    monkeypatch.setitem(sys.modules, "onnx", None)
    assert_user_error(heed_cli("export", trained_run, "-o", tmp_path / "again"), "onnx", *hints)


def test_an_exported_model_refuses_bf16_and_cuda_in_one_line(trained_run, tmp_path, heed_cli, assert_user_error):
    out = export_model(trained_run, tmp_path / "onnx")
    assert_user_error(heed_cli("translate", out, "--bf16", input="le 3 mars 1998\n"), "runs on the CPU")
    with pytest.raises(HeedError, match="runs on the CPU"):
        heed.load(str(out), bf16=True)


def test_exporting_over_an_earlier_export_replaces_it_and_never_over_other_files(trained_run, tmp_path):
    out = export_model(trained_run, tmp_path / "onnx")
    first = json.loads((out / MANIFEST_FILE).read_text())["files"]
    export_model(trained_run, out, int8=True)
    assert json.loads((out / MANIFEST_FILE).read_text())["files"] != first
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine\n")
    with pytest.raises(HeedError, match="not an exported directory"):
        export_model(trained_run, other)
    assert (other / "keep.txt").read_text() == "mine\n"
    with pytest.raises(ModelDirError, match="already an exported directory"):
        export_model(out, tmp_path / "again")
    shutil.rmtree(out)


def test_heed_serve_serves_an_exported_dir_like_the_model_dir(trained_run, tmp_path):
    with served_beside_pytorch(export_model(trained_run, tmp_path / "onnx"), trained_run):
        pass  # the helper's checks: the same parameter count, the same n-best texts


@pytest.mark.skipif("location" not in SCORES, reason="this heed has no location score")
def test_a_location_model_refuses_a_source_longer_than_its_positions(base, tmp_path):
    model_dir = _random_model_dir(base, tmp_path / "model", **KINDS["luong-location"])
    exported, _, _ = load_exported(export_model(model_dir, tmp_path / "onnx"))
    src = torch.full((1, 13), 5)
    with pytest.raises(HeedError, match="longer than the 12 positions"):
        exported.encode(src, torch.tensor([13]))


def test_cli_export_int8_writes_a_quantized_dir_that_translates(trained_run, tiny_corpus, tmp_path, heed_cli):
    result = heed_cli("export", trained_run, "-o", tmp_path / "int8", "--int8")
    assert result.exit_code == 0 and "(onnx, int8)" in result.stdout, result.output
    assert json.loads((tmp_path / "int8" / MANIFEST_FILE).read_text())["int8"] is True
    out = heed_cli("translate", tmp_path / "int8", "--input", tiny_corpus["test_src"])
    assert out.exit_code == 0 and out.stdout.count("\n") == 20
