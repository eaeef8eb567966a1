"""`heed export`: a model for ONNX Runtime or CTranslate2 (heed.export)."""
from __future__ import annotations

from pathlib import Path

import typer

from heed.cli.app import friendly_errors


@friendly_errors
def export_command(
    model: Path = typer.Argument(..., help="Model directory (or a training output directory)."),
    output: Path = typer.Option(..., "--output", "-o", help="The exported directory to write (replaced if it "
                                "holds an earlier export)."),
    int8: bool = typer.Option(False, "--int8", help="Store the weights in 8 bits (ONNX Runtime's dynamic "
                              "quantization, or CTranslate2's int8): smaller and faster on the CPU, slightly "
                              "less accurate. On an x86 CPU without VNNI, where int8 products saturate, a "
                              "CTranslate2 export multiplies in int16."),
    export_format: str = typer.Option("onnx", "--format", help="onnx: an encoder graph and a decoder-step graph "
                                      "that heed's own search runs with ONNX Runtime (any model; the explorer, "
                                      "alignments and every decode option work). ctranslate2: a Transformer as a "
                                      "CTranslate2 model, translated by CTranslate2's C++ search (the fastest on "
                                      "the CPU; translate, evaluate and serve, not the explorer's beam tree or "
                                      "alignments; needs heed-nmt[ct2]). Its greedy output, best beam "
                                      "hypothesis and n-best list are heed's (with a length penalty or an "
                                      "n-best list CTranslate2 searches to the length limit and heed ranks). "
                                      "argos: an Argos Translate package "
                                      "(-o NAME.argosmodel) of the CTranslate2 model, for LibreTranslate: a "
                                      "Transformer with one SentencePiece model for both sides "
                                      "(data.shared_vocab); needs --source-lang, --target-lang and "
                                      "heed-nmt[argos]."),
    source_lang: str = typer.Option(None, "--source-lang", help="With --format argos: the source language's "
                                    "ISO 639 code (en), as LibreTranslate lists it."),
    target_lang: str = typer.Option(None, "--target-lang", help="With --format argos: the target language's "
                                    "ISO 639 code."),
) -> None:
    """Export a model for deployment: the model for a runtime (ONNX graphs, or CTranslate2's model
    with --format ctranslate2), the tokenizers and vocabularies, and a manifest (heed version, model
    config, sha256 of every file). `heed translate`, `heed evaluate`, `heed serve` and `heed.load`
    take the exported directory and run it on the CPU. Needs `pip install 'heed-nmt[onnx]'`
    (or '[ct2]')."""
    from heed.export.onnx import export_model

    if export_format == "argos":
        from heed.export.argos import export_argos

        out = export_argos(model, output, source_lang=source_lang, target_lang=target_lang, int8=int8)
    else:
        out = export_model(model, output, int8=int8, kind=export_format)
    typer.echo(f"exported {model} -> {out} ({export_format}{', int8' if int8 else ''})")
