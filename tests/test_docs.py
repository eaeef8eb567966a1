"""The docs' examples run as a user runs them (issue 56): docs/pretrained.md's worked example is
taken out of the markdown and run as a script, in a subprocess, in an empty folder, with no network
and without this repository's tests package on the path."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRETRAINED = ROOT / "docs" / "pretrained.md"


def section(text: str, heading: str) -> str:
    """The markdown of the `## heading` section of `text`, up to the next `## `."""
    start = text.index(f"## {heading}")
    end = text.find("\n## ", start + 3)
    return text[start:end if end >= 0 else len(text)]


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", markdown, flags=re.MULTILINE | re.DOTALL)


def test_worked_example_imports_nothing_of_the_repository():
    example = python_blocks(section(PRETRAINED.read_text(encoding="utf-8"), "A worked example"))
    assert len(example) == 1
    assert not re.search(r"^\s*(from|import)\s+tests\b", example[0], flags=re.MULTILINE)


def test_pretrained_worked_example_runs_as_written(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("sentencepiece")
    example = python_blocks(section(PRETRAINED.read_text(encoding="utf-8"), "A worked example"))[0]
    script = tmp_path / "tiny_marian.py"
    script.write_text(example, encoding="utf-8")
    # heed as this checkout has it (a user's is installed); nothing else of the repository, and no hub
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_HOME": str(tmp_path / "hf-home"), "HEED_CACHE": str(tmp_path / "heed-cache"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, script.name], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    tokens = done.stdout.strip().splitlines()[-1]
    assert tokens.startswith("[") and tokens.endswith("]"), done.stdout  # the tokens' list, printed
    assert (tmp_path / "tiny-marian" / "config.json").is_file()
    assert (tmp_path / "tiny-heed" / "heed.json").is_file()
    meta = json.loads((tmp_path / "tiny-heed" / "heed.json").read_text(encoding="utf-8"))
    assert meta["pretrained"]["architecture"] == "MarianMTModel"


def test_local_directory_section_names_the_real_special_ids():
    text = section(PRETRAINED.read_text(encoding="utf-8"), "A local Hugging Face directory")
    assert "43,311" in text and "53,016" in text
    assert "MarianConfig.from_json_file" in text and "/work/shared/data/opus-mt-tc-big-fr-en" in text
