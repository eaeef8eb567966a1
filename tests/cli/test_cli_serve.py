"""`heed serve` on the command line: its options, its warnings and its errors. uvicorn.run is replaced
by a recorder, so nothing listens; the app it would serve is checked instead."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="heed-nmt[serve] is not installed")
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from heed.cli import app

runner = CliRunner()
OPTIONS = ["--names", "--host", "--port", "--device", "--threads", "--bf16", "--max-sentences", "--max-chars",
           "--max-body", "--max-queue", "--timeout", "--batch-wait-ms", "--batch-sentences", "--no-batching",
           "--max-beam", "--max-output"]


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What `uvicorn.run` was called with."""
    import uvicorn

    calls: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app_, **kwargs: calls.update(app=app_, **kwargs))
    return calls


def test_help_documents_every_option() -> None:
    result = runner.invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for option in OPTIONS:
        assert option in result.output, option


def test_serves_named_models_on_loopback_by_default(trained_run: Path, served: dict[str, Any]) -> None:
    result = runner.invoke(app, ["serve", str(trained_run / "model"), str(trained_run), "--names", "a,b",
                                 "--max-sentences", "7", "--no-batching", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert (served["host"], served["port"]) == ("127.0.0.1", 8000)
    assert "warning" not in result.stderr
    settings = served["app"].state.settings
    assert (settings.max_sentences, settings.batching) == (7, False)
    with TestClient(served["app"]) as client:
        assert client.get("/health").json()["models"] == ["a", "b"]
        reply = client.post("/v1/translate", json={"model": "a", "sentences": ["x"] * 8})
        assert reply.status_code == 413 and "--max-sentences" in reply.json()["error"]["message"]


def test_listening_beyond_loopback_warns(trained_run: Path, served: dict[str, Any]) -> None:
    result = runner.invoke(app, ["serve", str(trained_run), "--host", "0.0.0.0", "--port", "9001"])
    assert result.exit_code == 0, result.output
    assert served["host"] == "0.0.0.0" and served["port"] == 9001
    assert "warning:" in result.stderr and "no authentication" in result.stderr


@pytest.mark.parametrize("args, fragment", [
    (["serve", "no/such/dir"], "no/such/dir"),
    (["serve", "{run}", "--names", "a,b"], "--names"),
    (["serve", "{run}", "--port", "70000"], "--port"),
])
def test_mistakes_are_one_line_errors(trained_run: Path, served: dict[str, Any], args: list[str],
                                      fragment: str) -> None:
    result = runner.invoke(app, [a.format(run=trained_run) for a in args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert fragment in result.stderr
    assert not served


def test_serves_an_exported_directory_as_the_readme_shows(trained_run: Path, served: dict[str, Any],
                                                          tmp_path: Path) -> None:
    """`heed export runs/demo -o runs/demo-onnx && heed serve runs/demo-onnx`, through the CLI."""
    pytest.importorskip("onnxruntime", reason="heed-nmt[onnx] is not installed")
    exported = tmp_path / "demo-onnx"
    done = runner.invoke(app, ["export", str(trained_run), "-o", str(exported)])
    assert done.exit_code == 0, done.output
    result = runner.invoke(app, ["serve", str(exported)])
    assert result.exit_code == 0, result.output
    with TestClient(served["app"]) as client:
        info = client.get("/v1/models").json()["models"][0]
        assert info["name"] == "demo-onnx" and info["metrics"] is not None  # the training log came along
        reply = client.post("/v1/translate", json={"sentences": ["le 3 mars 1998"]})
        assert reply.status_code == 200
    import heed

    expected = heed.load(trained_run, device="cpu").translate(["le 3 mars 1998"])[0].text
    assert reply.json()["results"][0]["hypotheses"][0]["text"] == expected


def test_an_ensemble_is_served_under_its_own_name(trained_run: Path, served: dict[str, Any], tmp_path: Path) -> None:
    import shutil

    other = shutil.copytree(trained_run / "checkpoints" / "best", tmp_path / "best")
    result = runner.invoke(app, ["serve", str(trained_run), "--ensemble", f"both={trained_run},{other}",
                                 "--device", "cpu"])
    assert result.exit_code == 0, result.output
    with TestClient(served["app"]) as client:
        assert client.get("/health").json()["models"] == ["out", "both"]
        reply = client.post("/v1/translate", json={"model": "both", "sentences": ["le 3 mars 1998"]})
        assert reply.status_code == 200, reply.text
    import heed

    expected = heed.load([trained_run, other], device="cpu").translate(["le 3 mars 1998"])[0].text
    assert reply.json()["results"][0]["hypotheses"][0]["text"] == expected


@pytest.mark.parametrize("args, fragment", [
    (["--ensemble", "both={run}"], "--ensemble"),  # one member is no ensemble
    (["--ensemble", "out={run},{run}"], "--ensemble out"),  # the name of a served model
    (["--host", "999.1.1.1"], "--host 999.1.1.1"),
    (["--threads", "100000"], "--threads"),
])
def test_serve_mistakes_name_the_option(trained_run: Path, served: dict[str, Any], args: list[str],
                                        fragment: str) -> None:
    result = runner.invoke(app, ["serve", str(trained_run), *[a.format(run=trained_run) for a in args]])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and fragment in result.stderr
    assert not served


def test_models_shows_no_server_paths(trained_run: Path, served: dict[str, Any]) -> None:
    result = runner.invoke(app, ["serve", str(trained_run)])
    assert result.exit_code == 0, result.output
    with TestClient(served["app"]) as client:
        text = client.get("/v1/models").text
    assert str(trained_run.parent) not in text and "/tmp" not in text
    info = json.loads(text)["models"][0]
    assert info["config"]["data"]["max_src_len"] == 100 and "train" not in info["config"]["data"]


def test_the_server_reads_requests_with_a_deadline(served: dict[str, Any], trained_run: Path) -> None:
    result = runner.invoke(app, ["serve", str(trained_run), "--read-timeout", "2.5"])
    assert result.exit_code == 0, result.output
    protocol = served["http"]
    assert protocol.__name__ == "ReadTimeoutH11Protocol"
