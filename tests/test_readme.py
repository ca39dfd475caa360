"""The README's command blocks marked ``<!-- tested -->`` run as written, in order, in one bash
session: a fresh $HOME (so ~/.flinkpy and ~/savepoints are scratch), the repository as the
working directory, every command's exit status checked (``set -euo pipefail``). What the README
tells people to type cannot drift from what flinkpy does."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def readme_blocks(text: str) -> list[str]:
    """The ```sh blocks that follow a ``<!-- tested -->`` line, in README order."""
    return re.findall(r"^<!-- tested -->\n```sh\n(.*?)^```$", text, flags=re.M | re.S)


def test_the_readme_marks_its_runnable_blocks() -> None:
    blocks = readme_blocks(README.read_text())
    assert len(blocks) >= 4, "the Using it section's blocks are marked <!-- tested -->"
    for block in blocks:
        for line in block.splitlines():
            assert len(line) <= 80, f"README command line wider than 80 columns: {line!r}"


@pytest.mark.timeout(420)
def test_the_readme_blocks_run_as_written(tmp_path: Path) -> None:
    script = "set -euo pipefail\nset -x\n" + "\n".join(readme_blocks(README.read_text()))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLINKPY_")}
    bin_dir = str(Path(sys.executable).parent)
    # any free REST port: the README's cluster must not collide with another on 8081
    env.update({"HOME": str(tmp_path), "FLINKPY_REST_PORT": "0", "COLUMNS": "80", "NO_COLOR": "1", "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"})
    if not (ROOT / ".venv" / "bin" / "activate").is_file():
        # the README's first line activates the project's virtualenv; tests/run makes it
        script = script.replace(". .venv/bin/activate\n", "")
    try:
        res = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=400,
                             stdin=subprocess.DEVNULL)
    finally:
        subprocess.run([sys.executable, "-m", "commands.main", "cluster", "stop"], cwd=ROOT, env=env,
                       capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    tail = "\n".join(res.stderr.splitlines()[-40:])
    assert res.returncode == 0, f"a README command failed (exit {res.returncode}); the trace ends:\n{tail}"
    # what the blocks promise
    assert "Savepoint completed. Path: " in res.stdout and "Checkpoint " in res.stdout, res.stdout[-2000:]
    assert "Restore would succeed." in res.stdout
