"""The documentation site builds with ``mkdocs build --strict`` (a broken link, a missing anchor or a
page left out of the nav fails it), and the front door stays a front door: README.md under 15 KB,
history in CHANGELOG.md, no dated lab notes in the pages, short paragraphs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from doc_pages import DOCS, MKDOCS_YML, README, ROOT, nav_pages, reading_order

CHANGELOG = ROOT / "CHANGELOG.md"
#: pages generated from code and from the benchmark's report: a report's figures carry their dates
#: by design, and tables of options are not prose; their generators' own tests hold them
GENERATED = {DOCS / "performance.md", DOCS / "reference" / "configuration.md", DOCS / "reference" / "cli.md"}


def written_pages() -> list[Path]:
    """README.md and the site's pages that people write, in reading order."""
    return [p for p in reading_order() if p not in GENERATED]


def mkdocs_build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    # not --quiet: it hides warnings from the counter that --strict aborts on
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"),
                           "-d", str(site)], cwd=root, env=env, capture_output=True, text=True, timeout=90)


@pytest.mark.timeout(100)
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    res = mkdocs_build(ROOT, tmp_path / "site")
    assert res.returncode == 0, f"mkdocs build --strict failed:\n{res.stdout}\n{res.stderr}"
    assert (tmp_path / "site" / "index.html").is_file()


@pytest.mark.timeout(100)
def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(DOCS, copy / "docs")
    shutil.copy(MKDOCS_YML, copy / "mkdocs.yml")
    page = copy / "docs" / "getting-started.md"
    page.write_text(page.read_text() + "\nSee [nowhere](no-such-page.md).\n")
    res = mkdocs_build(copy, tmp_path / "site")
    assert res.returncode != 0 and "no-such-page.md" in res.stdout + res.stderr, res.stdout + res.stderr


def test_every_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    pages = set(nav_pages())
    missing = [str(p.relative_to(ROOT)) for p in pages if not p.is_file()]
    unlisted = [str(p.relative_to(ROOT)) for p in DOCS.rglob("*.md") if p not in pages]
    assert missing == [] and unlisted == [], f"in the nav but missing: {missing}; not in the nav: {unlisted}"


def test_the_readme_is_a_front_door() -> None:
    size = len(README.read_bytes())
    assert size <= 15 * 1024, f"README.md is {size:,} bytes; the rest belongs in docs/"
    text = README.read_text()
    assert "tests/run" in text and "examples/showcase.py" in text
    for link in re.findall(r"\]\(([^)#]+\.md)", text):
        assert (ROOT / link).is_file(), f"README.md links to {link}, which does not exist"


def test_the_changelog_keeps_a_changelog() -> None:
    text = CHANGELOG.read_text()
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert text.startswith("# Changelog")
    assert "## [Unreleased]" in text
    assert re.search(rf"^## \[{re.escape(version)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", text, flags=re.M), \
        f"the released version {version} has an entry with its date"


#: words of lab notes and of how the project was built, which belong in no user's page
LAB_NOTES = re.compile(r"\b20\d\d-\d\d-\d\d\b|\bthis session\b|\banother engineer|\bother engineers\b|\bbefore this session\b",
                       flags=re.I)


def test_the_pages_hold_no_dated_lab_notes() -> None:
    found = [f"{p.relative_to(ROOT)}: {m.group(0)!r}" for p in written_pages() for m in LAB_NOTES.finditer(p.read_text())]
    assert found == [], found


def paragraphs(text: str) -> list[list[str]]:
    """Prose paragraphs and list items of a Markdown page: code blocks, tables and headings left
    out, each list item on its own."""
    text = re.sub(r"^```.*?^```$", "", text, flags=re.M | re.S)
    out: list[list[str]] = []
    for chunk in re.split(r"\n\s*\n", text):
        current: list[str] = []
        for line in chunk.splitlines():
            if line.startswith(("|", "#", "<!--", "![")):
                continue
            if re.match(r"\s{0,3}(?:[-*]|\d+\.) ", line) and current:
                out.append(current)
                current = []
            current.append(line)
        if current:
            out.append(current)
    return out


def test_paragraphs_are_short() -> None:
    long = [f"{p.relative_to(ROOT)}: {para[0][:60]!r}... ({len(para)} lines)"
            for p in written_pages() for para in paragraphs(p.read_text()) if len(para) > 8]
    assert long == [], "paragraphs over 8 lines:\n" + "\n".join(long)
