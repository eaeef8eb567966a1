"""Make the project's virtual environment: isolated from the system's packages, except torch.

    python3 tools/make_venv.py .venv

`make` runs this once. The environment sees none of the system's site-packages, so every other
dependency (pytest, hypothesis, httpx, playwright, fastapi, ...) is installed from the registry at
its newest allowed version: what a fresh machine gets, on every machine, CI included. A system
pytest or a stray pytest plugin cannot change what the suite runs with.

The one exception is torch, which is gigabytes when it is a CUDA build: if the Python running this
script imports torch, the new environment reuses that build. torch and the distributions it
requires (sympy, nvidia-*, triton, ...) are linked, one symlink per top-level entry, into
`VENV/system-torch/`, which a `.pth` file appends to the environment's path. pip inside the
environment sees them as installed, so `torch>=2.1` is satisfied without a download; a package it
installs itself comes first on the path. Without a system torch, the Makefile runs
`pip install torch==2.13.0` in the environment instead: from PyPI on Linux x86_64 that is the CUDA
build, with several GB of nvidia-* packages; it is the CPU build only where pip finds one first (the
CPU index, `--index-url https://download.pytorch.org/whl/cpu`, or a local CPU wheel pip is set up to
use, as on this project's machines). For the CPU build anywhere, run this script, install torch from
the CPU index into the environment, then `make`: it keeps that torch.

An environment made the old way (with `--system-site-packages`) is replaced.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import sysconfig
import venv
from importlib import metadata
from pathlib import Path

SHARED_DIR = "system-torch"


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def torch_closure() -> list[metadata.Distribution]:
    """torch and every installed distribution it requires, transitively, in this Python.
    Requirements only under an extra (`; extra == "opt-einsum"`) are left out; an uninstalled one is
    skipped. Empty when this Python has no torch."""
    found: dict[str, metadata.Distribution] = {}
    todo = ["torch"]
    while todo:
        name = _canonical(todo.pop())
        if name in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        found[name] = dist
        for requirement in dist.requires or []:
            marker = requirement.partition(";")[2]
            if "extra" in marker:
                continue
            match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
            if match:
                todo.append(match.group(1))
    return list(found.values())


def top_level_entries(dist: metadata.Distribution) -> set[Path]:
    """The files and folders a distribution put directly into its site-packages folder (packages,
    modules, its .dist-info, bundled `.libs`), as absolute paths. Scripts outside it are skipped."""
    root = Path(dist.locate_file("")).resolve()
    entries = set()
    for file in dist.files or []:
        parts = Path(file).parts
        if not parts or parts[0] in ("..", "__pycache__") or Path(file).is_absolute():
            continue
        entries.add(root / parts[0])
    return {entry for entry in entries if entry.exists()}


def _site_packages(env: Path) -> Path:
    paths = sysconfig.get_paths(vars={"base": str(env), "platbase": str(env)})
    return Path(paths["purelib"])


def make_venv(env: Path) -> list[str]:
    """Create `env` (replacing one that sees the system's site-packages) with pip, and share this
    Python's torch with it. Returns the names of the shared distributions (empty: no system torch)."""
    config = env / "pyvenv.cfg"
    if config.exists() and re.search(r"include-system-site-packages\s*=\s*true", config.read_text(), re.IGNORECASE):
        print(f"{env} sees the system's site-packages (made by an older Makefile): replacing it", flush=True)
        shutil.rmtree(env)
    if not (env / "bin" / "python").exists():
        venv.EnvBuilder(with_pip=True, system_site_packages=False, symlinks=os.name != "nt").create(env)
    shared = env / SHARED_DIR
    if shared.exists():
        shutil.rmtree(shared)
    closure = torch_closure()
    if closure:
        shared.mkdir()
        for dist in closure:
            for entry in top_level_entries(dist):
                link = shared / entry.name
                if not link.exists():
                    link.symlink_to(entry, target_is_directory=entry.is_dir())
    pth = _site_packages(env) / f"{SHARED_DIR}.pth"
    if closure:
        pth.write_text(f"{shared.resolve()}\n", encoding="utf-8")
    elif pth.exists():
        pth.unlink()
    return [dist.metadata["Name"] for dist in closure]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python3 tools/make_venv.py VENV_DIR", file=sys.stderr)
        return 2
    names = make_venv(Path(argv[0]))
    if names:
        torch = metadata.version("torch")
        print(f"reusing this Python's torch {torch} and what it needs ({len(names)} distributions)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
