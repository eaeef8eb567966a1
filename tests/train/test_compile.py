"""train.compile: torch.compile on the training step's forward pass trains to eager's losses, saves
checkpoints an eager model loads, and falls back to eager, in one line, where no compiler is found."""
import io
import json

import pytest
import torch
from rich.console import Console

import heed
from heed.checkpoint import load_checkpoint
from heed.data.codec import Codec
from heed.nn.build import build_model
from heed.plumbing.runtime import compiler_problem
from heed.train import train

# Input feeding and dropout 0: the path compile replaces (heed.nn.rnn.feeding's hand-written pass)
# and no random masks, whose draws differ between eager and inductor code.
MODEL = {"input_feeding": True, "dropout": 0.0}
STEPS = 4


def losses(output_dir):
    lines = (output_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r["loss"] for r in map(json.loads, lines) if r["kind"] == "train"]


def run(make_config, output_dir, *, compile, console=None):
    config = make_config(output_dir, max_steps=STEPS, log_every=1, compile=compile)
    config.model = config.model.model_copy(update=MODEL)
    return train(config, console=console)


@pytest.fixture(scope="module")
def eager_and_compiled(make_config, tmp_path_factory):
    """One eager and one compiled run of the same tiny model (one compile: the tiny corpus's targets
    are all 11 tokens long)."""
    problem = compiler_problem()
    if problem is not None:
        pytest.skip(problem)
    directory = tmp_path_factory.mktemp("compile")
    eager = run(make_config, directory / "eager", compile=False)
    compiled = run(make_config, directory / "compiled", compile=True)
    return eager, compiled


def test_compiled_training_gives_eager_losses_within_float_tolerance(eager_and_compiled):
    eager, compiled = eager_and_compiled
    assert compiled.steps == eager.steps == STEPS
    # Same math, other operation order (inductor's fused kernels against the hand-written pass):
    # float32 rounding, compounded by four Adam steps.
    assert losses(compiled.output_dir) == pytest.approx(losses(eager.output_dir), rel=1e-5)


def test_a_checkpoint_from_a_compiled_run_loads_into_an_eager_model_and_translates_the_same(
        eager_and_compiled, tiny_corpus):
    eager, compiled = eager_and_compiled
    checkpoint = load_checkpoint(compiled.output_dir / "checkpoints" / "last")
    codec = Codec.load(checkpoint.directory, data=checkpoint.config.data)
    model = build_model(checkpoint.config.model, src_vocab_size=len(codec.src_vocab),
                        tgt_vocab_size=len(codec.tgt_vocab))
    assert not any("_orig_mod" in key for key in checkpoint.weights)
    model.load_state_dict(checkpoint.weights, strict=True)  # every key, same names, same shapes
    sources = tiny_corpus["test_src"].read_text(encoding="utf-8").splitlines()
    from_compiled = heed.load(compiled.model_dir).translate(sources, beam=3)
    from_eager = heed.load(eager.model_dir).translate(sources, beam=3)
    assert [t.text for t in from_compiled] == [t.text for t in from_eager]
    assert [t.score for t in from_compiled] == pytest.approx([t.score for t in from_eager], rel=1e-4)


def test_without_a_compiler_one_line_says_so_and_training_runs_eagerly(make_config, tmp_path, monkeypatch):
    from torch._inductor import config as inductor_config

    def no_compile(*args, **kwargs):
        raise AssertionError("torch.compile was called without a compiler")

    out = io.StringIO()
    # As on a machine without g++: inductor's own search finds no compiler. Set through inductor's
    # own patch(): pytest 9.2's monkeypatch undoes a setattr on its config proxy by deleting the
    # entry, which broke every later torch.compile of the session.
    with inductor_config.patch({"cpp.cxx": ("heed-test-no-such-c++",)}), monkeypatch.context() as patched:
        patched.setattr(torch, "compile", no_compile)
        fallback = run(make_config, tmp_path / "fallback", compile=True, console=Console(file=out, width=200))
    said = [line for line in out.getvalue().splitlines() if "compile" in line.replace(str(tmp_path), "")]
    assert said == [("train.compile: no C++ compiler for torch.compile (looked for heed-test-no-such-c++; "
                    "set CXX or install g++); training eagerly")]
    assert inductor_config.cpp.cxx != ("heed-test-no-such-c++",)  # the patch ended
    eager = run(make_config, tmp_path / "eager", compile=False)
    assert losses(fallback.output_dir) == losses(eager.output_dir)  # the eager pass, bit for bit


def test_target_lengths_past_the_limit_run_the_eager_pass(monkeypatch):
    """Each target length is a compile of its own; after COMPILED_TARGET_LENGTHS of them, batches of
    new lengths take the eager pass (and give the same features). The compiler is stubbed: this
    tests the routing, not inductor."""
    from heed.nn.build import ModelConfig
    from heed.nn.rnn import seq2seq

    calls = []

    def fake_compile(fn):
        def traced(tgt_in, enc, need_attention):
            calls.append(tgt_in.size(1))
            return fn(tgt_in, enc, need_attention)
        return traced

    monkeypatch.setattr(seq2seq, "compile_function", fake_compile)
    cfg = ModelConfig(decoder="luong", attention="general", input_feeding=True, embed_size=5, hidden_size=6,
                      dropout=0.0)
    model = build_model(cfg, src_vocab_size=11, tgt_vocab_size=9)
    model.compile_teacher_forced()  # training mode takes the compiled pass, evaluation mode the eager one
    src, src_lengths = torch.randint(3, 11, (2, 5)), torch.tensor([5, 5])
    limit = seq2seq.COMPILED_TARGET_LENGTHS
    for steps in [*range(1, limit + 2), 1]:
        tgt_in = torch.randint(3, 9, (2, steps))
        features = model.train().forward_features(src, src_lengths, tgt_in).features
        torch.testing.assert_close(features, model.eval().forward_features(src, src_lengths, tgt_in).features)
    assert calls == [*range(1, limit + 1), 1]  # limit + 1 ran eagerly; length 1 again: the compiled pass
