"""What a user sees of heed's surface, held still across refactors: every command's help (its text,
and every option's flags, help, default and type, as click describes them) and the server's OpenAPI
schema, byte for byte against tests/snapshots/. A change to either must be meant: rerun with
HEED_UPDATE_SNAPSHOTS=1 to rewrite the files, and the diff shows what users will see."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import typer

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
UPDATE = os.environ.get("HEED_UPDATE_SNAPSHOTS") == "1"


def _canonical(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False, default=repr) + "\n"


def _check(name: str, text: str) -> None:
    path = SNAPSHOTS / name
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"{path} is missing: run with HEED_UPDATE_SNAPSHOTS=1 to make it"
    assert text == path.read_text(encoding="utf-8"), f"{name} changed; if that is meant, HEED_UPDATE_SNAPSHOTS=1"


def _params(command: Any) -> list[dict[str, Any]]:
    """Each option's and argument's flags, help, default, bounds and whether it is required."""
    fields = ("name", "opts", "secondary_opts", "help", "default", "required", "hidden", "min", "max")
    return [{f: getattr(p, f, None) for f in fields} for p in command.params]


def _commands(command: Any, path: tuple[str, ...] = ("heed",)) -> dict[str, Any]:
    """Every command and group under `command`, by its full name: its help and its parameters."""
    out = {" ".join(path): {"help": command.help, "epilog": command.epilog, "params": _params(command)}}
    for name, sub in (getattr(command, "commands", None) or {}).items():
        out.update(_commands(sub, (*path, name)))
    return out


def test_every_commands_help_is_as_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("TERM", "dumb")
    monkeypatch.setenv("NO_COLOR", "1")
    from typer.testing import CliRunner

    from heed.cli import app

    commands = _commands(typer.main.get_command(app))
    assert {"heed", "heed train", "heed translate", "heed serve", "heed data get"} <= set(commands)
    runner = CliRunner()
    for name, info in commands.items():
        shown = runner.invoke(app, [*name.split()[1:], "--help"])
        assert shown.exit_code == 0, (name, shown.output)
        # The frame of the rendered text depends on rich's version; the words do not.
        info["help_text"] = " ".join(shown.output.replace("│", " ").replace("─", " ").replace("╭", " ")
                                     .replace("╮", " ").replace("╰", " ").replace("╯", " ").split())
    _check("cli_help.json", _canonical(commands))


def test_the_openapi_schema_is_as_recorded(trained_run: Path) -> None:
    pytest.importorskip("fastapi", reason="heed-nmt[serve] is not installed")
    from heed.api import Translator
    from heed.serve.app import create_app

    schema = create_app({"tiny": Translator.load(trained_run, device="cpu")}).openapi()
    _check("openapi.json", _canonical(schema))
