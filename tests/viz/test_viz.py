"""Attention heatmaps, grids, length plots, saving, CJK fonts, and no global matplotlib state."""
from __future__ import annotations

import io
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch
from fontTools.ttLib import TTFont
from matplotlib import font_manager
from matplotlib.figure import Figure

from heed import viz
from heed.errors import HeedError

SRC = ["▁the", "▁cat", "▁sat", "▁", "</s>"]
TGT = ["▁le", "▁chat", "▁était", "▁assis", "</s>"]
KO_SRC = ["나는", "학교", "에", "갑니다", "."]  # "I go to school."
KO_TGT = ["I", "go", "to", "school", "."]


def diagonal(tgt_len: int, src_len: int) -> np.ndarray:
    """Rows sum to 1 with 0.8 on the (stretched) diagonal: (tgt_len, src_len)."""
    w = np.full((tgt_len, src_len), 0.2 / max(src_len - 1, 1))
    for j in range(tgt_len):
        w[j, min(src_len - 1, j * src_len // tgt_len)] = 0.8
    return w


def heatmap_axes(fig: Figure):
    return [ax for ax in fig.axes if ax.images]


def glyph_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if "missing from font" in str(w.message)]


def test_heatmap_returns_figure_with_tokens_as_tick_labels():
    fig = viz.attention_heatmap(SRC, TGT, diagonal(5, 5), title="en-fr")
    assert isinstance(fig, Figure)
    (ax,) = heatmap_axes(fig)
    # "▁" is shown as the visible-space sign "␣"; a bare "▁" piece stays visible too.
    assert [t.get_text() for t in ax.get_xticklabels()] == ["␣the", "␣cat", "␣sat", "␣", "</s>"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["␣le", "␣chat", "␣était", "␣assis", "</s>"]
    assert ax.xaxis.get_ticks_position() == "top"  # source along the top
    assert ax.get_title() == "en-fr"
    assert ax.images[0].norm.vmin == 0.0 and ax.images[0].norm.vmax == 1.0
    assert len(fig.axes) == 2  # the heatmap and its colorbar


def test_heatmap_accepts_torch_and_rejects_mismatched_shapes():
    fig = viz.attention_heatmap(SRC, TGT, torch.tensor(diagonal(5, 5), dtype=torch.bfloat16))
    assert heatmap_axes(fig)
    with pytest.raises(ValueError, match=r"expected \(tgt_len, src_len\) = \(5, 4\)"):
        viz.attention_heatmap(SRC[:4], TGT, diagonal(4, 5))


def test_heatmap_labels_cells_from_005_with_contrasting_text():
    weights = np.array([[1.0, 0.0, 0.0], [0.1, 0.04, 0.86], [0.3, 0.3, 0.4]])
    fig = viz.attention_heatmap(["a", "b", "c"], ["x", "y", "z"], weights)
    (ax,) = heatmap_axes(fig)
    assert sorted(t.get_text() for t in ax.texts) == [".10", ".30", ".30", ".40", ".86", "1.00"]  # not .04, 0
    cells = {t.get_text(): t for t in ax.texts}
    assert cells["1.00"].get_color() == "white"  # dark cell
    assert cells[".10"].get_color() == "black"  # light cell


def test_heatmap_on_a_large_grid_has_no_cell_labels():
    fig = viz.attention_heatmap([f"s{i}" for i in range(31)], [f"t{j}" for j in range(31)], diagonal(31, 31))
    assert len(heatmap_axes(fig)[0].texts) == 0


def test_heatmap_draws_on_a_given_axes():
    fig = Figure()
    ax = fig.add_subplot()
    assert viz.attention_heatmap(SRC, TGT, diagonal(5, 5), ax=ax) is fig
    assert ax.images


def test_grid_has_one_heatmap_axes_per_item_and_a_shared_colorbar():
    items = [(SRC, TGT, diagonal(5, 5)), (SRC[:3], TGT[:2], diagonal(2, 3)), (KO_SRC, KO_TGT, diagonal(5, 5))]
    fig = viz.attention_grid(items, cols=2, titles=["a", "b", "c"])
    axes = heatmap_axes(fig)
    assert len(axes) == 3  # the empty fourth cell of the 2 x 2 grid is removed
    assert len(fig.axes) == 4  # + one colorbar
    assert [ax.get_title() for ax in axes] == ["a", "b", "c"]
    with pytest.raises(ValueError, match="2 titles for 3 items"):
        viz.attention_grid(items, titles=["a", "b"])


def test_length_plot_has_a_line_per_model_over_buckets_in_order():
    table = {
        "bahdanau": [("1-10", 30.0), ("11-20", 25.0), ("21+", 18.0)],
        "luong": [("1-10", 31.0), ("21+", 20.0)],  # no score for 11-20: a gap
    }
    fig = viz.length_plot(table, metric="chrF")
    (ax,) = fig.axes
    assert [line.get_label() for line in ax.lines] == ["bahdanau", "luong"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1-10", "11-20", "21+"]
    assert np.isnan(ax.lines[1].get_ydata()[1])
    assert ax.get_ylabel() == "chrF"


def test_length_plot_names_the_length_unit_and_starts_at_zero():
    fig = viz.length_plot({"m": [("1-10", 30.0), ("11+", 20.0)]}, unit="words")
    (ax,) = fig.axes
    assert ax.get_xlabel() == "source length (words)"
    assert ax.get_ylim()[0] == 0.0  # a 10-point gap looks like one


def test_figure_format_checks_the_suffix_before_any_drawing():
    assert [viz.figure_format(f"a{s}") for s in (".png", ".SVG", ".pdf")] == ["png", "svg", "pdf"]
    with pytest.raises(HeedError, match=r"a\.gif: cannot save a figure as '\.gif'"):
        viz.figure_format("a.gif")


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".svg", b"<svg"), (".pdf", b"%PDF")])
def test_save_figure_writes_the_format_of_the_suffix(tmp_path, suffix, magic):
    path = viz.save_figure(viz.attention_heatmap(SRC, TGT, diagonal(5, 5)), tmp_path / f"att{suffix}")
    assert magic in path.read_bytes()[:400]
    assert [p.name for p in tmp_path.iterdir()] == [f"att{suffix}"]  # no temp file left


