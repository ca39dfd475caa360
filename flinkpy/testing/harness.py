"""OperatorHarness: run a user function on the engine's operators, in this process, with a manual clock.

The function under test is given the way a job gives it: ``build`` receives the harness's input
streams and applies the DataStream API to them (``key_by(...).process(fn)``, a window with its
trigger and function, ``connect(...)``, ``broadcast(...)``). The harness turns that into the job
graph a submission would, and runs the one vertex it makes as ``parallelism`` local subtasks
(:mod:`flinkpy.testing.subtask`): the engine's operators, state backend, timers and snapshots,
each subtask with its own copy of the functions (unpickled from the payload, as in a task). The
test pushes records and watermarks, sets processing time, reads what came out, and takes
snapshots that are checkpoints like a job's; a harness built with ``restore_from=`` restores one,
at any parallelism.

>>> from flinkpy.datastream import KeyedProcessFunction
>>> from flinkpy.datastream.state import ValueStateDescriptor
>>> class Count(KeyedProcessFunction):
...     def open(self, ctx):
...         self.count = ctx.get_state(ValueStateDescriptor("count"))
...     def process_element(self, value, ctx):
...         self.count.update((self.count.value() or 0) + 1)
...         ctx.timer_service().register_event_time_timer(ctx.timestamp() // 10 * 10 + 9)
...     def on_timer(self, timestamp, ctx):
...         yield ctx.get_current_key(), self.count.value()
>>> h = OperatorHarness(lambda s: s.key_by(lambda r: r[0]).process(Count()))
>>> _ = h.process_element(("a", 1), timestamp=5)
>>> snap = h.snapshot()
>>> _ = h.process_element(("a", 2), timestamp=6)
>>> h.process_watermark(20).records
[StreamRecord(value=('a', 2), timestamp=9)]
>>> h2 = OperatorHarness(lambda s: s.key_by(lambda r: r[0]).process(Count()), restore_from=snap, parallelism=2)
>>> h2.process_watermark(20).records
[StreamRecord(value=('a', 1), timestamp=9)]
>>> h.close(); h2.close()
"""

from __future__ import annotations

import pickle
import uuid
from typing import Any, Callable, Iterable

from flinkpy.checkpoint.metadata import new_metadata, new_operator, new_subtask
from flinkpy.checkpoint.restore import restore_spec, unmatched_state
from flinkpy.checkpoint.storage import CheckpointStorage
from flinkpy.errors import InvalidProgramError, UsageError
from flinkpy.graph.job_graph import JobGraph, JobVertex
from flinkpy.graph.pickling import dumps
from flinkpy.graph.stream_graph import BROADCAST, CUSTOM, GLOBAL, HASH
from flinkpy.network.channels import dumps_batch
from flinkpy.protocol.deployment import TaskConfig, TaskDeploymentDescriptor
from flinkpy.state.configured import create_keyed_backend
from flinkpy.state.heap import TIMER_EVENT_TABLE, TIMER_PROCESSING_TABLE
from flinkpy.state.key_groups import key_group_range_for_operator
from flinkpy.task import operators as ops
from flinkpy.task.record_writer import RecordWriter
from flinkpy.task.watermarks import MIN_WATERMARK, StatusWatermarkValve
from flinkpy.testing.records import Element, ProcessingTime, Snapshot, Step, StepOutput, StreamRecord, Watermark
from flinkpy.testing.subtask import LocalChannel, LocalSubtask

#: where snapshots go unless the test names a directory (in this process's memory)
DEFAULT_CHECKPOINT_DIR = "memory://flinkpy-testing"


