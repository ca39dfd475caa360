"""The connectors' drivers are extras: flinkpy works without them, and a connector used without
its driver fails on one line that names the pip command.

The drivers are hidden from a subprocess by a "blocker" directory first on its PYTHONPATH,
whose ``psycopg`` and ``redis`` packages raise ModuleNotFoundError as a missing package does;
the processes the subprocess starts (an embedded cluster's) inherit it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

DRIVERS = ("psycopg", "redis", "pyiceberg")


@pytest.fixture
def without_drivers(tmp_path: Path) -> dict[str, str]:
    """The environment of a Python in which psycopg, redis-py and pyiceberg cannot be imported."""
    blocker = tmp_path / "blocker"
    for name in DRIVERS:
        (blocker / name).mkdir(parents=True)
        (blocker / name / "__init__.py").write_text(f"raise ModuleNotFoundError(\"No module named '{name}'\", name='{name}')\n")
    path = [str(blocker), str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {"PYTHONPATH": os.pathsep.join(path)}


def python(code: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env={**os.environ, **env}, cwd=str(ROOT), timeout=timeout, stdin=subprocess.DEVNULL)


def test_the_drivers_are_extras_and_the_test_extra_pulls_them_in() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [d.split("[")[0].split(">")[0].strip() for d in project["dependencies"]]
    assert "psycopg" not in names and "redis" not in names
    extras = project["optional-dependencies"]
    assert [d for d in extras["postgres"] if d.startswith("psycopg")] and [d for d in extras["redis"] if d.startswith("redis")]
    test_extra = next(d for d in extras["test"] if d.startswith("flinkpy["))
    assert [d for d in extras["iceberg"] if d.startswith("pyiceberg")] and "pyiceberg" not in names
    assert {"postgres", "redis", "iceberg", "spark"} <= set(test_extra.removeprefix("flinkpy[").removesuffix("]").split(","))


def test_the_blocker_hides_the_drivers(without_drivers: dict[str, str]) -> None:
    # the other tests here would pass vacuously if the drivers were still importable
    res = python("import psycopg", without_drivers)
    assert res.returncode == 1 and "ModuleNotFoundError: No module named 'psycopg'" in res.stderr
    res = python("import redis", without_drivers)
    assert res.returncode == 1 and "ModuleNotFoundError: No module named 'redis'" in res.stderr


def test_building_a_connector_without_its_driver_names_the_extra(without_drivers: dict[str, str]) -> None:
    res = python(
        """
        from flinkpy.connectors.drivers import MissingDriverError
        from flinkpy.datastream.connectors import (JdbcConnectionOptions, JdbcSink, PostgresBatchSink, PostgresSink,
            PostgresUpsertSink, RedisStreamsSink, RedisUpsertSink)
        from flinkpy.connectors.redis_streams import RedisStreamsSource
        from flinkpy.datastream.connectors.iceberg import IcebergSink
        from flinkpy.common import Types

        dsn = "postgresql://app@127.0.0.1:1/shop"
        url = "jdbc:postgresql://127.0.0.1:1/shop"
        builds = {
            "PostgresSink": lambda: PostgresSink.builder().set_dsn(dsn).set_sql("INSERT INTO t VALUES (?)").build(),
            "PostgresUpsertSink": lambda: PostgresSink.upsert(dsn, "t", ["k", "v"], ["k"]),
            "PostgresBatchSink": lambda: PostgresBatchSink(dsn, "INSERT INTO t VALUES (%s)"),
            "JdbcSink": lambda: JdbcSink.sink("INSERT INTO t VALUES (?)", Types.ROW([Types.LONG()]),
                                              JdbcConnectionOptions.JdbcConnectionOptionsBuilder().with_url(url).build()),
            "RedisStreamsSink": lambda: RedisStreamsSink.builder().set_url("redis://127.0.0.1:1").set_topic("t").set_partitions(2).build(),
            "RedisUpsertSink": lambda: RedisUpsertSink.builder().set_url("redis://127.0.0.1:1").set_hash("h").set_key_selector(str).build(),
            "RedisStreamsSource": lambda: RedisStreamsSource.builder().set_url("redis://127.0.0.1:1").set_topic("t").set_partitions(2).build(),
            "IcebergSink": lambda: IcebergSink.builder().set_catalog_properties({"type": "sql", "uri": "sqlite://"}).set_table("db.t").build(),
        }
        for name, build in builds.items():
            try:
                build()
            except MissingDriverError as e:
                print(name, e.exit_code, e)
            else:
                print(name, "built")
        """,
        without_drivers,
    )
    assert res.returncode == 0, res.stderr
    lines = dict(line.split(" ", 1) for line in res.stdout.splitlines())
    assert len(lines) == 8, res.stdout
    systems = {"Redis": ("redis", "redis", "Redis"), "Iceberg": ("iceberg", "pyiceberg", "Iceberg")}
    for name, line in lines.items():
        extra, module, system = next((v for k, v in systems.items() if name.startswith(k)), ("postgres", "psycopg", "PostgreSQL"))
        assert line == (
            f"8 the {system} connectors need {module}, which cannot be imported here: "
            f"No module named '{module}' (run \"pip install 'flinkpy[{extra}]'\")"
        ), (name, line)


JOB = """
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors import {import_}

env = StreamExecutionEnvironment.get_execution_environment()
env.from_collection([("a", 1)]).sink_to({build})
env.execute("needs a driver")
"""


@pytest.mark.parametrize(
    "import_, build, extra",
    [
        ("PostgresSink", 'PostgresSink.upsert("postgresql://app@127.0.0.1:1/shop", "t", ["k", "v"], ["k"])', "postgres"),
        ("RedisUpsertSink", 'RedisUpsertSink.builder().set_url("redis://127.0.0.1:1").set_hash("h").set_key_selector(lambda r: r[0]).build()', "redis"),
    ],
    ids=["postgres", "redis"],
)
def test_flinkpy_run_reports_a_missing_driver_on_one_line(without_drivers: dict[str, str], flinkpy_home: Path, tmp_path: Path,
                                                          import_: str, build: str, extra: str) -> None:
    job = tmp_path / "job.py"
    job.write_text(JOB.format(import_=import_, build=build))
    res = run_cli("run", str(job), env=without_drivers)
    assert res.returncode == 8, res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.splitlines()) == 1, res.stderr
    assert res.stderr.startswith("flinkpy: error: the ") and f"(run \"pip install 'flinkpy[{extra}]'\")" in res.stderr


@pytest.mark.timeout(120)
def test_jobs_without_connectors_run_without_the_drivers(without_drivers: dict[str, str], flinkpy_home: Path, tmp_path: Path) -> None:
    # the CLI, an embedded cluster's JobManager, TaskManager and task processes, and the
    # connectors package itself import without psycopg and redis-py
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent("""
        import flinkpy.datastream.connectors
        from flinkpy.datastream import StreamExecutionEnvironment

        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        squares = env.from_collection(range(10)).rebalance().map(lambda x: x * x).key_by(lambda x: x % 2).sum()
        print(sorted(squares.execute_and_collect()))
    """))
    res = run_cli("run", str(job), env=without_drivers, timeout=100)
    assert res.returncode == 0, res.stderr[-3000:]
    odd, even = [1, 9, 25, 49, 81], [0, 4, 16, 36, 64]
    running = sorted([sum(odd[: i + 1]) for i in range(5)] + [sum(even[: i + 1]) for i in range(5)])
    assert res.stdout.splitlines()[-1] == str(running)
