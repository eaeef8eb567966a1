"""The README's commands on the demo model run, in the README's order, after the demo (issue 56).

The README's ```bash blocks are read; every command that names `runs/demo` (runs/demo, runs/demo-int8,
runs/demo-seed2, ...) runs as written, with the commands that make its inputs (PREREQUISITES), in a
temporary directory laid out as a clone is after `make demo`. What differs from a real clone, and
why, is the size: `configs/demo.yaml` there is the repository's with a few hundred dates, a 16-unit
model, 2 epochs and outputs of at most 11 tokens (SHRINK), so that `heed demo`, which `make demo`
runs and which trains the model as the demo always does (heed.demo.run_demo reads configs/demo.yaml
from the current directory), takes seconds; every command then finds `runs/demo`,
`runs/demo/data/test.src`, ... where the README says; configs/own_data.yaml, the README's config to
copy, is shrunk the same way. A command changed to stay small says how and
why in SUBSTITUTED. `heed` commands run in this process (typer's CliRunner; `<<< TEXT` and `< FILE` are
its input), anything else under bash, with `.venv/bin/heed` and `.venv/bin/python` standing for this
interpreter. The Python blocks that load runs/demo run too, in one namespace, in order.
A command the test cannot run says why in SKIPPED; a command known to fail today is in KNOWN_FAILING.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml
from cli_helpers import invoke

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# The pages the README's commands on runs/demo moved to (issue 55), and docs/markup.md's, in the order
# their commands run:
# an export before the command that reads it beside the model, a second seed before its ensemble.
PAGES = tuple(ROOT / "docs" / name for name in (
    "guide/training.md", "guide/alignments.md", "guide/looking-inside.md", "guide/distributed.md",
    "guide/python-api.md", "guide/ensembles.md", "guide/export.md", "guide/serving.md", "markup.md"))
# The configs a README command trains, shrunk by SHRINK's model, train and decode fields.
SHRUNK_CONFIGS = ("demo.yaml", "own_data.yaml")

# configs/demo.yaml's own fields, shrunk: the same task, model kind and training, far smaller.
SHRINK = {"data": {"dates": {"n_train": 300, "n_dev": 20, "n_test": 30}},
          "model": {"embed_size": 8, "hidden_size": 16},
          "train": {"epochs": 2},
          # a half-trained model's outputs may not end: the dates' 10 characters and </s> are all it may write,
          # so that attribution (a pass per output token and step) stays small
          "decode": {"max_len_a": 0.0, "max_len_b": 11}}

# Commands without runs/demo whose outputs the runs/demo commands read, as the README writes them.
PREREQUISITES = (
    ".venv/bin/heed data task dates data/dates --config configs/demo.yaml",
    "head -20 data/dates/test.src > few.src",
)

# What the test changes in a command, and why: (the README's text, the test's, the reason).
SUBSTITUTED = (
    ("head -20 data/dates/test.src > few.src", "head -2 data/dates/test.src > few.src",
     "heed attribute's integrated gradients take seconds a sentence: 2 sentences, not 20"),
)

# Commands naming runs/demo that this test does not run, each with its reason (a fragment of the
# command, the reason).
SKIPPED = (
    ("make demo", "what this test does first, on the shrunk config: .venv/bin/heed demo"),
    ("make test", "the whole suite, this test among it"),
    ("hf:Helsinki-NLP/opus-mt-fr-en", ("downloads from the Hugging Face hub; the conversion runs offline in "
                                       "tests/pretrained/test_pretrained*.py and docs/pretrained.md's worked example")),
    ("models/opus-fr-en", "reads the model the download above writes"),
    ("heed serve ", ("starts a server that runs until stopped (the server: tests/cli/test_cli_serve.py, "
                     "tests/serve/test_serve_api.py)")),
    ("HEED_SCREENSHOT=1", "needs Chromium and remakes docs/explorer.png (tests/serve/test_serve_browser.py)"),
    ("--src tagged.html", ("reads a user's own tagged file and translations (heed markup --tgt: "
                           "tests/markup/test_markup.py)")),
    ("--processes 2", ("starts two training processes of the whole demo config (--processes: "
                       "tests/train/test_distributed.py)")),
)

# Commands naming runs/demo known to fail today: each still runs (so a fix is seen) but may exit non-zero.
# Empty: `heed align --beside runs/demo-int8` failed until the recorded reading fell back (issue 56).
KNOWN_FAILING: tuple[tuple[str, str], ...] = ()


def bash_commands(text: str) -> list[str]:
    """The commands of every ```bash block of `text`, in order, one per logical line
    (backslash-newline continuations joined), comments and blank lines dropped."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                commands.append(" ".join(line.split()))
    return commands


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def page_texts() -> list[str]:
    """README.md's text, then each page's of PAGES."""
    return [README.read_text(encoding="utf-8")] + [page.read_text(encoding="utf-8") for page in PAGES]


def demo_commands(texts: list[str]) -> list[str]:
    """Every command of the README (texts[0]), then the pages' commands on the demo model and the
    ones that make their inputs, in order."""
    wanted = bash_commands(texts[0])
    for text in texts[1:]:
        wanted += [c for c in bash_commands(text)
                   if "runs/demo" in c or c.split(" #")[0].strip() in PREREQUISITES]
    missing = [p for p in PREREQUISITES if p not in (c.split(" #")[0].strip() for c in wanted)]
    assert not missing, f"the README and its pages no longer have {missing}: update PREREQUISITES"
    return wanted


def reason_to_skip(command: str) -> str | None:
    return next((reason for fragment, reason in SKIPPED if fragment in command), None)


def known_failure(command: str) -> str | None:
    return next((reason for fragment, reason in KNOWN_FAILING if fragment in command), None)


def test_readme_lists_the_demo_commands_this_test_runs():
    commands = demo_commands(page_texts())
    assert len(commands) >= 15, commands
    assert any(c.startswith(".venv/bin/heed align runs/demo ") for c in commands)
    for fragment, *_ in SKIPPED + KNOWN_FAILING + SUBSTITUTED:  # each entry still matches a README command
        assert any(fragment in c for c in commands), f"{fragment!r} is in no README command: drop its entry"


def test_the_readme_starts_with_make_demo_and_make_test_and_stays_short():
    text = README.read_text(encoding="utf-8")
    assert [c.split(" #")[0].strip() for c in bash_commands(text)[:2]] == ["make demo", "make test"]
    assert len(text.splitlines()) < 250


def _clone_after_demo(tmp: Path) -> None:
    """`tmp` as a clone is for the README's commands: configs/demo.yaml (shrunk), .venv/bin/heed
    and .venv/bin/python (this interpreter, this heed)."""
    (tmp / "configs").mkdir()
    for name in SHRUNK_CONFIGS:
        config = yaml.safe_load((ROOT / "configs" / name).read_text(encoding="utf-8"))
        for section, fields in SHRINK.items():
            for key, value in fields.items():
                if isinstance(value, dict) and key in config[section]:
                    config[section][key].update(value)
                elif not isinstance(value, dict):
                    config.setdefault(section, {})[key] = value
                # data.dates: the demo's task only; own_data.yaml reads the files the shrunk task wrote
        (tmp / "configs" / name).write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    bin_dir = tmp / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    (bin_dir / "heed").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m heed "$@"\n', encoding="utf-8")
    (bin_dir / "heed").chmod(0o755)


def _run(command: str, tmp: Path):
    """(exit code, output) of one README command in `tmp`."""
    words = shlex.split(command, comments=True)
    plain = all(w not in ("|", ">", ">>", "&&", ";", "||", "2>") for w in words) and "=" not in words[0]
    if plain and words[0] == ".venv/bin/heed":
        args, stdin = [], None
        it = iter(words[1:])
        for word in it:
            if word == "<<<":
                stdin = next(it) + "\n"
            elif word == "<":
                stdin = (tmp / next(it)).read_text(encoding="utf-8")
            else:
                args.append(word)
        result = invoke(*args, input=stdin)
        detail = result.output + (f"\n{result.exception!r}" if result.exit_code not in (0, 2) else "")
        return result.exit_code, detail
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(["bash", "-c", command], cwd=tmp, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    return done.returncode, done.stdout + done.stderr


def test_readme_demo_commands_run_in_order(tmp_path, monkeypatch):
    texts = page_texts()
    _clone_after_demo(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, output = _run(".venv/bin/heed demo", tmp_path)  # what `make demo` runs, on the shrunk config
    assert code == 0, output
    assert (tmp_path / "runs" / "demo" / "model" / "heed.json").is_file()

    ran, skipped = [], []
    for command in demo_commands(texts):
        reason = reason_to_skip(command)
        if reason:
            skipped.append((command, reason))
            continue
        for readme_text, test_text, _ in SUBSTITUTED:
            command = command.replace(readme_text, test_text)
        code, output = _run(command, tmp_path)
        if known_failure(command) is None:
            assert code == 0, f"README command failed after the demo (exit {code}):\n  {command}\n{output}"
        ran.append(command)
    assert len(ran) >= 14 and len(skipped) >= 3, (ran, skipped)

    namespace: dict = {}
    for block in (block for text in texts for block in python_blocks(text)):
        if "runs/demo" in block or "translator." in block:  # the API blocks; the second reuses the first's names
            exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102 - the README's own code, as a user runs it
    assert "translator" in namespace and namespace["e"] is not None
