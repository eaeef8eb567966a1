"""The explorer serving exports, in real headless Chromium (as tests/serve/test_serve_browser.py): each
export kind of each family (an RNN through ONNX, a Transformer through ONNX and through
CTranslate2) alone and side by side with the model directory. The page asks each model only for
what it can give (GET /v1/models' "gives"), shows the translation and the averaged attention, and
says in place what a model cannot show (every head, attribution, CTranslate2's beam tree): no
page-wide error, no console error."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from serve import test_serve_browser as browser_tests
from serve.test_serve_browser import Explorer, Server, _serve

from heed.api import Translator
from heed.export.onnx import export_model

SENTENCE = "le 3 mars 1998"
browser, explorer = browser_tests.browser, browser_tests.explorer


@pytest.fixture(scope="module")
def server(trained_run: Path, transformer_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("ctranslate2")
    out = tmp_path_factory.mktemp("exports")
    translators = {
        "transformer": Translator.load(transformer_run, device="cpu"),
        "rnn-onnx": Translator.load(export_model(trained_run, out / "rnn-onnx")),
        "transformer-onnx": Translator.load(export_model(transformer_run, out / "tf-onnx")),
        "transformer-ct2": Translator.load(export_model(transformer_run, out / "tf-ct2", kind="ctranslate2")),
    }
    running = _serve(translators)
    yield running
    running.stop()


def _single(ex: Explorer, model: str, beam: int = 3) -> dict:
    ex.page.select_option("#model", model)
    body, data = ex.translate(SENTENCE, beam_size=beam, n_best=2)
    assert body["model"] == model
    return body, data


def _notes(ex: Explorer) -> dict[str, str]:
    found = ex.page.eval_on_selector_all(".note.cannot:not([hidden])", "ns => ns.filter(n => n.offsetParent !== null)"
                                         ".map(n => [n.dataset.cannot, n.textContent])")
    return dict(found)


def test_the_models_say_what_they_give(server: Server) -> None:
    import json
    import urllib.request

    with urllib.request.urlopen(server.url + "v1/models", timeout=30) as response:
        models = {m["name"]: m for m in json.load(response)["models"]}
    assert models["transformer"]["runtime"] == "pytorch" and all(models["transformer"]["gives"].values())
    assert models["transformer-onnx"]["runtime"] == "onnx"
    assert models["transformer-onnx"]["gives"] == {"tree": True, "heads": False, "attribution": False,
                                                   "intervention": False, "contributions": False}
    assert models["transformer-ct2"]["runtime"] == "ctranslate2"
    assert models["transformer-ct2"]["gives"] == {"tree": False, "heads": False, "attribution": False,
                                                  "intervention": False, "contributions": False}


@pytest.mark.parametrize("model", ["rnn-onnx", "transformer-onnx"])
def test_an_onnx_export_shows_its_translation_attention_and_tree_and_says_what_it_cannot(
        explorer: Explorer, server: Server, model: str) -> None:
    body, data = _single(explorer, model)
    assert body["trace"] is True  # heed's own search runs the export: it traces
    best = data["results"][0]["hypotheses"][0]
    assert best["text"] == server.translate(body)["results"][0]["hypotheses"][0]["text"]
    assert best["text"] in explorer.page.inner_text("#output")
    assert explorer.page.locator("#heatmap rect.cell").count() > 0  # the averaged attention
    assert explorer.page.locator("#beam svg").count() == 1  # the beam tree
    notes = _notes(explorer)
    assert "tree" not in notes and "ONNX export" in notes["attribution"]
    if model == "transformer-onnx":
        assert "only its averaged attention" in notes["heads"]
    assert explorer.page.is_disabled("#attribute") and explorer.page.is_disabled("#permute")
    assert explorer.page.is_hidden("#error")


def test_a_ctranslate2_export_translates_in_the_page_without_asking_for_a_tree(
        explorer: Explorer, server: Server) -> None:
    body, data = _single(explorer, "transformer-ct2")
    assert "trace" not in body and "alternatives" not in body  # it cannot trace: not asked
    best = data["results"][0]["hypotheses"][0]
    assert best["text"] and best["text"] in explorer.page.inner_text("#output")
    assert explorer.page.locator("#heatmap rect.cell").count() > 0
    notes = _notes(explorer)
    assert "CTranslate2" in notes["tree"] and "only its averaged attention" in notes["heads"]
    assert "CTranslate2 export" in notes["attribution"]
    assert explorer.page.locator("#beam svg").count() == 0
    assert explorer.page.is_hidden("#error")


def test_side_by_side_every_export_answers_in_its_panel_with_no_page_wide_error(explorer: Explorer) -> None:
    explorer.page.check("#compare-toggle")
    for box in explorer.page.query_selector_all("#compare-models input"):
        box.check()
    explorer.page.fill("#sentence", SENTENCE)
    calls = [(body, data) for body, data in explorer.act(lambda: explorer.page.press("#sentence", "Enter"),
                                                          requests=4, at_least=True)
             if "prefix" not in body]  # the others ask again with the first's output forced (the gap)
    assert {body["model"] for body, _ in calls} == {"transformer", "rnn-onnx", "transformer-onnx",
                                                     "transformer-ct2"}
    assert all(("trace" in body) == (body["model"] != "transformer-ct2") for body, _ in calls)
    panels = explorer.page.locator(".model-panel")
    assert panels.count() == 4
    assert explorer.page.locator(".panel-error").count() == 0
    assert all(text.strip() for text in explorer.texts(".model-panel .output-text"))
    assert explorer.page.is_hidden("#error")


def test_permuted_attention_is_left_out_for_exports_side_by_side_and_said_in_their_panels(
        explorer: Explorer) -> None:
    explorer.page.check("#compare-toggle")
    for box in explorer.page.query_selector_all("#compare-models input"):
        box.check()
    explorer.page.check("#permute")
    explorer.page.fill("#sentence", SENTENCE)
    calls = [(body, data) for body, data in explorer.act(lambda: explorer.page.press("#sentence", "Enter"),
                                                          requests=4, at_least=True) if "prefix" not in body]
    assert {body["model"]: body.get("intervention") for body, _ in calls} == {
        "transformer": "permute", "rnn-onnx": None, "transformer-onnx": None, "transformer-ct2": None}
    assert explorer.page.locator(".model-panel .note.cannot[data-cannot=intervention]").count() == 3
    assert explorer.page.is_hidden("#error")


def test_the_model_select_shows_every_name_whole_at_1400_px(browser, server: Server) -> None:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = context.new_page()
        page.goto(server.url)
        page.wait_for_selector("#model option", state="attached")
        room, widest = page.evaluate("""() => {
            const select = document.getElementById("model");
            const style = getComputedStyle(select);
            const context = document.createElement("canvas").getContext("2d");
            context.font = `${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
            const widest = Math.max(...Array.from(select.options, (o) => context.measureText(o.text).width));
            const room = select.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight) - 16;
            return [room, widest];
        }""")
        assert widest <= room, (widest, room)  # 16 px for the arrow
    finally:
        context.close()
