"""The keyed job the state tools are tested on (tests/test_state_analyze.py, tests/test_state_checks.py),
and stopping it with a savepoint once its state covers exactly the numbers it keeps.

The job reads the numbers 1, 2, ... without end; ``Select`` passes those its condition keeps on as
``(key_of(n), n)`` and counts them in operator state (``passed``); ``Track``, a keyed process
function each test writes, keeps per-key state. Once a completed checkpoint shows every source
past the last number kept, the state is final, and ``flinkpy stop`` takes the savepoint.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from conftest import checkpoint_past, run_cli, wait_for

#: the source's range: it runs until stopped
N = 10**12

_IMPORTS = """\
from flinkpy.common import WatermarkStrategy
from flinkpy.datastream import CheckpointedFunction, FlatMapFunction, KeyedProcessFunction, StreamExecutionEnvironment
from flinkpy.datastream.connectors.number_seq import NumberSequenceSource
from flinkpy.datastream.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
"""

_SELECT = '''
class Select(FlatMapFunction, CheckpointedFunction):
    """Passes the numbers it keeps on as (key, n) and keeps how many it passed in operator state."""

    def initialize_state(self, context):
        self.state = context.get_operator_state_store().get_list_state(ListStateDescriptor("passed", None))
        self.passed = sum(self.state.get())

    def snapshot_state(self, context):
        self.state.update([self.passed])

    def flat_map(self, n):
        if CONDITION:
            self.passed += 1
            yield (key_of(n), n)
'''

_PIPELINE = """
env = StreamExecutionEnvironment.get_execution_environment()
env.enable_checkpointing(100)
SETTINGS
numbers = env.from_source(NumberSequenceSource(1, N), WatermarkStrategy.no_watermarks(), "numbers").uid("numbers")
pairs = numbers.flat_map(Select()).uid("select").name("select")
pairs.key_by(lambda pair: pair[0]).process(Track()).uid("track").name("track").add_sink(lambda v: None)
env.execute(NAME)
"""


def keyed_job(*, prelude: str, condition: str, track: str, name: str, settings: str = "") -> str:
    """The job's file: ``prelude`` (defining ``key_of``), Select keeping the numbers ``n`` for which
    the expression ``condition`` holds, the class ``Track`` (``track``), ``settings`` on ``env``."""
    return "\n".join([
        _IMPORTS + textwrap.dedent(prelude),
        _SELECT.replace("CONDITION", condition),
        textwrap.dedent(track),
        _PIPELINE.replace("SETTINGS", settings).replace("(1, N)", f"(1, {N})").replace("NAME", repr(name)),
    ])


def stop_with_savepoint(job: list[str], *, parallelism: int, checkpoints: Path, last: int, savepoints: Path,
                        env: dict[str, str] | None = None) -> Path:
    """Submit ``job`` (its file and arguments) detached; once a completed checkpoint under
    ``checkpoints`` shows its source past number ``last``, stop it with a savepoint into
    ``savepoints``; the savepoint's directory."""
    res = run_cli("run", "-d", "-p", str(parallelism), "--json", *job, env=env)
    assert res.returncode == 0, res.stderr
    jid = json.loads(res.stdout)["jobs"][0]["jid"]
    wait_for(lambda: checkpoint_past(checkpoints, jid, last), timeout=60, interval=0.05,
             message=f"a completed checkpoint of job {jid} past number {last}")
    stop = run_cli("stop", "--json", "--savepoint-path", str(savepoints), jid, env=env)
    assert stop.returncode == 0, stop.stderr
    return Path(json.loads(stop.stdout)["location"].removeprefix("file://"))