def test_save_figure_rejects_other_suffixes(tmp_path):
    fig = viz.attention_heatmap(SRC, TGT, diagonal(5, 5))
    for name in ["att.jpg", "att"]:
        with pytest.raises(HeedError, match=r"use \.png, \.svg or \.pdf"):
            viz.save_figure(fig, tmp_path / name)
    assert list(tmp_path.iterdir()) == []


def test_save_figure_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "att.png"
    path.write_bytes(b"old")
    fig = viz.attention_heatmap(SRC, TGT, diagonal(5, 5))

    def broken_savefig(f, **kwargs):
        f.write(b"half a png")
        raise RuntimeError("disk full")

    fig.savefig = broken_savefig
    with pytest.raises(RuntimeError, match="disk full"):
        viz.save_figure(fig, path)
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["att.png"]


def test_cjk_font_is_chosen_by_glyph_coverage_not_by_name(monkeypatch):
    # DejaVu Sans is installed everywhere and has no Hangul: even ranked first, it is skipped.
    monkeypatch.setattr(viz, "PREFERRED_CJK_FONTS", ("DejaVu Sans", *viz.PREFERRED_CJK_FONTS))
    viz.cjk_font.cache_clear()
    try:
        assert viz.cjk_font() != "DejaVu Sans"
    finally:
        viz.cjk_font.cache_clear()


def test_korean_heatmap_renders_hangul_glyphs():
    # An installed CJK font, else heed's bundled one: fails if the font heed picks lacks the
    # glyphs, since Korean tokens would then be drawn as empty boxes.
    font = viz.cjk_font()
    assert font is not None, "no font with Hangul, Kana and CJK ideographs is installed"
    path = font_manager.findfont(font_manager.FontProperties(family=font), fallback_to_default=False)
    face = getattr(path, "face_index", 0)
    with TTFont(str(path), fontNumber=face, lazy=True) as ttf:
        cmap = ttf.getBestCmap()
    hangul = sorted({c for token in KO_SRC for c in token if "\uac00" <= c <= "\ud7a3"})
    assert hangul and all(ord(c) in cmap for c in hangul), f"{font} ({path}) lacks some of {hangul}"
    # matplotlib's own renderer finds a real glyph (index 0 is .notdef, the empty box).
    ft = font_manager.get_font(str(path)) if face == 0 else font_manager.get_font(path)
    assert all(ft.get_char_index(ord(c)) != 0 for c in hangul)

    fig = viz.attention_heatmap(KO_SRC, KO_TGT, diagonal(5, 5), title="한국어 → English")
    (ax,) = heatmap_axes(fig)
    assert ax.get_xticklabels()[0].get_fontfamily()[0] == font  # set on the artist, not rcParams
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.savefig(io.BytesIO(), format="png")  # plain savefig: save_figure would hide them
    assert glyph_warnings(caught) == []


