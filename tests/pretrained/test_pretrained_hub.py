"""`heed import hf:ORG/NAME` through heed's hub client (heed.hub) against a hub on loopback
(tests/fake_hub.py) serving a tiny Marian model that transformers builds: the revision recorded,
the cache read by a second import, offline mode, and a missing model or revision as one line with
nothing written. What a hostile or broken hub does is in tests/test_bad_inputs_hub.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.fake_hub import FakeHub, serving_tiny_marian

pytest.importorskip("transformers", reason="transformers (heed-nmt[dev]) is not installed")


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with serving_tiny_marian(tmp_path_factory.mktemp("hub")) as fake:
        yield fake


def hub_env(hub: FakeHub, cache: Path, *, offline: bool = False) -> dict[str, str]:
    """The environment of a process that talks to `hub`, with its hub cache in `cache`."""
    env = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(cache / "hf"), "HEED_CACHE": str(cache),
           "HF_HUB_OFFLINE": "1" if offline else "0", "NO_PROXY": "127.0.0.1"}
    env.pop("HF_TOKEN", None)
    return env


def heed_import(hub: FakeHub, cache: Path, *args: str, offline: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "heed", "import", *args], env=hub_env(hub, cache, offline=offline),
                          capture_output=True, text=True, timeout=120)


def test_a_hub_import_records_its_revision_and_a_second_reads_the_cache(hub, tmp_path):
    commit = hub.repos["heed-tests/opus-mt-tiny"][0]
    first = heed_import(hub, tmp_path / "cache", "hf:heed-tests/opus-mt-tiny", "-o", str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr
    meta = json.loads((tmp_path / "a" / "heed.json").read_text())
    assert meta["pretrained"] == {"source": "hf:heed-tests/opus-mt-tiny", "revision": commit,
                                  "architecture": "MarianMTModel"}
    downloaded = hub.requests["GET file"]
    assert downloaded >= 6  # config, weights, two SentencePiece models, vocab, tokenizer config
    second = heed_import(hub, tmp_path / "cache", "hf:heed-tests/opus-mt-tiny", "--revision", commit,
                         "-o", str(tmp_path / "b"))
    assert second.returncode == 0, second.stderr
    assert hub.requests["GET file"] == downloaded  # every file from the cache
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    before = sum(hub.requests.values())
    offline = heed_import(hub, tmp_path / "cache", "hf:heed-tests/opus-mt-tiny", "-o", str(tmp_path / "c"),
                          offline=True)
    assert offline.returncode == 0, offline.stderr
    assert sum(hub.requests.values()) == before  # offline: not one request
    assert json.loads((tmp_path / "c" / "heed.json").read_text())["pretrained"]["revision"] == commit


@pytest.mark.parametrize("source, expect", [
    ("hf:heed-tests/no-such-model", "no such model on the hub"),
    ("hf:heed-tests/opus-mt-tiny@v9", "has no revision 'v9'"),
])
def test_a_missing_model_or_revision_is_one_line_and_writes_nothing(hub, tmp_path, source, expect):
    out = tmp_path / "out"
    done = heed_import(hub, tmp_path / "cache", source, "-o", str(out))
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and expect in lines[0], done.stderr
    assert not out.exists()


def test_offline_without_the_model_in_the_cache_says_so(hub, tmp_path):
    done = heed_import(hub, tmp_path / "empty-cache", "hf:heed-tests/opus-mt-tiny", "-o", str(tmp_path / "out"),
                       offline=True)
    assert done.returncode == 2 and "not in heed's hub cache" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


def test_heed_load_of_a_hub_id_imports_once_into_heeds_cache(hub, tmp_path):
    script = ("import heed, sys; t = heed.load('hf:heed-tests/opus-mt-tiny'); "
              "print(len(t.translate(['Je suis là.'])), t.codec.tgt_vocab.eos_id)")
    env = hub_env(hub, tmp_path / "heed")
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and done.stdout.split() == ["1", "0"], done.stderr
    commit = hub.repos["heed-tests/opus-mt-tiny"][0]
    converted = tmp_path / "heed" / "pretrained" / "heed-tests--opus-mt-tiny" / commit
    assert json.loads((converted / "heed.json").read_text())["pretrained"]["revision"] == commit
    assert [p.name for p in converted.parent.iterdir()] == [commit]
