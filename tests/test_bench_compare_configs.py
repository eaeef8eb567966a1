"""bench/compare writes heed configs from code (systems.Heed.config): they must stay valid heed
configs as heed's fields change, and the Transformer's must say what TransformerSpec says (the
spec every peer's config is built from). The peers' own configs need their toolkits and are
exercised by the bench itself."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from heed.config import load_config

COMPARE = Path(__file__).resolve().parents[1] / "bench" / "compare"


@pytest.fixture()
def systems(monkeypatch):
    monkeypatch.syspath_prepend(str(COMPARE))  # a script folder, not a package (as run.py does)
    import corpora
    import systems as module

    yield module, corpora
    for name in ("systems", "corpora", "measure"):
        sys.modules.pop(name, None)


def _bench(module, corpora, tmp_path: Path, model: str):
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "dev", "test"):
        (data / f"{split}.src").write_text("▁ein ▁Hund\n▁zwei ▁Katzen\n", encoding="utf-8")
        (data / f"{split}.tgt").write_text("▁a ▁dog\n▁two ▁cats\n", encoding="utf-8")
    return module.Bench(repo=COMPARE.parents[1], work=tmp_path, peers=tmp_path, shared=tmp_path,
                        heed_python=Path(sys.executable), dataset=corpora.Multi30k(source=tmp_path), steps=300,
                        threads=1, seed=42, max_len=60, timeout=60, env={}, model=model)


@pytest.mark.parametrize("model", ["rnn", "transformer"])
def test_the_bench_writes_valid_heed_configs(systems, tmp_path, model):
    module, corpora = systems
    bench = _bench(module, corpora, tmp_path, model)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(module.Heed(bench).config(), allow_unicode=True), encoding="utf-8")
    config = load_config(path, environment=False)
    assert config.model.family == model
    assert config.train.max_steps == 300 and config.train.seed == 42 and config.train.threads == 1
    assert config.data.max_sentences == 128


def test_the_heed_transformer_is_the_spec(systems, tmp_path):
    module, corpora = systems
    spec = module.TRANSFORMER
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(module.Heed(_bench(module, corpora, tmp_path, "transformer")).config(),
                                   allow_unicode=True), encoding="utf-8")
    config = load_config(path, environment=False)
    m, t = config.model, config.train
    assert (m.layers, m.d_model, m.heads, m.ff_size) == (spec.layers, spec.d_model, spec.heads, spec.ff_size)
    assert (m.norm, m.positions, m.tie_embeddings) == ("pre", "sinusoidal", True)
    assert (m.dropout, m.attention_dropout) == (spec.dropout, spec.attention_dropout)
    assert (t.lr, t.clip, t.label_smoothing) == (spec.lr, spec.clip, spec.label_smoothing)
    assert (t.schedule.name, t.schedule.warmup_steps, t.schedule.decay) == ("warmup", spec.warmup, "inverse_sqrt")


def test_opennmt_noam_peaks_at_the_spec_rate(systems):
    """OpenNMT-py's noam rate is lr * d^-0.5 * min(step^-0.5, step * warmup^-1.5): with the bench's
    lr it peaks, at step = warmup, at the spec's rate, and the rates around it match the others'
    inverse-sqrt schedule (linear rise, then peak * sqrt(warmup / step))."""
    module, _ = systems
    spec, cfg = module.TRANSFORMER, {}
    module.OpenNMT._transformer(cfg)

    def noam(step: int) -> float:
        return cfg["learning_rate"] * spec.d_model ** -0.5 * min(step ** -0.5, step * cfg["warmup_steps"] ** -1.5)

    assert noam(spec.warmup) == pytest.approx(spec.lr)
    assert noam(spec.warmup // 2) == pytest.approx(spec.lr / 2)
    assert noam(4 * spec.warmup) == pytest.approx(spec.lr / 2)
    assert cfg["encoder_type"] == cfg["decoder_type"] == "transformer" and "rnn_type" not in cfg
