"""The rolling path's fast paths (issue #21): the keyed reduce's one dict of values (heap
backend) must respect copy-on-write snapshots, also with a reduce that changes its first
argument in place, the SinkFunction adapter must call invoke once per record in
order, and the benchmark's peers' form must run end to end on a real cluster and count every
record."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from flinkpy.benchmarks import peers_form
from flinkpy.benchmarks.__main__ import parse_args
from flinkpy.benchmarks.workloads import add_counts, make_lines, run_job, word_key
from flinkpy.common.functions import SinkFunction
from flinkpy.connectors.base import ReaderContext
from flinkpy.connectors.function_sink import FunctionSink
from flinkpy.state.heap import HeapKeyedStateBackend, writable_copy
from flinkpy.task.operators import Discard, KeyedReduceOperator, Output, SinkOperator


class Collect(Output):
    def __init__(self) -> None:
        self.values: list[Any] = []

    def process(self, values: list, timestamps: list[int] | None) -> None:
        self.values.extend(values)

    def process_watermark(self, watermark: int) -> None:
        pass


def _reduce_op(batch_mode: bool = False) -> tuple[KeyedReduceOperator, HeapKeyedStateBackend, Collect]:
    backend = HeapKeyedStateBackend(128, range(128))
    out = Collect()
    op = KeyedReduceOperator("reduce", add_counts, out, word_key, backend, batch_mode)
    op.open(None)
    return op, backend, out


def test_keyed_reduce_snapshot_is_not_changed_by_later_batches() -> None:
    """The cached dict of a key group must be thawed (copied) after a snapshot: records after the
    snapshot's synchronous part must not reach what the snapshot writes out."""
    op, backend, out = _reduce_op()
    op.process([("a", 1), ("b", 1), ("a", 1)], None)
    frozen = backend.snapshot_sync()
    op.process([("a", 1), ("c", 1)], None)
    second = backend.snapshot_sync()
    op.process([("a", 1), ("b", 5)], None)
    first_doc = frozen.to_dict()["states"]
    assert _counts(frozen) == {"a": ("a", 2), "b": ("b", 1)}, first_doc
    assert _counts(second) == {"a": ("a", 3), "b": ("b", 1), "c": ("c", 1)}
    assert _counts(backend.snapshot_sync()) == {"a": ("a", 4), "b": ("b", 6), "c": ("c", 1)}
    assert out.values == [("a", 1), ("b", 1), ("a", 2), ("a", 3), ("c", 1), ("a", 4), ("b", 6)]


def _add_in_place(a: list, b: list) -> list:
    a[1] += b[1]
    return a


def test_keyed_reduce_snapshot_survives_a_reduce_that_changes_its_first_argument() -> None:
    backend = HeapKeyedStateBackend(128, range(128))
    op = KeyedReduceOperator("reduce", _add_in_place, Collect(), word_key, backend, False)
    op.open(None)
    op.process([["a", 1], ["a", 1], ["g", 1]], None)
    frozen = backend.snapshot_sync()
    op.process([["a", 5], ["g", 2]], None)
    assert _counts(frozen) == {"a": ["a", 2], "g": ["g", 1]}
    # a rescale keeps its own key groups only: "g" is in 120, "a" in 55
    restored = HeapKeyedStateBackend(128, range(64, 128))
    restored.restore([frozen.to_dict()])
    again = KeyedReduceOperator("reduce", _add_in_place, Collect(), word_key, restored, False)
    again.open(None)
    again.process([["g", 1]], None)
    assert _counts(restored.snapshot_sync()) == {"g": ["g", 2]}


def test_keyed_reduce_batch_mode_emits_only_final_values() -> None:
    op, backend, out = _reduce_op(batch_mode=True)
    op.process([("a", 1), ("b", 1), ("a", 1)], None)
    backend.snapshot_sync()
    op.process([("a", 1)], None)
    assert out.values == []
    op.end_input()
    assert sorted(out.values) == [("a", 3), ("b", 1)]


def _counts(snapshot: Any) -> dict[str, Any]:
    groups = snapshot.states["_reduce"][1]
    return {k: v for m in groups.values() for k, v in m.items()}


class Recording(SinkFunction):
    def __init__(self) -> None:
        self.seen: list[tuple[Any, Any]] = []

    def invoke(self, value: Any, context: Any) -> None:
        self.seen.append((value, context))


def test_function_sink_invokes_once_per_record_in_order() -> None:
    fn = Recording()
    writer = FunctionSink(fn).create_writer(None)  # type: ignore[arg-type]
    writer.write([1, 2, 3])
    writer.write([])
    writer.write([4])
    assert fn.seen == [(1, None), (2, None), (3, None), (4, None)]
    plain: list[int] = []
    FunctionSink(plain.append).create_writer(None).write([5, 6])  # type: ignore[arg-type]
    assert plain == [5, 6]


def _sink_operator(fn: Any) -> SinkOperator:
    sink = SinkOperator("sink", FunctionSink(fn), Discard(), ReaderContext(subtask_index=0, parallelism=1))
    sink.open(None)
    return sink


