"""Attention heatmaps and evaluation plots, with the matplotlib object API only.

Every function builds its own `Figure` on an Agg canvas and returns it: nothing here imports
pyplot, calls `matplotlib.use` or writes `rcParams` (DESIGN rule 10), so heed's plots never
change a user's plots. Fonts are chosen per text artist: tokens, titles and labels get the
family list `[<CJK font>, "DejaVu Sans"]`, so Korean, Japanese and Chinese tokens render as
glyphs when any installed font covers them (matplotlib falls back glyph by glyph through the
list). When none does, heed says once how to install one instead of matplotlib warning per glyph.

    fig = attention_heatmap(src_tokens, out_tokens, hyp.attention)  # (tgt_len, src_len)
    save_figure(fig, "attention.png")
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import unicodedata
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import font_manager
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import Normalize
from matplotlib.figure import Figure, FigureBase

from heed.errors import HeedError
from heed.explain.align import weight_matrix
from heed.plumbing.files import atomic_open

__all__ = [
    "MAX_HEATMAP_TOKENS",
    "MissingFontWarning",
    "attention_grid",
    "attention_heatmap",
    "cjk_font",
    "figure_format",
    "head_grid",
    "length_plot",
    "save_figure",
]

CMAP = "Blues"  # sequential, white at 0: the few strong links stand out on a quiet background
BASE_FONT = "DejaVu Sans"  # ships with matplotlib, so it is always there
MAX_LABELLED = 30  # cells get their weight printed up to 30 x 30
# Past 200 tokens a side the labels shrink below legibility and a figure costs seconds to draw;
# such a heatmap is refused, not drawn.
MAX_HEATMAP_TOKENS = 200
MIN_LABELLED = 0.05  # weights below this stay unlabelled: they are visual noise
SAVE_FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
PNG_DPI = 150

# Preferred fonts covering Hangul, Kana and CJK ideographs, best first: Linux packages
# (fonts-noto-cjk, fonts-nanum, fonts-wqy-*, fonts-droid-fallback), then macOS and Windows.
PREFERRED_CJK_FONTS = (
    "Noto Sans CJK KR", "Noto Sans CJK JP", "Noto Sans CJK SC", "Noto Sans CJK TC",
    "Noto Sans CJK HK", "Source Han Sans K", "Source Han Sans KR", "Source Han Sans",
    "Noto Sans KR", "Noto Sans JP", "Noto Sans SC", "Noto Sans TC",
    "NanumGothic", "NanumBarunGothic", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei",
    "Droid Sans Fallback", "Apple SD Gothic Neo", "AppleGothic", "Hiragino Sans",
    "Malgun Gothic", "Yu Gothic", "Microsoft YaHei", "Arial Unicode MS",
)
BUNDLED_CJK_FONT = Path(__file__).parent / "fonts" / "HeedCJKSans-Regular.ttf"
BUNDLED_CJK_FAMILY = "Heed CJK Sans"
# One probe character per script: 한 (Hangul), あ (Hiragana), 中 (CJK ideograph).
CJK_PROBES = "\ud55c\u3042\u4e2d"

INSTALL_HINT = (
    "no installed font has glyphs for the Korean/Japanese/Chinese characters in this figure, "
    "so they show as empty boxes. Install a CJK font, then start Python again: "
    "Debian/Ubuntu `apt-get install fonts-noto-cjk` (or the smaller `fonts-wqy-microhei`), "
    "Fedora `dnf install google-noto-sans-cjk-fonts`, macOS has Apple SD Gothic Neo and "
    "Windows has Malgun Gothic built in. If matplotlib still does not see it, delete "
    "matplotlib's font cache (the fontlist-*.json in `matplotlib.get_cachedir()`)."
)


class MissingFontWarning(UserWarning):
    """Some text in a heed figure has characters no installed font can draw."""


# ---------------------------------------------------------------- fonts


@functools.cache
def _codepoints(path: str, face_index: int = 0) -> frozenset[int]:
    """The code points a font file maps to glyphs (its cmap), read with fontTools."""
    from fontTools.ttLib import TTFont  # a matplotlib dependency; only needed here

    try:
        with TTFont(path, fontNumber=face_index, lazy=True) as font:
            return frozenset(font.getBestCmap() or ())
    except Exception:  # noqa: BLE001  # an unreadable or exotic font file covers nothing, it is not an error
        return frozenset()


def _family_codepoints(family: str) -> frozenset[int]:
    """The cmap of the file matplotlib actually renders `family` with (regular weight)."""
    try:
        path = font_manager.findfont(font_manager.FontProperties(family=family), fallback_to_default=False)
    except ValueError:
        return frozenset()
    # matplotlib >= 3.10 returns a FontPath carrying the face index of a .ttc collection.
    return _codepoints(str(path), getattr(path, "face_index", 0))


def _covers(family: str, chars: str) -> bool:
    cmap = _family_codepoints(family)
    return all(ord(c) in cmap for c in chars)


def _is_regular(entry: font_manager.FontEntry) -> bool:
    return entry.style == "normal" and entry.weight in (400, "normal", "regular", "book")


@functools.cache
def cjk_font() -> str | None:
    """Family name of an installed font with glyphs for Hangul, Kana and CJK ideographs, or None.

    Preferred fonts (`PREFERRED_CJK_FONTS`) come first, then any other font matplotlib knows.
    Coverage is checked in the font file's cmap, not guessed from the name: Debian's
    "Droid Sans Fallback" (DroidSansFallbackFull.ttf), for one, has kana and ideographs but
    no Hangul. Where no installed font qualifies, heed's bundled "Heed CJK Sans" is used, so
    None means that file is missing too. The answer is cached for the process.
    """
    # Only families with an upright regular face: text is drawn at normal weight, and asking
    # findfont for a family without one makes matplotlib log a complaint per family.
    known = sorted({entry.name for entry in font_manager.fontManager.ttflist if _is_regular(entry)})
    ordered = [name for name in PREFERRED_CJK_FONTS if name in known]
    ordered += [name for name in known if name not in PREFERRED_CJK_FONTS]
    for name in ordered:
        if _covers(name, CJK_PROBES):
            return name
    return _cjk_font_missing_from_cache() or _bundled_cjk_font()


def _bundled_cjk_font() -> str | None:
    """heed's own fallback, a subset of WenQuanYi Micro Hei (Apache-2.0; see heed/fonts/NOTICE),
    registered for this process only. An installed CJK font is preferred: it looks better."""
    path = str(BUNDLED_CJK_FONT)
    if not BUNDLED_CJK_FONT.is_file() or not all(ord(c) in _codepoints(path) for c in CJK_PROBES):
        return None
    font_manager.fontManager.addfont(path)
    return BUNDLED_CJK_FAMILY if _covers(BUNDLED_CJK_FAMILY, CJK_PROBES) else None


def _cjk_font_missing_from_cache() -> str | None:
    """A CJK font installed after matplotlib cached its font list, registered so it can be used.

    matplotlib scans the system fonts once and keeps the list in a JSON cache; a font installed
    later (`apt-get install fonts-noto-cjk` on a machine that has run matplotlib before) is
    invisible until that cache is deleted. `FontManager.addfont` is matplotlib's public way to
    add one file to the running process; it writes nothing to disk and touches no rcParams.
    """
    known_files = {os.path.realpath(entry.fname) for entry in font_manager.fontManager.ttflist}
    for path in sorted(font_manager.findSystemFonts()):
        if os.path.realpath(path) in known_files:
            continue
        cmap = _codepoints(path)
        if all(ord(c) in cmap for c in CJK_PROBES):
            font_manager.fontManager.addfont(path)
            for entry in font_manager.fontManager.ttflist:
                if entry.fname == path and _is_regular(entry) and _covers(entry.name, CJK_PROBES):
                    return entry.name
    return None


def _font_family() -> list[str]:
    """Family list for every text artist heed creates: CJK first, DejaVu Sans for the rest."""
    cjk = cjk_font()
    return [cjk, BASE_FONT] if cjk else [BASE_FONT]


def _is_cjk(char: str) -> bool:
    cp = ord(char)
    return (
        0x1100 <= cp <= 0x11FF  # Hangul Jamo
        or 0x2E80 <= cp <= 0x2FDF  # CJK radicals
        or 0x3000 <= cp <= 0x30FF  # CJK punctuation, Hiragana, Katakana
        or 0x3130 <= cp <= 0x318F  # Hangul compatibility Jamo
        or 0x31F0 <= cp <= 0x31FF  # Katakana extensions
        or 0x3400 <= cp <= 0x4DBF  # CJK extension A
        or 0x4E00 <= cp <= 0x9FFF  # CJK unified ideographs
        or 0xAC00 <= cp <= 0xD7AF  # Hangul syllables
        or 0xF900 <= cp <= 0xFAFF  # CJK compatibility ideographs
        or 0xFF00 <= cp <= 0xFFEF  # half- and full-width forms
        or 0x20000 <= cp <= 0x3FFFF  # CJK extensions B and later
    )


def _warn_missing_glyphs(texts: Sequence[str], family: Sequence[str], *, stacklevel: int) -> None:
    """One MissingFontWarning for the characters in `texts` that no font in `family` has."""
    covered = frozenset().union(*(_family_codepoints(name) for name in family))
    missing = sorted({c for text in texts for c in text if not c.isspace() and ord(c) not in covered})
    if not missing:
        return
    if any(_is_cjk(c) for c in missing):
        message = INSTALL_HINT
    else:
        shown = "".join(missing[:20]) + ("…" if len(missing) > 20 else "")
        message = f"no installed font has glyphs for {shown!r}; they show as empty boxes"
    warnings.warn(message, MissingFontWarning, stacklevel=stacklevel + 1)


@contextlib.contextmanager
def _quiet_missing_glyphs() -> Iterator[None]:
    """Silence matplotlib's one-warning-per-glyph while drawing; `_warn_missing_glyphs` said it once."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from font", category=UserWarning)
        yield


