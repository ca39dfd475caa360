"""The lifecycle runbook (tests/runbooks/lifecycle.sh), run as an operator runs it: bash and the CLI.

One job goes through a stateless upgrade, a savepoint upgrade that raises and is rolled back, the
same upgrade by hand with a ``flinkpy.state_processor`` migration, a last-state upgrade, an
in-place rescale 2 -> 3 -> 1, a SIGKILLed upgrade run again, a savepoint prune, and a renamed uid
fixed with ``savepoint rewrite``; its output must then be exact (``flinkpy verify`` and the
runbook's own computation of every field). The script's header says what each step checks.

By default one kill is in the suite: a last-state upgrade SIGKILLed just after it submitted the
new job, whose re-run must adopt that job. ``LIFECYCLE_KILLS=all`` (in the environment of this
test) kills the upgrade at every step of a savepoint and a last-state upgrade and of a rollback,
fourteen kills, some five to ten minutes more; the test's timeout grows with it. On two loaded cores the
default run takes one and a half to two and a half minutes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

KILLS = os.environ.get("LIFECYCLE_KILLS", "some")


@pytest.mark.timeout(1800 if KILLS == "all" else 300)
def test_lifecycle_runbook_keeps_the_output_exact_through_every_change(tmp_path: Path) -> None:
    env = dict(os.environ, LIFECYCLE_KILLS=KILLS, TMPDIR=str(tmp_path),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("FLINKPY_HOME", None)
    env.pop("FLINKPY_JOBMANAGER", None)
    res = subprocess.run(["bash", str(ROOT / "tests" / "runbooks" / "lifecycle.sh")], capture_output=True, text=True,
                         timeout=1780 if KILLS == "all" else 290, cwd=str(ROOT), env=env, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr[-4000:]
    for step in ("2. stateless upgrade", "3. savepoint upgrade to version 3 without a migration", "6. rescale in place",
                 "9. a renamed uid", "10. verify the output"):
        assert step in res.stderr
    assert "Rolling back: new job" in res.stderr and "KeyError: 'last'" in res.stderr
    assert "killed at submit:submitted, run again" in res.stderr or KILLS == "none"
    assert "lost 0, duplicated 0, state mismatches 0" in res.stdout
    assert "records, every one exact" in res.stdout and "runbook: every step done" in res.stdout
