"""A many-language model (a tiny M2M-100, tests/pretrained_models.py) served without a default pair:
/v1/models lists its languages, a request without a pair is told of the request's fields (not of
the CLI's flags or Python's keywords), and `heed serve` warns at start-up. The explorer's pickers
are tested in Chromium (tests/serve/test_serve_browser_languages.py)."""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="heed-nmt[serve] is not installed")
pytest.importorskip("transformers")
from fastapi.testclient import TestClient
from tests.pretrained_models import make_m2m100, tatoeba
from typer.testing import CliRunner

import heed
from heed.cli import app
from heed.pretrained import import_model
from heed.serve.app import create_app, unpaired


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An imported tiny M2M-100 model directory (no default pair)."""
    root = tmp_path_factory.mktemp("m2m100")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return import_model(make_m2m100(root / "hf"), root / "m2m100")


def test_a_request_without_a_pair_is_told_of_the_requests_fields(many: Path) -> None:
    translator = heed.load(many, device="cpu")
    fr = list(tatoeba(5000, 1)[0])
    with TestClient(create_app({"m": translator})) as client:
        info = client.get("/v1/models").json()["models"][0]
        errors = [client.post("/v1/translate", json={"sentences": fr}).json()["error"],
                  client.post("/v1/translate", json={"sentences": fr, "src_lang": "fr"}).json()["error"],
                  client.post("/v1/heads", json={"sources": fr, "targets": [["a"]]}).json()["error"]]
        paired = client.post("/v1/translate", json={"sentences": fr, "src_lang": "fr", "tgt_lang": "en",
                                                    "beam_size": 1})
    assert info["languages"] == translator.languages and {"fr", "en"} <= set(info["languages"])
    assert [e["field"] for e in errors] == ["src_lang", "tgt_lang", "src_lang"]
    for error in errors:
        assert "src_lang and tgt_lang" in error["message"] and "/v1/models" in error["message"]
        assert "--src-lang" not in error["message"] and "heed.load" not in error["message"], error
    assert paired.status_code == 200, paired.text


def test_heed_serve_warns_of_a_many_language_model_without_a_default_pair(many: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    served: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app_, **kwargs: served.update(app=app_))
    runner = CliRunner()
    bare = runner.invoke(app, ["serve", str(many)])
    assert bare.exit_code == 0, bare.output
    assert "warning:" in bare.output and "without a default pair" in bare.output
    assert "src_lang and tgt_lang" in bare.output and "--src-lang" in bare.output
    paired = runner.invoke(app, ["serve", str(many), "--src-lang", "fr", "--tgt-lang", "en"])
    assert paired.exit_code == 0 and "warning" not in paired.output, paired.output
    assert unpaired({"m": heed.load(many, device="cpu")}) == ["m"]
    assert unpaired({"m": heed.load(many, device="cpu", src_lang="fr", tgt_lang="en")}) == []
