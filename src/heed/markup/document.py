"""A marked-up text (an HTML or XML fragment) as sentences to translate, and back.

    parse("<p>The <b>red</b> car<br/>is here.</p>", "html")
        -> Marked: sentences ["The red car is here."], each with its inline elements as Spans
    marked.render([(translation, placements), ...]) -> the fragment with each run's text replaced
        by its translation and its inline elements placed at the given target ranges

A *run* is the text of one block (a paragraph, a list item, a table cell, the fragment itself)
with its inline elements (b, i, em, strong, a, span, code, sub, sup, br, img, ...) taken out: it is
translated as one sentence. Elements kept verbatim (`translate="no"`, code, script, style, the
caller's `ignore_tags`) and comments stay in their run as points: untranslated, moved with the word
that follows them. In XML, where no tag is known to be inline, an element is inline when it stands
in running text: text beside it in its parent, or siblings separated by spaces on one line.

Parsing is lxml's (libxml2): HTML leniently as browsers do, XML strictly (a malformed fragment is a
MarkupError naming the line and column), without DTDs, entities from outside or network access.
The output is serialised by lxml from the same tree, so it is well-formed, and it holds only
elements and attributes of the source: inline elements are re-made with the source element's tag
and attributes copied verbatim.
"""
from __future__ import annotations

import copy
import re
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from lxml import etree, html  # type: ignore[import-untyped]

from heed.data.corpus import ZERO_WIDTH
from heed.errors import HeedError
from heed.markup.placement import Span

Kind = Literal["html", "xml"]
MAX_DEPTH = 256  # libxml2's own default bound on nesting; deeper input is refused, not recursed
MAX_INLINE = 1000  # inline elements in one run
HTML_INLINE = frozenset({"a", "abbr", "b", "bdi", "bdo", "big", "br", "cite", "code", "data", "del", "dfn", "em", "font",
                         "i", "img", "ins", "kbd", "mark", "q", "s", "samp", "small", "span", "strike", "strong",
                         "sub", "sup", "time", "tt", "u", "var", "wbr"})
HTML_VOID = frozenset({"br", "img", "wbr", "hr", "input", "area", "embed", "source", "track"})
HTML_VERBATIM = frozenset({"code", "script", "style", "kbd", "samp", "var", "textarea", "pre", "svg", "math"})
_SPACE = re.compile(r"\s+")
_ZERO_WIDTH = dict.fromkeys(map(ord, ZERO_WIDTH), None)


class MarkupError(HeedError):
    """Markup heed cannot carry: malformed XML, nesting too deep, too many inline elements."""


@dataclass
class _Inline:
    """An inline element of a run: `element` (its tag and attributes; its own text and children
    are rebuilt), or a verbatim one (`verbatim`: the element or comment, copied whole)."""

    element: etree._Element
    verbatim: bool
    spaced: bool = False  # a verbatim element that stood between words: it keeps a space after it


@dataclass
class Run:
    """One sentence of a fragment: its plain text, its inline elements as Spans (document order,
    with `inlines[k]` the element of `spans[k]`), and where it sits in the tree: the text slot it
    starts in (`holder`.text or .tail) and the nodes it replaces."""

    text: str
    spans: list[Span]
    inlines: list[_Inline]
    holder: etree._Element
    slot: Literal["text", "tail"]
    nodes: list[etree._Element]
    lead: str  # whitespace before the run's text, kept
    trail: str  # and after it


@dataclass
class Marked:
    """A parsed fragment: `sentences` to translate (one per run, in document order) and the tree
    to put their translations back into (`render`)."""

    kind: Kind
    root: etree._Element
    runs: list[Run] = field(default_factory=list)

    @property
    def sentences(self) -> list[str]:
        return [run.text for run in self.runs]

    def render(self, placed: Sequence[tuple[str, Sequence[tuple[int, int]]]]) -> str:
        """The fragment with run k's text replaced by `placed[k][0]` and its inline elements at the
        target ranges `placed[k][1]` (heed.markup.placement.place). The tree is changed in place:
        render once."""
        if len(placed) != len(self.runs):
            raise ValueError(f"{len(self.runs)} runs but {len(placed)} translations")
        for run, (text, ranges) in zip(self.runs, placed):
            _replace_run(run, text, ranges)
        return _serialise(self.root, self.kind)


def parse(text: str, kind: Kind = "html", *, ignore_tags: Sequence[str] = ()) -> Marked:
    """A fragment of `kind` as runs to translate (see the module doc). `ignore_tags`: elements
    kept verbatim, as DeepL's ignore_tags."""
    root = _parse_fragment(text, kind)
    keep = frozenset(t.lower() for t in ignore_tags) | (HTML_VERBATIM if kind == "html" else frozenset())
    marked = Marked(kind, root)
    stack = [(root, 0)]
    while stack:  # the blocks, parents first; an inline element's content belongs to its run
        element, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise MarkupError(f"the markup nests deeper than {MAX_DEPTH} elements; flatten it")
        if element is not root and (_kept(element, keep) or _is_inline(element, kind)):
            continue
        marked.runs.extend(_runs_of(element, kind, keep))
        stack.extend((child, depth + 1) for child in reversed(element))
    return marked


