"""`heed import`: a pretrained translator as a heed model directory (heed.pretrained)."""
from __future__ import annotations

from pathlib import Path

import typer

from heed.cli.app import friendly_errors


@friendly_errors
def import_command(
    source: str = typer.Argument(..., help="A Hugging Face model directory (config.json, the weights, the "
                                 "tokenizer files), a Marian release as OPUS-MT publishes it, unzipped (the .npz, "
                                 "vocab.yml, source.spm, target.spm, decoder.yml), or a hub id hf:ORG/NAME, e.g. "
                                 "hf:Helsinki-NLP/opus-mt-fr-en."),
    output: Path = typer.Option(..., "--output", "-o", help="The heed model directory to write (replaced if it "
                                "holds an earlier model)."),
    revision: str | None = typer.Option(None, "--revision", help="With hf:ORG/NAME: the branch, tag or commit to "
                                        "import (default: the main branch); heed.json records the commit."),
    src_lang: str | None = typer.Option(None, "--src-lang", help="A many-language model's (M2M-100, NLLB) default "
                                        "source language, e.g. fra_Latn; other commands may still give another."),
    tgt_lang: str | None = typer.Option(None, "--tgt-lang", help="Its default target language, e.g. eng_Latn."),
) -> None:
    """Import a pretrained translator (OPUS-MT/Marian, M2M-100, NLLB) as a heed model directory,
    which every heed command takes: translate, evaluate, attention, align, attribute, serve, export.
    A hub id downloads into heed's cache (HEED_CACHE, default ~/.cache/heed) from HF_ENDPOINT, with
    your token (HF_TOKEN or `hf auth login`'s) and offline mode (HF_HUB_OFFLINE=1). A many-language
    model reads --src-lang and writes --tgt-lang: here its default pair, or on each command."""
    from heed.pretrained import import_model

    out = import_model(source, output, revision=revision, src_lang=src_lang, tgt_lang=tgt_lang)
    languages = f" ({src_lang or '?'} -> {tgt_lang or '?'})" if src_lang or tgt_lang else ""
    typer.echo(f"imported {source} -> {out}{languages}")