def test_bundled_font_draws_hangul_where_no_cjk_font_is_installed(tmp_path):
    # A fresh process that sees no system font with CJK glyphs falls back to heed's own subset.
    script = f"""
import warnings, io
from matplotlib import font_manager
from heed import viz
probe = frozenset(ord(c) for c in viz.CJK_PROBES)
font_manager.fontManager.ttflist = [e for e in font_manager.fontManager.ttflist
                                    if not probe <= viz._codepoints(e.fname)]
font_manager.findSystemFonts = lambda *a, **k: []
assert viz.cjk_font() == viz.BUNDLED_CJK_FAMILY, viz.cjk_font()
fig = viz.attention_heatmap({KO_SRC!r}, {KO_TGT!r}, [[1.0 / {len(KO_SRC)}] * {len(KO_SRC)}] * {len(KO_TGT)})
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    fig.savefig(io.BytesIO(), format="png")
bad = [str(w.message) for w in caught if "missing from font" in str(w.message) or w.category is viz.MissingFontWarning]
assert not bad, bad
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_without_a_cjk_font_heed_warns_once_with_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(viz, "cjk_font", lambda: None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig = viz.attention_heatmap(KO_SRC, KO_TGT, diagonal(5, 5))
        viz.save_figure(fig, tmp_path / "ko.png")
    ours = [w for w in caught if issubclass(w.category, viz.MissingFontWarning)]
    assert len(ours) == 1 and "apt-get install fonts-noto-cjk" in str(ours[0].message)
    assert ours[0].filename == __file__  # points at the caller
    assert glyph_warnings(caught) == []  # no per-glyph spam from matplotlib


def test_latin_only_text_needs_no_cjk_font(monkeypatch):
    monkeypatch.setattr(viz, "cjk_font", lambda: None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        viz.attention_heatmap(SRC, TGT, diagonal(5, 5))


def test_viz_changes_no_global_matplotlib_state(tmp_path):
    # A fresh interpreter, so the import itself is covered. dict.items reads rcParams without
    # resolving the backend (which would import pyplot).
    script = textwrap.dedent(
        f"""
        import sys, numpy as np, matplotlib
        snapshot = lambda: dict(dict.items(matplotlib.rcParams))
        before = snapshot()
        from heed import viz
        w = np.full((3, 3), 1 / 3)
        viz.save_figure(viz.attention_heatmap(["a", "b", "c"], ["나", "는", "."], w, title="t"),
                        {str(tmp_path / "h.png")!r})
        viz.save_figure(viz.attention_grid([(["a"], ["b"], [[1.0]])] * 2), {str(tmp_path / "g.svg")!r})
        viz.save_figure(viz.length_plot({{"m": [("1-10", 1.0)]}}), {str(tmp_path / "l.pdf")!r})
        after = snapshot()
        changed = sorted(k for k in before if before[k] != after[k])
        assert not changed, changed
        assert "matplotlib.pyplot" not in sys.modules
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_a_grid_of_a_short_and_a_long_sentence_is_readable_with_square_cells():
    """The demo's figure: a 16-token and a 37-token source were drawn side by side, 4620 px wide, the
    short one stretched to the long one's width."""
    import numpy as np

    from heed.viz import PNG_DPI, attention_grid

    short = (list("2019년 3월 19일 (화)"), list("2019-03-19"), np.full((10, 16), 1 / 16))
    long = (list("the fourth of April, twenty forty-one"), list("2041-04-04"), np.full((10, 37), 1 / 37))
    fig = attention_grid([short, long], titles=["short", "long"])
    width, height = fig.get_size_inches() * PNG_DPI
    assert width <= 2600 and height <= 2600, (width, height)
    fig.canvas.draw()
    for ax, cols in zip(fig.axes[:2], (16, 37)):
        box = ax.get_window_extent()
        cell_w, cell_h = box.width / cols, box.height / 10
        assert abs(cell_w - cell_h) / cell_h < 0.02, (cell_w, cell_h)  # square cells


def test_head_grid_draws_a_panel_per_layer_and_head_on_one_scale():
    from heed.viz import MAX_GRID_TOKENS, head_grid

    rng = np.random.default_rng(0)
    src, tgt = ["▁le", "▁chat", "</s>"], ["▁the", "▁cat", ".", "</s>"]
    cross = rng.dirichlet(np.ones(len(src)), size=(3, 2, len(tgt)))  # (layers, heads, tgt, src)
    fig = head_grid(src, tgt, cross[1:], layers=[1, 2], title="le chat")
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 2 * 2 and len(fig.axes) == 2 * 2 + 1  # + the colorbar
    np.testing.assert_allclose(panels[3].images[0].get_array(), cross[2, 1])  # row-major: layer 2, head 1
    assert panels[0].get_ylabel() == "layer 1" and panels[0].get_title() == "head 0"
    assert [t.get_text() for t in panels[0].get_xticklabels()] == ["␣le", "␣chat", "</s>"]
    assert not panels[3].get_xticklabels() and not panels[3].get_yticklabels()  # labels on the edges only
    with pytest.raises(ValueError, match=r"cross must be \(layers, heads, 4, 3\)"):
        head_grid(src, tgt, cross[:, :, :2])
    with pytest.raises(HeedError, match="a grid of every head"):
        long = ["x"] * (MAX_GRID_TOKENS + 1)
        head_grid(long, tgt, np.zeros((1, 1, len(tgt), len(long))))
