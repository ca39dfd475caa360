"""`flinkpy state diff` and `flinkpy savepoint plan --check-code` on savepoints of real jobs.

One cluster per module (2 TaskManagers x 3 slots) runs the same keyed job twice at once: A at
parallelism 2 and max parallelism 128 over the numbers 1..400, B at parallelism 3 and max
parallelism 64 over 1..1000 without key k3. Each keeps, per key, a count and the first and
latest number it saw as a `readings.Reading` (a dataclass in a module beside the job). Each runs
until a completed checkpoint shows its sources past its limit, then `flinkpy stop` takes its
savepoint. What the diff must find is computed here from the numbers alone: keys k40..k49 added
(numbers above 400 key by n % 50), k3 removed, every other key's count and latest changed and
its first unchanged; compared by key across different parallelism and max parallelism.

The "new" program has the same job beside a `readings.py` whose Reading renamed its field `n`
to `number`: --check-code must refuse it, naming the class and the field, for every key.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from conftest import module_cluster, run_cli, wait_for
from flinkpy.errors import ExitCode

pytestmark = pytest.mark.timeout(120)

N = 10**12  #: the source's range: it runs until stopped
DROPPED = "k3"

JOB = textwrap.dedent(
    f"""
    import sys
    from flinkpy.common import WatermarkStrategy
    from flinkpy.datastream import FlatMapFunction, KeyedProcessFunction, StreamExecutionEnvironment
    from flinkpy.datastream.connectors.number_seq import NumberSequenceSource
    from flinkpy.datastream.state import ValueStateDescriptor
    from readings import Reading, key_of

    LIMIT, MAX_PARALLELISM, SKIP = int(sys.argv[1]), int(sys.argv[2]), set(sys.argv[3:])


    class Select(FlatMapFunction):
        def flat_map(self, n):
            if n <= LIMIT and key_of(n) not in SKIP:
                yield (key_of(n), n)


    class Track(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count"))
            self.first = ctx.get_state(ValueStateDescriptor("first"))
            self.latest = ctx.get_state(ValueStateDescriptor("latest"))

        def process_element(self, pair, ctx):
            key, n = pair
            self.count.update((self.count.value() or 0) + 1)
            first, latest = self.first.value(), self.latest.value()
            if first is None or n < first.n:
                self.first.update(Reading(n, key))
            if latest is None or n > latest.n:
                self.latest.update(Reading(n, key))
            return []


    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(100)
    env.set_max_parallelism(MAX_PARALLELISM)
    numbers = env.from_source(NumberSequenceSource(1, {N}), WatermarkStrategy.no_watermarks(), "numbers").uid("numbers")
    pairs = numbers.flat_map(Select()).uid("select").name("select")
    pairs.key_by(lambda pair: pair[0]).process(Track()).uid("track").name("track").add_sink(lambda v: None)
    env.execute("readings")
    """
)

READINGS = """
from dataclasses import dataclass


def key_of(n):
    return f"k{n % 40}" if n <= 400 else f"k{n % 50}"


@dataclass(frozen=True)
class Reading:
    FIELD: int
    key: str
"""


def expected(limit: int, skip: set[str]) -> dict[str, tuple[int, int, int]]:
    """key -> (count, first, latest) of a run over 1..limit."""
    namespace: dict[str, Any] = {}
    exec(READINGS.replace("FIELD", "n"), namespace)  # noqa: S102 - our own constant
    state: dict[str, tuple[int, int, int]] = {}
    for n in range(1, limit + 1):
        key = namespace["key_of"](n)
        if key not in skip:
            count, first, _ = state.get(key, (0, n, n))
            state[key] = (count + 1, first, n)
    return state


def _past(offsets: list[Any], limit: int) -> bool:
    return bool(offsets) and all(o and all(int(a) > limit for a, b in o["ranges"] if int(a) < int(b)) for o in offsets)


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Savepoints A and B, and the old and new program directories."""
    from flinkpy.checkpoint import CheckpointStorage
    from flinkpy.errors import FlinkpyError

    base = tmp_path_factory.mktemp("state-checks")
    dirs = {}
    for name, field in (("old", "n"), ("new", "number")):
        d = base / name
        d.mkdir()
        (d / "job.py").write_text(JOB)
        (d / "readings.py").write_text(READINGS.replace("FIELD", field))
        dirs[name] = d
    with module_cluster(tmp_path_factory, "state-checks-home", taskmanagers=2, slots=3) as home:
        runs = {"a": (2, ["400", "128"], 400), "b": (3, ["1000", "64", DROPPED], 1000)}
        jids = {}
        for side, (p, args, _) in runs.items():
            res = run_cli("run", "-d", "-p", str(p), "--json", str(dirs["old"] / "job.py"), *args)
            assert res.returncode == 0, res.stderr
            jids[side] = json.loads(res.stdout)["jobs"][0]["jid"]
        storage = CheckpointStorage(str(home / "checkpoints"))

        def covered(side: str) -> bool:
            jid, limit = jids[side], runs[side][2]
            for cid in reversed(storage.list_checkpoints(jid)):
                try:
                    doc = storage.read_metadata(storage.checkpoint_dir(jid, cid))
                except FlinkpyError:  # discarded while we read it: a newer one exists
                    continue
                source = next(op for op in doc["operators"] if op["uid"] == "numbers")
                return _past([s["source_offsets"] for s in source["subtasks"]], limit)
            return False

        paths = {}
        for side in runs:
            wait_for(lambda: covered(side), timeout=60, interval=0.05, message=f"a checkpoint of {side} past its limit")
            stop = run_cli("stop", "--json", "--savepoint-path", str(base / f"savepoints-{side}"), jids[side])
            assert stop.returncode == 0, stop.stderr
            location = json.loads(stop.stdout)["location"]
            paths[side] = Path(location.removeprefix("file://"))
    return {**paths, **dirs}


def _diff(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    res = run_cli("state", "diff", "--json", *args, env=env)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_diff_compares_by_key_across_parallelism_and_max_parallelism(snapshots: dict[str, Path]) -> None:
    a, b = expected(400, set()), expected(1000, {DROPPED})
    env = {"PYTHONPATH": f"{snapshots['old']}:{Path.cwd()}"}
    doc = _diff("--trusted", "--top", "3", str(snapshots["a"]), str(snapshots["b"]), env=env)
    assert (doc["a"]["max_parallelism"], doc["b"]["max_parallelism"]) == (128, 64)
    track = next(op for op in doc["operators"] if op["uid"] == "track")
    assert (track["parallelism_a"], track["parallelism_b"]) == (2, 3) and track["status"] == "both"
    states = {s["name"]: s for s in track["states"] if not s["internal"]}
    added, removed = set(b) - set(a), set(a) - set(b)
    assert added == {f"k{i}" for i in range(40, 50)} and removed == {DROPPED}
    common = set(a) & set(b)
    for name, pos in (("count", 0), ("first", 1), ("latest", 2)):
        changed = sum(1 for k in common if a[k][pos] != b[k][pos])
        got = states[name]
        assert (got["added"], got["removed"], got["changed"], got["unchanged"]) == (len(added), len(removed), changed, len(common) - changed), name
        assert (got["keys_a"], got["keys_b"]) == (len(a), len(b))
    assert states["first"]["changed"] == 0 and states["latest"]["changed"] == len(common)
    assert doc["identical"] is False
    assert doc["totals"]["added"] == 3 * len(added) and doc["totals"]["removed"] == 3 * len(removed)
    # the states that grew most: every one of the three grew by 10 keys; largest growth first
    deltas = [g["bytes_delta"] for g in doc["grown"]]
    assert len(deltas) == 3 and deltas == sorted(deltas, reverse=True) and all(d > 0 for d in deltas)
    assert {g["state"] for g in doc["grown"]} == {"count", "first", "latest"}
    assert len(doc["top_keys"]) == 3 and all(k["bytes_delta"] > 0 for k in doc["top_keys"])

    # the same snapshot against itself: identical; --uid narrows to one operator
    same = _diff("--trusted", "--uid", "track", str(snapshots["b"]), str(snapshots["b"]), env=env)
    assert same["identical"] is True and [op["uid"] for op in same["operators"]] == ["track"]
    assert same["totals"]["unchanged"] == 3 * len(b) and same["totals"]["changed"] == 0

    # for people: a table and a verdict line
    res = run_cli("state", "diff", "--trusted", "--uid", "track", str(snapshots["a"]), str(snapshots["b"]), env=env)
    assert res.returncode == 0, res.stderr
    assert "States that grew most" in res.stdout and "The state differs." in res.stdout


def test_diff_refuses_what_it_cannot_compare(snapshots: dict[str, Path]) -> None:
    # the job's own class without --trusted: refused by name (exit 8), nothing decoded
    res = run_cli("state", "diff", str(snapshots["a"]), str(snapshots["b"]))
    assert res.returncode == ExitCode.CONFIGURATION and "readings.Reading" in res.stderr, res.stderr
    res = run_cli("state", "diff", "--trusted", "--uid", "nope", str(snapshots["a"]), str(snapshots["a"]),
                  env={"PYTHONPATH": f"{snapshots['old']}:{Path.cwd()}"})
    assert res.returncode == ExitCode.NOT_FOUND and "uid nope" in res.stderr, res.stderr


def test_check_code_names_the_renamed_field_of_every_key(snapshots: dict[str, Path]) -> None:
    keys = expected(400, set())
    res = run_cli("savepoint", "plan", "--check-code", "--json", str(snapshots["a"]), str(snapshots["new"] / "job.py"), "400", "128")
    assert res.returncode == ExitCode.INVALID_PROGRAM, res.stderr
    doc = json.loads(res.stdout)
    assert doc["restorable"] is False
    checked = doc["code_check"]
    failures = {(f["uid"], f["state"], f["error"]): f for f in checked["failures"]}
    renamed = {f for f in failures if "field 'n'" in f[2] and "readings.Reading" in f[2]}
    missing = {f for f in failures if "field 'number'" in f[2]}
    assert {(uid, state) for uid, state, _ in renamed} == {("track", "first"), ("track", "latest")}
    assert {(uid, state) for uid, state, _ in missing} == {("track", "first"), ("track", "latest")}
    assert all(failures[f]["keys"] == len(keys) for f in renamed | missing)
    assert set(failures) == renamed | missing  # count holds plain ints: it restores
    assert checked["values_failed"] == 2 * len(keys)
    assert "readings.Reading" in res.stderr and "'n'" in res.stderr
    # the check runs in a process of its own: the caller never imports the program's modules
    import sys

    from flinkpy.client.restore_plan import check_code

    assert check_code(str(snapshots["a"]), str(snapshots["new"] / "job.py"))["values_failed"] == 2 * len(keys)
    assert "readings" not in sys.modules

    # the program that wrote the savepoint decodes every value
    res = run_cli("savepoint", "plan", "--check-code", str(snapshots["a"]), str(snapshots["old"] / "job.py"), "400", "128")
    assert res.returncode == 0, res.stderr
    assert "every one restores" in res.stdout and "Restore would succeed." in res.stdout