def test_keyed_reduce_hands_each_update_to_a_sink_function_as_it_makes_it() -> None:
    """A SinkFunction chained after a keyed reduce is called from the reduce's own loop, with no
    batch built between them: each update reaches invoke() before the next record is reduced,
    in order, with a None context; a snapshot between batches keeps the values of its time."""
    events: list[tuple[str, Any]] = []

    class Logged(SinkFunction):
        def invoke(self, value: Any, context: Any) -> None:
            events.append(("invoke", value, context))

    def logged_add(a: tuple[str, int], b: tuple[str, int]) -> tuple[str, int]:
        events.append(("reduce", b))
        return add_counts(a, b)

    backend = HeapKeyedStateBackend(128, range(128))
    op = KeyedReduceOperator("reduce", logged_add, _sink_operator(Logged()), word_key, backend, False)
    op.open(None)
    op.process([("a", 1), ("a", 1), ("b", 1)], None)
    frozen = backend.snapshot_sync()
    op.process([("a", 5)], None)
    assert events == [("invoke", ("a", 1), None), ("reduce", ("a", 1)), ("invoke", ("a", 2), None), ("invoke", ("b", 1), None),
                      ("reduce", ("a", 5)), ("invoke", ("a", 7), None)]
    assert _counts(frozen) == {"a": ("a", 2), "b": ("b", 1)}
    assert _counts(backend.snapshot_sync()) == {"a": ("a", 7), "b": ("b", 1)}


def test_keyed_reduce_still_hands_batches_to_a_plain_callable_sink() -> None:
    """A plain callable takes one argument, not invoke's two: it keeps the batch path."""
    seen: list[Any] = []
    sink = _sink_operator(seen.append)
    assert sink.per_record is None
    op = KeyedReduceOperator("reduce", add_counts, sink, word_key, HeapKeyedStateBackend(128, range(128)), False)
    op.open(None)
    op.process([("a", 1), ("a", 1)], None)
    assert seen == [("a", 1), ("a", 2)]


def test_writable_copy_shares_immutable_values_and_copies_the_others() -> None:
    """Values of immutable types (tuples of them too) are shared; any other value, a tuple
    holding a list included, is copied, so a change in place cannot reach the snapshot."""
    inner = [1]
    m = {"i": 1, "t": ("a", 2), "l": [3], "n": ("b", inner), "f": frozenset({1})}
    copy = writable_copy(m)
    assert copy == m
    assert copy["t"] is m["t"] and copy["f"] is m["f"]
    assert copy["l"] is not m["l"] and copy["n"][1] is not inner
    only_immutable = {"a": ("a", 1), "b": 2.5, "c": None}
    assert writable_copy(only_immutable) == only_immutable


def test_peers_form_is_a_benchmark_part_and_its_loops_count() -> None:
    assert parse_args(["--only", "peers-form"]).only == "peers-form"
    lines = make_lines(100)
    assert peers_form.loop_w1(lines)[0] == sum(len(line.split()) for line in lines)
    assert peers_form.loop_w2(1000)[0] == 1000


@pytest.mark.timeout(120)
def test_peers_form_jobs_deliver_every_record_to_the_sink(tmp_path: Path) -> None:
    """Both jobs of the peers' form on a real embedded cluster, with checkpoints every 100 ms:
    the sink sees every running update, and its notes give a positive time."""
    from flinkpy.cluster import EmbeddedCluster

    lines = make_lines(2_000)
    paths = peers_form.write_files(lines, tmp_path)
    assert len(paths) == peers_form.FILES
    with EmbeddedCluster(slots=2, job_stdout=subprocess.DEVNULL) as cluster:
        address, token = cluster.rest_address, cluster.token()
        for name, n, build in (
            ("w1", 20_000, lambda env, d: peers_form.job_w1(env, paths, d)),
            ("w2", 50_000, lambda env, d: peers_form.job_w2(env, 50_000, d)),
        ):
            d = tmp_path / name
            d.mkdir()
            run_job(address, token, lambda env: build(env, str(d)), 1, f"test-peers-{name}", checkpoint_ms=100)
            assert peers_form.sink_seconds(str(d), n) > 0


def test_input_channel_announces_credit_in_halves_and_on_demand() -> None:
    """Credit for processed buffers goes back in one frame per half of the initial credit, and
    whatever is still owed when the task is about to wait goes back at once: the producer's
    ledger ends where per-buffer credit would have left it."""
    import socket as sockets

    from flinkpy.network.channels import CREDIT, InputChannel, OutputChannel

    a, b = sockets.socketpair()
    try:
        consumer = InputChannel(a, 0, 0, 4, "test channel")
        producer = OutputChannel(b, 0, 0, "test channel")
        producer.credit.grant(4)
        for _ in range(4):
            consumer.credit.on_buffer_received()
        consumer.return_credit()
        assert consumer.owed == 1  # not yet announced
        consumer.return_credit()
        assert consumer.owed == 0
        consumer.return_credit()
        consumer.announce_credit()  # what the input processor does before it waits
        consumer.announce_credit()  # nothing owed: no frame
        a.shutdown(sockets.SHUT_WR)
        frames = []
        while (got := producer.reader.feed()) is not None:
            frames += got
        assert [(kind, int.from_bytes(p, "big")) for kind, p in frames] == [(CREDIT, 2), (CREDIT, 1)]
        producer._absorb(frames)
        assert producer.credit.available == 4 + 3
        assert consumer.credit.outstanding == 3
    finally:
        a.close()
        b.close()
