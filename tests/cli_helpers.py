"""The command line in tests: run `heed` in-process and check a user error the house way. Shared by
the CLI test files (importable: pyproject puts tests/ on the path) and by conftest's fixtures."""
from __future__ import annotations

from typing import Any

from typer.testing import CliRunner

from heed.cli import app


def invoke(*args: Any, input: str | None = None, env: dict[str, str] | None = None) -> Any:
    """`heed ARGS` run in-process (typer's CliRunner): its Result (exit_code, stdout, stderr); `env`
    entries are set for the run (None values unset)."""
    return CliRunner().invoke(app, [str(a) for a in args], input=input, env=env)


def assert_user_error(result: Any, *fragments: str) -> None:
    """Exit code 2, a message of one or two lines starting "error:" and naming every fragment
    (whitespace runs read as one space), no traceback: the house rule for a user's mistake."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    message = result.stderr.strip()
    assert message.startswith("error:") and len(message.splitlines()) <= 2, message
    flat = " ".join(message.split())
    for fragment in fragments:
        assert fragment in flat, (fragment, message)
