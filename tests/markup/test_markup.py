"""Markup carried across a translation (heed.markup): where each inline element goes for a given
alignment (placement), what a fragment's sentences are and that the output is always well-formed
and holds nothing the source did not (document), and the whole path on a trained dates model, on
a gold by construction (carry)."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree, html

from heed.markup import MarkupError, Span, parse, place

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "studies"))
import markup_dates

# ---------------------------------------------------------------- placement


def test_an_element_follows_its_word_when_the_translation_reorders():
    src, tgt = "the red car", "la voiture rouge"
    ranges = place(src, [Span(4, 7)], tgt, [(0, 0), (1, 2), (2, 1)])
    assert [tgt[a:b] for a, b in ranges] == ["rouge"]


def test_an_element_of_two_words_wraps_the_hull_of_their_targets():
    src, tgt = "a very big dog", "un chien très grand"
    ranges = place(src, [Span(2, 10)], tgt, [(0, 0), (1, 2), (2, 3), (3, 1)])
    assert [tgt[a:b] for a, b in ranges] == ["très grand"]


def test_a_hull_is_not_stretched_across_another_words_unit():
    """A dash that argmax gave to the year must not make the year's tag wrap the month."""
    src, tgt = "20 juin 2021", "2021-06-20"
    links = [(2, 0), (2, 1), (2, 2), (2, 3), (2, 4), (1, 5), (1, 6), (2, 7), (0, 8), (0, 9)]
    ranges = place(src, [Span(0, 2), Span(3, 7), Span(8, 12)], tgt, links, "chars")
    assert [tgt[a:b] for a, b in ranges] == ["20", "06", "2021"]


def test_a_hull_grows_over_the_unlinked_characters_of_its_target_word():
    """A null threshold left the day's "0" unlinked: the day's tag still wraps "05"."""
    src, tgt = "le 5 mai 2021", "2021-05-05"
    links = [(3, 0), (3, 1), (3, 2), (3, 3), (2, 5), (2, 6), (1, 9)]  # unit 8 ("0" of the day) unlinked
    ranges = place(src, [Span(3, 4), Span(5, 8), Span(9, 13)], tgt, links, "chars")
    assert [tgt[a:b] for a, b in ranges] == ["05", "05", "2021"]


def test_a_stray_link_does_not_keep_a_character_from_its_neighbours_tag():
    """The year's last "1" linked to the day, apart from the day's own "10": it joins the year."""
    src, tgt = "le 10 juin 1901", "1901-06-10"
    links = [(3, 0), (3, 1), (3, 2), (1, 3), (2, 5), (2, 6), (1, 8), (1, 9)]
    ranges = place(src, [Span(3, 5), Span(6, 10), Span(11, 15)], tgt, links, "chars")
    assert [tgt[a:b] for a, b in ranges] == ["10", "06", "1901"]


def test_a_hull_ending_on_a_separator_is_not_grown_past_it():
    """The month's links end on the dash before the day: the day's unlinked "0" is not the month's."""
    src, tgt = "1 nov. 2024", "2024-11-01"
    links = [(2, 0), (2, 1), (2, 2), (2, 3), (1, 4), (1, 5), (1, 6), (1, 7), (0, 9)]
    ranges = place(src, [Span(0, 1), Span(2, 6), Span(7, 11)], tgt, links, "chars")
    assert [tgt[a:b] for a, b in ranges] == ["01", "11", "2024"]


def test_in_words_a_hull_never_grows_over_an_unlinked_neighbour():
    src, tgt = "a red car", "une voiture rouge"
    ranges = place(src, [Span(2, 5)], tgt, [(1, 2), (2, 1)])  # "une" unlinked
    assert [tgt[a:b] for a, b in ranges] == ["rouge"]


def test_punctuation_the_source_element_lacks_stays_outside():
    src, tgt = "go here.", "va ici."
    assert [tgt[a:b] for a, b in place(src, [Span(3, 7)], tgt, [(0, 0), (1, 1)])] == ["ici"]
    assert [tgt[a:b] for a, b in place(src, [Span(3, 8)], tgt, [(0, 0), (1, 1)])] == ["ici."]


def test_a_point_goes_before_the_target_of_the_word_after_it_and_at_the_end_after_the_last():
    src, tgt = "red car", "voiture rouge"
    ranges = place(src, [Span(4, 4, point=True), Span(7, 7, point=True)], tgt, [(0, 1), (1, 0)])
    assert ranges == [(0, 0), (len(tgt), len(tgt))]