# ---------------------------------------------------------------- labels


def display_token(token: str, *, max_chars: int = 20) -> str:
    """A token as a readable tick label.

    SentencePiece's word-boundary mark "▁" (U+2581) is a low bar that reads as nothing at tick
    size, and a piece that is only "▁" vanishes; both become "␣" (U+2423, the visible-space
    sign), as do literal spaces. Empty tokens show as "∅"; very long ones are cut with "…".
    """
    if token == "":
        return "∅"
    shown = token.replace("\u2581", "\u2423").replace(" ", "\u2423")
    return shown if len(shown) <= max_chars else shown[: max_chars - 1] + "…"


def _text_width_em(text: str) -> float:
    """Rough width of `text` in em: wide (CJK) characters 1 em, others about 0.6 em."""
    return sum(1.0 if unicodedata.east_asian_width(c) in "WF" else 0.6 for c in text)


def _new_figure(width: float, height: float) -> Figure:
    # Constrained layout places the rotated tick labels, the title and the colorbar without
    # clipping (tight_layout ignores colorbars made with `ax=`).
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _root_figure(ax: Axes) -> Figure:
    fig: FigureBase = ax.figure
    while not isinstance(fig, Figure):  # an axes in a SubFigure
        fig = fig.figure
    return fig


# ---------------------------------------------------------------- heatmaps


