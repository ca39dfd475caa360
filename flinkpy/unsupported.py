"""What PyFlink has and flinkpy does not: one registry, and one error that names the missing
piece and what flinkpy offers instead.

A PyFlink program with its imports renamed runs on flinkpy for every feature flinkpy has; one that
uses something flinkpy lacks (``flinkpy.table``, ``flinkpy.datastream.connectors.pulsar``,
``DataStream.infer``, ...) stops where it first touches it, before any cluster starts, with an
:class:`UnsupportedError` (exit code 14, ``ExitCode.UNSUPPORTED``):

>>> import flinkpy.table
Traceback (most recent call last):
...
flinkpy.unsupported.MissingModuleError: flinkpy does not have flinkpy.table (PyFlink's Table API and SQL) (write the job with the DataStream API, flinkpy.datastream: Types.ROW rows, the JSON and CSV row formats and keyed state cover most of what a Table program does)

Three doors lead here: a module flinkpy lacks (a finder at the end of ``sys.meta_path``, so it
is asked only once every real module has been looked for), a name a flinkpy module lacks (the
module's ``__getattr__``, :func:`module_getattr`), and a method a class lacks (the class's
``__getattr__``, :func:`attribute_error`). ``flinkpy run`` and ``flinkpy info`` report the error
as any other; a program run with ``python JOB.py`` ends with the same line on stderr and the same
exit code (:func:`install`).
"""

from __future__ import annotations

import atexit
import importlib.abc
import os
import sys
from dataclasses import dataclass
from typing import Any

from flinkpy.errors import ExitCode, FlinkpyError


@dataclass(frozen=True)
class Gap:
    """A PyFlink name flinkpy lacks (spelt with ``flinkpy``), what it is, and what to use instead."""

    name: str
    what: str
    instead: str | None = None


_KAFKA_LIKE = ("use Kafka (KafkaSource in flinkpy.datastream.connectors.kafka) or a Redis stream, replayable "
               "logs with checkpointed offsets: RedisStreamsSource and RedisStreamsSink in flinkpy.datastream.connectors.redis")
_STORE_LIKE = ("write with an exactly-once PostgresSink or PostgresUpsertSink (flinkpy.datastream.connectors.jdbc) "
               "or a RedisUpsertSink (flinkpy.datastream.connectors.redis)")

