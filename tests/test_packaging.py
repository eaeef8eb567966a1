"""The package as a user installs it: `python -m build` makes a wheel and an sdist named heed-nmt
(the name `heed` on PyPI is another project's), the wheel carries the explorer's files and the
font, and installed into a fresh virtual environment it runs `heed --help` and translates."""
from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CARRIED = ["heed/serve/static/index.html", "heed/serve/static/explorer.js", "heed/serve/static/explorer.css",
           "heed/fonts/HeedCJKSans-Regular.ttf", "heed/fonts/NOTICE", "heed/py.typed"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("build", reason="the dev extra's `build` is not installed")
    out = tmp_path_factory.mktemp("dist")
    # Built from a copy of the sources, so the build's own files (build/, *.egg-info) stay out of the clone.
    source = tmp_path_factory.mktemp("source") / "heed"
    local = {".git", ".venv", "runs", "data", "build", "dist"}  # the clone's own folders, at its top only

    def ignore(folder: str, names: list[str]) -> set[str]:
        top = local if Path(folder) == REPO else set()
        return {n for n in names if n in top or n.endswith(".egg-info") or n in ("__pycache__", ".pytest_cache")}

    shutil.copytree(REPO, source, ignore=ignore)
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--sdist", "--outdir", str(out),
                           str(source)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # setuptools stops taking the `license = {text = ...}` table after 2027-02-18: an SPDX string now
    assert "project.license" not in done.stdout + done.stderr, done.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


def test_the_distribution_is_heed_nmt_and_carries_the_explorer_and_the_font(built):
    import heed

    assert built["wheel"].name == f"heed_nmt-{heed.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(built["wheel"]) as wheel:
        names = set(wheel.namelist())
        metadata = wheel.read(f"heed_nmt-{heed.__version__}.dist-info/METADATA").decode()
        scripts = wheel.read(f"heed_nmt-{heed.__version__}.dist-info/entry_points.txt").decode()
    assert set(CARRIED) <= names
    assert "Name: heed-nmt" in metadata and "heed = heed.cli:main" in scripts
    assert "License-Expression: MIT" in metadata and f"heed_nmt-{heed.__version__}.dist-info/licenses/LICENSE" in names
    assert not any(n.startswith(("tests/", "bench/")) for n in names)
    with tarfile.open(built["sdist"]) as sdist:
        members = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
    assert {f"src/{c}" for c in CARRIED} <= members and "pyproject.toml" in members


def test_the_wheel_installed_in_a_fresh_venv_runs_help_and_translates(built, trained_run, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                    "--quiet", str(built["wheel"])], check=True, timeout=300)
    # heed's dependencies come from this environment's site directories, added as plain paths: its
    # editable heed (a .pth finder) is not, so the fresh venv can only import heed from the wheel.
    ours = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True,
                          text=True, check=True).stdout.strip()
    # (and the system's torch, where `make` shares it through tools/make_venv.py's system-torch/)
    dependencies = [p for p in (*site.getsitepackages(), site.getusersitepackages(),
                                *(p for p in sys.path if Path(p).name == "system-torch")) if Path(p).is_dir()]
    (Path(ours) / "heed-test-dependencies.pth").write_text("\n".join(dependencies) + "\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = subprocess.run([str(python), "-c", ("import heed, heed.serve.app as a; print(heed.__file__); "
                            "print(a.STATIC_DIR.joinpath('index.html').is_file(), a.CJK_FONT.is_file())")],
                           capture_output=True, text=True, env=env, timeout=120)
    assert where.returncode == 0, where.stderr
    location, carried = where.stdout.split("\n")[:2]
    assert Path(location).is_relative_to(venv) and carried == "True True", where.stdout
    help_ = subprocess.run([str(venv / "bin" / "heed"), "--help"], capture_output=True, text=True, env=env,
                           timeout=120)
    assert help_.returncode == 0 and "translate" in help_.stdout and "serve" in help_.stdout, help_.stderr
    done = subprocess.run([str(venv / "bin" / "heed"), "translate", str(trained_run), "--device", "cpu"],
                          input="le 3 mars 1998\n", capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    import heed

    assert done.stdout == heed.load(trained_run, device="cpu").translate(["le 3 mars 1998"])[0].text + "\n"