GRID_WIDTH = 16.0  # inches: attention_grid puts two panels side by side only within this width


def _cell_inches(src_len: int, tgt_len: int) -> float:
    """Side of one cell: 0.5 in, shrinking so a long sentence stays under ~14 in."""
    return min(0.5, 14.0 / max(src_len, tgt_len, 1))


def _label_fontsize(src_len: int, tgt_len: int) -> float:
    return max(5.0, min(10.0, 10.0 - (max(src_len, tgt_len) - 30) / 8))


def _heatmap_size(src_labels: Sequence[str], tgt_labels: Sequence[str], titled: bool) -> tuple[float, float]:
    """Figure size for one heatmap with colorbar: cells plus room for the tick labels."""
    src_len, tgt_len = len(src_labels), len(tgt_labels)
    cell = _cell_inches(src_len, tgt_len)
    em = _label_fontsize(src_len, tgt_len) / 72  # inches
    longest_src = max((_text_width_em(t) for t in src_labels), default=1) * em
    longest_tgt = max((_text_width_em(t) for t in tgt_labels), default=1) * em
    rotated = _rotate_source_labels(src_labels, cell, em * 72)
    top = (longest_src * 0.87 if rotated else em) + 0.5 + (0.35 if titled else 0)
    width = src_len * cell + longest_tgt + 0.5 + 1.0  # + y label + colorbar
    height = tgt_len * cell + top + 0.2
    # Rotated labels lean right: leave room past the last column.
    if rotated:
        width += max(0.0, longest_src * 0.5 - 1.0)
    return max(width, 3.5), max(height, 2.5)


