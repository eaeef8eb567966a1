"""`heed import`: a pretrained translator as a heed model directory (heed.pretrained)."""
from __future__ import annotations

from pathlib import Path

import typer

from heed.cli.app import friendly_errors


@friendly_errors
def import_command(
    source: str = typer.Argument(..., help="A Hugging Face model directory (config.json, the weights, the "
                                 "tokenizer files), or a hub id hf:ORG/NAME, e.g. hf:Helsinki-NLP/opus-mt-fr-en."),
    output: Path = typer.Option(..., "--output", "-o", help="The heed model directory to write (replaced if it "
                                "holds an earlier model)."),
    revision: str | None = typer.Option(None, "--revision", help="With hf:ORG/NAME: the branch, tag or commit to "
                                        "import (default: the main branch); heed.json records the commit."),
) -> None:
    """Import a pretrained translator (OPUS-MT/Marian) as a heed model directory, which every heed
    command takes: translate, evaluate, attention, align, attribute, serve, export. A hub id
    downloads through huggingface_hub, with your hub cache, token and offline mode
    (HF_HUB_OFFLINE=1)."""
    from heed.pretrained import import_model

    out = import_model(source, output, revision=revision)
    typer.echo(f"imported {source} -> {out}")