def _parse_fragment(text: str, kind: Kind) -> etree._Element:
    if kind == "html":
        parser = html.HTMLParser(no_network=True, huge_tree=False)
        try:
            root = html.fragment_fromstring(text, create_parent="div", parser=parser)
        except (etree.ParserError, ValueError) as e:
            raise MarkupError(f"not HTML that can be parsed ({e})") from None
        for entry in parser.error_log:  # lenient, as a browser, except where it would drop text
            if "depth" in entry.message.lower():
                raise MarkupError(f"line {entry.line}, column {entry.column}: the markup nests deeper than "
                                  f"{MAX_DEPTH} elements; flatten it")
        return root
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False,
                             remove_comments=False, strip_cdata=True)
    wrapper = "heed-fragment"
    try:
        return etree.fromstring(f"<{wrapper}>{text}</{wrapper}>", parser)
    except etree.XMLSyntaxError as e:
        line, column = e.position if e.position else (1, 0)
        if line == 1:  # the wrapper's start tag is not the user's, nor its end tag
            column = min(column - len(wrapper) - 2, len(text) + 1)
        reason = (str(e.msg).split(",")[0] if e.msg else "malformed").replace(f"and {wrapper}", "and the end")
        where = f"column {max(column, 1)}" if line == 1 else f"line {line}, column {max(column, 1)}"
        raise MarkupError(f"{where}: not well-formed XML ({reason[:120]})") from None


def _name(element: etree._Element) -> str:
    return etree.QName(element).localname.lower() if isinstance(element.tag, str) else ""


def _kept(element: etree._Element, keep: frozenset[str]) -> bool:
    return not isinstance(element.tag, str) or _name(element) in keep or element.get("translate") == "no"


def _is_inline(element: etree._Element, kind: Kind) -> bool:
    if not isinstance(element.tag, str):  # a comment or processing instruction: a point in the run
        return True
    if kind == "html":
        return _name(element) in HTML_INLINE
    parent = element.getparent()
    return parent is not None and _mixed(parent)


def _mixed(element: etree._Element) -> bool:
    """Whether `element`'s children stand in running text (XML's mark of inline content): text
    beside them, or children separated by spaces on one line (`<b>27</b> <i>mars</i>`), where
    elements laid out one a line, or with nothing between them, are structure."""
    if (element.text or "").strip() or any((child.tail or "").strip() for child in element):
        return True
    return any(child.tail and "\n" not in child.tail for child in list(element)[:-1])


def _is_block(element: etree._Element, kind: Kind) -> bool:
    """An element whose own content holds runs: the root, or any element that is not inline."""
    return element.getparent() is None or not _is_inline(element, kind)


def _runs_of(block: etree._Element, kind: Kind, keep: frozenset[str]) -> Iterator[Run]:
    """The runs of `block`'s own content: maximal stretches of text and inline elements between
    its block children."""
    holder: etree._Element = block
    slot: Literal["text", "tail"] = "text"
    nodes: list[etree._Element] = []
    for child in block:
        if _is_inline(child, kind):
            nodes.append(child)
            continue
        run = _run(holder, slot, nodes, keep)  # the stretch before this block child
        if run is not None:
            yield run
        holder, slot, nodes = child, "tail", []
    run = _run(holder, slot, nodes, keep)
    if run is not None:
        yield run


class _Flattener:
    """Plain text and spans of a run, normalised as heed normalises a sentence (NFC, zero-width
    characters dropped, whitespace runs one space, stripped), offsets in the normalised text."""

    def __init__(self, keep: frozenset[str]) -> None:
        self.keep = keep
        self.parts: list[str] = []
        self.length = 0
        self.spaced = True  # a space here would be dropped: at the start, or after a space
        self.spans: list[Span] = []
        self.inlines: list[_Inline] = []

    def add_text(self, text: str | None) -> None:
        pieces = _SPACE.split(unicodedata.normalize("NFC", text or "").translate(_ZERO_WIDTH))
        for k, piece in enumerate(pieces):
            if k and not self.spaced:  # whitespace stood between this piece and the last
                self._append(" ")
                self.spaced = True
            if piece:
                self._append(piece)
                self.spaced = False

    def _append(self, piece: str) -> None:
        self.parts.append(piece)
        self.length += len(piece)

    def add_inline(self, element: etree._Element, parent: int, depth: int) -> None:
        """`element` and, unless it is kept verbatim, its content, as spans under span `parent`."""
        if len(self.spans) >= MAX_INLINE:
            raise MarkupError(f"more than {MAX_INLINE} inline elements in one sentence; split the text")
        if depth > MAX_DEPTH:
            raise MarkupError(f"the markup nests deeper than {MAX_DEPTH} elements; flatten it")
        verbatim = _kept(element, self.keep)
        index, start = len(self.spans), self.length
        spaced = (verbatim and isinstance(element.tag, str) and self.spaced and bool(self.parts)
                  and (element.tail or "")[:1].isspace())
        self.inlines.append(_Inline(element, verbatim, spaced))
        self.spans.append(Span(start, start, parent, point=True))
        if verbatim or _name(element) in HTML_VOID:
            if _name(element) == "br":  # a line break separates words
                self.add_text(" ")
            return
        self.add_text(element.text)
        for child in element:
            self.add_inline(child, index, depth + 1)
            self.add_text(child.tail)
        self.spans[index] = Span(start, self.length, parent, point=self.length == start)

    def finish(self) -> str:
        """The run's plain text; spans past its end (a trailing space dropped) are clipped."""
        if self.parts and self.parts[-1] == " ":
            self.parts.pop()
            self.length -= 1
        self.spans = [Span(min(s.start, self.length), min(s.end, self.length), s.parent, s.point)
                      for s in self.spans]
        return "".join(self.parts)


