"""/v1/align with a model one of a recorded pair (`heed train --both-directions`, heed.pair.json):
it symmetrises with the reverse model as `heed align` does, unless the request asks one_way; a
recorded reverse that is not the model's other direction is refused when the server starts."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="heed-nmt[serve] is not installed")
from cli_helpers import invoke
from fastapi.testclient import TestClient

from heed.api import Translator
from heed.cli.serve import recorded_reverses
from heed.data.pharaoh import read_alignments
from heed.errors import HeedError
from heed.serve.app import ServeSettings, create_app
from heed.train.pair import PAIR_FILE


@pytest.fixture(scope="module")
def pair(trained_pair: tuple[Path, Path]) -> tuple[Path, Path]:
    """conftest's `trained_pair`: (forward, reverse) run dirs of `heed train --both-directions`."""
    return trained_pair


@pytest.fixture(scope="module")
def client(pair) -> TestClient:
    forward, _ = pair
    translators = {"dates": Translator.load(forward, device="cpu")}
    reverses = recorded_reverses({"dates": forward}, translators, {}, device="cpu", bf16=False, int8=False)
    with TestClient(create_app(translators, ServeSettings(), reverses=reverses)) as c:
        yield c


def _links(reply: dict) -> list[set[tuple[int, int]]]:
    return [{(i, j) for i, j in r["links"]} for r in reply["results"]]


def test_align_symmetrises_with_the_recorded_reverse_as_heed_align_does(pair, client, tiny_corpus, tmp_path):
    forward, _ = pair
    sources = tiny_corpus["test_src"].read_text(encoding="utf-8").splitlines()
    targets = tiny_corpus["test_ref"].read_text(encoding="utf-8").splitlines()
    for args, body in (((), {}), (("--one-way",), {"one_way": True})):
        out = tmp_path / f"{len(args)}.align"
        result = invoke("align", forward, "--src", tiny_corpus["test_src"], "--tgt", tiny_corpus["test_ref"], "-o", out,
                        *args)
        assert result.exit_code == 0, result.output
        reply = client.post("/v1/align", json={"sources": sources, "targets": targets, **body})
        assert reply.status_code == 200, reply.text
        assert reply.json()["symmetrized"] == (None if args else "grow-diag-final")
        assert _links(reply.json()) == read_alignments(out)
        assert [r["pharaoh"] for r in reply.json()["results"]] == out.read_text(encoding="utf-8").splitlines()
    both = _links(client.post("/v1/align", json={"sources": sources, "targets": targets}).json())
    alone = _links(client.post("/v1/align", json={"sources": sources, "targets": targets, "one_way": True}).json())
    assert both != alone  # the reverse model was read


def test_characters_read_the_model_alone(client, tiny_corpus):
    sources = tiny_corpus["test_src"].read_text(encoding="utf-8").splitlines()[:3]
    targets = tiny_corpus["test_ref"].read_text(encoding="utf-8").splitlines()[:3]
    reply = client.post("/v1/align", json={"sources": sources, "targets": targets, "tgt_units": "chars"})
    assert reply.status_code == 200, reply.text
    assert reply.json()["symmetrized"] is None


def test_a_recorded_reverse_of_the_same_direction_is_refused_at_start(pair, tmp_path):
    forward, _ = pair
    copy, twin = tmp_path / "copy", tmp_path / "twin"
    shutil.copytree(forward / "model", copy)
    shutil.copytree(forward / "model", twin)
    (copy / PAIR_FILE).write_text(json.dumps({"direction": "forward", "other": "../twin",
                                              "symmetrize": "grow-diag-final"}), encoding="utf-8")
    translators = {"copy": Translator.load(copy, device="cpu")}
    with pytest.raises(HeedError, match="not its other direction"):
        recorded_reverses({"copy": copy}, translators, {}, device="cpu", bf16=False, int8=False)
