"""A hostile or broken hub (tests/fake_hub.py's faults) against `heed import hf:` and
`heed.load("hf:")`: each case ends in one line (a ModelDirError; exit code 2 from the CLI), within
seconds, with no file written outside heed's cache and nothing in the cache that looks complete.
The hub's equivalent of tests/test_bad_inputs.py (issue 56: the adversary's hub findings)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.fake_hub import serving_tiny_marian

import heed
from heed import hub as heed_hub
from heed.errors import ModelDirError
from heed.pretrained import import_model

pytest.importorskip("transformers", reason="transformers (heed-nmt[dev]) is not installed")

REPO = "heed-tests/opus-mt-tiny"


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    with serving_tiny_marian(tmp_path_factory.mktemp("hub")) as served:
        yield served


@pytest.fixture
def hub(fake, tmp_path, monkeypatch):
    """The fake hub, faultless, as this process's HF_ENDPOINT, with heed's cache in tmp_path/cache."""
    fake.fault = None
    monkeypatch.setenv("HF_ENDPOINT", fake.endpoint)
    monkeypatch.setenv("HEED_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(heed_hub, "token", lambda: None)
    yield fake
    fake.fault = None


def refused(tmp_path: Path, source: str = f"hf:{REPO}") -> str:
    """The one-line message of a failed import, after checking it wrote nothing."""
    out = tmp_path / "out"
    with pytest.raises(ModelDirError) as caught:
        import_model(source, out)
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message, message
    assert not out.exists()
    snapshots = tmp_path / "cache" / "hub" / REPO.replace("/", "--") / "snapshots"
    assert not snapshots.exists() or not any(snapshots.iterdir()), "a failed download left a snapshot"
    return message


def files_beside(directory: Path) -> set[Path]:
    """Every path under `directory`'s parent that is not `directory` or inside it."""
    return {p for p in directory.parent.rglob("*") if p != directory and directory not in p.parents}


def test_a_commit_that_is_a_path_is_refused_before_any_file_is_fetched(hub, tmp_path):
    hub.fault = "commit"
    before = hub.requests["GET file"]
    assert "no commit of 40 hex digits" in refused(tmp_path)
    assert hub.requests["GET file"] == before
    assert not Path("/tmp/heed-evil").exists()


def test_etags_and_file_names_that_are_paths_write_nothing_outside_the_cache(hub, tmp_path):
    hub.fault = "etag"
    before = files_beside(tmp_path)
    out = import_model(f"hf:{REPO}", tmp_path / "out")
    assert (out / "heed.json").is_file()
    assert files_beside(tmp_path) == before, "a file was written beside the cache"
    assert not any(p.name.endswith("evil.pth") for p in tmp_path.rglob("*"))


@pytest.mark.parametrize("source", ["hf:../../etc", "hf:heed-tests/..", "hf:a/b/c", "hf:org/na me", "hf:"])
def test_a_hub_id_that_is_not_org_slash_name_is_refused_before_any_request(hub, tmp_path, source):
    before = sum(hub.requests.values())
    assert "not a hub model id" in refused(tmp_path, source)
    assert sum(hub.requests.values()) == before


@pytest.mark.parametrize("fault, expect", [
    ("short", "broke off"),
    ("size", "not the"),
    ("endless", "runs past"),
    ("redirect-loop", "redirects in a loop"),
    ("nested", "not JSON"),
])
def test_a_broken_hub_is_one_line_and_leaves_nothing_complete(hub, tmp_path, fault, expect):
    hub.fault = fault
    started = time.monotonic()
    message = refused(tmp_path)
    assert expect in message, message
    assert time.monotonic() - started < 30


def test_a_hub_that_never_answers_ends_at_the_read_deadline(hub, tmp_path, monkeypatch):
    monkeypatch.setattr(heed_hub, "READ_TIMEOUT_SECONDS", 1.0)
    hub.fault = "silent"
    started = time.monotonic()
    assert "no answer within 1 s" in refused(tmp_path)
    assert time.monotonic() - started < 10


def test_a_trickling_download_is_given_up_below_the_rate_floor(hub, tmp_path, monkeypatch):
    monkeypatch.setattr(heed_hub, "RATE_GRACE_SECONDS", 2.0)
    monkeypatch.setattr(heed_hub, "MIN_BYTES_PER_SECOND", 1024)
    hub.fault = "trickle"
    started = time.monotonic()
    assert "too slow" in refused(tmp_path)
    assert time.monotonic() - started < 15


def test_a_download_the_disk_cannot_hold_is_refused_before_it_starts(hub, tmp_path, monkeypatch):
    monkeypatch.setattr(heed_hub.shutil, "disk_usage", lambda path: type("U", (), {"free": 1000})())
    before = hub.requests["GET file"]
    assert "make room" in refused(tmp_path)
    assert hub.requests["GET file"] == before + 1  # the first file's answer gave its size; nothing more


def closed_port_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens once the socket is closed


def test_a_hub_out_of_reach_is_one_line_from_heed_load(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_ENDPOINT", closed_port_endpoint())
    monkeypatch.setenv("HEED_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    with pytest.raises(ModelDirError) as caught:
        heed.load(f"hf:{REPO}")
    message = str(caught.value)
    assert "out of reach" in message and "\n" not in message, message


def test_a_hub_out_of_reach_is_one_line_and_exit_2_from_the_cli(tmp_path):
    env = {**os.environ, "HF_ENDPOINT": closed_port_endpoint(), "HEED_CACHE": str(tmp_path / "cache"),
           "HF_HUB_OFFLINE": "0", "NO_PROXY": "127.0.0.1"}
    done = subprocess.run([sys.executable, "-m", "heed", "import", f"hf:{REPO}", "-o", str(tmp_path / "out")],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and "out of reach" in lines[0], done.stderr
    assert not (tmp_path / "out").exists()


def test_a_hub_out_of_reach_falls_back_to_a_snapshot_downloaded_earlier(hub, tmp_path, monkeypatch):
    first = import_model(f"hf:{REPO}", tmp_path / "a")
    monkeypatch.setenv("HF_ENDPOINT", closed_port_endpoint())
    second = import_model(f"hf:{REPO}", tmp_path / "b")
    assert (first / "model.safetensors").read_bytes() == (second / "model.safetensors").read_bytes()
