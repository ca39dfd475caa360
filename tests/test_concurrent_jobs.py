"""Several jobs on one cluster at once: their tasks share TaskManagers (and execution ids)."""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from conftest import wait_for

ENDLESS = textwrap.dedent(
    """
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream import StreamExecutionEnvironment
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource

    env = StreamExecutionEnvironment.get_execution_environment()
    (env.from_source(NumberSequenceSource(1, 10**12), WatermarkStrategy.no_watermarks(), "numbers")
        .key_by(lambda n: n % 7).reduce(lambda a, b: a + b).add_sink(lambda v: None))
    env.execute("endless")
    """
)

BOUNDED = textwrap.dedent(
    """
    from flinkpy.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    words = ["a b c a", "b a d", "c c c"] * 50
    (env.from_collection(words).flat_map(str.split).map(lambda w: (w, 1))
        .key_by(lambda p: p[0]).reduce(lambda x, y: (x[0], x[1] + y[1])).print())
    env.execute("bounded")
    """
)


@pytest.mark.timeout(90)
def test_jobs_with_the_same_shape_run_side_by_side(cluster, cli, tmp_path: Path) -> None:
    endless, bounded = tmp_path / "endless.py", tmp_path / "bounded.py"
    endless.write_text(ENDLESS)
    bounded.write_text(BOUNDED)
    # parallelism 2 on 2 TaskManagers: subtask i of both jobs lands on the same TaskManager
    first = json.loads(cli("run", "-d", "-p", "2", "--json", str(endless)).stdout)["jobs"][0]["jid"]
    second = json.loads(cli("run", "-d", "-p", "2", "--json", str(endless)).stdout)["jobs"][0]["jid"]

    def state(jid: str) -> str:
        return json.loads(cli("job", "show", jid, "--json").stdout)["state"]

    def all_running(jid: str) -> bool:
        doc = json.loads(cli("job", "show", jid, "--json").stdout)
        return all(v["status"] == "RUNNING" for v in doc["vertices"])

    wait_for(lambda: all_running(first) and all_running(second), timeout=30, message="both endless jobs running")
    # cancel one while a job with the same execution ids is deployed next to it
    assert cli("cancel", first).returncode == 0
    res = cli("run", str(bounded))
    assert res.returncode == 0, res.stderr
    wait_for(lambda: state(first) == "CANCELED", timeout=30)
    assert state(second) == "RUNNING"
    assert all_running(second)
    # the bounded job's printed output is on the TaskManagers' stdout logs
    expected = Counter(w for line in ["a b c a", "b a d", "c c c"] * 50 for w in line.split())
    outputs = "".join(Path(tm.stdout_path).read_text() for tm in cluster.taskmanagers)
    finals = {}
    for line in outputs.splitlines():
        word, count = eval(line.split("> ", 1)[-1])  # noqa: S307 - our own printed tuples
        finals[word] = max(finals.get(word, 0), count)
    assert finals == dict(expected)
    assert cli("cancel", second).returncode == 0
    wait_for(lambda: state(second) == "CANCELED", timeout=30)