def test_without_links_an_element_is_placed_on_the_diagonal():
    src, tgt = "one two three four", "un deux trois quatre"
    (a, b), = place(src, [Span(8, 13)], tgt, [])
    assert tgt[a:b] == "trois"


def test_children_stay_inside_their_parent_and_siblings_never_cross():
    src, tgt = "a b c d", "w x y z"
    spans = [Span(0, 3), Span(2, 3, parent=0), Span(4, 7)]
    ranges = place(src, spans, tgt, [(0, 1), (1, 3), (2, 0), (3, 2)])  # the parent's words go to x and z
    (p0, p1), (c0, c1), (s0, s1) = ranges
    assert p0 <= c0 <= c1 <= p1 and p0 < p1
    assert s1 <= p0 or s0 >= p1  # siblings do not overlap


# ---------------------------------------------------------------- document


def identity(marked, shout: bool = True) -> str:
    """Render `marked` with each sentence upper-cased and linked word for word."""
    placed = []
    for run in marked.runs:
        out = run.text.upper() if shout else run.text
        placed.append((out, place(run.text, run.spans, out, [(i, i) for i in range(len(run.text.split()))])))
    return marked.render(placed)


def test_blocks_are_sentences_and_inline_elements_stay_in_them():
    marked = parse("<p>The <b>red</b> car<br>is <a href='/x' title=\"t\">here</a>.</p><ul><li>one</li>"
                   "<li>two <i>three</i></li></ul>", "html")
    assert marked.sentences == ["The red car is here.", "one", "two three"]
    assert identity(marked) == ('<p>THE <b>RED</b> CAR <br>IS <a href="/x" title="t">HERE</a>.</p>'
                                "<ul><li>ONE</li><li>TWO <i>THREE</i></li></ul>")


def test_code_script_style_and_translate_no_are_kept_verbatim_in_place():
    source = ("<p>Run <code>make test</code> now <span translate=\"no\">Heed</span> ok</p>"
              "<script>var x = '<b>';</script><style>p {}</style><!-- note -->")
    marked = parse(source, "html")
    assert marked.sentences == ["Run now ok"]
    out = identity(marked)
    assert "<code>make test</code> NOW" in out and '<span translate="no">Heed</span>' in out
    assert "<script>var x = '<b>';</script><style>p {}</style><!-- note -->" in out


def test_deepls_ignore_tags_are_kept_verbatim():
    marked = parse("<doc>Keep <x>this one</x> please</doc>", "xml", ignore_tags=["x"])
    assert marked.sentences == ["Keep please"]
    assert identity(marked) == "<doc>KEEP <x>this one</x> PLEASE</doc>"


def test_xml_elements_on_one_line_are_inline_and_one_a_line_are_structure():
    assert parse("<b>27</b> <i>mars</i> <u>2016</u>", "xml").sentences == ["27 mars 2016"]
    assert parse("<t>one</t>\n<t>two</t>", "xml").sentences == ["one", "two"]


def test_entities_and_cdata_come_back_escaped():
    marked = parse("<p>Tom &amp; <b>Jerry</b> &lt;3</p>", "html")
    assert marked.sentences == ["Tom & Jerry <3"]
    assert identity(marked, shout=False) == "<p>Tom &amp; <b>Jerry</b> &lt;3</p>"
    marked = parse("<t>a <![CDATA[<b> & c]]> d</t>", "xml")
    assert marked.sentences == ["a <b> & c d"]
    out = identity(marked, shout=False)
    etree.fromstring(f"<r>{out}</r>")
    assert "&lt;b&gt; &amp; c" in out


def test_malformed_xml_is_one_line_naming_the_line_and_column():
    with pytest.raises(MarkupError, match=r"^column \d+: not well-formed XML"):
        parse("<a>one <b>two</a>", "xml")
    with pytest.raises(MarkupError, match=r"^line 2, column \d+: not well-formed XML"):
        parse("<a>one\n<b>two</a>", "xml")


@pytest.mark.parametrize("kind", ["xml", "html"])
def test_ten_thousand_nested_tags_are_refused_not_recursed(kind):
    with pytest.raises(MarkupError, match="(deeper than|depth in document:) 256"):
        parse("<b>" * 10_000 + "x" + "</b>" * 10_000, kind)


def test_unclosed_html_is_read_as_a_browser_reads_it():
    marked = parse("<p>one <b>two <i>three</p><p>four", "html")
    assert marked.sentences == ["one two three", "four"]
    html.fragment_fromstring(identity(marked), create_parent="div")


