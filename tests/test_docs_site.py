"""The documentation site (mkdocs.yml over docs/, `make docs`): every page is in the nav, links written
for the repository reach the site's pages (tools/mkdocs_hooks.py), and `mkdocs build --strict` passes
where mkdocs is installed (the `docs` extra, which `make` installs)."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _hooks():
    pytest.importorskip("mkdocs", reason="mkdocs is not installed: pip install -e '.[docs]' (make does)")
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "tools" / "mkdocs_hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _nav_pages(entries) -> list[str]:
    pages = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_every_docs_page_is_in_the_nav_once():
    nav = _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"])
    assert len(nav) == len(set(nav))
    on_disk = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert set(nav) == on_disk | {"results.md", "contributing.md"}


def test_repository_links_point_at_the_sites_pages():
    rewrite = _hooks().rewrite_links
    # from docs/guide/serving.md the repository's bench/RESULTS.md is ../../bench/RESULTS.md; on the site, results.md
    assert rewrite("[figures](../../bench/RESULTS.md#serving)", "guide/serving.md") == "[figures](../results.md#serving)"
    # from bench/RESULTS.md, a docs page and a figure
    assert rewrite("[by length](../docs/attention-by-length.md)", "results.md") == "[by length](attention-by-length.md)"
    assert rewrite("![f](../docs/figures/a.png)", "results.md") == "![f](figures/a.png)"
    assert rewrite("[c](CONTRIBUTING.md)", "contributing.md") == "[c](contributing.md)"
    # a docs link stays, a URL stays, a link outside docs/ stays (and --strict then fails on it)
    assert rewrite("[config](../config.md)", "guide/training.md") == "[config](../config.md)"
    assert rewrite("[t](https://pytorch.org/x.md)", "index.md") == "[t](https://pytorch.org/x.md)"
    assert rewrite("[s](../src/heed/api.py)", "index.md") == "[s](../src/heed/api.py)"


def test_the_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed: pip install -e '.[docs]' (make does)")
    pytest.importorskip("material", reason="mkdocs-material is not installed: pip install -e '.[docs]' (make does)")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "results" / "index.html").is_file()
    assert (tmp_path / "site" / "cli" / "index.html").is_file()


def _github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_the_results_open_with_a_summary_whose_links_reach_their_sections():
    text = (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    assert text.index("\n## Summary\n") < text.index("\n## ", text.index("\n## Summary\n") + 1)  # the first section
    summary = text[text.index("\n## Summary\n"):text.index("\n## ", text.index("\n## Summary\n") + 1)]
    rows = [line for line in summary.splitlines() if line.startswith("| ") and "](#" in line]
    assert len(rows) >= 15
    anchors = {_github_anchor(line[3:]) for line in text.splitlines() if line.startswith("## ")}
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split(" | ")]
        assert len(cells) == 5 and re.fullmatch(r"2026-\d\d-\d\d", cells[3]), row  # topic, headline, CPU, date, link
        anchor = re.search(r"\]\(#([^)]+)\)", cells[4]).group(1)
        assert anchor in anchors, f"{anchor} is no section of bench/RESULTS.md (GitHub's anchors)"
