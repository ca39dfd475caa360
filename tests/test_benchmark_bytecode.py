"""The benchmark's processes run with Python's bytecode cache on even where the environment
turns it off (``flinkpy.benchmarks.bytecode``): an installed flinkpy never compiles its modules
at start-up, so no figure should include that."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from flinkpy.benchmarks import bytecode


@pytest.mark.timeout(120)
def test_the_cache_is_on_in_a_directory_of_its_own_with_flinkpy_compiled_before_any_timing(tmp_path: Path) -> None:
    base = {"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "KEPT": "yes"}
    env = bytecode.environment(tmp_path / "pyc", base)
    assert "PYTHONDONTWRITEBYTECODE" not in env and env["KEPT"] == "yes" and env["PYTHONPYCACHEPREFIX"] == str(tmp_path / "pyc")
    # the prefix mirrors the source tree's absolute path: the engine's modules are compiled there
    task = bytecode.ROOT / "flinkpy" / "task" / "task.py"
    compiled = list((tmp_path / "pyc").joinpath(*task.parent.parts[1:]).glob("task.*.pyc"))
    assert compiled, sorted(p.name for p in (tmp_path / "pyc").rglob("*.pyc"))[:10]
    # a process started with it imports from the cache and writes what is missing there
    probe = "import sys, flinkpy.task.task; print(sys.flags.dont_write_bytecode, sys.pycache_prefix)"
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True, cwd=bytecode.ROOT).stdout
    assert out.split() == ["0", str(tmp_path / "pyc")]