def test_a_text_without_markup_is_one_sentence_and_comes_back_as_text():
    marked = parse("plain", "html")
    assert marked.sentences == ["plain"]
    assert identity(marked) == "PLAIN"


# ---------------------------------------------------------------- the fuzz set: always well-formed


INLINE = ["b", "i", "em", "strong", "a", "span", "code", "sub", "sup"]
WORDS = ["le", "chat", "noir", "dort", "ici", "&amp;", "&lt;", "x<y", "été", "—", "1.5"]


@st.composite
def fragments(draw, depth: int = 0) -> str:
    """An HTML or XML fragment: words, inline elements (with attributes, some kept verbatim),
    void elements, comments; nested up to 4 deep."""
    parts = []
    for _ in range(draw(st.integers(0, 5))):
        choice = draw(st.integers(0, 9))
        if choice < 4 or depth >= 4:
            parts.append(draw(st.sampled_from(WORDS)).replace("x<y", "x&lt;y"))
        elif choice < 7:
            tag = draw(st.sampled_from(INLINE))
            attrs = draw(st.sampled_from(["", ' class="c"', ' href="javascript:alert(1)"', ' onerror="e()"',
                                          ' translate="no"', ' data-x="&quot;q&quot;"']))
            inner = draw(fragments(depth + 1))
            parts.append(f"<{tag}{attrs}>{inner}</{tag}>")
        elif choice == 7:
            parts.append(draw(st.sampled_from(["<br/>", '<img src="a.png"/>', "<wbr/>"])))
        elif choice == 8:
            parts.append("<!-- c -->")
        else:
            parts.append(f"<p>{draw(fragments(depth + 1))}</p>")
    return draw(st.sampled_from([" ", "", "\n"])).join(parts)


def elements_and_attributes(root: etree._Element) -> tuple[set[str], set[tuple[str, str]]]:
    elements = {e.tag for e in root.iter() if isinstance(e.tag, str)}
    attributes = {(k, v) for e in root.iter() if isinstance(e.tag, str) for k, v in e.attrib.items()}
    return elements, attributes


@settings(max_examples=150, deadline=None)
@given(source=fragments(), seed=st.integers(0, 2**16), kind=st.sampled_from(["xml", "html"]))
def test_every_output_is_well_formed_and_holds_only_the_sources_elements_and_attributes(source, seed, kind):
    rng = random.Random(seed)
    marked = parse(source, kind)
    placed = []
    for run in marked.runs:
        out = " ".join(rng.choice(["un", "deux", "trois", "<&>", "quatre"]) for _ in range(rng.randint(0, 6)))
        n_src, n_tgt = len(run.text.split()), len(out.split())
        links = [(rng.randrange(n_src), j) for j in range(n_tgt) if n_src and rng.random() < 0.8]
        placed.append((out, place(run.text, run.spans, out, links)))
    rendered = marked.render(placed)
    if kind == "xml":
        before, after = etree.fromstring(f"<r>{source}</r>"), etree.fromstring(f"<r>{rendered}</r>")
    else:
        before = html.fragment_fromstring(source, create_parent="div")
        after = html.fragment_fromstring(rendered, create_parent="div")
    (tags, attributes), (out_tags, out_attributes) = elements_and_attributes(before), elements_and_attributes(after)
    assert out_tags <= tags and out_attributes <= attributes, rendered
    text = " ".join(translated_text(after, kind).split())  # a kept element between words keeps a space beside it
    for out, _ in placed:
        assert " ".join(out.split()) in text, (out, text)


def translated_text(element: etree._Element, kind: str) -> str:
    """The text of `element` outside the elements kept verbatim (translate="no"; HTML's code)."""
    def walk(e: etree._Element) -> str:
        kept = isinstance(e.tag, str) and (e.get("translate") == "no" or (kind == "html" and e.tag == "code"))
        inner = "" if kept or not isinstance(e.tag, str) else (e.text or "") + "".join(walk(c) for c in e)
        return inner + (e.tail or "")
    return (element.text or "") + "".join(walk(c) for c in element)


# ---------------------------------------------------------------- on a trained model