def _run(holder: etree._Element, slot: Literal["text", "tail"], nodes: list[etree._Element],
         keep: frozenset[str]) -> Run | None:
    """The run starting in `holder`'s `slot` and holding the inline `nodes`; None when it has no
    text to translate (only whitespace, or only verbatim elements)."""
    first = getattr(holder, slot) or ""
    flat = _Flattener(keep)
    flat.add_text(first)
    for node in nodes:
        flat.add_inline(node, -1, 1)
        flat.add_text(node.tail)
    text = flat.finish()
    if not text:
        return None
    last = (nodes[-1].tail if nodes else first) or ""
    lead = first[: len(first) - len(first.lstrip())]
    trail = last[len(last.rstrip()):] if nodes or last.strip() else ""
    return Run(text, flat.spans, flat.inlines, holder, slot, list(nodes), lead, trail)


def _replace_run(run: Run, text: str, ranges: Sequence[tuple[int, int]]) -> None:
    """Put `text` with the run's inline elements at `ranges` in place of the run's old content."""
    parent = run.holder if run.slot == "text" else run.holder.getparent()
    assert parent is not None
    position = 0 if run.slot == "text" else parent.index(run.holder) + 1
    for node in run.nodes:
        parent.remove(node)
    children: dict[int, list[int]] = {}
    for k, span in enumerate(run.spans):
        children.setdefault(span.parent, []).append(k)
    made = _fresh_elements(run)
    leading, elements = _fill(made, run, text, ranges, children, 0, len(text), -1)
    setattr(run.holder, run.slot, run.lead + leading)
    for offset, element in enumerate(elements):
        parent.insert(position + offset, element)
    last = elements[-1] if elements else None
    if last is not None:
        last.tail = (last.tail or "") + run.trail
    else:
        setattr(run.holder, run.slot, (getattr(run.holder, run.slot) or "") + run.trail)


def _fresh_elements(run: Run) -> list[etree._Element]:
    """A fresh element for each span: the source element's tag and attributes (copied verbatim),
    or the whole verbatim element without its tail."""
    made = []
    for inline in run.inlines:
        source = inline.element
        if inline.verbatim:
            element = copy.deepcopy(source)
        else:
            element = source.makeelement(source.tag, dict(source.attrib), nsmap=source.nsmap) \
                if isinstance(source.tag, str) else copy.deepcopy(source)
        element.tail = None
        if not inline.verbatim and isinstance(source.tag, str):
            element.text = None
        made.append(element)
    return made


def _fill(made: list[etree._Element], run: Run, text: str, ranges: Sequence[tuple[int, int]],
          children: dict[int, list[int]], lo: int, hi: int, parent: int) -> tuple[str, list[etree._Element]]:
    """(the text before the first child, the children with their tails) of target range [lo, hi)
    under span `parent`; each child filled in the same way (as deep as the source, at most MAX_DEPTH)."""
    order = sorted(children.get(parent, []), key=lambda k: (ranges[k][0], ranges[k][1] > ranges[k][0], k))
    leading: str | None = None
    cursor = lo
    out: list[etree._Element] = []
    for k in order:
        start, end = ranges[k]
        piece = text[cursor:start] if start > cursor else ""
        if out:
            out[-1].tail = (out[-1].tail or "") + piece
        else:
            leading = piece
        element = made[k]
        if run.inlines[k].spaced and text[start - 1:start] == " " and text[start:start + 1] not in ("", " "):
            element.tail = " "
        if not run.inlines[k].verbatim and isinstance(element.tag, str):
            inner, kids = _fill(made, run, text, ranges, children, start, end, k)
            element.text = inner or None
            for kid in kids:
                element.append(kid)
        out.append(element)
        cursor = max(cursor, end)
    rest = text[cursor:hi] if hi > cursor else ""
    if out:
        out[-1].tail = (out[-1].tail or "") + rest
        return leading or "", out
    return (leading or "") + rest, out


def _serialise(root: etree._Element, kind: Kind) -> str:
    method = "html" if kind == "html" else "xml"
    inner = [etree.tostring(child, encoding="unicode", method=method, with_tail=True) for child in root]
    head = root.text or ""
    return _escape(head) + "".join(inner)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