#: every PyFlink module and name flinkpy is known to lack, by flinkpy's name for it; a module's
#: entry covers its submodules too
GAPS: dict[str, Gap] = {g.name: g for g in (
    Gap("flinkpy.table", "PyFlink's Table API and SQL",
        "write the job with the DataStream API, flinkpy.datastream: Types.ROW rows, the JSON and CSV row "
        "formats and keyed state cover most of what a Table program does"),
    Gap("flinkpy.datastream.connectors.dynamic_kafka", "the dynamic Kafka connector", _KAFKA_LIKE),
    Gap("flinkpy.datastream.connectors.pulsar", "the Pulsar connector", _KAFKA_LIKE),
    Gap("flinkpy.datastream.connectors.kinesis", "the Kinesis connector", _KAFKA_LIKE),
    Gap("flinkpy.datastream.connectors.pubsub", "the Google Pub/Sub connector", _KAFKA_LIKE),
    Gap("flinkpy.datastream.connectors.elasticsearch", "the Elasticsearch sink", _STORE_LIKE),
    Gap("flinkpy.datastream.connectors.cassandra", "the Cassandra sink", _STORE_LIKE),
    Gap("flinkpy.datastream.connectors.hybrid_source", "HybridSource",
        "run the bounded part and the unbounded part as two jobs, or union two sources"),
    Gap("flinkpy.datastream.formats.parquet", "the Parquet format",
        "use the JSON or CSV row format (flinkpy.datastream.formats.json, .csv)"),
    Gap("flinkpy.datastream.formats.orc", "the ORC format",
        "use the JSON or CSV row format (flinkpy.datastream.formats.json, .csv)"),
    Gap("flinkpy.datastream.checkpoint_storage", "checkpoint storage classes",
        "set the directory with env.get_checkpoint_config().set_checkpoint_storage_dir(url) or "
        "execution.checkpointing.dir: any fsspec URL"),
    Gap("flinkpy.datastream.ExternalizedCheckpointRetention", "ExternalizedCheckpointRetention",
        "use ExternalizedCheckpointCleanup (flinkpy.datastream) with "
        "CheckpointConfig.set_externalized_checkpoint_cleanup, or the key "
        "execution.checkpointing.externalized-checkpoint-retention"),
    Gap("flinkpy.datastream.CustomStateBackend", "state backends written in Java",
        "use HashMapStateBackend or EmbeddedRocksDBStateBackend"),
    Gap("flinkpy.datastream.PredefinedOptions", "RocksDB's predefined option profiles",
        "set the state.backend.rocksdb.* keys"),
    Gap("flinkpy.datastream.CheckpointStorage", "checkpoint storage classes",
        "set the directory with env.get_checkpoint_config().set_checkpoint_storage_dir(url) or "
        "execution.checkpointing.dir: any fsspec URL"),
    Gap("flinkpy.datastream.JobManagerCheckpointStorage", "checkpoints kept in the JobManager's memory",
        "checkpoints always go to execution.checkpointing.dir (memory:// for a throwaway one)"),
    Gap("flinkpy.datastream.FileSystemCheckpointStorage", "checkpoint storage classes",
        "set the directory with env.get_checkpoint_config().set_checkpoint_storage_dir(url) or "
        "execution.checkpointing.dir: any fsspec URL"),
    Gap("flinkpy.datastream.CustomCheckpointStorage", "checkpoint storage written in Java",
        "checkpoints go to any fsspec URL in execution.checkpointing.dir"),
    Gap("flinkpy.datastream.MemorySize", "MemorySize (fine-grained resources)",
        "give memory sizes as strings to the configuration keys ('64 mb')"),
    Gap("flinkpy.datastream.MemoryStateBackend", "MemoryStateBackend (deprecated in Flink)",
        "use HashMapStateBackend from flinkpy.datastream.state_backend"),
    Gap("flinkpy.datastream.FsStateBackend", "FsStateBackend (deprecated in Flink)",
        "use HashMapStateBackend from flinkpy.datastream.state_backend"),
    Gap("flinkpy.datastream.RocksDBStateBackend", "RocksDBStateBackend (deprecated in Flink)",
        "use EmbeddedRocksDBStateBackend from flinkpy.datastream.state_backend"),
    Gap("flinkpy.datastream.TimeCharacteristic", "TimeCharacteristic (deprecated in Flink)",
        "event time needs no switch: give the source a WatermarkStrategy or call assign_timestamps_and_watermarks"),
    Gap("flinkpy.datastream.SlotSharingGroup", "slot sharing groups with resources",
        "slot_sharing_group(name) is accepted; every task of a job shares the slots"),
    Gap("flinkpy.datastream.DataStream.infer", "model inference (DataStream.infer)",
        "call the model in map() or process(), loading it in open()"),
    Gap("flinkpy.datastream.DataStream.cache", "cached streams (DataStream.cache)",
        "write the stream to files with FileSink and read them back with FileSource"),
    Gap("flinkpy.datastream.StreamExecutionEnvironment.set_python_requirements", "requirements installed per job",
        "install the packages into the environment the TaskManagers run in"),
    Gap("flinkpy.datastream.StreamExecutionEnvironment.add_python_archive", "archives unpacked per job",
        "ship files with add_python_file() or --pyFiles"),
    Gap("flinkpy.datastream.StreamExecutionEnvironment.set_python_executable", "a Python interpreter per job",
        "the TaskManagers run the Python that started them"),
    Gap("flinkpy.datastream.StreamExecutionEnvironment.register_cached_file", "the distributed cache",
        "ship files with add_python_file() or --pyFiles"),
)}


