"""The explorer's language pickers in real headless Chromium (as tests/serve/test_serve_browser.py): a
many-language model (a tiny M2M-100, tests/pretrained_models.py) served without a default pair
shows a source and a target picker filled with its languages; the pair picked goes with every
request, and the page shows what POST /v1/translate gives for that pair. A model of one pair
shows no pickers."""
from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from serve import test_serve_browser as browser_tests
from serve.test_serve_browser import Explorer, Server, _serve

from heed.api import Translator

pytest.importorskip("transformers")
browser, explorer = browser_tests.browser, browser_tests.explorer


@pytest.fixture(scope="module")
def server(trained_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    from tests.pretrained_models import make_m2m100

    from heed.pretrained import import_model

    root = tmp_path_factory.mktemp("m2m100")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        many = import_model(make_m2m100(root / "hf"), root / "m2m100")
    running = _serve({"many": Translator.load(many, device="cpu"), "tiny": Translator.load(trained_run, device="cpu")})
    yield running
    running.stop()


def test_the_pickers_send_the_pair_and_show_its_translation(explorer: Explorer, server: Server) -> None:
    page = explorer.page
    assert page.is_visible("#languages")
    languages = page.eval_on_selector_all("#src_lang option:not([disabled])", "nodes => nodes.map(n => n.value)")
    assert {"fr", "en", "de"} <= set(languages)
    assert page.eval_on_selector("#src_lang", "n => n.value") == ""  # served without a pair: none chosen
    page.select_option("#src_lang", "fr")
    page.select_option("#tgt_lang", "en")
    body, data = explorer.translate("Je suis content.", beam_size=1, n_best=1)
    assert body["src_lang"] == "fr" and body["tgt_lang"] == "en"
    assert server.translate(body) == data  # the same request gives the same answer
    plain = server.translate({"model": "many", "sentences": ["Je suis content."], "beam_size": 1, "n_best": 1,
                              "src_lang": "fr", "tgt_lang": "en"})
    assert data["results"][0]["hypotheses"][0]["tokens"] == plain["results"][0]["hypotheses"][0]["tokens"]
    assert page.is_hidden("#error") and page.is_visible("#single-view")
    # another target: the page asks again with it
    ((again, _),) = explorer.act(lambda: page.select_option("#tgt_lang", "de"))
    assert again["src_lang"] == "fr" and again["tgt_lang"] == "de"
    page.select_option("#model", "tiny")
    assert page.is_hidden("#languages")  # a model of one pair has none
    assert not explorer.unexpected_errors()


def test_without_a_pair_the_page_says_which_request_fields_are_missing(explorer: Explorer) -> None:
    explorer.allowed.append("422")
    explorer.page.fill("#sentence", "Bonjour.")
    explorer.act(lambda: explorer.page.press("#sentence", "Enter"))
    message = explorer.page.text_content("#error") or ""
    assert "src_lang and tgt_lang" in message and "--src-lang" not in message
