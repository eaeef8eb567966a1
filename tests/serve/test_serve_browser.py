"""The attention explorer (`heed serve`'s page at /) in a real headless Chromium, against the real
server on a free port: what the page shows is checked against what POST /v1/translate returns for
the same request. Any console error or uncaught exception on the page fails the test.

Needs Chromium (`apt-get install chromium`), playwright, fastapi and uvicorn (`pip install
'heed-nmt[dev,serve]'`); skipped, with the reason, without them.

The screenshot test writes docs/explorer.png only with HEED_SCREENSHOT=1 (so a test run never
changes the checkout); HEED_SCREENSHOT_MODEL=DIR takes it with that model instead of the tiny one:
    HEED_SCREENSHOT=1 HEED_SCREENSHOT_MODEL=runs/demo/model pytest tests/serve/test_serve_browser.py -k screenshot
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import struct
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


def _chromium() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    return found or ("/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None)


def _missing() -> str | None:
    for module in ("playwright", "fastapi", "uvicorn"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install 'heed-nmt[dev,serve]')"
    return None if _chromium() else "no Chromium to drive (apt-get install chromium)"


if _missing():
    pytest.skip(_missing(), allow_module_level=True)

import itertools

import uvicorn
from playwright.sync_api import ConsoleMessage, Page, sync_playwright

from heed.api import Translator
from heed.serve.app import ServeSettings, create_app, last_metrics

REPO = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]
VIEWPORT = {"width": 1280, "height": 900}
SENTENCE = "le 3 mars 1998"


# ------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def plain_run(tiny_config: Callable[..., dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny dates model without attention, for the side-by-side view (the tiny luong model is
    conftest's trained_run)."""
    from heed.config import config_from_dict
    from heed.train import train

    config = tiny_config(tmp_path_factory.mktemp("plain") / "out")
    config["model"] = {**config["model"], "decoder": "plain"}
    train(config_from_dict(config))
    return Path(config["output_dir"])


class Server:
    """A uvicorn server on a free port of 127.0.0.1, in a background thread."""

    def __init__(self, app: Any) -> None:
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, name="explorer-server", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]  # port 0: the one the OS gave
        self.url = f"http://127.0.0.1:{port}/"

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)

    def translate(self, body: dict[str, Any]) -> dict[str, Any]:
        status, data = self.post("v1/translate", body)
        assert status == 200, data
        return data

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def _serve(translators: dict[str, Translator], metrics: dict[str, Any] | None = None) -> Server:
    return Server(create_app(translators, ServeSettings(timeout=60.0), metrics=metrics))


