"""Markup carried across a translation by the model's own word alignment.

    marked = parse(text, "html")                      # heed.markup.document
    outputs = translator.translate(marked.sentences)  # or any translation of them (a person's, another engine's)
    carry(translator, marked, outputs) -> the translated markup

The alignment is a forced pass of the model over each (sentence, translation) pair, read as the
model's recorded reading (the heads guided alignment trained, else the rule measured for its kind:
Translator.default_reading) with every target unit linked (markup_reading), unless `options` names
another; or, with `aligner` "priors" or
"both", eflomal with the statistical `priors` (heed.explain.priors) on the pairs alone, or those
links joined with the model's; so a translation the model did not
write is carried the same way (projection onto a given translation). A model that writes
characters is aligned in characters, so a tag can wrap part of a target word.
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from heed.markup.document import Kind, Marked, parse
from heed.markup.placement import Units, place
from heed.plumbing.collector import collector_paused

if TYPE_CHECKING:
    from heed.api import Translation, Translator
    from heed.explain.align_methods import AlignOptions
    from heed.explain.priors import Aligner, Priors
    from heed.results import Alignment


def target_units(translator: Translator) -> Units:
    """Characters for a model whose target tokenizer writes characters, else words."""
    return "chars" if getattr(translator.codec.tgt_tokenizer, "kind", "") == "char" else "words"


def carry(translator: Translator, marked: Marked, outputs: Sequence[str], *,
          options: AlignOptions | None = None, batch_size: int = 64, aligner: Aligner = "model",
          priors: Priors | None = None) -> str:
    """`marked` with each sentence replaced by its translation in `outputs` (same order) and its
    inline elements placed by the alignment of sentence and translation (see the module doc)."""
    return carry_many(translator, [marked], [outputs], options=options, batch_size=batch_size, aligner=aligner,
                      priors=priors)[0]


def carry_many(translator: Translator, documents: Sequence[Marked], outputs: Sequence[Sequence[str]], *,
               options: AlignOptions | None = None, batch_size: int = 64,
               translations: Sequence[Sequence[Translation | None]] | None = None, aligner: Aligner = "model",
               priors: Priors | None = None, stop: Callable[[], bool] | None = None, searched: bool = False) -> list[str]:
    """`carry` for many documents, their sentences aligned in one batched pass. Renders each
    document's tree in place: render a Marked once. `translations` (optional, as `outputs`; None
    where there is none): the model's own Translations of the sentences; where the reading is the
    attention the search reports, their links are read off it (`own_links`) instead of a second,
    forced pass; `searched`: they come from translate_documents(reading=options), which has the
    search report the reading where it can. `aligner`: whose links (heed.explain.priors.aligner_links); priors or both align
    every pair. `stop`: the forced pass stops (heed.errors.Abandoned) once it turns true (a server's
    time limit)."""
    with collector_paused():  # many objects, all freed on return: no full collection (heed.plumbing.collector)
        return _carry_many(translator, documents, outputs, options=options, batch_size=batch_size,
                           translations=translations, aligner=aligner, priors=priors, stop=stop, searched=searched)


def _carry_many(translator: Translator, documents: Sequence[Marked], outputs: Sequence[Sequence[str]], *,
                options: AlignOptions | None, batch_size: int, translations: Sequence[Sequence[Translation | None]] | None,
                aligner: Aligner, priors: Priors | None, stop: Callable[[], bool] | None, searched: bool) -> list[str]:
    from heed.data.corpus import Pair
    from heed.explain.priors import aligner_links

    for marked, translated in zip(documents, outputs, strict=True):
        if len(translated) != len(marked.sentences):
            raise ValueError(f"{len(marked.sentences)} sentences but {len(translated)} translations")
    if options is None:
        options = markup_reading(translator)
    runs = [(d, k, run, out) for d, (marked, translated) in enumerate(zip(documents, outputs))
            for k, (run, out) in enumerate(zip(marked.runs, translated))]
    pairs = [(d, k, run.text, out) for d, k, run, out in runs if run.spans and out.strip()]
    links: dict[tuple[int, int], list[tuple[int, int]]] = {}
    if translations is not None and aligner == "model":
        mine = [(d, k, t) for d, k, _, out in pairs if (t := translations[d][k]) is not None and t.text == out]
        found = own_links(translator, [t for _, _, t in mine], options, searched=searched)
        links.update({(d, k): f for (d, k, _), f in zip(mine, found) if f is not None})
        pairs = [p for p in pairs if (p[0], p[1]) not in links]
    if pairs:
        chosen = options

        def model() -> list[Alignment]:
            return translator.align([p[2] for p in pairs], [p[3] for p in pairs], options=chosen, batch_size=batch_size,
                                    stop=stop)

        aligned = aligner_links(aligner, model, [Pair(p[2], p[3]) for p in pairs], priors, units=options.tgt_units)
        links.update({(d, k): sorted(found) for (d, k, _, _), found in zip(pairs, aligned)})  # beside own_links
    placed: list[list[tuple[str, list[tuple[int, int]]]]] = [[] for _ in documents]
    for d, k, run, out in runs:
        placed[d].append((out, place(run.text, run.spans, out, links.get((d, k), []), options.tgt_units)))
    return [marked.render(p) for marked, p in zip(documents, placed)]


def markup_reading(translator: Translator) -> AlignOptions:
    """The reading markup is placed by: the model's recorded one (Translator.default_reading, in
    target_units) with every target unit linked, its null threshold left out. A threshold is chosen
    for AER; a unit it leaves unlinked falls outside every element, and a word whose units all fall
    below it loses its element to the diagonal (bench/RESULTS.md, "Markup carried across by the
    alignment": 98.56% of the dates' tags exact with the layer's 0.5, 99.16% without)."""
    from dataclasses import replace

    options, _ = translator.default_reading(target_units(translator))
    return replace(options, null_threshold=0.0)


def translate_markup(translator: Translator, texts: Sequence[str], *, kind: Kind = "html",
                     ignore_tags: Sequence[str] = (), options: AlignOptions | None = None,
                     aligner: Aligner = "model", priors: Priors | None = None, **decode: Any) -> list[str]:
    """Each of `texts`, a fragment of `kind`, translated with its inline markup carried across;
    `decode`: Translator.translate's options (beam, ...)."""
    with collector_paused():  # the fragments live to the end, then die by reference counting
        documents = [parse(text, kind, ignore_tags=ignore_tags) for text in texts]
        reading = markup_reading(translator) if options is None else options
        own = translate_documents(translator, documents, reading=reading if aligner == "model" else None, **decode)
        return carry_many(translator, documents, [[t.text for t in d] for d in own], options=reading,
                          translations=own, aligner=aligner, priors=priors, searched=True)


def translate_documents(translator: Translator, documents: Sequence[Marked], *, reading: AlignOptions | None = None,
                        **decode: Any) -> list[list[Translation]]:
    """Each document's sentences translated, all documents' in one call (`decode`: Translator.translate's
    options), as one list per document. With `reading`, each Translation's attention is that
    reading's where the search can report it (search_report: a layer's head of a Transformer),
    so that own_links(..., searched=True) reads the links off it; else the search's own."""
    sentences = [s for d in documents for s in d.sentences]
    report = None if reading is None else search_report(translator, reading)
    searcher = translator if report is None else _reporting(translator, report)
    translated = searcher.translate(sentences, **decode) if sentences else []
    own, at = [], 0
    for document in documents:
        own.append(translated[at:at + len(document.sentences)])
        at += len(document.sentences)
    return own


def own_links(translator: Translator, translations: Sequence[Translation], options: AlignOptions, *,
              searched: bool = False) -> list[list[tuple[int, int]] | None]:
    """For each translation, the links `translator.align(source, translation.text, options=options)`
    gives, read off the attention the search recorded while writing it: a forced pass over the
    model's own output computes that same attention again (the same states, token by token).
    `searched`: the translations come from translate_documents(reading=options), so their
    attention is the reading wherever search_report names one. None where that does not hold or
    cannot be checked: a reading the search did not report (value norms, rollout, the alignment
    layer, a mean over layers), a source cut at max_src_len, or a text that does not tokenize back
    into the tokens the search wrote."""
    from dataclasses import replace

    from heed.explain.forced import ForcedPair, links_of

    if not (reads_search_attention(translator, options) or (searched and search_report(translator, options))):
        return [None] * len(translations)
    reported = replace(options, layer=None, head=None)  # the search's attention is the reading: one layer, one head
    out: list[list[tuple[int, int]] | None] = []
    for translation in translations:
        attention = translation.attention
        if (attention is None or translation.truncated or not translation.tokens
                or attention.shape != (len(translation.tokens) + 1, len(translation.src_tokens) + 1)
                or translator.codec.tgt_tokens(translation.text) != translation.tokens):
            out.append(None)
            continue
        pair = ForcedPair(translation.src_tokens, translation.tokens,
                          attention[None, None, :, : len(translation.src_tokens)])  # (1, 1, tgt_len + 1, src_len)
        maps = pair.unit_maps(translator.codec, translation.text, options.tgt_units)
        out.append(list(links_of(pair, maps, reported, 0)[1]))
    return out


def search_report(translator: Translator, options: AlignOptions) -> tuple[int, tuple[int, ...] | None] | None:
    """The (decoder layer, heads) whose attention the translator's search can report as the
    reading `options` (heed.explain.pairs.search_report); None where it cannot."""
    from heed.explain.pairs import search_report as report_of

    return report_of(translator.model, options)


def _reporting(translator: Translator, report: tuple[int, tuple[int, ...] | None]) -> Translator:
    """`translator` (the same model, not copied) whose search reports `report`'s attention."""
    from heed.explain.pairs import Reporting

    other = copy.copy(translator)
    other.model = Reporting(translator.model, report)
    return other


def reads_search_attention(translator: Translator, options: AlignOptions) -> bool:
    """Whether the reading `options` is the attention the search reports (the default attention,
    or the one attention of a model with one layer and head), so `own_links` can read a
    translation's links off the search instead of a forced pass."""
    from heed.explain.forced import attention_shape

    layers, heads, _ = attention_shape(translator.model)
    return options.weights == "attention" and (options.default_attention or (layers, heads) == (1, 1))