@pytest.fixture(scope="module")
def dates_rnn(tiny_config, tmp_path_factory) -> Path:
    """A Luong RNN trained on 1,000 English and French dates (characters)."""
    from heed.config import config_from_dict
    from heed.data.dates import generate_dates, write_splits
    from heed.train import train

    directory = tmp_path_factory.mktemp("markup-dates")
    paths = write_splits(generate_dates(n_train=1000, n_dev=20, n_test=20, seed=3, languages=("en", "fr"),
                                        verbose_forms=False), directory / "data")
    config = tiny_config(directory / "out", epochs=12, lr=0.01, log_every=10_000)
    config["data"] = {**config["data"], "train": {"tsv": str(paths["train"])}, "dev": {"tsv": str(paths["dev"])}}
    config.pop("test", None)
    config["data"].pop("test", None)
    config["model"] = {"embed_size": 16, "hidden_size": 48, "input_feeding": True, "dropout": 0.0}
    train(config_from_dict(config))
    return directory / "out"


def test_tags_around_a_dates_fields_land_on_its_output_characters(dates_rnn):
    """Projected onto the reference (a forced pass, the model's reading), each tag around a day,
    month or year wraps exactly the characters that field writes, for most tags; every output
    parses. bench/studies/markup_dates.py measures the demo model (bench/RESULTS.md)."""
    import heed
    from heed.data.dates import generate_dates_aligned
    from heed.markup import carry_many

    translator = heed.load(str(dates_rnn), device="cpu")
    splits, golds = generate_dates_aligned(n_train=0, n_dev=0, n_test=200, seed=11, languages=("en", "fr"),
                                           verbose_forms=False)
    sources, gold_tags = zip(*(markup_dates.tagged(p.src, g[0]) for p, g in zip(splits.test, golds.test)))
    outputs = carry_many(translator, [parse(s, "html") for s in sources], [[p.tgt] for p in splits.test])
    right = total = 0
    for out, gold in zip(outputs, gold_tags):
        got = dict(markup_dates.placed_tags(out))
        right += sum(got.get(tag) == span for tag, span in gold)
        total += len(gold)
    assert right / total >= 0.75, (right, total)  # 89.3% (443 of 496) on an AMD EPYC Zen 5


@pytest.mark.parametrize("head", [2, (0, 3), None])
@pytest.mark.parametrize("beam", [1, 3])
def test_a_heads_links_read_off_the_search_are_the_forced_passs(converged_transformer, head, beam):
    """A Transformer's search asked to report a reading's head (or heads, or their mean) writes the
    same translations, and the links read off it equal those of a forced pass over them, so markup
    needs no second pass and places its tags exactly as before."""
    import heed
    from heed.explain.align_methods import AlignOptions
    from heed.markup import carry_many, translate_documents
    from heed.markup.carry import own_links

    translator = heed.load(str(converged_transformer), device="cpu")
    reading = AlignOptions(method="argmax", layer=0, head=head, tgt_units="chars")
    sources = ["<b>27</b> mars <i>2016</i>", "le <u>3</u> <b>juin</b> 1999", "<i>May</i> 4, <b>2001</b>",
               "<b>12</b> déc. 1931", "<i>9</i> <u>août</u> <b>2040</b>"]
    documents = [parse(s, "html") for s in sources]
    own = translate_documents(translator, documents, reading=reading, beam=beam)
    plain = translator.translate([d.sentences[0] for d in documents], beam=beam)
    assert [d[0].text for d in own] == [t.text for t in plain]
    found = own_links(translator, [d[0] for d in own], reading, searched=True)
    forced = translator.align([d.sentences[0] for d in documents], [t.text for t in plain], options=reading)
    assert [sorted(f) for f in found if f is not None] == [sorted(a.links) for a in forced]
    assert len(found) == len(sources)
    given = [[t.text] for t in plain]
    searched = carry_many(translator, documents, given, options=reading, translations=own, searched=True)
    again = carry_many(translator, [parse(s, "html") for s in sources], given, options=reading)  # forced
    assert searched == again


def test_the_default_attention_of_a_transformer_of_two_layers_is_read_off_the_search(transformer_run):
    """The search's own attention (the last layer's heads averaged) is one layer of one head: read
    as that, not as layer 1 of it (an IndexError before)."""
    import heed
    from heed.explain.align_methods import AlignOptions
    from heed.markup import translate_documents
    from heed.markup.carry import own_links

    translator = heed.load(str(transformer_run), device="cpu")
    assert translator.model.head_grid[0] == 2
    reading = AlignOptions(method="argmax", tgt_units="chars")
    documents = [parse(s, "html") for s in ("<b>27</b> mars 2016", "le <u>3</u> juin 1999")]
    own = [d[0] for d in translate_documents(translator, documents)]
    found = own_links(translator, own, reading)
    forced = translator.align([d.sentences[0] for d in documents], [t.text for t in own], options=reading)
    assert [sorted(f) for f in found if f is not None] == [sorted(a.links) for a in forced]
    assert None not in found