@pytest.fixture(scope="module")
def server(trained_run: Path, plain_run: Path) -> Iterator[Server]:
    """The tiny luong model as "tiny" (first: the page's default) and the plain one as "plain"."""
    translators = {"tiny": Translator.load(trained_run, device="cpu"),
                   "plain": Translator.load(plain_run, device="cpu")}
    running = _serve(translators, {"tiny": last_metrics(trained_run / "model")})
    yield running
    running.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium, with only the machine's fonts: CJK text must render through the font the
    server itself serves (/fonts/heed-cjk.ttf) where the machine has no CJK font."""
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


class Explorer:
    """One page of the explorer, with the page's console errors collected and helpers to act."""

    def __init__(self, page: Page, server: Server) -> None:
        self.page, self.server = page, server
        self.errors: list[str] = []
        self.allowed: list[str] = []  # substrings of console errors a test expects
        page.on("console", self._console)
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))

    def _console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "assert"):
            self.errors.append(f"console.{message.type}: {message.text}")

    def open(self) -> Explorer:
        self.page.goto(self.server.url)
        self.page.wait_for_selector("#model option", state="attached")
        return self

    def renders(self) -> int:
        return int(self.page.evaluate("Number(document.body.dataset.renders || 0)"))

    def act(self, action: Callable[[], None], requests: int = 1,
            at_least: bool = False) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """Do `action`, which makes the page call v1/translate `requests` times (`at_least`: or more,
        as side by side asks again where a model's output differs); wait until the page has drawn
        the answers; return each (request body, response body)."""
        before = self.renders()
        seen: list[Any] = []

        def listener(response: Any) -> None:
            if response.url.endswith("/v1/translate"):
                seen.append(response)

        self.page.on("response", listener)
        try:
            action()
            self.page.wait_for_function(f"Number(document.body.dataset.renders || 0) > {before}", timeout=30_000)
            deadline = time.monotonic() + 10
            while len(seen) < requests and time.monotonic() < deadline:
                self.page.wait_for_timeout(20)
        finally:
            self.page.remove_listener("response", listener)
        assert len(seen) >= requests if at_least else len(seen) == requests, \
            f"expected {requests} translate calls, saw {len(seen)}"
        return [(r.request.post_data_json, r.json()) for r in seen]

    def translate(self, sentence: str, **fields: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """Fill the form (fields by input id) and press Enter in the sentence box."""
        for name, value in fields.items():
            self.page.fill(f"#{name}", str(value))
        self.page.fill("#sentence", sentence)
        ((body, data),) = self.act(lambda: self.page.press("#sentence", "Enter"))
        return body, data

    def attrs(self, selector: str, name: str) -> list[str | None]:
        return self.page.eval_on_selector_all(selector, f"nodes => nodes.map(n => n.getAttribute({name!r}))")

    def texts(self, selector: str) -> list[str]:
        return self.page.eval_on_selector_all(selector, "nodes => nodes.map(n => n.textContent)")

    def unexpected_errors(self) -> list[str]:
        return [e for e in self.errors if not any(a in e for a in self.allowed)]


@pytest.fixture
def explorer(browser: Any, server: Server) -> Iterator[Explorer]:
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(20_000)
    ex = Explorer(page, server).open()
    yield ex
    errors = ex.unexpected_errors()
    context.close()
    assert not errors, f"the page logged errors: {errors}"


def _best(data: dict[str, Any]) -> dict[str, Any]:
    return data["results"][0]["hypotheses"][0]


# --------------------------------------------------------------------------------- tests


def test_translating_shows_what_the_api_returns(explorer: Explorer, server: Server) -> None:
    body, data = explorer.translate(SENTENCE)
    # the page asks for everything it draws, with its own search defaults for a greedy model
    assert body["model"] == "tiny" and body["sentences"] == [SENTENCE]
    assert body["trace"] is True and body["alternatives"] == 5
    assert (body["beam_size"], body["n_best"], body["sampling"]) == (5, 3, False)
    assert "prefix" not in body
    assert server.translate(body) == data  # the same request gives the same answer (no sampling)

    best, result = _best(data), data["results"][0]
    assert explorer.page.text_content("#output .output-text") == best["text"]
    assert explorer.texts("#output [data-token-index]") == best["tokens"] + ["</s>"]
    # every cell carries the API's exact weight, row by row
    rows, cols = len(best["tokens"]) + 1, len(result["src_tokens"]) + 1
    cells = explorer.page.eval_on_selector_all(
        "#heatmap [data-row]", "cs => cs.map(c => [+c.dataset.row, +c.dataset.col, +c.dataset.weight])")
    assert len(cells) == rows * cols
    for j, i, w in cells:
        assert w == best["attention"][j][i]
    assert explorer.texts("#heatmap [data-out-index]") == best["tokens"] + ["</s>"]
    assert explorer.texts("#heatmap [data-src-index] text") == result["src_tokens"] + ["</s>"]
    # the alignment view draws a line per weight of at least 0.05, as wide as the weight
    lines = explorer.attrs("#alignment line", "data-weight")
    assert len(lines) == sum(w >= 0.05 for row in best["attention"] for w in row) > 0


def test_hovering_an_output_token_highlights_its_attention_row(explorer: Explorer) -> None:
    _, data = explorer.translate(SENTENCE)
    best = _best(data)
    assert explorer.attrs("[data-src-index]", "data-highlight") == [None] * (len(best["attention"][0]))
    for j in sorted({0, len(best["tokens"]) // 2, len(best["tokens"])}):  # first, middle, </s>
        explorer.page.hover(f'#heatmap [data-out-index="{j}"]')
        highlighted = explorer.attrs("#heatmap [data-src-index]", "data-highlight")
        assert all(h is not None for h in highlighted)
        assert [float(h) for h in highlighted] == pytest.approx(best["attention"][j], abs=1e-6)
        assert explorer.page.get_attribute(f'#heatmap [data-out-index="{j}"]', "class").split().count("hl") == 1
        assert explorer.page.get_attribute("#heatmap .row-outline", "visibility") == "visible"
    # a cell's tooltip gives its weight to 3 decimals
    j, i = len(best["tokens"]) // 2, 1
    explorer.page.hover(f'#heatmap [data-row="{j}"][data-col="{i}"]')
    assert explorer.page.is_visible("#tooltip")
    assert explorer.page.text_content("#tooltip .tip-head") == f"{best['attention'][j][i]:.3f}"
    # leaving the heatmap clears the highlight
    explorer.page.hover("#nbest")
    assert set(explorer.attrs("#heatmap [data-src-index]", "data-highlight")) == {None}
    assert explorer.page.is_hidden("#tooltip")


def test_nbest_list_and_beam_tree(explorer: Explorer, server: Server) -> None:
    body, data = explorer.translate(SENTENCE, beam_size=4, n_best=3)
    assert (body["beam_size"], body["n_best"]) == (4, 3)
    result = data["results"][0]
    assert explorer.texts("#nbest li .nbest-text") == [h["text"] or "(empty)" for h in result["hypotheses"]]
    assert len(result["hypotheses"]) == 3

    nodes = result["beam"]["nodes"]
    drawn = explorer.page.eval_on_selector_all(
        "svg#beam-tree [data-node-id]", "ns => ns.map(n => [+n.dataset.nodeId, n.dataset.status, n.dataset.token])")
    assert sorted(drawn) == sorted([n["id"], n["status"], n["token"]] for n in nodes)
    statuses = {status for _, status, _ in drawn}
    assert {"root", "kept", "finished"} <= statuses
    # the best path: the best hypothesis' node and its ancestors, root to end
    by_id = {n["id"]: n for n in nodes}
    path, node = set(), by_id[_best(data)["node"]]
    while node is not None:
        path.add(node["id"])
        node = by_id.get(node["parent"]) if node["parent"] is not None else None
    highlighted = {int(i) for i in explorer.attrs("svg#beam-tree .node.best", "data-node-id")}
    assert highlighted == path and len(path) == len(_best(data)["tokens"]) + 2  # <s>, tokens, </s>

    # picking another hypothesis shows its attention and marks its path too
    explorer.page.click("#nbest li:nth-child(2)")
    second = result["hypotheses"][1]
    assert explorer.page.get_attribute("#nbest li:nth-child(2)", "aria-current") == "true"
    weights = explorer.page.eval_on_selector_all("#heatmap [data-row]", "cs => cs.map(c => +c.dataset.weight)")
    assert weights == [w for row in second["attention"] for w in row]
    assert explorer.page.locator("svg#beam-tree .node.picked").count() > 0
    # ... and the Translation card shows that hypothesis, its text and its score, not #1's
    assert explorer.page.text_content("#output .output-text") == second["text"]
    assert f"score {second['score']:.4f}" in explorer.page.text_content("#output-meta")
    assert "n-best #2" in explorer.page.text_content("#output-title")
    assert explorer.texts("#output .tok") == [*second["tokens"], "</s>"]
    assert "selected hypothesis" in explorer.page.text_content(".legend")  # the colour of the picked path
    explorer.page.click("#nbest li:nth-child(1)")
    assert explorer.page.text_content("#output .output-text") == _best(data)["text"]

    # greedy search keeps no tree: the page says so
    _, data = explorer.translate(SENTENCE, beam_size=1, n_best=1)
    assert data["results"][0]["beam"] is None
    assert explorer.page.locator("svg#beam-tree").count() == 0
    assert "beam size > 1" in explorer.page.text_content("#beam")
    assert explorer.page.locator("#nbest li").count() == 1


def test_forcing_another_token_translates_again_from_that_prefix(explorer: Explorer, server: Server) -> None:
    _, data = explorer.translate(SENTENCE)
    original = _best(data)["tokens"]
    j = min(2, len(original))  # a position inside the output (or its </s> for an empty one)
    explorer.page.click(f'#output [data-token-index="{j}"]')
    offered = explorer.attrs("#alternatives [data-alt-token]", "data-alt-token")
    assert offered == [a["token"] for a in data["results"][0]["steps"][j]]
    choice = explorer.page.locator("#alternatives [data-alt-token]:not([disabled])").first
    token = choice.get_attribute("data-alt-token")
    assert token != (original[j] if j < len(original) else "</s>")

    ((body, forced),) = explorer.act(choice.click)
    prefix = original[:j] + [token]
    assert body["prefix"] == [prefix]
    assert server.translate(body) == forced
    tokens = _best(forced)["tokens"]
    assert tokens[: j + 1] == prefix and tokens[j:] != original[j:]
    assert explorer.page.text_content("#output .output-text") == _best(forced)["text"]
    # the forced prefix is marked, in the tokens and in the heatmap's rows
    assert explorer.texts("#output .tok.forced") == prefix
    assert [int(i) for i in explorer.attrs("#heatmap .out-label.forced", "data-out-index")] == list(range(j + 1))
    assert explorer.page.is_visible("#prefix-note")

    # clearing the prefix gives the first translation back
    ((body, cleared),) = explorer.act(lambda: explorer.page.click("#clear-prefix"))
    assert "prefix" not in body and _best(cleared)["tokens"] == original
    assert explorer.page.locator("#output .tok.forced").count() == 0


def test_side_by_side_translates_with_every_model(explorer: Explorer, server: Server) -> None:
    explorer.translate(SENTENCE)
    calls = explorer.act(lambda: explorer.page.check("#compare-toggle"), requests=2)
    assert sorted(body["model"] for body, _ in calls) == ["plain", "tiny"]
    assert explorer.page.is_hidden("#single-view")
    panels = explorer.page.locator("#compare-view .model-panel")
    assert panels.count() == 2
    assert explorer.attrs("#compare-view .model-panel", "data-model") == ["tiny", "plain"]
    for body, data in calls:
        panel = f'#compare-view .model-panel[data-model="{body["model"]}"]'
        best = _best(data)
        assert server.translate(body) == data
        assert explorer.page.text_content(f"{panel} .output-text") == best["text"]
        cells = explorer.page.locator(f"{panel} [data-row]").count()
        if body["model"] == "tiny":
            assert cells == (len(best["tokens"]) + 1) * (len(data["results"][0]["src_tokens"]) + 1)
        else:  # no attention: a note instead of a heatmap
            assert best["attention"] is None and cells == 0
            assert "no attention" in explorer.page.text_content(f"{panel} .no-attention")
    # the two heatmaps sit side by side
    boxes = [panels.nth(k).bounding_box() for k in range(2)]
    assert boxes[0]["y"] == boxes[1]["y"] and boxes[0]["x"] + boxes[0]["width"] <= boxes[1]["x"]

    # back to one model
    explorer.act(lambda: explorer.page.uncheck("#compare-toggle"))
    assert explorer.page.is_visible("#single-view") and explorer.page.is_hidden("#compare-view")


def test_a_model_without_attention_shows_notes_not_a_heatmap(explorer: Explorer) -> None:
    explorer.page.select_option("#model", "plain")
    body, data = explorer.translate(SENTENCE)
    assert body["model"] == "plain" and _best(data)["attention"] is None
    assert explorer.page.text_content("#output .output-text") == _best(data)["text"]
    assert explorer.page.locator("#heatmap [data-row]").count() == 0
    assert "no attention" in explorer.page.text_content("#heatmap")
    assert explorer.page.locator("svg#beam-tree [data-node-id]").count() == len(data["results"][0]["beam"]["nodes"])


def test_api_errors_are_shown_on_the_page(explorer: Explorer, server: Server) -> None:
    explorer.allowed.append("status of 422")  # the browser logs the failed request itself
    explorer.translate(SENTENCE)
    explorer.page.fill("#beam_size", "2")
    explorer.page.fill("#n_best", "4")
    before = explorer.renders()
    with explorer.page.expect_response("**/v1/translate") as answer:
        explorer.page.press("#sentence", "Enter")
    explorer.page.wait_for_function(f"Number(document.body.dataset.renders) > {before}")
    status, error = server.post("v1/translate", answer.value.request.post_data_json)
    assert status == answer.value.status == 422
    assert explorer.page.is_visible("#error")
    shown = explorer.page.text_content("#error")
    assert error["error"]["message"] in shown and "n_best" in shown
    # the earlier translation is gone: left under the message, it read as the failed request's answer
    assert not explorer.page.is_visible("#single-view")
    explorer.page.fill("#n_best", "1")
    explorer.translate(SENTENCE)
    assert explorer.page.is_visible("#single-view") and not explorer.page.is_visible("#error")


def test_korean_renders_with_a_cjk_font(explorer: Explorer) -> None:
    explorer.translate("1998년 3월 3일")
    assert "년" in explorer.texts("[data-src-index]")
    explorer.page.evaluate("document.fonts.ready")
    # The page's CJK face: the system's CJK font, or else heed's own from /fonts/heed-cjk.ttf (this
    # machine may have none), loaded for the Hangul on the page.
    loaded = explorer.page.evaluate(
        "[...document.fonts].filter(f => f.family.includes('Heed CJK Sans')).map(f => f.status)")
    assert loaded == ["loaded"]


def test_a_60_token_source_stays_readable(explorer: Explorer) -> None:
    sentence = "le 3 mars 1998, le 4 mai 2001, le 5 juin 1950, le 6 juil 199"  # 60 characters
    assert len(sentence) == 60
    _, data = explorer.translate(sentence)
    assert len(data["results"][0]["src_tokens"]) == 60
    cells = explorer.page.locator("#heatmap [data-row]")
    width = float(cells.first.get_attribute("width")) + 1
    assert 14 <= width <= 28  # shrunk, but not below readable
    # the labels do not run into each other: upright ones fit their column (one character each
    # here), rotated ones (wider tokens, </s>) are turned
    labels = explorer.page.eval_on_selector_all("#heatmap [data-src-index]", """gs => gs.map(g => {
        const r = g.querySelector("text").getBoundingClientRect();
        return [g.getAttribute("transform").includes("rotate"), r.left, r.right,
                parseFloat(getComputedStyle(g.querySelector("text")).fontSize)]; })""")
    assert len(labels) == 61 and all(size >= 10 for *_, size in labels)
    upright = [(left, right) for rotated, left, right, _ in labels if not rotated]
    assert len(upright) >= 60
    assert all(a[1] <= b[0] + 0.5 for a, b in itertools.pairwise(upright))
    # the panel scrolls, the page does not
    assert explorer.page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    # the alignment spans its card: every source token in view (no scrolling), upright labels apart
    fits = explorer.page.evaluate("""(() => { const b = document.getElementById("alignment");
        return b.scrollWidth <= b.clientWidth + 1; })()""")
    assert fits
    spots = explorer.page.eval_on_selector_all(".alignment-svg .align-token.src", """ts => ts.map(t => {
        const r = t.getBoundingClientRect(); return [t.hasAttribute("transform"), r.left, r.right]; })""")
    assert len(spots) == 61
    box = explorer.page.eval_on_selector("#alignment", "b => { const r = b.getBoundingClientRect(); "
                                         "return [r.left, r.right]; }")
    assert all(box[0] - 1 <= left and right <= box[1] + 1 for turned, left, right in spots if not turned)
    upright = [(left, right) for turned, left, right in spots if not turned]
    assert len(upright) >= 45 and all(a[1] <= b[0] + 0.5 for a, b in itertools.pairwise(upright))


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_screenshot(browser: Any, server: Server, tmp_path: Path) -> None:
    """The explorer on a dates sentence: heatmap, n-best and beam tree. Writes docs/explorer.png
    only with HEED_SCREENSHOT=1; HEED_SCREENSHOT_MODEL=DIR takes it with that model (the demo)."""
    model_dir = os.environ.get("HEED_SCREENSHOT_MODEL")
    own = None
    if model_dir:
        own = _serve({"dates": Translator.load(model_dir, device="cpu")}, {"dates": last_metrics(Path(model_dir))})
    context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
    try:
        ex = Explorer(context.new_page(), own or server).open()
        _, data = ex.translate("1998년 3월 3일" if own else SENTENCE, beam_size=3, n_best=3)
        row = min(5, len(_best(data)["tokens"]))  # a month digit of a date
        ex.page.click(f'#output [data-token-index="{row}"]')  # "what if" open there
        ex.page.wait_for_selector("#alternatives [data-alt-token]")
        ex.page.hover(f'#heatmap [data-out-index="{row}"]')  # its attention highlighted
        ex.page.evaluate("document.fonts.ready")  # the CJK fallback font, fetched for the Hangul, in place
        ex.page.wait_for_timeout(200)
        target = tmp_path / "explorer.png"
        ex.page.screenshot(path=str(target), full_page=True)
        assert not ex.unexpected_errors(), ex.errors
    finally:
        context.close()
        if own:
            own.stop()
    width, height = _png_size(target)
    assert width == VIEWPORT["width"] and height >= 700
    assert data["results"][0]["beam"] is not None
    if os.environ.get("HEED_SCREENSHOT") == "1":
        docs = REPO / "docs"
        with tempfile.NamedTemporaryFile(dir=docs, suffix=".png.tmp", delete=False) as f:
            f.write(target.read_bytes())
        os.chmod(f.name, 0o644)  # a temporary file is private; the committed one is not
        os.replace(f.name, docs / "explorer.png")
