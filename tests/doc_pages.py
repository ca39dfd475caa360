"""The documentation's pages in reading order, and their command blocks.

The order is README.md, then the pages of ``mkdocs.yml``'s nav from top to bottom: the order in
which a reader walks them, and in which tests/test_readme.py runs their tested blocks.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MKDOCS_YML = ROOT / "mkdocs.yml"


class _Loader(yaml.SafeLoader):
    """mkdocs.yml names Python objects (``!!python/name:...``) for Markdown extensions; the nav
    needs none of them, so they load as their names instead of importing anything."""


_Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: suffix)


def mkdocs_config() -> dict[str, Any]:
    return yaml.load(MKDOCS_YML.read_text(), Loader=_Loader)


def _walk(nav: Any) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for entry in nav for page in _walk(entry)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _walk(value)]
    return []


def nav_pages() -> list[Path]:
    """The site's pages in the nav's order."""
    return [DOCS / page for page in _walk(mkdocs_config()["nav"])]


def reading_order() -> list[Path]:
    """README.md, then every page of the site in the nav's order."""
    return [README, *nav_pages()]


def runnable_blocks(text: str) -> list[str]:
    """The ```sh blocks that follow a ``<!-- tested -->`` line, in the page's order."""
    return re.findall(r"^<!-- tested -->\n```sh\n(.*?)^```$", text, flags=re.M | re.S)


def shell_blocks(text: str) -> list[str]:
    """Every ```sh block of a page, tested or not."""
    return re.findall(r"^```sh\n(.*?)^```$", text, flags=re.M | re.S)
