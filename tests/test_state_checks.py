"""`flinkpy state diff` and `flinkpy savepoint plan --check-code` on savepoints of real jobs.

One cluster per module (1 TaskManager with 5 slots) runs the same keyed job twice at once: A at
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import module_cluster, run_cli
from flinkpy.errors import ExitCode
from keyed_state_job import keyed_job, stop_with_savepoint

pytestmark = pytest.mark.timeout(120)

DROPPED = "k3"

JOB = keyed_job(
    prelude="""
    import sys
    from readings import Reading, key_of

    LIMIT, MAX_PARALLELISM, SKIP = int(sys.argv[1]), int(sys.argv[2]), set(sys.argv[3:])
    """,
    condition="n <= LIMIT and key_of(n) not in SKIP",
    track="""
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
    """,
    settings="env.set_max_parallelism(MAX_PARALLELISM)",
    name="readings",
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


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Savepoints A and B, and the old and new program directories."""
    base = tmp_path_factory.mktemp("state-checks")
    dirs = {}
    for name, field in (("old", "n"), ("new", "number")):
        d = base / name
        d.mkdir()
        (d / "job.py").write_text(JOB)
        (d / "readings.py").write_text(READINGS.replace("FIELD", field))
        dirs[name] = d
    with module_cluster(tmp_path_factory, "state-checks-home", taskmanagers=1, slots=5) as home:
        runs = {"a": (2, ["400", "128"], 400), "b": (3, ["1000", "64", DROPPED], 1000)}

        def savepoint(side: str) -> Path:
            p, args, limit = runs[side]
            return stop_with_savepoint([str(dirs["old"] / "job.py"), *args], parallelism=p, checkpoints=home / "checkpoints",
                                       last=limit, savepoints=base / f"savepoints-{side}")

        # both jobs at once, each from its own thread: the module's setup is most of its time
        with ThreadPoolExecutor(2) as pool:
            paths = dict(zip(runs, pool.map(savepoint, runs)))
    return {**paths, **dirs}


@pytest.fixture
def trusted_program(snapshots: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The old program's modules importable in this process (for a --trusted diff), and gone after."""
    import sys

    monkeypatch.syspath_prepend(str(snapshots["old"]))
    yield
    sys.modules.pop("readings", None)


def test_diff_compares_by_key_across_parallelism_and_max_parallelism(snapshots: dict[str, Path], trusted_program: None) -> None:
    from flinkpy.client.analysis import diff

    a, b = expected(400, set()), expected(1000, {DROPPED})
    doc = json.loads(json.dumps(diff(str(snapshots["a"]), str(snapshots["b"]), top=3, trusted=True)))
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
    # operator state: one count per source subtask, 2 in A and 3 in B
    select = next(op for op in doc["operators"] if op["uid"] == "select")
    assert [(s["name"], s["entries_a"], s["entries_b"], s["changed"]) for s in select["operator_state"]] == [("passed", 2, 3, True)]
    assert select["states"] == []

    # the same snapshot against itself: identical
    same = diff(str(snapshots["b"]), str(snapshots["b"]), trusted=True)
    assert same["identical"] is True and same["totals"]["unchanged"] == 3 * len(b) and same["totals"]["changed"] == 0
    assert not any(s["changed"] for op in same["operators"] for s in op["operator_state"])

    # for people, one operator: a table and a verdict line
    res = run_cli("state", "diff", "--trusted", "--uid", "track", str(snapshots["a"]), str(snapshots["b"]),
                  env={"PYTHONPATH": f"{snapshots['old']}:{Path.cwd()}"})
    assert res.returncode == 0, res.stderr
    assert "States that grew most" in res.stdout and "The state differs." in res.stdout
    assert "track [uid track]" in res.stdout and "select" not in res.stdout


def test_diff_refuses_what_it_cannot_compare(snapshots: dict[str, Path], trusted_program: None) -> None:
    from flinkpy.client.analysis import diff
    from flinkpy.errors import NotFoundError

    # the job's own class without --trusted: refused by name (exit 8), nothing decoded
    res = run_cli("state", "diff", "--json", str(snapshots["a"]), str(snapshots["b"]))
    assert res.returncode == ExitCode.CONFIGURATION and "readings.Reading" in res.stderr, res.stderr
    assert json.loads(res.stdout)["error"]["exit_code"] == ExitCode.CONFIGURATION
    with pytest.raises(NotFoundError, match="uid nope"):
        diff(str(snapshots["a"]), str(snapshots["a"]), uid="nope", trusted=True)


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
    # the check runs in a process of its own: the caller never imports the program's modules;
    # the program that wrote the savepoint decodes every value
    import sys

    from flinkpy.client.restore_plan import check_code

    assert "readings" not in sys.modules
    checked = check_code(str(snapshots["a"]), str(snapshots["old"] / "job.py"))
    assert (checked["values_failed"], checked["failures"]) == (0, [])
    assert checked["values_checked"] == 3 * len(keys) + 2  # three states per key, and A's two operator-state items
    assert "readings" not in sys.modules


OLD_SHAPES = """
from dataclasses import dataclass, field
from typing import NamedTuple


@dataclass
class Counted:
    n: int


class Pair(NamedTuple):
    a: int
    b: int


class Slotted:
    __slots__ = ("x",)

    def __init__(self, x):
        self.x = x


class Gone:
    pass
"""

NEW_SHAPES = """
from dataclasses import dataclass, field
from typing import NamedTuple


@dataclass
class Counted:
    n: int
    unit: str = "s"                                   # added with a default: restores
    tags: list = field(default_factory=list)          # added with a factory: no value when restored


class Pair(NamedTuple):
    a: int


class Slotted:
    __slots__ = ("y",)
"""


def test_the_checking_unpickler_names_each_shape_change_and_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a cluster: every value of one pickle is checked, a failure does not end the rest."""
    import pickle
    import sys

    from flinkpy.checkpoint.code_check import loads, value_problems

    for name, text in (("old", OLD_SHAPES), ("new", NEW_SHAPES)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "shapes_drill.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path / "old"))
    import shapes_drill as old

    saved = pickle.dumps({"counted": old.Counted(1), "pair": old.Pair(1, 2), "slotted": old.Slotted(3), "gone": old.Gone(), "plain": [1, "x"]},
                         protocol=5)
    del sys.modules["shapes_drill"]
    monkeypatch.setattr(sys, "path", [str(tmp_path / "new"), *[p for p in sys.path if p != str(tmp_path / "old")]])
    try:
        value = loads(saved)
        per_key = {key: list(value_problems(v)) for key, v in value.items()}
    finally:
        sys.modules.pop("shapes_drill", None)
    assert per_key["plain"] == []
    assert [p.split(":")[0] for p in per_key["gone"]] == ["shapes_drill.Gone cannot be imported"]
    assert per_key["pair"][0].startswith("shapes_drill.Pair: TypeError")
    assert per_key["slotted"][0].startswith("shapes_drill.Slotted: AttributeError")
    assert len(per_key["counted"]) == 1 and "field 'tags'" in per_key["counted"][0]  # 'unit' has its default