def _rotate_source_labels(labels: Sequence[str], cell: float, fontsize: float) -> bool:
    """Rotate when some label is wider than its column."""
    em = fontsize / 72  # inches
    return any(_text_width_em(t) * em > cell * 0.95 for t in labels)


def _draw_heatmap(
    ax: Axes,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    weights: np.ndarray,
    *,
    family: Sequence[str],
    title: str | None,
):
    """Draw weights `(tgt_len, src_len)` on `ax`; returns the image for a colorbar."""
    tgt_len, src_len = weights.shape
    norm = Normalize(vmin=0.0, vmax=1.0)  # fixed, so heatmaps compare across sentences
    image = ax.imshow(weights, cmap=CMAP, norm=norm, aspect="auto", interpolation="nearest")
    fontsize = _label_fontsize(src_len, tgt_len)
    src_labels = [display_token(t) for t in src_tokens]
    tgt_labels = [display_token(t) for t in tgt_tokens]

    # Source along the top, read left to right like the sentence; outputs top to bottom.
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.set_xticks(range(src_len))
    ax.set_yticks(range(tgt_len))
    if _rotate_source_labels(src_labels, _cell_inches(src_len, tgt_len), fontsize):
        ax.set_xticklabels(src_labels, fontfamily=family, fontsize=fontsize,
                           rotation=60, ha="left", va="bottom", rotation_mode="anchor")
    else:
        ax.set_xticklabels(src_labels, fontfamily=family, fontsize=fontsize)
    ax.set_yticklabels(tgt_labels, fontfamily=family, fontsize=fontsize)
    ax.set_xlabel("source", fontfamily=family, fontsize=fontsize)
    ax.set_ylabel("output", fontfamily=family, fontsize=fontsize)
    if title:
        ax.set_title(title, fontfamily=family, fontsize=fontsize + 1)

    # Thin white lines between cells, no tick marks or frame.
    ax.set_xticks(np.arange(-0.5, src_len, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, tgt_len, 1), minor=True)
    ax.grid(False, which="major")  # whatever the user's style says
    ax.grid(True, which="minor", color="white", linewidth=0.8)
    ax.tick_params(which="both", length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)

    if src_len <= MAX_LABELLED and tgt_len <= MAX_LABELLED:
        cmap = image.get_cmap()
        cell_font = max(4.5, fontsize - 2.5)
        for j in range(tgt_len):
            for i in range(src_len):
                w = weights[j, i]
                if not np.isfinite(w) or w < MIN_LABELLED:
                    continue
                r, g, b, _ = cmap(norm(w))
                dark = 0.2126 * r + 0.7152 * g + 0.0722 * b < 0.5  # Rec. 709 luma
                ax.text(i, j, f"{w:.2f}".removeprefix("0"), ha="center", va="center",
                        fontsize=cell_font, fontfamily=BASE_FONT, color="white" if dark else "black")
    return image


def _colorbar(fig: FigureBase, image: Any, axes: Any, label: str, *, fraction: float, pad: float,
              aspect: float) -> None:
    """The 0..1 colour scale beside `axes` (one axes or a list), labelled, without a frame."""
    colorbar = fig.colorbar(image, ax=axes, fraction=fraction, pad=pad, aspect=aspect)
    colorbar.set_label(label, fontfamily=BASE_FONT, fontsize=9)
    colorbar.ax.tick_params(labelsize=8)
    colorbar.outline.set_visible(False)


def _prepare(src_tokens: Sequence[str], tgt_tokens: Sequence[str], weights: Any) -> np.ndarray:
    longest = max(len(src_tokens), len(tgt_tokens))
    if longest > MAX_HEATMAP_TOKENS:
        raise HeedError(f"a heatmap of {len(tgt_tokens)} x {len(src_tokens)} tokens is unreadable (at most "
                        f"{MAX_HEATMAP_TOKENS} a side); draw a shorter sentence")
    return weight_matrix(weights, tgt_len=len(tgt_tokens), src_len=len(src_tokens))


