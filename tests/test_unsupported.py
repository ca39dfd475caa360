"""A PyFlink program that uses what flinkpy lacks ends with one line and exit code 14.

Through ``python JOB.py``, ``flinkpy run`` and ``flinkpy info`` alike: the line names the missing
module, class or method and what flinkpy offers instead, there is no traceback, and no cluster
starts. The registry itself is checked against the code: every name it lists is really absent
(an entry left behind by a feature that arrived fails here).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli
from flinkpy.errors import ExitCode
from flinkpy.unsupported import GAPS, MissingAttributeError

HEADER = "from flinkpy.datastream import StreamExecutionEnvironment\nenv = StreamExecutionEnvironment.get_execution_environment()\n"

#: (what the program does, what the one line must name, what it must offer instead)
PROGRAMS = [
    ("from flinkpy.table import StreamTableEnvironment\n", "flinkpy.table", "DataStream API"),
    ("from flinkpy.datastream.connectors.pulsar import PulsarSource\n", "flinkpy.datastream.connectors.pulsar", "RedisStreamsSource"),
    ("from flinkpy.datastream.connectors.elasticsearch import Elasticsearch7SinkBuilder\n",
     "flinkpy.datastream.connectors.elasticsearch", "PostgresSink"),
    ("env.from_collection([1, 2]).infer(None).print()\nenv.execute()\n", "DataStream.infer", "map() or process()"),
    ("from flinkpy.datastream import TimeCharacteristic\n", "flinkpy.datastream.TimeCharacteristic", "WatermarkStrategy"),
    ("import flinkpy.datastream.connectors.no_such_connector\n", "flinkpy.datastream.connectors.no_such_connector", "API reference"),
]


def check_one_line(res: subprocess.CompletedProcess, names: str, instead: str) -> None:
    assert res.returncode == ExitCode.UNSUPPORTED == 14, (res.returncode, res.stderr)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("flinkpy: error: flinkpy does not have ") and names in lines[0] and instead in lines[0], lines[0]
    assert "Traceback" not in res.stderr and res.stdout == ""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("body,names,instead", PROGRAMS, ids=[p[1] for p in PROGRAMS])
def test_python_job_ends_with_one_line_and_exit_14(flinkpy_home: Path, tmp_path: Path, body: str, names: str, instead: str) -> None:
    job = tmp_path / "job.py"
    job.write_text(HEADER + body)
    res = subprocess.run([sys.executable, str(job)], capture_output=True, text=True, timeout=50)
    check_one_line(res, names, instead)
    assert not any(flinkpy_home.iterdir()), "nothing may start before the error"


@pytest.mark.timeout(90)
@pytest.mark.parametrize("verb", ["run", "info"])
def test_flinkpy_run_and_info_end_with_one_line_and_exit_14(flinkpy_home: Path, tmp_path: Path, verb: str) -> None:
    for body, names, instead in PROGRAMS[:4]:
        job = tmp_path / "job.py"
        job.write_text(HEADER + body)
        res = run_cli(verb, str(job), timeout=60)
        check_one_line(res, names, instead)
        assert "embedded local cluster" not in res.stderr
    assert not any(flinkpy_home.iterdir()), "no cluster may start"
    if verb == "info":  # info --json: one document with the error, the same exit code
        res = run_cli("info", "--json", str(job))
        assert res.returncode == 14 and json.loads(res.stdout)["error"]["exit_code"] == 14


def test_a_program_can_probe_for_what_flinkpy_lacks() -> None:
    from flinkpy.datastream import StreamExecutionEnvironment

    ds = StreamExecutionEnvironment.get_execution_environment().from_collection([1])
    assert not hasattr(ds, "infer") and hasattr(ds, "map")
    with pytest.raises(MissingAttributeError):
        ds.infer
    with pytest.raises(ImportError):  # `except ImportError:` around an optional import goes on
        import flinkpy.table  # noqa: F401
    with pytest.raises(AttributeError, match="no attribute 'no_such_method'"):
        ds.no_such_method


@pytest.mark.parametrize("name", sorted(GAPS))
def test_every_registered_name_is_really_missing(name: str) -> None:
    """The registry lists only what flinkpy lacks: a module that cannot be imported, a name its
    module does not define, a method its class does not have."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):  # the longest prefix that is a real module
        module_name = ".".join(parts[:cut])
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        owner, rest = module, parts[cut:]
        break
    for attr in rest[:-1]:
        owner = owner.__dict__[attr]  # a class of the module
    assert rest[-1] not in vars(owner) and not any(rest[-1] in vars(k) for k in getattr(owner, "__mro__", ())), name
    if isinstance(owner, type):
        return
    try:
        importlib.import_module(name)
    except ImportError:
        return
    pytest.fail(f"{name} can be imported: remove it from flinkpy.unsupported.GAPS")


#: the names PyFlink's pyflink.datastream exports (its __all__)
PYFLINK_DATASTREAM = """
StreamExecutionEnvironment DataStream KeyedStream WindowedStream ConnectedStreams BroadcastStream
BroadcastConnectedStream DataStreamSink MapFunction CoMapFunction FlatMapFunction CoFlatMapFunction
ReduceFunction FilterFunction ProcessFunction KeyedProcessFunction CoProcessFunction
KeyedCoProcessFunction WindowFunction ProcessWindowFunction AggregateFunction BroadcastProcessFunction
KeyedBroadcastProcessFunction RuntimeContext TimerService CheckpointingMode CheckpointConfig
ExternalizedCheckpointCleanup ExternalizedCheckpointRetention StateBackend HashMapStateBackend
EmbeddedRocksDBStateBackend CustomStateBackend MemoryStateBackend RocksDBStateBackend FsStateBackend
PredefinedOptions CheckpointStorage JobManagerCheckpointStorage FileSystemCheckpointStorage
CustomCheckpointStorage RuntimeExecutionMode Window TimeWindow CountWindow GlobalWindow WindowAssigner
MergingWindowAssigner TriggerResult Trigger TimeCharacteristic TimeDomain KeySelector Partitioner
SourceFunction SinkFunction SlotSharingGroup MemorySize OutputTag
""".split()


@pytest.mark.parametrize("name", PYFLINK_DATASTREAM)
def test_every_name_pyflink_datastream_exports_is_there_or_registered(name: str) -> None:
    """``from flinkpy.datastream import X`` works for every X of PyFlink's, or ends with the
    registry's line: never a bare ImportError, never 'flinkpy does not have' for what it has."""
    import flinkpy.datastream

    if f"flinkpy.datastream.{name}" in GAPS:
        with pytest.raises(ImportError, match="flinkpy does not have"):
            exec(f"from flinkpy.datastream import {name}", {})
    else:
        assert getattr(flinkpy.datastream, name) is not None
