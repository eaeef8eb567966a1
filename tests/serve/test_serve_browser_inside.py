"""The explorer's look-inside views in real headless Chromium (as tests/serve/test_serve_browser.py):
the layer x head grid (a click enlarges the right head, and its weights are the API's), the
attribution view beside the attention, and the permuted-attention toggle.

HEED_SCREENSHOT=1 writes docs/explorer-inside.png (the grid and the attribution view); with
HEED_SCREENSHOT_MODEL=DIR, of that model (a Transformer)."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from serve import test_serve_browser as browser_tests
from serve.test_serve_browser import REPO, VIEWPORT, Explorer, Server, _serve

from heed.api import Translator

SENTENCE = "le 3 mars 1998"
# the browser tests' fixtures; `explorer` runs against this module's `server`
browser, explorer = browser_tests.browser, browser_tests.explorer


@pytest.fixture(scope="module")
def wide_run(tiny_config, tmp_path_factory) -> Path:
    """A Transformer of 6 layers x 16 heads (barely trained: the grid's size is what matters)."""
    from heed.config import config_from_dict
    from heed.train import train

    output = tmp_path_factory.mktemp("wide") / "out"
    config = tiny_config(output, epochs=1)
    config["model"] = {"family": "transformer", "layers": 6, "heads": 16, "d_model": 32, "ff_size": 32}
    train(config_from_dict(config))
    return output


@pytest.fixture(scope="module")
def one_layer_run(tiny_config, tmp_path_factory) -> Path:
    """A Transformer of 1 layer x 2 heads (barely trained)."""
    from heed.config import config_from_dict
    from heed.train import train

    output = tmp_path_factory.mktemp("one") / "out"
    config = tiny_config(output, epochs=1)
    config["model"] = {"family": "transformer", "layers": 1, "heads": 2, "d_model": 16, "ff_size": 32}
    train(config_from_dict(config))
    return output


@pytest.fixture(scope="module")
def server(transformer_run: Path, trained_run: Path, wide_run: Path, one_layer_run: Path) -> Iterator[Server]:
    translators = {"transformer": Translator.load(transformer_run, device="cpu"),
                   "rnn": Translator.load(trained_run, device="cpu"),
                   "wide": Translator.load(wide_run, device="cpu"),
                   "one": Translator.load(one_layer_run, device="cpu")}
    running = _serve(translators)
    yield running
    running.stop()


def _counter(ex: Explorer, name: str) -> int:
    return int(ex.page.evaluate(f"Number(document.body.dataset.{name} || 0)"))


def _translate_and_wait_for_heads(ex: Explorer, model: str, sentence: str) -> dict[str, Any]:
    ex.page.select_option("#model", model)
    before = _counter(ex, "heads")
    _, data = ex.translate(sentence, beam_size=1, n_best=1)
    ex.page.wait_for_function(f"Number(document.body.dataset.heads || 0) > {before}")
    return data


def _zoom_weights(ex: Explorer, box: str) -> np.ndarray:
    cells = ex.page.eval_on_selector_all(f"{box} rect.cell", "rs => rs.map(r => [+r.dataset.row, +r.dataset.col, "
                                         "+r.dataset.weight])")
    rows, cols = max(c[0] for c in cells) + 1, max(c[1] for c in cells) + 1
    out = np.zeros((rows, cols))
    for j, i, w in cells:
        out[j, i] = w
    return out


def test_a_click_enlarges_the_head_it_names_with_the_apis_weights(explorer: Explorer, server: Server) -> None:
    data = _translate_and_wait_for_heads(explorer, "transformer", SENTENCE)
    best = data["results"][0]["hypotheses"][0]
    status, heads = server.post("v1/heads", {"model": "transformer", "sources": [SENTENCE], "targets": [best["tokens"]]})
    assert status == 200
    cross = np.asarray(heads["results"][0]["cross"])  # (layers, heads, tgt, src)
    layers, n_heads = cross.shape[:2]
    assert explorer.page.locator("#heads-grid button.mini").count() == (layers + 1) * (n_heads + 1)
    for layer, head, expected in ((1, 0, cross[1, 0]), (0, 1, cross[0, 1]), ("mean", "mean", cross.mean((0, 1))),
                                  (0, "mean", cross[0].mean(0))):
        explorer.page.click(f'#heads-grid button[data-layer="{layer}"][data-head="{head}"]')
        assert explorer.page.get_attribute("#head-zoom-map", "data-layer") == str(layer)
        assert explorer.page.get_attribute("#head-zoom-map", "data-head") == str(head)
        np.testing.assert_allclose(_zoom_weights(explorer, "#head-zoom-map"), expected, atol=1e-6)
        picked = explorer.page.locator("#heads-grid button.mini.picked")
        assert picked.count() == 1 and picked.get_attribute("data-layer") == str(layer)
    # the layer's mean of the last layer is the attention the main heatmap shows
    np.testing.assert_allclose(cross[-1].mean(0), np.asarray(best["attention"]), atol=1e-5)
    # hovering a source token marks its column in every small map
    explorer.page.hover('#heads-tokens [data-src-index="2"]')
    lefts = explorer.page.eval_on_selector_all("#heads-grid .mini-mark", "ms => ms.map(m => m.hidden ? null : "
                                               "[m.style.left, m.dataset.cell])")
    cell = int(lefts[0][1])
    assert 3 <= cell <= 8 and lefts == [[f"{2 * cell}px", str(cell)]] * ((layers + 1) * (n_heads + 1))


def test_a_one_layer_model_shows_one_row_of_heads_not_its_copy_as_the_mean(explorer: Explorer) -> None:
    """The mean over one layer is that layer: the grid has no second, identical row."""
    _translate_and_wait_for_heads(explorer, "one", SENTENCE)
    layers = explorer.attrs("#heads-grid button.mini", "data-layer")
    assert layers == ["0", "0", "0"]  # head 0, head 1, their mean
    assert explorer.attrs("#heads-grid button.mini", "data-head") == ["0", "1", "mean"]


def test_the_attribution_map_says_what_its_colours_are(explorer: Explorer) -> None:
    """Under the attribution map the legend names attribution, not attention weight."""
    explorer.page.select_option("#model", "rnn")
    explorer.translate(SENTENCE, beam_size=1, n_best=1)
    before = _counter(explorer, "attributions")
    explorer.page.click("#attribute")
    explorer.page.wait_for_function(f"Number(document.body.dataset.attributions || 0) > {before}")
    assert explorer.texts("#attribution-map .color-legend text")[-1] == "|attribution| / row max"
    assert explorer.texts("#attribution-attention .color-legend text")[-1] == "attention weight"
    assert "integrated gradients" in explorer.texts("#attribution h3")[1]


def test_an_rnn_shows_its_one_attention_and_no_grid(explorer: Explorer) -> None:
    explorer.page.select_option("#model", "rnn")
    explorer.translate(SENTENCE, beam_size=1, n_best=1)
    assert explorer.page.locator("#heads-card").is_hidden()
    assert explorer.page.locator("#heatmap rect.cell").count() > 0


def test_the_grid_stays_usable_at_60_tokens_and_16_heads_by_6_layers(explorer: Explorer) -> None:
    sentence = "le 3 mars 1998, le 4 mai 2001, le 5 juin 1950, le 6 juil 199"
    data = _translate_and_wait_for_heads(explorer, "wide", sentence)
    assert len(data["results"][0]["src_tokens"]) == 60
    assert explorer.page.locator("#heads-grid button.mini").count() == 7 * 17
    # the grid scrolls inside its card, the page does not; a click still enlarges one at once
    assert explorer.page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    started = explorer.page.evaluate("performance.now()")
    explorer.page.click('#heads-grid button[data-layer="5"][data-head="15"]')
    explorer.page.wait_for_selector("#head-zoom-map rect.cell")
    assert explorer.page.evaluate("performance.now()") - started < 2000
    assert explorer.page.get_attribute("#head-zoom-map", "data-head") == "15"


def test_attribution_is_shown_beside_the_attention_as_the_api_gives_it(explorer: Explorer, server: Server) -> None:
    explorer.page.select_option("#model", "rnn")
    _, data = explorer.translate(SENTENCE, beam_size=1, n_best=1)
    best = data["results"][0]["hypotheses"][0]
    explorer.page.click("#attribute")
    explorer.page.wait_for_function("Number(document.body.dataset.attributions || 0) > 0")
    status, answer = server.post("v1/attribute", {"model": "rnn", "sentences": [SENTENCE], "targets": [best["tokens"]]})
    assert status == 200
    a = answer["attributions"][0]
    magnitude = np.abs(np.asarray(a["source"]))
    np.testing.assert_allclose(_zoom_weights(explorer, "#attribution-map"),
                               magnitude / magnitude.max(axis=1, keepdims=True), atol=1e-6)
    np.testing.assert_allclose(_zoom_weights(explorer, "#attribution-attention"), np.asarray(best["attention"]),
                               atol=1e-6)
    shown = explorer.texts("#attribution .agreement .rho")
    assert shown == [f"ρ {x:.2f}" for x in a["agreement"]]


def test_the_permuted_toggle_decodes_again_with_permuted_attention(explorer: Explorer, server: Server) -> None:
    explorer.page.select_option("#model", "rnn")
    _, plain = explorer.translate(SENTENCE, beam_size=1, n_best=1)
    ((body, permuted),) = explorer.act(lambda: explorer.page.check("#permute"))
    assert body["intervention"] == "permute"
    expected = server.translate({"model": "rnn", "sentences": [SENTENCE], "beam_size": 1, "n_best": 1,
                                 "intervention": "permute"})
    shown = explorer.texts("#output [data-token-index]")
    assert shown[: len(expected["results"][0]["hypotheses"][0]["tokens"])] == \
        expected["results"][0]["hypotheses"][0]["tokens"]
    assert permuted["results"][0]["hypotheses"][0]["tokens"] == expected["results"][0]["hypotheses"][0]["tokens"]
    ((body, again),) = explorer.act(lambda: explorer.page.uncheck("#permute"))
    assert "intervention" not in body
    assert again["results"][0]["hypotheses"][0]["tokens"] == plain["results"][0]["hypotheses"][0]["tokens"]


@pytest.mark.parametrize("second", ["int8", "transformer"])
def test_side_by_side_shows_the_attention_gap_on_the_first_models_output(
        explorer: Explorer, trained_run: Path, transformer_run: Path, tmp_path: Path, second: str) -> None:
    """The float32 RNN beside its int8 export (the same output, most likely) and beside the
    Transformer (another output: the page reads the RNN's with it, forced)."""
    if second == "int8":
        pytest.importorskip("onnxruntime")
        from heed.export.onnx import export_model

        other = Translator.load(export_model(trained_run, tmp_path / "int8", int8=True))
    else:
        other = Translator.load(transformer_run, device="cpu")
    own_server = _serve({"float32": Translator.load(trained_run, device="cpu"), second: other})
    try:
        ex = Explorer(explorer.page, own_server).open()
        request = {"sentences": [SENTENCE], "beam_size": 1, "n_best": 1}
        base = own_server.translate({"model": "float32", **request})["results"][0]["hypotheses"][0]
        own = own_server.translate({"model": second, **request})["results"][0]["hypotheses"][0]
        forced = own["tokens"] != base["tokens"]
        if forced:
            own = own_server.translate({"model": second, **request, "prefix": [base["tokens"]]})
            own = own["results"][0]["hypotheses"][0]
        rows = len(base["tokens"]) + 1
        theirs = np.asarray(own["attention"])[:rows]
        diff = np.abs(np.asarray(base["attention"]) - theirs)
        ex.translate(SENTENCE, beam_size=1, n_best=1)
        ex.act(lambda: ex.page.check("#compare-toggle"), requests=3 if forced else 2)
        gap = f'#compare-view .model-panel[data-model="{second}"] .gap'
        assert ex.page.get_attribute(gap, "data-against") == "float32"
        assert ex.page.get_attribute(gap, "data-forced") == str(forced).lower()
        assert float(ex.page.get_attribute(gap, "data-mean")) == pytest.approx(diff.mean(), abs=1e-6)
        assert float(ex.page.get_attribute(gap, "data-max")) == pytest.approx(diff.max(), abs=1e-6)
        moved = int((np.asarray(base["attention"]).argmax(1) != theirs.argmax(1)).sum())
        assert ex.page.get_attribute(gap, "data-moved") == str(moved)
        np.testing.assert_allclose(_zoom_weights(ex, f"{gap} .gap-map"), diff, atol=1e-6)
        assert ex.page.locator('#compare-view .model-panel[data-model="float32"] .gap').count() == 0
        assert not ex.unexpected_errors(), ex.errors
    finally:
        own_server.stop()


def test_screenshot_of_the_grid_and_the_attribution(explorer: Explorer, tmp_path: Path) -> None:
    model_dir = os.environ.get("HEED_SCREENSHOT_MODEL")
    ex, own = explorer, None
    if model_dir:
        own = _serve({"model": Translator.load(model_dir, device="cpu")})
        ex = Explorer(explorer.page, own).open()
    try:
        _take_screenshot(ex, bool(model_dir), tmp_path)
    finally:
        if own is not None:
            own.stop()


def _take_screenshot(ex: Explorer, own_model: bool, tmp_path: Path) -> None:
    model_dir = own_model
    _translate_and_wait_for_heads(ex, ex.page.eval_on_selector("#model", "s => s.options[0].value")
                                  if model_dir else "transformer", SENTENCE)
    ex.page.click('#heads-grid button[data-layer="0"][data-head="1"]')
    ex.page.click("#attribute")
    ex.page.wait_for_function("Number(document.body.dataset.attributions || 0) > 0")
    ex.page.hover('#heads-tokens [data-src-index="3"]')
    card = tmp_path / "heads.png"
    ex.page.locator("#heads-card").screenshot(path=str(card))
    assert card.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("HEED_SCREENSHOT") == "1":
        top, bottom = ex.page.evaluate("""[...["heads-card", "attribution-card"]].map(id => {
            const r = document.getElementById(id).getBoundingClientRect();
            return [r.top + window.scrollY, r.bottom + window.scrollY]; })""")
        clip = {"x": 0, "y": top[0] - 8, "width": VIEWPORT["width"], "height": bottom[1] - top[0] + 16}
        with tempfile.NamedTemporaryFile(dir=REPO / "docs", suffix=".tmp.png", delete=False) as f:
            ex.page.screenshot(path=f.name, clip=clip, full_page=True)
        os.chmod(f.name, 0o644)
        os.replace(f.name, REPO / "docs" / "explorer-inside.png")


def test_source_share_marks_are_the_apis_values(explorer: Explorer, server: Server) -> None:
    """Each output chip carries the ALTI+ source share the API gave its token, and the dashed chips
    are exactly those under 50%; the sentence's share is in the meta line."""
    data = _translate_and_wait_for_heads(explorer, "transformer", SENTENCE)
    best = data["results"][0]["hypotheses"][0]
    status, direct = server.post("v1/translate", {"model": "transformer", "sentences": [SENTENCE], "beam_size": 1,
                                                  "n_best": 1, "explain": ["source_share"]})
    assert status == 200
    expected = direct["results"][0]["hypotheses"][0]["source_share"]
    assert best["source_share"]["per_token"] == pytest.approx(expected["per_token"], abs=1e-9)
    chips = explorer.page.eval_on_selector_all("#output .tok", "bs => bs.map(b => [+b.dataset.sourceShare, "
                                               "b.classList.contains('from-prefix')])")
    assert [c[0] for c in chips] == pytest.approx(expected["per_token"], abs=1e-9)
    assert [c[1] for c in chips] == [v < 0.5 for v in expected["per_token"]]
    assert f"source share {100 * expected['sentence']:.1f}%" in explorer.page.inner_text("#output-meta")
    if any(c[1] for c in chips):
        assert "made mostly from the output so far" in explorer.page.inner_text("#output")


def test_the_reading_picker_draws_the_apis_word_alignment(explorer: Explorer, server: Server) -> None:
    """Picking ALTI+ (then rollout with shift-att) draws the links /v1/align gives for that reading:
    every line's weight is the API's, and the word links are its links. An RNN cannot pick them."""
    data = _translate_and_wait_for_heads(explorer, "transformer", SENTENCE)
    best = data["results"][0]["hypotheses"][0]
    for weights, method in (("alti", "argmax"), ("rollout", "shift")):
        explorer.page.select_option("#align-method", method) if weights == "rollout" else None
        explorer.page.select_option("#reading", weights)
        explorer.page.wait_for_function(f"document.body.dataset.alignmentReading === '{weights}:{method}'")
        # the dates model writes characters: the page reads it in characters, as heed align --tgt-units chars
        status, aligned = server.post("v1/align", {"model": "transformer", "sources": [SENTENCE],
                                                   "targets": [best["text"]], "weights": weights, "method": method,
                                                   "tgt_units": "chars"})
        assert status == 200
        result = aligned["results"][0]
        lines = explorer.page.eval_on_selector_all("#alignment line", "ls => ls.map(l => [+l.dataset.row, "
                                                   "+l.dataset.col, +l.dataset.weight])")
        expected = [(j, i, w) for j, row in enumerate(result["attention"]) for i, w in enumerate(row) if w >= 0.05]
        assert sorted((j, i) for j, i, _ in lines) == sorted((j, i) for j, i, _ in expected)
        got = {(j, i): w for j, i, w in lines}
        assert [got[(j, i)] for j, i, _ in expected] == pytest.approx([w for _, _, w in expected], abs=1e-6)
        shown = explorer.page.locator("#word-links .word-link").count()
        assert shown == len(result["links"]) > 0
        assert "ALTI+" in explorer.page.inner_text("#alignment-meta") or weights != "alti"
        assert "target characters" in explorer.page.inner_text("#alignment-meta")
        assert len(result["attention"]) == len(best["text"].replace(" ", ""))
    explorer.page.select_option("#align-method", "argmax")
    explorer.page.select_option("#reading", "tokens")
    explorer.page.wait_for_function("document.body.dataset.alignmentReading === 'tokens'")
    explorer.page.select_option("#model", "rnn")
    explorer.translate(SENTENCE, beam_size=1, n_best=1)
    disabled = explorer.page.eval_on_selector_all("#reading option", "os => os.map(o => [o.value, o.disabled])")
    assert dict(disabled) == {"tokens": False, "attention": False, "value_norm": True, "rollout": True, "alti": True}
    assert explorer.page.eval_on_selector("#output .tok", "b => b.dataset.sourceShare === undefined")
    assert explorer.errors == []
