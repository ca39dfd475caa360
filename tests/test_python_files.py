"""``env.add_python_file`` on flinkpy's engine: the task processes import the added module, and
the job's own directory still ships with the job (a module next to the job file imports in the
tasks too), whatever the order of the two on the driver's ``sys.path``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

JOB = '''
import os, sys
from flinkpy.datastream import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.add_python_file(sys.argv[1])

from beside import triple   # next to this job file
from shipped import offset  # made importable by add_python_file

out = env.from_collection(list(range(1, 21))).map(triple).map(offset).execute_and_collect()
print("RESULT", sorted(out))
'''


def test_an_added_file_and_the_jobs_own_modules_import_in_the_tasks(tmp_path: Path, flinkpy_home: Path) -> None:
    job_dir, lib = tmp_path / "job", tmp_path / "lib"
    job_dir.mkdir()
    lib.mkdir()
    (job_dir / "job.py").write_text(JOB)
    (job_dir / "beside.py").write_text("def triple(x):\n    return 3 * x\n")
    (lib / "shipped.py").write_text("def offset(x):\n    return x + 1000\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, str(job_dir / "job.py"), str(lib / "shipped.py")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=100, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    expected = sorted(3 * x + 1000 for x in range(1, 21))
    assert f"RESULT {expected}" in done.stdout, done.stdout[-2000:]
