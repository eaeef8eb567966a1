"""mkdocs hooks (mkdocs.yml `hooks:`): the site is docs/ plus two files that live outside it, and
every page keeps the links that work where it lives in the repository.

bench/RESULTS.md (the measured figures) and CONTRIBUTING.md stay where a reader of the repository
looks for them; the site shows them as results.md and contributing.md. A page's relative link is
written for the repository (from docs/guide/serving.md, `../../bench/RESULTS.md`; from
bench/RESULTS.md, `../docs/look-inside.md`), so it is resolved against the page's place in the
repository and rewritten to the site's page. A link that reaches neither docs/ nor one of these
files is left alone, and `mkdocs build --strict` fails on it, as it should.
"""
from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
# repository path -> the site's page
OUTSIDE = {"bench/RESULTS.md": "results.md", "CONTRIBUTING.md": "contributing.md"}
_LINK = re.compile(r"(!?\[[^\]\n]*\]\()([^)\s#]+)(#[^)\s]*)?((?:\s+\"[^\"]*\")?\))")


def on_files(files: Files, config: Any) -> Files:
    for repo_path, site_path in OUTSIDE.items():
        files.append(File.generated(config, site_path, abs_src_path=str(ROOT / repo_path)))
    return files


def _repository_path(site_path: str) -> str:
    """Where a site page's markdown lives in the repository."""
    by_site = {site: repo for repo, site in OUTSIDE.items()}
    return by_site.get(site_path, f"docs/{site_path}")


def rewrite_links(markdown: str, site_path: str) -> str:
    """`markdown` of the page at `site_path` with each relative link resolved in the repository and
    pointed at the site's page."""
    here = posixpath.dirname(_repository_path(site_path))
    site_dir = posixpath.dirname(site_path)

    def one(match: re.Match[str]) -> str:
        opening, target, anchor, closing = match.group(1), match.group(2), match.group(3) or "", match.group(4)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
            return match.group(0)  # a URL, or an absolute path: not the repository's
        in_repo = posixpath.normpath(posixpath.join(here, target))
        if in_repo in OUTSIDE:
            page = OUTSIDE[in_repo]
        elif in_repo.startswith("docs/"):
            page = in_repo[len("docs/"):]
        else:
            return match.group(0)
        return f"{opening}{posixpath.relpath(page, site_dir or '.')}{anchor}{closing}"

    return _LINK.sub(one, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    return rewrite_links(markdown, page.file.src_uri)
