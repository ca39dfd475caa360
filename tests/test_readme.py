"""The documentation's command blocks marked ``<!-- tested -->`` run as written, in reading order
(README.md, then the site's pages in the order of mkdocs.yml's nav), in one bash session: a fresh
$HOME (so ~/.flinkpy and ~/savepoints are scratch), the repository as the working directory,
every command's exit status checked (``set -euo pipefail``), at 80 columns. What the pages tell
people to type cannot drift from what flinkpy does.

After every block the walk checks that no job of the running cluster is FAILED: a reader who
walks the pages in order, and stops anywhere, never leaves a job that a drill broke."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from doc_pages import README, ROOT, reading_order, shell_blocks, runnable_blocks

#: run after each block; `flinkpy list` exits 3 when no cluster runs (nothing to check then)
NO_JOB_FAILED = r"""
no_job_failed() {
  local out rc=0 failed
  out=$(flinkpy list -a --json 2>/dev/null) || rc=$?
  [ "$rc" = 3 ] && return 0
  [ "$rc" = 0 ] || { echo "flinkpy list -a exited $rc after $1" >&2; return 1; }
  failed=$(printf '%s' "$out" | jq -r '.jobs[] | select(.state == "FAILED") | .jid')
  [ -z "$failed" ] || { echo "job(s) $failed FAILED after $1" >&2; return 1; }
}
"""


def walk_script() -> str:
    """Every tested block of every page in reading order, each followed by the FAILED check."""
    parts = ["set -euo pipefail", NO_JOB_FAILED, "set -x"]
    for page in reading_order():
        for i, block in enumerate(runnable_blocks(page.read_text()), 1):
            parts += [block, f"no_job_failed '{page.relative_to(ROOT)}, tested block {i}'"]
    return "\n".join(parts) + "\n"


def test_the_pages_mark_their_runnable_blocks() -> None:
    assert runnable_blocks(README.read_text()), "README.md's first commands are marked <!-- tested -->"
    counts = {page.relative_to(ROOT): len(runnable_blocks(page.read_text())) for page in reading_order()}
    assert sum(counts.values()) >= 8, counts


#: the one line allowed to be wider: README's first command, kept whole so that it pastes as one
SHOWCASE = "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/python examples/showcase.py"


def test_every_command_line_fits_80_columns() -> None:
    assert SHOWCASE in README.read_text(), "README.md's first command runs the showcase, as written here"
    wide = [
        f"{page.relative_to(ROOT)}: {line!r}"
        for page in reading_order()
        for block in shell_blocks(page.read_text())
        for line in block.splitlines()
        if len(line) > 80 and line != SHOWCASE
    ]
    assert wide == [], "command lines wider than 80 columns:\n" + "\n".join(wide)


@pytest.mark.timeout(660)
def test_the_runnable_blocks_run_as_written_in_reading_order(tmp_path: Path) -> None:
    script = walk_script()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLINKPY_")}
    bin_dir = str(Path(sys.executable).parent)
    # any free REST port: the walk's clusters must not collide with another on 8081
    env.update({"HOME": str(tmp_path), "FLINKPY_REST_PORT": "0", "COLUMNS": "80", "NO_COLOR": "1",
                "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"})
    if not (ROOT / ".venv" / "bin" / "activate").is_file():
        # the pages' first lines activate the project's virtualenv; tests/run makes it
        script = script.replace(". .venv/bin/activate\n", "")
    try:
        res = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=640,
                             stdin=subprocess.DEVNULL)
    finally:
        subprocess.run([sys.executable, "-m", "commands.main", "cluster", "stop"], cwd=ROOT, env=env,
                       capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    tail = "\n".join(res.stderr.splitlines()[-40:])
    assert res.returncode == 0, f"a documented command failed (exit {res.returncode}); the trace ends:\n{tail}"
    # what the blocks promise
    assert "Savepoint completed. Path: " in res.stdout and "Checkpoint " in res.stdout, res.stdout[-2000:]
    assert "Restore would succeed." in res.stdout