def test_readings_the_search_cannot_report_are_not_read_off_it(converged_transformer):
    import heed
    from heed.explain.align_methods import AlignOptions
    from heed.markup import translate_documents
    from heed.markup.carry import own_links, search_report

    translator = heed.load(str(converged_transformer), device="cpu")
    for reading in (AlignOptions(layer=0, weights="value_norm"), AlignOptions(layer="mean", head=1)):
        assert search_report(translator, reading) is None
        own = translate_documents(translator, [parse("<b>27</b> mars 2016", "html")], reading=reading)
        assert own_links(translator, own[0], reading, searched=True) == [None]


def test_markup_reads_the_recorded_reading_with_every_unit_linked():
    """A null threshold chosen for AER is left out (a unit below it would fall outside every tag);
    the rest of the recorded reading is kept."""
    from types import SimpleNamespace

    from heed.explain.align_methods import AlignOptions
    from heed.markup.carry import markup_reading

    recorded = AlignOptions(method="argmax", layer=None, head=None, tgt_units="chars", weights="alignment_layer",
                            join="sum", null_threshold=0.5)
    translator = SimpleNamespace(codec=SimpleNamespace(tgt_tokenizer=SimpleNamespace(kind="char")),
                                 default_reading=lambda units: (recorded, "recorded"))
    assert markup_reading(translator) == AlignOptions(method="argmax", layer=None, head=None, tgt_units="chars",
                                                      weights="alignment_layer", join="sum", null_threshold=0.0)


# ---------------------------------------------------------------- heed markup


def test_heed_markup_translates_and_projects_onto_given_translations(dates_rnn, tmp_path):
    from cli_helpers import invoke

    src = tmp_path / "tagged.src"
    src.write_text('<b>27</b> <i>mars</i> <u>2016</u>\nMarch <a href="/x" onclick="f()">4</a>, 2001\n',
                   encoding="utf-8")
    tgt = tmp_path / "plain.tgt"
    tgt.write_text("2016-03-27\n2001-03-04\n", encoding="utf-8")
    projected = invoke("markup", dates_rnn, "--src", src, "--tgt", tgt, "--format", "xml", "-o", tmp_path / "out")
    assert projected.exit_code == 0, projected.output
    lines = (tmp_path / "out").read_text(encoding="utf-8").splitlines()
    # the given translations, untouched, with the source's tags (where: the gold test above measures)
    assert ["".join(etree.fromstring(f"<r>{line}</r>").itertext()) for line in lines] == ["2016-03-27", "2001-03-04"]
    assert sorted(tag for tag, _ in markup_dates.placed_tags(lines[0])) == ["b", "i", "u"]
    assert '<a href="/x" onclick="f()">' in lines[1]
    translated = invoke("markup", dates_rnn, "--src", src, "--beam", "2")
    assert translated.exit_code == 0, translated.output
    assert len(translated.stdout.splitlines()) == 2 and "<u>" in translated.stdout
    same = invoke("translate", dates_rnn, "--input", src, "--format", "html", "--beam", "2")
    assert same.exit_code == 0 and same.stdout == translated.stdout, same.output


@pytest.mark.parametrize("lines, tgt_lines, args, expect", [
    (["<a>one <b>two</a>"], None, ["--format", "xml"], "line 1: column"),
    (["<p>one</p><p>two</p>"], ["un"], [], "line 1 holds 2 blocks"),
    (["one", "two"], ["un"], [], "1 lines, but"),
    (["one"], None, ["--format", "pdf"], "--format 'pdf'"),
    (["one"], None, ["--translate-with", "--format", "xml", "--n-best", "2", "--beam", "2"], "not with --n-best"),
])
def test_heed_markup_bad_input_is_one_line_and_writes_nothing(dates_rnn, tmp_path, lines, tgt_lines, args, expect):
    from cli_helpers import assert_user_error, invoke

    src = tmp_path / "in.src"
    src.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    extra = []
    if tgt_lines is not None:
        (tmp_path / "in.tgt").write_text("".join(line + "\n" for line in tgt_lines), encoding="utf-8")
        extra = ["--tgt", tmp_path / "in.tgt"]
    if args and args[0] == "--translate-with":
        result = invoke("translate", dates_rnn, "--input", src, *args[1:], "-o", tmp_path / "out")
    else:
        result = invoke("markup", dates_rnn, "--src", src, *extra, *args, "-o", tmp_path / "out")
    assert_user_error(result, expect)
    assert not (tmp_path / "out").exists()
