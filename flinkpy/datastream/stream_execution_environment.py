"""StreamExecutionEnvironment: where a job's sources are created and from where it is executed.

Shaped like PyFlink's. ``execute()`` builds the JobGraph and hands it to the client executor,
which submits it to the cluster the CLI points at (``flinkpy run``) or, when there is none, to an
embedded local cluster of real processes started for this job and stopped afterwards.
"""

from __future__ import annotations

import copy
from typing import Any, Iterable

from flinkpy.errors import InvalidProgramError
from flinkpy.graph.job_graph import JobGraph, build_job_graph
from flinkpy.graph.stream_graph import StreamGraph, StreamRef


class RuntimeExecutionMode:
    """STREAMING emits running results; BATCH (bounded inputs) emits each key's final result."""

    STREAMING = "STREAMING"
    BATCH = "BATCH"
    AUTOMATIC = "AUTOMATIC"


class StreamExecutionEnvironment:
    """Where a job is built and from where it runs: its sources, its settings, ``execute()``.

    A job program gets one with :meth:`get_execution_environment`, sets what applies to the
    whole job (parallelism, checkpointing, state backend, restart strategy, runtime mode),
    creates sources (``from_collection``, ``from_source``, ...), transforms their streams, and
    calls :meth:`execute`. Settings come first from the execution context (``flinkpy run -D``,
    flinkpy.yaml), then from calls here, which win. Methods named as in PyFlink's
    environment behave as there.

    >>> env = StreamExecutionEnvironment.get_execution_environment()
    >>> env.set_parallelism(2).get_parallelism()
    2
    >>> squares = env.from_collection(range(6)).rebalance().map(lambda n: n * n)   # on 2 subtasks
    >>> sink = squares.key_by(lambda n: n % 2).reduce(lambda a, b: a + b).print()
    >>> result = env.execute("sums of squares")    # prints "2> 0", "1> 1", ..., "1> 35"
    >>> result.get_job_id() != "", result.get_net_runtime() >= 0
    (True, True)
    """

    def __getattr__(self, name: str) -> Any:
        # only reached for a name the class lacks: a PyFlink method flinkpy does not have says so
        from flinkpy.unsupported import attribute_error

        raise attribute_error("flinkpy.datastream.StreamExecutionEnvironment", self, name)

    def __init__(self, configuration: Any = None):
        from flinkpy.program.context import current_context
        from flinkpy.common.execution_config import ExecutionConfig

        ctx = current_context()
        self._settings: dict[str, str] = dict(ctx.config)
        if configuration is not None:
            self._settings.update({str(k): str(v) for k, v in configuration.to_dict().items()})
        self._graph = StreamGraph()
        self._config = ExecutionConfig()
        self._parallelism: int = ctx.parallelism or int(self._settings.get("parallelism.default", 1))
        self._max_parallelism: int = int(self._settings.get("pipeline.max-parallelism", 128))
        self._runtime_mode: str = self._settings.get("execution.runtime-mode", RuntimeExecutionMode.STREAMING).upper()
        self._chaining = True
        self._buffer_timeout: int | None = None
        self._checkpoint_config: Any = None

    @staticmethod
    def get_execution_environment(configuration: Any = None) -> "StreamExecutionEnvironment":
        """A new environment in the current execution context: the cluster ``flinkpy run`` points at
        (with its ``-D`` settings and ``-p``), or an embedded local cluster per ``execute()`` when
        the program runs with plain ``python``. ``configuration`` (a
        :class:`~flinkpy.common.Configuration`) overrides settings for this environment.
        """
        return StreamExecutionEnvironment(configuration)

    # -- settings ----------------------------------------------------------------------------

    def get_config(self) -> Any:
        """The :class:`~flinkpy.common.ExecutionConfig`: auto-watermark interval and global job
        parameters.
        """
        return self._config

    def configure(self, configuration: Any) -> "StreamExecutionEnvironment":
        """Apply settings of ``configuration`` (a :class:`~flinkpy.common.Configuration`), the keys of
        flinkpy.yaml and ``-D``: ``parallelism.default``, ``execution.runtime-mode``,
        ``execution.checkpointing.interval``, ``state.backend.type``, ...

        >>> from flinkpy.common import Configuration
        >>> env = StreamExecutionEnvironment.get_execution_environment()
        >>> env.configure(Configuration({"parallelism.default": "3"})).get_parallelism()
        3
        """
        self._settings.update({str(k): str(v) for k, v in configuration.to_dict().items()})
        if "parallelism.default" in self._settings:
            self._parallelism = int(self._settings["parallelism.default"])
        if "pipeline.max-parallelism" in self._settings:
            self._max_parallelism = int(self._settings["pipeline.max-parallelism"])
        if "execution.runtime-mode" in self._settings:
            self._runtime_mode = self._settings["execution.runtime-mode"].upper()
        return self

    def set_parallelism(self, parallelism: int) -> "StreamExecutionEnvironment":
        """The parallelism of operators that set none (``parallelism.default``; ``flinkpy run -p``).
        Each subtask takes a slot, so a job needs as many free slots as its largest parallelism.
        """
        if not isinstance(parallelism, int) or parallelism < 1:
            raise InvalidProgramError(f"parallelism must be a positive integer, got {parallelism!r}")
        self._parallelism = parallelism
        return self

    def get_parallelism(self) -> int:
        """The default parallelism of this environment's operators."""
        return self._parallelism

    def set_max_parallelism(self, max_parallelism: int) -> "StreamExecutionEnvironment":
        """The default max parallelism (``pipeline.max-parallelism``, 128): how many key groups keyed
        state is split into, and so the most subtasks a keyed operator can be rescaled to. Changing
        it makes earlier savepoints of keyed operators unusable.
        """
        if not isinstance(max_parallelism, int) or not 1 <= max_parallelism <= 32768:
            raise InvalidProgramError(f"max parallelism must be between 1 and 32768, got {max_parallelism!r}")
        self._max_parallelism = max_parallelism
        return self

    def get_max_parallelism(self) -> int:
        """The default max parallelism of this environment's operators."""
        return self._max_parallelism

    def set_runtime_mode(self, execution_mode: Any) -> "StreamExecutionEnvironment":
        """STREAMING (the default): keyed aggregations emit every update, event time is driven by
        watermarks. BATCH, for bounded sources only: each key's final result once the input ends.
        AUTOMATIC: BATCH when every source is bounded, else STREAMING. Takes a
        :class:`RuntimeExecutionMode` member or its name.
        """
        mode = getattr(execution_mode, "name", None) or str(execution_mode)
        mode = mode.split(".")[-1].upper()
        if mode not in (RuntimeExecutionMode.STREAMING, RuntimeExecutionMode.BATCH, RuntimeExecutionMode.AUTOMATIC):
            raise InvalidProgramError(f"unknown runtime mode {execution_mode!r}", remedy="use STREAMING, BATCH or AUTOMATIC")
        self._runtime_mode = mode
        return self

    def set_buffer_timeout(self, timeout_millis: int) -> "StreamExecutionEnvironment":
        """How long records may wait in an output buffer before it is sent (milliseconds;
        ``execution.buffer-timeout.interval``, 100 ms): lower means less latency, 0 sends every
        record at once (slowest).
        """
        self._buffer_timeout = int(timeout_millis)
        return self

    def get_buffer_timeout(self) -> int:
        """The output buffer timeout in milliseconds: set here, or from the configuration.

        >>> StreamExecutionEnvironment.get_execution_environment().set_buffer_timeout(5).get_buffer_timeout()
        5
        """
        if self._buffer_timeout is not None:
            return self._buffer_timeout
        from flinkpy.units import parse_duration_ms

        return parse_duration_ms(self._settings.get("execution.buffer-timeout.interval", "100 ms"))

    def disable_operator_chaining(self) -> "StreamExecutionEnvironment":
        """Run every operator in a task of its own, with channels between them (chaining fuses
        operators connected one to one into one task and process).
        """
        self._chaining = False
        return self

    def is_chaining_enabled(self) -> bool:
        """Whether operators may be chained (true unless :meth:`disable_operator_chaining` was called)."""
        return self._chaining

    def enable_checkpointing(self, interval: int, mode: Any = None) -> "StreamExecutionEnvironment":
        """Take a checkpoint every ``interval`` milliseconds (``execution.checkpointing.interval``),
        with ``mode`` EXACTLY_ONCE (aligned barriers, the default) or AT_LEAST_ONCE. After a
        failure the job restarts from its latest completed checkpoint.

        >>> env = StreamExecutionEnvironment.get_execution_environment()
        >>> env.enable_checkpointing(1000).get_checkpoint_interval(), env.get_checkpointing_mode()
        (1000, 'EXACTLY_ONCE')
        """
        self._settings["execution.checkpointing.interval"] = f"{int(interval)} ms"
        if mode is not None:
            self._settings["execution.checkpointing.mode"] = getattr(mode, "name", str(mode)).split(".")[-1]
        return self

    def get_checkpoint_config(self) -> Any:
        """The :class:`~flinkpy.datastream.checkpoint_config.CheckpointConfig`, a view on this
        environment's checkpoint settings: changes made through it apply to the job.
        """
        from flinkpy.datastream.checkpoint_config import CheckpointConfig

        return CheckpointConfig(self._settings)

    def get_checkpoint_interval(self) -> int:
        """The checkpoint interval in milliseconds, -1 when checkpointing is off."""
        return self.get_checkpoint_config().get_checkpoint_interval()

    def get_checkpointing_mode(self) -> str:
        """``"EXACTLY_ONCE"`` or ``"AT_LEAST_ONCE"``."""
        return self.get_checkpoint_config().get_checkpointing_mode()

    def set_state_backend(self, state_backend: Any) -> "StreamExecutionEnvironment":
        """Where keyed state lives: ``HashMapStateBackend()`` or ``EmbeddedRocksDBStateBackend()``
        (see flinkpy.datastream.state_backend)."""
        settings = getattr(state_backend, "settings", None)
        if not getattr(state_backend, "type_name", None) or not callable(settings):
            raise InvalidProgramError(f"set_state_backend() needs a state backend, got {type(state_backend).__name__}",
                                      remedy="pass HashMapStateBackend() or EmbeddedRocksDBStateBackend() (flinkpy.datastream.state_backend)")
        self._settings.update(settings())
        return self

    def get_state_backend(self) -> Any:
        """The state backend the job will use (from :meth:`set_state_backend` or ``state.backend.type``)."""
        from flinkpy.datastream.state_backend import backend_of

        return backend_of(self._settings.get("state.backend.type", "hashmap"), self._settings)

    def set_restart_strategy(self, restart_strategy_configuration: Any) -> "StreamExecutionEnvironment":
        """How the job restarts after a failure: a configuration from
        :class:`~flinkpy.common.RestartStrategies` (no restart, fixed delay, failure rate,
        exponential delay). ``flinkpy restart-strategy set`` changes it on a running job.
        """
        self._settings.update(restart_strategy_configuration.to_config())
        return self

    def add_python_file(self, file_path: str) -> None:
        """Make a module, a package or module directory, or a .zip/.whl/.egg importable where the
        job's functions run, as PyFlink's ``python.files``: it is shipped with the job, to
        flinkpy's TaskManagers (in the job's archive of Python files) and to Spark's executors
        (``--runner spark``). It is importable in the job file at once too.

        >>> import os, tempfile
        >>> d = tempfile.mkdtemp(); _ = open(os.path.join(d, "helpers_x1.py"), "w").write("K = 7\\n")
        >>> env = StreamExecutionEnvironment.get_execution_environment()
        >>> env.add_python_file(os.path.join(d, "helpers_x1.py"))
        >>> import helpers_x1; helpers_x1.K
        7
        """
        import os
        import sys

        from flinkpy.program import python_files
        from flinkpy.errors import NotFoundError

        path = os.path.abspath(file_path)
        if not os.path.exists(path):
            raise NotFoundError(f"add_python_file: {file_path} does not exist",
                                remedy="pass a .py file, a directory or a .zip/.whl/.egg that exists")
        self._settings[python_files.KEY] = python_files.add_entry(self._settings.get(python_files.KEY), path)
        root = python_files.import_root(path)
        if root not in sys.path:
            # appended: sys.path[0] stays the job's own directory, which the job ships first
            sys.path.append(root)

    def add_jars(self, *jars_path: str) -> None:
        """Accepted for PyFlink compatibility; flinkpy runs no JVM, so jars have no effect."""

    def add_classpaths(self, *classpaths: str) -> None:
        """Accepted for PyFlink compatibility; no effect."""

    # -- sources -----------------------------------------------------------------------------

    def _source(self, name: str, source: Any, type_info: Any = None, non_parallel: bool = False) -> Any:
        from flinkpy.datastream.data_stream import DataStream

        node = self._graph.add_node("source", name, source)
        if type_info is not None:
            node.params["output_type"] = type_info
        if non_parallel:
            node.max_allowed_parallelism = 1
            node.parallelism = 1
        return DataStream(self, (StreamRef(node.id),), node)

    def from_collection(self, collection: Iterable[Any], type_info: Any = None) -> Any:
        """A source of the items of ``collection`` (materialized as a list at once), in order, at
        parallelism 1. Replayable: the position is checkpointed, so a restored job continues after
        the last item of its checkpoint. With ``type_info`` ``Types.ROW(...)`` or
        ``Types.ROW_NAMED(...)`` the items (tuples, lists or Rows) become Rows with the type's
        field names, as in PyFlink; other type information is kept for PyFlink programs.
        """
        from flinkpy.common.typeinfo import RowTypeInfo
        from flinkpy.connectors.collection import CollectionSource

        items = list(collection)
        if isinstance(type_info, RowTypeInfo):
            try:
                items = [type_info.to_row(item) for item in items]
            except TypeError as e:
                raise InvalidProgramError(f"from_collection: {e}", remedy="make every item a tuple, list or Row of the type's arity") from None
        return self._source("Collection Source", CollectionSource(items), type_info, non_parallel=True)

    def read_text_file(self, file_path: str, charset_name: str = "UTF-8") -> Any:
        """The lines of a file, or of the files of a directory, as strings (a
        :class:`~flinkpy.datastream.connectors.FileSource` read once; positions are checkpointed).
        """
        from flinkpy.datastream.connectors.file_system import FileSource, StreamFormat

        source = FileSource.for_record_stream_format(StreamFormat.text_line_format(charset_name), file_path).build()
        return self._source(f"Read Text File: {file_path}", source)

    def socket_text_stream(self, hostname: str, port: int, delimiter: str = "\n", max_retry: int = 0) -> Any:
        """The lines a TCP server sends (Flink's ``socketTextStream``); parallelism 1, and no
        delivery guarantee: a socket cannot be replayed after a failure."""
        from flinkpy.connectors.socket_source import SocketTextSource

        source = SocketTextSource(hostname, port, delimiter, max_retry)
        return self._source(f"Socket Stream: {hostname}:{port}", source, non_parallel=True)

    def from_source(self, source: Any, watermark_strategy: Any = None, source_name: str = "Source", type_info: Any = None) -> Any:
        """A stream from a :class:`~flinkpy.datastream.connectors.Source` (NumberSequenceSource,
        FileSource, DataGeneratorSource, RedisStreamsSource, ...): one reader per subtask, whose
        positions are in checkpoints. ``watermark_strategy`` stamps records and makes watermarks
        at the readers, for event time.

        >>> from flinkpy.common import WatermarkStrategy
        >>> from flinkpy.datastream.connectors import NumberSequenceSource
        >>> env = StreamExecutionEnvironment.get_execution_environment()
        >>> numbers = env.from_source(NumberSequenceSource(1, 100), WatermarkStrategy.no_watermarks(), "numbers")
        >>> numbers.get_name()
        'numbers'
        """
        from flinkpy.connectors.base import Source

        if not isinstance(source, Source):
            raise InvalidProgramError(
                f"from_source() needs a Source (FileSource, NumberSequenceSource, ...), got {type(source).__name__}"
            )
        if type_info is None:
            # a source whose deserializer knows its rows (PyFlink's getProducedType): KafkaSource
            type_info = getattr(source, "produced_type", None)
        stream = self._source(source_name, source, type_info)
        if watermark_strategy is not None:
            stream._node.params["watermark_strategy"] = watermark_strategy
        return stream

    def add_source(self, source_func: Any, source_name: str = "Custom Source", type_info: Any = None) -> Any:
        """A stream from a SourceFunction (``run(ctx)`` calling ``ctx.collect(value)``, ``cancel()``)
        at parallelism 1. It cannot be replayed: after a failure ``run`` starts again from its
        beginning, so use :meth:`from_source` with a replayable source for exactly-once results.
        A Source object is passed on to :meth:`from_source`.
        """
        from flinkpy.connectors.base import Source

        if isinstance(source_func, Source):
            return self._source(source_name, source_func, type_info)
        if not callable(getattr(source_func, "run", None)):
            raise InvalidProgramError(
                f"add_source() needs a Source or a SourceFunction with run(ctx), got {type(source_func).__name__}"
            )
        from flinkpy.connectors.function_source import FunctionSource

        return self._source(source_name, FunctionSource(source_func), type_info, non_parallel=True)

    # -- execution ---------------------------------------------------------------------------

    def _job_graph(self, job_name: str | None) -> JobGraph:
        settings = dict(self._settings)
        if self._buffer_timeout is not None:
            settings["execution.buffer-timeout.interval"] = f"{self._buffer_timeout} ms"
        mode = self._runtime_mode
        if mode == RuntimeExecutionMode.AUTOMATIC:
            mode = RuntimeExecutionMode.BATCH if self._all_sources_bounded() else RuntimeExecutionMode.STREAMING
        if mode == RuntimeExecutionMode.BATCH and not self._all_sources_bounded():
            raise InvalidProgramError(
                "BATCH execution mode needs bounded sources, but this job has an unbounded one",
                remedy="use STREAMING mode, or make the sources bounded",
            )
        from flinkpy.datastream.state_backend import backend_of

        backend_of(settings.get("state.backend.type", "hashmap"), settings)  # refuses unknown types and bad options
        interval = self._config.get_auto_watermark_interval()
        if interval != 200 or "pipeline.auto-watermark-interval" not in settings:
            settings["pipeline.auto-watermark-interval"] = f"{interval} ms"
        params = self._config.get_global_job_parameters() if hasattr(self._config, "get_global_job_parameters") else {}
        if params:
            settings.update({f"$job.{k}": str(v) for k, v in dict(params).items()})
        graph = self._graph.to_execute()
        if not graph.nodes:
            raise InvalidProgramError(
                "no operators to execute: every operator of this environment ran in an earlier execute()",
                remedy="build the next pipeline (a source and a sink) before calling execute() again",
            )
        return build_job_graph(
            graph,
            job_name=job_name or self._settings.get("pipeline.name") or "Flink Streaming Job",
            default_parallelism=self._parallelism,
            max_parallelism=self._max_parallelism,
            chaining_enabled=self._chaining,
            config=settings,
            runtime_mode=mode,
        )

    def _all_sources_bounded(self) -> bool:
        from flinkpy.connectors.base import Boundedness

        return all(
            getattr(n.fn, "boundedness", Boundedness.BOUNDED) == Boundedness.BOUNDED
            for n in self._graph.nodes.values()
            if n.is_source
        )

    def get_execution_plan(self) -> str:
        """The job graph that :meth:`execute` would submit, as JSON: vertices (chains of operators)
        with their parallelism, and the partitioning of the edges between them (what ``flinkpy
        info JOB.py`` prints).
        """
        import json

        return json.dumps(self._job_graph(None).plan(), indent=2)

    def execute(self, job_name: str | None = None) -> Any:
        """Run the job and wait for its end; returns a JobExecutionResult (job id, net runtime), or
        raises :class:`~flinkpy.errors.JobExecutionError` with the root cause if the job failed.

        The job goes to the cluster of the execution context (``flinkpy run``), else to an
        embedded local cluster started for it and stopped afterwards. What its sinks print shows
        on this process's standard output.
        """
        from flinkpy.client.executor import execute_job_graph

        job = self._job_graph(job_name)
        if self._captured(job.job_name):
            from flinkpy.client.job_client import JobExecutionResult

            return JobExecutionResult("", 0, job.job_name)
        self._graph.executed()
        return execute_job_graph(job, detached=False)

    def execute_async(self, job_name: str = "Flink Streaming Job") -> Any:
        """Submit the job to a running cluster and return a JobClient at once (job id, status,
        cancel). Needs a cluster (``flinkpy cluster start``, or ``flinkpy run -d``): an embedded
        one would end with this program.
        """
        from flinkpy.client.executor import execute_job_graph

        job = self._job_graph(job_name)
        if self._captured(job.job_name):
            return None
        self._graph.executed()
        return execute_job_graph(job, detached=True)

    def _start(self, job_name: str) -> Any:
        """Submit the job without waiting for it (an embedded cluster is started for it when no
        cluster is configured): a StartedJob, or None when a capturing context took it."""
        from flinkpy.client.executor import start_job_graph

        job = self._job_graph(job_name)
        if self._captured(job.job_name):
            return None
        self._graph.executed()
        return start_job_graph(job)

    def _captured(self, job_name: str) -> bool:
        """In a capturing context (the Spark runner), hand this environment over instead of running it."""
        from flinkpy.program.context import current_context

        capture = current_context().capture
        if capture is None:
            return False
        # what this execute() runs, apart from what the program builds next
        captured = copy.copy(self)
        captured._graph = self._graph.to_execute()
        self._graph.executed()
        capture.append((captured, job_name))
        return True

    def close(self) -> None:
        """Nothing to release: embedded clusters live only as long as one execute()."""