class UnsupportedError(FlinkpyError):
    """The program uses a PyFlink module, class or method that flinkpy does not have."""

    exit_code = ExitCode.UNSUPPORTED

    def __init__(self, name: str, gap: Gap | None) -> None:
        what = f" ({gap.what})" if gap is not None else ""
        instead = gap.instead if gap is not None and gap.instead else (
            "it is not part of what flinkpy provides of PyFlink; see the API reference for what is")
        super().__init__(f"flinkpy does not have {name}{what}", remedy=instead)
        self.name = name


class MissingModuleError(UnsupportedError, ImportError):
    """An import of a module, or of a name from a module, that flinkpy lacks: an ImportError, so
    that a program probing for an optional feature with ``except ImportError`` goes on."""


class MissingAttributeError(UnsupportedError, AttributeError):
    """A method flinkpy lacks: an AttributeError, so that ``hasattr`` answers False."""


def gap_of(name: str) -> Gap | None:
    """The registry's entry for ``name`` or for the nearest module above it.

    >>> gap_of("flinkpy.table.expressions").name
    'flinkpy.table'
    >>> gap_of("flinkpy.datastream.DataStream.map") is None
    True
    """
    parts = name.split(".")
    for end in range(len(parts), 1, -1):
        gap = GAPS.get(".".join(parts[:end]))
        if gap is not None:
            return gap
    return None


def module_getattr(module: str) -> Any:
    """A module ``__getattr__`` for ``module``: a name in the registry raises
    :class:`MissingModuleError` (``from module import Name`` then ends with its line), any other
    the usual AttributeError."""

    def __getattr__(name: str) -> Any:
        gap = GAPS.get(f"{module}.{name}")
        if gap is not None:
            raise MissingModuleError(f"{module}.{name}", gap)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


def attribute_error(owner: str, obj: object, name: str) -> AttributeError:
    """What a class's ``__getattr__`` raises for ``name``: :class:`MissingAttributeError` for a
    method in the registry under ``owner`` (``flinkpy.datastream.DataStream``), else the usual
    AttributeError."""
    gap = GAPS.get(f"{owner}.{name}")
    if gap is not None:
        return MissingAttributeError(f"{owner.rsplit('.', 1)[-1]}.{name}", gap)
    return AttributeError(f"{type(obj).__name__!r} object has no attribute {name!r}")


class _Finder(importlib.abc.MetaPathFinder):
    """Last on ``sys.meta_path``: asked only for a ``flinkpy.`` module no other finder found."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname.startswith("flinkpy."):
            raise MissingModuleError(fullname, gap_of(fullname))
        return None


_exit_code: int | None = None


def _excepthook(kind: type[BaseException], exc: BaseException, tb: Any, _previous: Any = None) -> None:
    global _exit_code
    if isinstance(exc, UnsupportedError) and not os.environ.get("FLINKPY_DEBUG"):
        sys.stderr.write(f"flinkpy: error: {exc}\n")
        _exit_code = exc.exit_code
        return
    (_previous or sys.__excepthook__)(kind, exc, tb)


def _exit_with_code() -> None:
    """Registered when flinkpy is first imported, so it runs after the handlers registered later
    (an interpreter ending on an uncaught exception exits 1, whatever the exception)."""
    if _exit_code is not None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(_exit_code)


def install() -> None:
    """Put the finder at the end of ``sys.meta_path`` and chain an excepthook that ends a
    ``python JOB.py`` stopped by an UnsupportedError with its one line (the traceback with
    ``FLINKPY_DEBUG=1``) and exit code 14; idempotent."""
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    sys.meta_path.append(_Finder())
    previous = sys.excepthook
    sys.excepthook = lambda kind, exc, tb: _excepthook(kind, exc, tb, previous)
    atexit.register(_exit_with_code)