class OperatorHarness:
    """The function that ``build(*inputs)`` applies, on ``parallelism`` subtasks.

    ``inputs``: how many input streams ``build`` takes (2 for ``connect``). ``state_backend``:
    ``HashMapStateBackend()`` (default) or ``EmbeddedRocksDBStateBackend()``.
    ``processing_time``: where the manual clock starts (epoch ms). ``restore_from``: a
    :class:`Snapshot` to restore (its clocks carry over: processing time, and each input's last
    watermark, which the restored subtasks receive again as their upstream would send it).
    ``checkpoint_dir``: where snapshots are written (an fsspec URL or a path; default memory).
    State in ``restore_from`` that no operator of ``build`` claims (its id changed: a missing
    ``uid``, another trigger or evictor) is refused, as a job's restore refuses it, unless
    ``allow_non_restored_state`` drops it.
    """

    def __init__(
        self,
        build: Callable[..., Any],
        *,
        inputs: int = 1,
        parallelism: int = 1,
        max_parallelism: int | None = None,
        state_backend: Any = None,
        processing_time: int | None = None,
        restore_from: Snapshot | None = None,
        checkpoint_dir: str | None = None,
        allow_non_restored_state: bool = False,
    ):
        if inputs not in (1, 2):
            raise UsageError(f"inputs={inputs!r}: a function has one input or two", remedy="pass inputs=1 or inputs=2")
        if restore_from is not None and len(restore_from.watermarks) != inputs:
            raise UsageError(f"the snapshot is of a function with {len(restore_from.watermarks)} input(s), not {inputs}",
                             remedy=f"restore it with inputs={len(restore_from.watermarks)}")
        if max_parallelism is None:
            max_parallelism = restore_from.max_parallelism if restore_from is not None else 128
        self.inputs = inputs
        self.job_id = uuid.uuid4().hex
        self.storage = CheckpointStorage(str(checkpoint_dir or DEFAULT_CHECKPOINT_DIR))
        self._time = processing_time if processing_time is not None else (restore_from.processing_time if restore_from else 0)
        self._checkpoint_id = restore_from.checkpoint_id if restore_from is not None else 0
        #: the last watermark pushed on each input
        self._input_watermarks = [MIN_WATERMARK] * inputs
        #: everything the function emitted: records, side outputs by tag id, watermarks
        self.output: list[StreamRecord] = []
        self._side: dict[str, list[StreamRecord]] = {}
        self.watermarks: list[int] = []
        self._step = StepOutput()
        graph, sources = _job_graph(build, inputs, parallelism, max_parallelism, state_backend)
        self.vertex = _the_vertex(graph)
        if restore_from is not None and not allow_non_restored_state:
            _check_claimed(restore_from, set(self.vertex.operator_ids))
        #: the test's input (0-based) of each placeholder source node
        self._input_of = {node: i for i, node in enumerate(sources)}
        self.parallelism = self.vertex.parallelism
        self.max_parallelism = self.vertex.max_parallelism
        self._out_valve = StatusWatermarkValve(self.parallelism)
        self.subtasks = self._deploy(graph, restore_from)
        self._writers = [self._writers_of(graph, node_id) for node_id in sources]
        if restore_from is not None and restore_from.parallelism == self.parallelism and restore_from.round_robin:
            for writers, positions in zip(self._writers, restore_from.round_robin):
                for (_, writer), position in zip(writers, positions):
                    writer.round_robin_position = position
        if restore_from is not None:
            self.restored = self._collecting(lambda: [self._push_watermark(w, i + 1) for i, w in enumerate(restore_from.watermarks) if w > MIN_WATERMARK])
        else:
            self.restored = StepOutput()

    # -- setting up ---------------------------------------------------------------------------

    def _deploy(self, graph: JobGraph, restore_from: Snapshot | None) -> list[LocalSubtask]:
        payload = graph.payloads[self.vertex.id]
        for op in payload.operators:
            if not op.chained_outputs and not op.network_outputs and op.kind != "sink":
                op.network_outputs = [-1]  # the tail's output: LocalSubtask wires it to the harness
        blob = dumps(payload)
        settings = {k: v for k, v in graph.config.items() if k.startswith("state.backend.")}
        config = TaskConfig(checkpoint_dir=self.storage.base_url, state_backend=settings, buffer_timeout_ms=0)
        parameters = {k[len("$job."):]: v for k, v in graph.config.items() if k.startswith("$job.")}
        p, maxp = self.parallelism, self.max_parallelism
        subtasks: list[LocalSubtask] = []
        try:
            for sub in range(p):
                spec = None
                if restore_from is not None:
                    spec = restore_spec(restore_from.metadata, restore_from.path, self.vertex.operator_ids, subtask=sub, parallelism=p, max_parallelism=maxp)
                d = TaskDeploymentDescriptor(
                    job_id=self.job_id, exec_id=f"{self.job_id}-{sub}", vertex_id=self.vertex.id, vertex_name=self.vertex.name,
                    subtask=sub, parallelism=p, max_parallelism=maxp, attempt=0, payload=blob, inputs=[], outputs=[],
                    config=config, runtime_mode=graph.runtime_mode, job_parameters=parameters, restore=spec,
                )
                subtasks.append(LocalSubtask(
                    pickle.loads(blob), d, output=_Collector(self, sub), side_output=self._side_collector,
                    backend_factory=self._backend_factory(settings, sub), clock=self.current_processing_time, inputs=self.inputs,
                ))
        except BaseException:
            for s in subtasks:  # the ones already open: their threads and backends go
                s.close()
            raise
        return subtasks

    def _backend_factory(self, settings: dict[str, str], subtask: int) -> Callable[[], Any]:
        def create() -> Any:
            kg = key_group_range_for_operator(self.max_parallelism, self.parallelism, subtask)
            backend = create_keyed_backend(settings, self.max_parallelism, kg)
            backend.ttl_clock = self.current_processing_time  # state time-to-live reads the manual clock too
            return backend

        return create

    def _writers_of(self, graph: JobGraph, source_node: int) -> list[tuple[int, RecordWriter]]:
        """The engine's record writers from one test input to the subtasks: (head input, writer)
        per edge, partitioned as the job's edge is (by key group, broadcast, round robin, ...)."""
        source = next(v for v in graph.vertices.values() if source_node in v.node_ids)
        selectors = graph.payloads[source.id].edge_key_selectors
        writers = []
        for edge in (e for e in graph.edges if e.source == source.id):
            channels = [LocalChannel(edge.id, c, self._deliverer(c, source_node, edge.type_number)) for c in range(self.parallelism)]
            writers.append((edge.type_number, RecordWriter(
                channels, edge.partitioner, key_selector=selectors.get(edge.id), max_parallelism=self.max_parallelism,
                consumer_parallelism=self.parallelism, buffer_timeout_ms=0, segment_size=32768,
            )))
        return writers

    def _deliverer(self, subtask: int, source_node: int, type_number: int) -> Callable[[int, bytes], None]:
        def deliver(kind: int, payload: bytes) -> None:
            self.subtasks[subtask].frame(self._input_of[source_node], type_number, kind, payload)

        return deliver

    def _side_collector(self, tag_id: str) -> ops.Output:
        return _SideCollector(self, tag_id)

    # -- input --------------------------------------------------------------------------------

    def process_element(self, value: Any, timestamp: int | None = None, *, input: int = 1) -> StepOutput:
        """A record (with its event timestamp, or none) on input ``input``; returns what it made
        the function emit."""
        return self.apply(Element(value, timestamp, input))

    def process_elements(self, values: Iterable[Any], *, input: int = 1) -> StepOutput:
        """Records without timestamps, one after the other; returns what they made it emit."""
        return self._collecting(lambda: [self._push(Element(v, None, input)) for v in values])

    def process_watermark(self, time: int, *, input: int = 1) -> StepOutput:
        """Event time on input ``input`` reaches ``time``: due event-time timers and windows fire."""
        return self.apply(Watermark(time, input))

    def set_processing_time(self, time: int) -> StepOutput:
        """Move the manual clock to ``time`` (epoch ms); due processing-time timers fire."""
        return self.apply(ProcessingTime(time))

    # Flink's names on its two-input harness
    def process_element1(self, value: Any, timestamp: int | None = None) -> StepOutput:
        return self.process_element(value, timestamp, input=1)

    def process_element2(self, value: Any, timestamp: int | None = None) -> StepOutput:
        return self.process_element(value, timestamp, input=2)

    def process_watermark1(self, time: int) -> StepOutput:
        return self.process_watermark(time, input=1)

    def process_watermark2(self, time: int) -> StepOutput:
        return self.process_watermark(time, input=2)

    def apply(self, step: Step) -> StepOutput:
        """Carry out one step of a script; returns what it made the function emit."""
        return self._collecting(lambda: self._push(step))

    def run(self, steps: Iterable[Step]) -> list[StepOutput]:
        """Carry out a script, step by step; the outputs of each step."""
        return [self.apply(s) for s in steps]

    def _push(self, step: Step) -> None:
        if isinstance(step, Element):
            self._check_input(step.input)
            for type_number, writer in self._writers[step.input - 1]:
                writer.process([step.value], None if step.timestamp is None else [int(step.timestamp)])
        elif isinstance(step, Watermark):
            self._check_input(step.input)
            self._push_watermark(int(step.time), step.input)
        elif isinstance(step, ProcessingTime):
            if step.time < self._time:
                raise UsageError(f"processing time cannot go back from {self._time} to {step.time}", remedy="set a time at or after the current one")
            self._time = int(step.time)
            for s in self.subtasks:
                s.fire_processing_timers()
        else:
            raise UsageError(f"{step!r} is not a step", remedy="use Element, Watermark or ProcessingTime (flinkpy.testing)")

    def _push_watermark(self, time: int, input: int) -> None:
        self._input_watermarks[input - 1] = max(self._input_watermarks[input - 1], time)
        for _, writer in self._writers[input - 1]:
            writer.process_watermark(time)

    def _check_input(self, input: int) -> None:
        if not 1 <= input <= self.inputs:
            raise UsageError(f"input {input} does not exist: the harness has {self.inputs} input(s)",
                             remedy="build the harness with inputs=2 for a two-input function")

    def _collecting(self, act: Callable[[], Any]) -> StepOutput:
        self._step = step = StepOutput()
        try:
            act()
        finally:
            self._step = StepOutput()
        return step

    # -- output and state ---------------------------------------------------------------------

    @property
    def values(self) -> list[Any]:
        """The values of :attr:`output` (the records emitted so far, in order)."""
        return [r.value for r in self.output]

    def side_output(self, tag: Any) -> list[StreamRecord]:
        """What went to the side output ``tag`` (an OutputTag or its id)."""
        return list(self._side.get(getattr(tag, "tag_id", tag), ()))

    def clear(self) -> None:
        """Forget the output so far (records, side outputs, watermarks)."""
        self.output.clear()
        self._side.clear()
        self.watermarks.clear()

    def current_processing_time(self) -> int:
        return self._time

    @property
    def keyed_inputs(self) -> bool:
        """Whether every input reaches the subtasks by key (or broadcast): then which records
        meet in a subtask does not depend on the parallelism. Otherwise, at parallelism > 1,
        records are spread round robin, as a rebalance spreads them."""
        return all(w.partitioner in (HASH, BROADCAST, CUSTOM, GLOBAL) for writers in self._writers for _, w in writers)

    @property
    def current_watermark(self) -> int:
        """The function's event time: the least of its inputs' last watermarks."""
        return min(self._input_watermarks)

    def _timers(self, table: str) -> int:
        return sum(len(t) for s in self.subtasks if s.chain.backend is not None for t in s.chain.backend.table(table).values())

    @property
    def event_time_timers(self) -> int:
        """How many event-time timers are registered (every subtask, every key)."""
        return self._timers(TIMER_EVENT_TABLE)

    @property
    def processing_time_timers(self) -> int:
        """How many processing-time timers are registered."""
        return self._timers(TIMER_PROCESSING_TABLE)

    # -- snapshots ----------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """Take a checkpoint of every subtask, as a job's barrier makes each take it, write its
        ``_metadata`` and notify the functions that it completed."""
        self._checkpoint_id += 1
        cid, now, v = self._checkpoint_id, self._time, self.vertex
        acks = [s.snapshot(cid, now) for s in self.subtasks]
        operators = []
        for position, operator_id in enumerate(v.operator_ids):
            subtasks = []
            for sub, state in enumerate(acks):
                entry = next((e for e in state if e.get("operator_id") == operator_id), {})
                subtasks.append(new_subtask(sub, keyed_state=entry.get("keyed_state"), operator_state=entry.get("operator_state"), source_offsets=entry.get("source_offsets")))
            operators.append(new_operator(operator_id=operator_id, uid=v.uids[position], name=v.operator_names[position], vertex_id=v.id,
                                          parallelism=self.parallelism, max_parallelism=self.max_parallelism, subtasks=subtasks))
        doc = new_metadata(job_id=self.job_id, job_name="flinkpy.testing", checkpoint_id=cid, trigger_timestamp=now,
                           completion_timestamp=now, operators=operators, max_parallelism=self.max_parallelism)
        directory = self.storage.checkpoint_dir(self.job_id, cid)
        self.storage.write_metadata_in(directory, doc)
        for s in self.subtasks:
            s.notify_complete(cid)
        positions = tuple(tuple(w.round_robin_position for _, w in writers) for writers in self._writers)
        return Snapshot(cid, directory, doc, self.parallelism, self.max_parallelism, tuple(self._input_watermarks), now, positions)

    def close(self) -> None:
        """Close the functions and release the state backends."""
        subtasks, self.subtasks = self.subtasks, []
        for s in subtasks:
            s.close()

    def __enter__(self) -> OperatorHarness:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Collector(ops.Output):
    """The tail of one subtask: records into the harness's output, as a consumer would receive
    them (pickled and back, so a value the function changes later stays as it was emitted)."""

    def __init__(self, harness: OperatorHarness, subtask: int):
        self.harness = harness
        self.subtask = subtask

    def process(self, values: list, timestamps: list[int] | None) -> None:
        if not values:
            return
        h = self.harness
        values = pickle.loads(dumps_batch(values))
        records = [StreamRecord(v, t) for v, t in zip(values, timestamps or [None] * len(values))]
        h.output.extend(records)
        h._step.records.extend(records)

    def process_watermark(self, watermark: int) -> None:
        h = self.harness
        advanced = h._out_valve.on_watermark(self.subtask, watermark)
        if advanced is not None:
            h.watermarks.append(advanced)


class _SideCollector(ops.Output):
    def __init__(self, harness: OperatorHarness, tag_id: str):
        self.harness = harness
        self.tag_id = tag_id

    def process(self, values: list, timestamps: list[int] | None) -> None:
        h = self.harness
        values = pickle.loads(dumps_batch(values))
        records = [StreamRecord(v, t) for v, t in zip(values, timestamps or [None] * len(values))]
        h._side.setdefault(self.tag_id, []).extend(records)
        h._step.side.setdefault(self.tag_id, []).extend(records)

    def process_watermark(self, watermark: int) -> None:
        pass


def _job_graph(build: Callable[..., Any], inputs: int, parallelism: int, max_parallelism: int, state_backend: Any) -> tuple[JobGraph, list[int]]:
    """The job graph of ``build`` applied to ``inputs`` placeholder streams, and their nodes."""
    from flinkpy.datastream import StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.set_max_parallelism(max_parallelism)
    if state_backend is not None:
        env.set_state_backend(state_backend)
    streams = [env.from_collection([]) for _ in range(inputs)]
    nodes = [s._refs[0].node_id for s in streams]
    for n in nodes:
        env._graph.nodes[n].chaining = "never"  # the inputs stand apart from the function's vertex
    build(*streams)
    return env._job_graph("flinkpy.testing"), nodes


def _the_vertex(graph: JobGraph) -> JobVertex:
    others = [v for v in graph.vertices.values() if not v.is_source]
    if len(others) != 1:
        names = ", ".join(repr(v.name) for v in others) or "none"
        raise InvalidProgramError(
            f"the harness runs one chain of operators, but build() makes {len(others)}: {names}",
            remedy="apply one function (or a chain of them without key_by/rebalance between) to the input streams",
        )
    return others[0]


def _check_claimed(snapshot: Snapshot, operator_ids: set[str]) -> None:
    """Refuse a snapshot with state that none of the harness's operators claims: restored, it
    would silently start empty."""
    dropped = unmatched_state(snapshot.metadata, operator_ids)
    if dropped:
        names = ", ".join(f"{op.get('name')!r} (id {op.get('uid') or op['operator_id']})" for op in dropped)
        raise InvalidProgramError(f"the snapshot has state for operators this function does not have: {names}",
                         remedy="give the operators the same uid(...) as when the snapshot was taken, "
                                "or pass allow_non_restored_state=True to drop that state")
