"""Python's bytecode cache for the processes a benchmark starts, as an installed flinkpy has it.

An installed package comes with its modules compiled. A source checkout compiles them on first
import and keeps the result in ``__pycache__``, unless the environment turns the cache off
(``PYTHONDONTWRITEBYTECODE``, usual in sandboxes and CI images). Then every process compiles
what it imports from source again: the CLI, the JobManager, each TaskManager, and each task
that imports the job's module (about 50 ms of CPU per task on the project's 2-core machines,
and a third of a small job's start-up). No user of an installed flinkpy pays that.

So the benchmark runs its processes with the cache on, in a directory of its own
(``PYTHONPYCACHEPREFIX``: nothing is written into the source tree), with flinkpy compiled into
it before any timing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def environment(directory: str | Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (this process's environment by default) with the cache on in ``directory``,
    and flinkpy's and the CLI's modules compiled into it."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(Path(directory))
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j0", str(ROOT / "flinkpy"), str(ROOT / "commands")],
                   env=env, check=True, stdout=subprocess.DEVNULL)
    return env


def turn_on(directory: str | Path) -> None:
    """The cache on for every process this one starts from now on."""
    env = environment(directory)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = env["PYTHONPYCACHEPREFIX"]
