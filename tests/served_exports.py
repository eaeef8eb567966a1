"""An exported directory served beside the model directory it came from (tests/export/test_export.py for
ONNX, tests/export/test_export_ct2.py for CTranslate2)."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest


@contextmanager
def served_beside_pytorch(exported: Path, model_dir: Path) -> Iterator[Any]:
    """`heed serve`'s app with the export as model "export" and the model directory as "torch":
    checks that both report the same parameter count and give the same n-best texts for a beam-3,
    n-best-2 request, then yields the test client for more requests."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from heed.api import Translator
    from heed.serve.app import create_app

    translators = {"export": Translator.load(exported), "torch": Translator.load(model_dir, device="cpu")}
    body = {"sentences": ["le 3 mars 1998", "March 5, 2001"], "beam_size": 3, "n_best": 2}
    with TestClient(create_app(translators)) as client:
        models = {m["name"]: m for m in client.get("/v1/models").json()["models"]}
        assert models["export"]["parameters"] == models["torch"]["parameters"] > 0
        got = [client.post("/v1/translate", json={**body, "model": name}).json()["results"]
               for name in ("export", "torch")]
        assert [[h["text"] for h in r["hypotheses"]] for r in got[0]] == \
            [[h["text"] for h in r["hypotheses"]] for r in got[1]]
        yield client
