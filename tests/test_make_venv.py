"""tools/make_venv.py, which `make` runs: an environment that sees none of the system's packages
but reuses its torch. Here the "system" Python is the one running the tests (it has torch, pytest
and heed), so the new environment must import torch from the same files and must not see pytest."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _load_tool():
    spec = importlib.util.spec_from_file_location("make_venv", ROOT / "tools" / "make_venv.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(python: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120)


def test_the_closure_of_torch_holds_torch_and_what_it_requires_but_not_extras():
    names = {dist.metadata["Name"].lower() for dist in _load_tool().torch_closure()}
    assert {"torch", "sympy", "filelock", "networkx", "jinja2", "fsspec"} <= names
    assert "pytest" not in names and "heed-nmt" not in names and "numpy" not in names


def test_the_environment_reuses_torch_and_nothing_else(tmp_path):
    env = tmp_path / "venv"
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "make_venv.py"), str(env)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"reusing this Python's torch {torch.__version__}" in done.stdout
    python = env / "bin" / "python"
    seen = _run(python, "import torch, os; print(torch.__version__); print(os.path.realpath(torch.__file__))")
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.split() == [torch.__version__, str(Path(torch.__file__).resolve())]
    for name in ("pytest", "heed", "hypothesis"):
        hidden = _run(python, f"import {name}")
        assert hidden.returncode == 1 and "ModuleNotFoundError" in hidden.stderr, name
    # pip inside the environment counts the shared torch as installed: `torch>=2.1` needs no download
    shown = subprocess.run([str(python), "-m", "pip", "show", "torch"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and f"Version: {torch.__version__}" in shown.stdout


def test_an_environment_that_sees_the_system_packages_is_replaced(tmp_path):
    env = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(env)], check=True,
                   timeout=120)
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "make_venv.py"), str(env)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "replacing it" in done.stdout
    assert "include-system-site-packages = false" in (env / "pyvenv.cfg").read_text()
    assert _run(env / "bin" / "python", "import pytest").returncode == 1