def attention_heatmap(
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    weights: Any,
    *,
    title: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Heatmap of one sentence's attention: source tokens across the top, outputs down the side.

    `weights`: `(tgt_len, src_len)`, NumPy or torch; row j is where output token j looked.
    Colours run over a fixed 0..1, so two heatmaps can be compared by eye; up to 30 x 30 cells
    each weight >= 0.05 is printed in its cell. More than MAX_HEATMAP_TOKENS (200) tokens on a
    side is a HeedError, not a figure. Draws on `ax` when given (and returns its figure),
    else on a new figure sized to the sentence.
    """
    matrix = _prepare(src_tokens, tgt_tokens, weights)
    family = _font_family()
    texts = [display_token(t) for t in (*src_tokens, *tgt_tokens)] + ([title] if title else [])
    _warn_missing_glyphs(texts, family, stacklevel=2)
    if ax is None:
        size = _heatmap_size([display_token(t) for t in src_tokens],
                             [display_token(t) for t in tgt_tokens], bool(title))
        fig = _new_figure(*size)
        ax = fig.add_subplot()
    else:
        fig = _root_figure(ax)
    image = _draw_heatmap(ax, src_tokens, tgt_tokens, matrix, family=family, title=title)
    _colorbar(ax.figure, image, ax, "attention weight", fraction=0.05, pad=0.03, aspect=30)
    return fig


def attention_grid(
    items: Sequence[tuple[Sequence[str], Sequence[str], Any]],
    *,
    cols: int | None = None,
    titles: Sequence[str] | None = None,
    label: str = "attention weight",
) -> Figure:
    """Several sentences' heatmaps in a grid, sharing one 0..1 colorbar (named `label`).

    `items`: `(src_tokens, tgt_tokens, weights (tgt_len, src_len))` per sentence. `cols` defaults
    to 2 where two panels fit side by side in GRID_WIDTH inches, else 1 (1 for a single item);
    `titles`, if given, has one per item. Every panel keeps square cells of its own size: rows and
    columns of the grid are as tall and wide as their largest panel (a short sentence beside a long
    one was stretched to its width, and a grid of two 30-token sentences was 4620 px wide). The
    figure has one axes per item plus the colorbar's.
    """
    if not items:
        raise ValueError("attention_grid needs at least one (src_tokens, tgt_tokens, weights) item")
    if titles is not None and len(titles) != len(items):
        raise ValueError(f"got {len(titles)} titles for {len(items)} items")
    if cols is not None and cols < 1:
        raise ValueError(f"cols must be at least 1, got {cols}")
    matrices = [_prepare(src, tgt, w) for src, tgt, w in items]
    family = _font_family()
    texts = [display_token(t) for src, tgt, _ in items for t in (*src, *tgt)] + list(titles or [])
    _warn_missing_glyphs(texts, family, stacklevel=2)

    n = len(items)
    sizes = []
    for (src, tgt, _), title in zip(items, titles or [""] * n):  # "": no title
        w, h = _heatmap_size([display_token(t) for t in src], [display_token(t) for t in tgt], bool(title))
        sizes.append((w - 0.8, h))  # the colorbar is shared
    widest = sorted((w for w, _ in sizes), reverse=True)
    if cols is None:
        cols = 2 if n > 1 and sum(widest[:2]) <= GRID_WIDTH else 1
    cols = min(cols, n)
    rows = math.ceil(n / cols)
    col_w = [max(sizes[k][0] for k in range(c, n, cols)) for c in range(cols)]
    row_h = [max(sizes[k][1] for k in range(r * cols, min(n, (r + 1) * cols))) for r in range(rows)]
    fig = _new_figure(sum(col_w) + 0.8, sum(row_h))
    grid = fig.add_gridspec(rows, cols, width_ratios=col_w, height_ratios=row_h)
    axes = [fig.add_subplot(grid[k // cols, k % cols]) for k in range(n)]
    image = None
    for k, ((src, tgt, _), matrix) in enumerate(zip(items, matrices)):
        heading = titles[k] if titles is not None else None
        image = _draw_heatmap(axes[k], src, tgt, matrix, family=family, title=heading)
        axes[k].set_aspect("equal", adjustable="box")  # square cells, whatever the panel's share
        axes[k].set_anchor("W")
    _colorbar(fig, image, axes, label, fraction=0.03, pad=0.02, aspect=40)
    return fig


MAX_GRID_TOKENS = 60  # a side, in a grid of every head: past it the small panels' cells are specks


def head_grid(src_tokens: Sequence[str], tgt_tokens: Sequence[str], cross: Any, *,
              layers: Sequence[int] | None = None, title: str | None = None) -> Figure:
    """Every head of every decoder layer of one sentence: a grid of small heatmaps, one row per
    layer and one column per head, on one 0..1 colour scale.

    `cross`: `(layers, heads, tgt_len, src_len)` (heed.api.HeadMaps.cross); `layers`: the numbers
    to label its rows with (default 0..layers-1, for a slice of the stack). Source tokens label
    the top row's panels and output tokens the first column's, so 6 x 8 heads of a 15-token
    sentence fit a page; more than MAX_GRID_TOKENS tokens a side is a HeedError."""
    stack = np.asarray(cross, dtype=np.float64)
    if stack.ndim != 4 or stack.shape[2:] != (len(tgt_tokens), len(src_tokens)):
        raise ValueError(f"cross must be (layers, heads, {len(tgt_tokens)}, {len(src_tokens)}), got {stack.shape}")
    longest = max(len(src_tokens), len(tgt_tokens))
    if longest > MAX_GRID_TOKENS:
        raise HeedError(f"a grid of every head over {len(tgt_tokens)} x {len(src_tokens)} tokens is unreadable (at "
                        f"most {MAX_GRID_TOKENS} a side); give a shorter sentence, or pick one with --layer/--head")
    n_layers, n_heads = stack.shape[:2]
    names = list(layers) if layers is not None else list(range(n_layers))
    if len(names) != n_layers:
        raise ValueError(f"got {len(names)} layer numbers for {n_layers} layers")
    family = _font_family()
    src_labels = [display_token(t, max_chars=12) for t in src_tokens]
    tgt_labels = [display_token(t, max_chars=12) for t in tgt_tokens]
    _warn_missing_glyphs([*src_labels, *tgt_labels, *([title] if title else [])], family, stacklevel=2)
    cell = min(0.22, 2.4 / longest)  # inches: a panel is at most ~2.4 in a side
    fontsize = max(4.0, min(7.0, cell * 72 * 0.8))
    em = fontsize / 72
    left = max((_text_width_em(t) for t in tgt_labels), default=1) * em + 0.5
    top = max((_text_width_em(t) for t in src_labels), default=1) * em * 0.87 + 0.6 + (0.3 if title else 0)
    panel_w, panel_h = len(src_tokens) * cell + 0.12, len(tgt_tokens) * cell + 0.25
    fig = _new_figure(left + n_heads * panel_w + 0.9, top + n_layers * panel_h + 0.2)
    grid = fig.add_gridspec(n_layers, n_heads)
    norm = Normalize(vmin=0.0, vmax=1.0)
    image = None
    axes = []
    for r in range(n_layers):
        for c in range(n_heads):
            ax = fig.add_subplot(grid[r, c])
            axes.append(ax)
            image = ax.imshow(stack[r, c], cmap=CMAP, norm=norm, aspect="equal", interpolation="nearest")
            ax.tick_params(which="both", length=0)
            for spine in ax.spines.values():
                spine.set_linewidth(0.3)
            ax.set_xticks(range(len(src_tokens)) if r == 0 else [])
            ax.set_yticks(range(len(tgt_tokens)) if c == 0 else [])
            if r == 0:
                ax.xaxis.tick_top()
                ax.set_xticklabels(src_labels, fontfamily=family, fontsize=fontsize, rotation=60, ha="left",
                                   va="bottom", rotation_mode="anchor")
                ax.set_title(f"head {c}", fontfamily=BASE_FONT, fontsize=8)
            if c == 0:
                ax.set_yticklabels(tgt_labels, fontfamily=family, fontsize=fontsize)
                ax.set_ylabel(f"layer {names[r]}", fontfamily=BASE_FONT, fontsize=8)
    if title:
        fig.suptitle(title, fontfamily=family, fontsize=10)
    _colorbar(fig, image, axes, "attention weight", fraction=0.02, pad=0.01, aspect=40)
    return fig


# ---------------------------------------------------------------- scores by length

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def length_plot(table: Mapping[str, Sequence[tuple[str, float]]], *, metric: str = "BLEU",
                unit: str = "tokens") -> Figure:
    """Scores by sentence-length bucket, one line with markers per model.

    `table`: `{model_name: [(bucket_label, value), ...]}` as `heed.evaluate` makes it, e.g.
    `{"model-a": [("1-10", 31.2), ("11-20", 27.5)], ...}`. Buckets are drawn in the order they
    first appear; a model without a score for a bucket leaves a gap there. `unit` names what the
    lengths count, on the x axis ("source length (words)").
    """
    if not table:
        raise ValueError("length_plot needs at least one model's scores")
    buckets: list[str] = []
    for rows in table.values():
        for label, _ in rows:
            if label not in buckets:
                buckets.append(label)
    family = _font_family()
    _warn_missing_glyphs([*table.keys(), *buckets, metric], family, stacklevel=2)

    longest = max(_text_width_em(b) for b in buckets) * 9 / 72
    rotate = longest > 0.9 * 6.0 / max(len(buckets), 1)
    fig = _new_figure(max(5.0, 0.8 * len(buckets) + 2.5), 4.0 + (longest * 0.7 if rotate else 0))
    ax = fig.add_subplot()
    x = np.arange(len(buckets))
    for k, (model, rows) in enumerate(table.items()):
        values = dict(rows)
        y = np.array([values.get(b, np.nan) for b in buckets], dtype=float)
        ax.plot(x, y, marker=_MARKERS[k % len(_MARKERS)], markersize=6, linewidth=1.8, label=model)
    ax.set_xticks(x)
    if rotate:
        ax.set_xticklabels(buckets, fontfamily=family, fontsize=9, rotation=30, ha="right",
                           rotation_mode="anchor")
    else:
        ax.set_xticklabels(buckets, fontfamily=family, fontsize=9)
    ax.tick_params(axis="y", labelsize=9)
    ax.set_xlabel(f"source length ({unit})", fontfamily=family)
    ax.set_ylabel(metric, fontfamily=family)
    ax.set_ylim(bottom=0)  # scores are 0-100: a gap between lines should look as big as it is
    ax.set_title(f"{metric} by sentence length", fontfamily=family)
    ax.grid(axis="y", alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    ax.margins(x=0.08)
    ax.legend(prop=font_manager.FontProperties(family=family, size=9), frameon=False)
    return fig


def aer_grid(grids: dict[str, np.ndarray], *, diagonal: float | None = None, title: str = "AER",
             lower_is_better: bool = True) -> Figure:
    """One heatmap per method of AER (or another score, `title`: agreement F1) by decoder layer
    (rows) and head (columns), the last row the mean of the layers and the last column the mean of
    the heads (heed.explain.forced.SweepResult.grid), and one colour bar in % for all of them.

    `grids`: `{reading: (layers + 1, heads + 1)}` in 0-1 ("argmax", "shift-att", "argmax, value
    norms", ...; "shift" is shown as shift-att); cells are printed in % with one decimal, NaN cells
    left blank (a reading that mixes the heads has only the mean column). For AER darker is better
    (lower); with `lower_is_better` False (F1) brighter is. `diagonal`: the no-model baseline's
    score, in every panel's title and within the colour scale (for AER its top: a cell as bright
    reads attention no better than the diagonal)."""
    if not grids:
        raise ValueError("aer_grid needs at least one method's grid")
    shapes = {g.shape for g in grids.values()}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise ValueError(f"every grid must be the same 2-D (layers + 1, heads + 1) shape, got {sorted(shapes)}")
    rows, cols = next(iter(shapes))
    family = _font_family()
    cell = 0.55
    top = max([*(float(np.nanmax(g)) for g in grids.values()), diagonal or 0.0, 1e-6])
    across = min(len(grids), 2 if len(grids) % 2 == 0 and len(grids) > 4 else 4)  # a row per weighting past 4
    down = math.ceil(len(grids) / across)
    fig = _new_figure(across * (cols * cell + 1.6) + 1.4, down * (rows * cell + 1.5))
    axes = fig.subplots(down, across, squeeze=False).ravel()
    for ax in axes[len(grids):]:
        ax.set_visible(False)
    for ax, (method, grid) in zip(axes, grids.items()):
        image = ax.imshow(100 * grid, cmap="viridis", vmin=0.0, vmax=100 * top, aspect="equal")
        for r in range(rows):
            for c in range(cols):
                if np.isnan(grid[r, c]):  # a reading with no head of its own (rollout, ALTI+)
                    continue
                ax.text(c, r, f"{100 * grid[r, c]:.1f}", ha="center", va="center", fontsize=6,
                        color="white" if grid[r, c] < 0.6 * top else "black", fontfamily=family)
        ax.set_xticks(range(cols), [*map(str, range(cols - 1)), "mean"], fontsize=8, fontfamily=family)
        ax.set_yticks(range(rows), [*map(str, range(rows - 1)), "mean"], fontsize=8, fontfamily=family)
        ax.set_xlabel("head", fontfamily=family)
        ax.set_ylabel("decoder layer", fontfamily=family)
        name = "shift-att" if method == "shift" else method
        best = f"best {100 * (np.nanmin(grid) if lower_is_better else np.nanmax(grid)):.1f}"
        base = f", diagonal {100 * diagonal:.1f}" if diagonal is not None else ""
        ax.set_title(f"{title} % ({name})\n{best}{base}", fontsize=9, fontfamily=family)
    _colorbar(fig, image, list(axes[:len(grids)]), f"{title} %" + (" (lower is better)" if lower_is_better
                                                                  else " (higher is better)"),
              fraction=0.03, pad=0.02, aspect=30)
    return fig


def entropy_curves(steps: Sequence[int], entropy: np.ndarray, *, title: str = "attention entropy") -> Figure:
    """How peaked each head's attention was over training: one panel per decoder layer, one line
    per head (in nats: 0 = one source token gets all the weight; log n = uniform over n).

    `steps`: the evaluations' training steps; `entropy`: (evaluations, layers, heads), as
    heed.explain.history.entropy_history reads it off metrics.jsonl. An RNN's one attention is one panel
    with one line. Heads past eight share the colours again (the legend names each)."""
    entropy = np.asarray(entropy, dtype=np.float64)
    if entropy.ndim != 3 or entropy.shape[0] != len(steps) or entropy.shape[0] == 0:
        raise ValueError(f"entropy must be (evaluations, layers, heads) with one evaluation per step, "
                         f"got {entropy.shape} for {len(steps)} steps")
    _, layers, heads = entropy.shape
    family = _font_family()
    cols = min(layers, 3)
    rows = math.ceil(layers / cols)
    fig = _new_figure(4.2 * cols + 0.4, 3.0 * rows + 0.4)
    axes = fig.subplots(rows, cols, squeeze=False, sharey=True)
    top = float(np.nanmax(entropy)) * 1.05 or 1.0
    for layer in range(rows * cols):
        ax = axes[layer // cols, layer % cols]
        if layer >= layers:
            ax.set_visible(False)
            continue
        for head in range(heads):
            ax.plot(steps, entropy[:, layer, head], linewidth=1.4, marker="." if len(steps) < 30 else None,
                    label=f"head {head}")
        if heads > 1:
            ax.plot(steps, entropy[:, layer, :].mean(axis=1), linewidth=2.4, color="black", label="mean")
        ax.set_ylim(0, top)
        ax.set_title(f"decoder layer {layer}" if layers > 1 or heads > 1 else title, fontsize=10, fontfamily=family)
        ax.set_xlabel("training step", fontfamily=family, fontsize=9)
        if layer % cols == 0:
            ax.set_ylabel("entropy (nats)", fontfamily=family, fontsize=9)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
    if heads > 1:
        axes[0, 0].legend(prop=font_manager.FontProperties(family=family, size=7), frameon=False,
                          ncol=2 if heads > 4 else 1)
    if layers > 1 or heads > 1:
        fig.suptitle(title, fontfamily=family, fontsize=11)
    return fig


# ---------------------------------------------------------------- saving


def figure_format(path: str | Path) -> str:
    """"png", "svg" or "pdf" from the suffix of `path`; HeedError for any other (so a command
    can check its output path before it does the work)."""
    path = Path(path)
    fmt = SAVE_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise HeedError(
            f"{path}: cannot save a figure as '{path.suffix or '(no suffix)'}'; use .png, .svg or .pdf"
        )
    return fmt


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write `fig` as PNG (150 dpi), SVG or PDF, chosen by the suffix; returns the path.

    The file is written to a temporary file in the same directory and `os.replace`d, so a reader
    never sees half a figure. SVG and PDF carry no creation date, so the same figure gives the
    same bytes.
    """
    path = Path(path)
    fmt = figure_format(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    options: dict[str, Any] = {"format": fmt}
    if fmt == "png":
        options["dpi"] = PNG_DPI
    elif fmt == "svg":
        options["metadata"] = {"Date": None}
    else:
        options["metadata"] = {"CreationDate": None}
    with atomic_open(path, "wb") as f, _quiet_missing_glyphs():
        fig.savefig(f, **options)
    return path
