"""docs/cli.md, the command reference: the `--help` of `heed` and of every command and group under
it, in the order `heed --help` lists them, each as heed prints it (80 columns, no colour).

    python tools/cli_reference.py > docs/cli.md        # after changing a command's help
    python tools/cli_reference.py --check              # exit 1 when docs/cli.md is stale

tests/cli/test_cli_reference.py keeps the committed page equal to what this prints, as
tests/config/test_config_reference.py does for docs/config.md (`heed config`).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
WIDTH = 80  # the columns the help is drawn in: narrow enough to read on a phone, and fixed, so the page is stable
# What rich reads to draw the help the same on every machine and terminal.
ENVIRONMENT = {"COLUMNS": str(WIDTH), "TERM": "dumb", "NO_COLOR": "1", "TERMINAL_WIDTH": str(WIDTH)}

HEADER = """# Commands

Every `heed` command's `--help`, as `heed` prints it. This page is generated
(`python tools/cli_reference.py > docs/cli.md`; a test checks it is current), so it says what the
installed version does; the config fields are in the [configuration reference](config.md).
"""


def _commands(command: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The argument paths of `command` and every command under it, depth first, in listed order."""
    out = [path]
    subcommands = getattr(command, "commands", None) or {}
    listed = command.list_commands(None) if subcommands else []  # type: ignore[arg-type]  # click's own order
    for name in listed:
        out += _commands(subcommands[name], (*path, name))
    return out


def reference() -> str:
    """The markdown of docs/cli.md."""
    saved = {key: os.environ.get(key) for key in ENVIRONMENT}
    os.environ.update(ENVIRONMENT)
    try:
        import typer
        from typer.testing import CliRunner

        from heed.cli import app

        runner = CliRunner()
        sections = [HEADER]
        for path in _commands(typer.main.get_command(app)):
            shown = runner.invoke(app, [*path, "--help"], env=ENVIRONMENT, terminal_width=WIDTH)
            if shown.exit_code != 0:
                raise RuntimeError(f"heed {' '.join(path)} --help exited {shown.exit_code}: {shown.output}")
            lines = [line.rstrip() for line in shown.output.strip("\n").splitlines()]
            title = " ".join(("heed", *path))
            sections.append(f"## {title}\n\n```text\n" + "\n".join(lines) + "\n```\n")
        return "\n".join(sections)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def main(argv: list[str]) -> int:
    text = reference()
    if argv[1:] == ["--check"]:
        if DOC.read_text(encoding="utf-8") != text:
            print(f"{DOC} is stale: python tools/cli_reference.py > docs/cli.md", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
