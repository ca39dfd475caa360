"""The repository holds source, not downloaded artifacts."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 1 << 20  # 1 MiB


def tracked_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=30).stdout
    return [ROOT / name for name in out.decode().split("\0") if name]


def test_no_tracked_file_over_one_mebibyte() -> None:
    big = [f"{p.relative_to(ROOT)} ({p.stat().st_size:,} bytes)" for p in tracked_files() if p.is_file() and p.stat().st_size > LIMIT]
    assert big == [], f"files over 1 MiB are tracked (wheels, archives, data belong on PyPI or are made by tests): {big}"
