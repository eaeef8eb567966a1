"""The `heed` command, a thin layer over the library: each command parses its options and calls
heed.train, heed.api, heed.explain, heed.serve, heed.export or heed.data.

    app           the Typer app, its root options, and user errors as one line on stderr (exit 2)
    progress      progress on stderr for the long commands
    decode_flags  the decoding flags every translating command takes
    train         train, prepare, average, config, demo
    translate     translate, evaluate, compare
    explain       attention, align, attribute, faithfulness
    lens          lens (each decoder layer read through the output layer)
    markup        markup (inline HTML/XML tags carried across by the alignment)
    readings      explain READING (every reading of heed.explain.readings, generated from the registry)
    serve, export, data
    pretrained    import (a pretrained translator)

The commands are registered here, in the order `heed --help` lists them.
"""
from heed.cli import data, explain, export, lens, markup, pretrained, readings, serve, train, translate
from heed.cli.app import HeedCommand, app, main

COMMANDS = (
    (train.train, None), (train.prepare, None), (translate.translate, None), (translate.evaluate, None),
    (explain.attention, None), (explain.align, None), (explain.attribute, None), (lens.lens, None),
    (explain.faithfulness_command, "faithfulness"), (markup.markup_command, "markup"), (translate.compare, None), (serve.serve, None),
    (train.average, None), (train.config_command, "config"), (export.export_command, "export"),
    (pretrained.import_command, "import"), (train.demo, None),
)
for command, name in COMMANDS:
    app.command(name, cls=HeedCommand)(command)
for registered in data.data_app.registered_commands:
    registered.cls = HeedCommand
app.add_typer(data.data_app)
app.add_typer(readings.explain_app)  # heed explain READING: one command per registered reading

__all__ = ["app", "main"]
