"""Markup carried across a translation by the model's own word alignment.

    marked = parse(text, "html")                      # heed.markup.document
    outputs = translator.translate(marked.sentences)  # or any translation of them (a person's, another engine's)
    carry(translator, marked, outputs) -> the translated markup

The alignment is a forced pass of the model over each (sentence, translation) pair, read as the
model's recorded reading (the heads guided alignment trained, else the rule measured for its kind:
Translator.default_reading), unless `options` names another; or, with `aligner` "priors" or
"both", eflomal with the statistical `priors` (heed.explain.priors) on the pairs alone, or those
links joined with the model's; so a translation the model did not
write is carried the same way (projection onto a given translation). A model that writes
characters is aligned in characters, so a tag can wrap part of a target word.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from heed.markup.document import Kind, Marked, parse
from heed.markup.placement import Units, place

if TYPE_CHECKING:
    from heed.api import Translator
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
               options: AlignOptions | None = None, batch_size: int = 64, aligner: Aligner = "model",
               priors: Priors | None = None) -> list[str]:
    """`carry` for many documents, their sentences aligned in one batched pass (`aligner`: whose
    links, heed.explain.priors.aligner_links). Renders each document's tree in place: render a
    Marked once."""
    from heed.data.corpus import Pair
    from heed.explain.priors import aligner_links

    for marked, translated in zip(documents, outputs, strict=True):
        if len(translated) != len(marked.sentences):
            raise ValueError(f"{len(marked.sentences)} sentences but {len(translated)} translations")
    if options is None:
        options, _ = translator.default_reading(target_units(translator))
    runs = [(d, k, run, out) for d, (marked, translated) in enumerate(zip(documents, outputs))
            for k, (run, out) in enumerate(zip(marked.runs, translated))]
    pairs = [(d, k, run.text, out) for d, k, run, out in runs if run.spans and out.strip()]
    links: dict[tuple[int, int], list[tuple[int, int]]] = {}
    if pairs:
        chosen = options

        def model() -> list[Alignment]:
            return translator.align([p[2] for p in pairs], [p[3] for p in pairs], options=chosen, batch_size=batch_size)

        aligned = aligner_links(aligner, model, [Pair(p[2], p[3]) for p in pairs], priors, units=options.tgt_units)
        links = {(d, k): sorted(found) for (d, k, _, _), found in zip(pairs, aligned)}
    placed: list[list[tuple[str, list[tuple[int, int]]]]] = [[] for _ in documents]
    for d, k, run, out in runs:
        placed[d].append((out, place(run.text, run.spans, out, links.get((d, k), []), options.tgt_units)))
    return [marked.render(p) for marked, p in zip(documents, placed)]


def translate_markup(translator: Translator, texts: Sequence[str], *, kind: Kind = "html",
                     ignore_tags: Sequence[str] = (), options: AlignOptions | None = None,
                     aligner: Aligner = "model", priors: Priors | None = None, **decode: Any) -> list[str]:
    """Each of `texts`, a fragment of `kind`, translated with its inline markup carried across;
    `decode`: Translator.translate's options (beam, ...)."""
    documents = [parse(text, kind, ignore_tags=ignore_tags) for text in texts]
    sentences = [s for d in documents for s in d.sentences]
    translated = [t.text for t in translator.translate(sentences, **decode)] if sentences else []
    outputs, at = [], 0
    for document in documents:
        outputs.append(translated[at:at + len(document.sentences)])
        at += len(document.sentences)
    return carry_many(translator, documents, outputs, options=options, aligner=aligner, priors=priors)
