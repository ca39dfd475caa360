"""The Redis connectors against a real redis-server: Streams source and sink, upsert sink.

Reader tests drive :class:`RedisStreamsReader` directly (partition assignment, state, resume,
rescale re-splits, starting offsets, trimmed offsets, unreachable servers). Job tests run on a
real background cluster (the ``start`` fixture of test_recovery) with SIGKILL fault points, and
compare what the sinks made visible with the input: committed FileSink lines (exactly-once,
multiset equality), the topic's entries (at-least-once), the upsert hash (exact final values).

Entry counts, split points and values come from a seeded RNG; the seed is printed (rerun with
FLINKPY_TEST_SEED). Jobs are paced by a map that sleeps 1 ms every few records, so that their
checkpoints and faults fall while input remains; all waiting is ``wait_for`` with a deadline.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conftest import cli_json, run_cli, wait_for
from flinkpy.common import RestartStrategies, Types, WatermarkStrategy
from flinkpy.common.serialization import Encoder
from flinkpy.connectors.base import ReaderContext
from flinkpy.datastream import MapFunction, StreamExecutionEnvironment
from flinkpy.datastream.connectors import FileSink, NumberSequenceSource
from flinkpy.datastream.connectors.redis import (
    OffsetOutOfRangeError,
    RedisStreamsOffsetsInitializer,
    RedisStreamsSink,
    RedisStreamsSource,
    RedisUnreachableError,
    RedisUpsertSink,
    StreamEntry,
    create_topic,
    partition_for,
    produce,
    stream_key,
)
from flinkpy.errors import NotFoundError, UsageError
from servers import free_port
from test_recovery import start, vertex_id  # noqa: F401 - ``start`` is a fixture

TOPIC = "events"


def seeded(name: str) -> random.Random:
    seed = int(os.environ.get("FLINKPY_TEST_SEED") or random.randrange(2**32))
    print(f"{name}: seed {seed} (rerun with FLINKPY_TEST_SEED={seed})")
    return random.Random(seed)


def ctx(subtask: int, parallelism: int, states: list | None = None) -> ReaderContext:
    return ReaderContext(subtask_index=subtask, parallelism=parallelism, restored_state=list(states or []))


def source(url: str, partitions: int | None = 4, topic: str = TOPIC, **options: Any) -> RedisStreamsSource:
    builder = RedisStreamsSource.builder().set_url(url).set_topic(topic)
    if partitions is not None:
        builder.set_partitions(partitions)
    for name, arg in options.items():
        method = getattr(builder, name)
        method() if arg is True else method(arg)
    return builder.build()


def fill(client: Any, counts: list[int], topic: str = TOPIC, tag: str = "") -> dict[int, list[str]]:
    """Append ``counts[p]`` entries to partition p; values name partition and index."""
    written: dict[int, list[str]] = {}
    pipe = client.pipeline(transaction=False)
    for p, n in enumerate(counts):
        start_at = client.xlen(stream_key(topic, p))
        written[p] = [f"{tag}p{p}-{start_at + i}" for i in range(n)]
        for value in written[p]:
            pipe.xadd(stream_key(topic, p), {"value": value})
    pipe.execute()
    return written


def drain(reader: Any, max_records: int = 1024) -> list:
    """Poll until the reader has nothing more (unbounded: [] once caught up; bounded: None)."""
    out: list = []
    while True:
        batch = reader.poll(max_records)
        if not batch:
            return out
        out.extend(batch)


def partition_of(value: str) -> int:
    return int(value.split("-")[0].lstrip("abcdefghijklmnopqrstuvwxyz"))


# ---- reader unit tests ------------------------------------------------------------------------


@pytest.mark.timeout(20)
def test_partitions_are_read_by_subtask_p_mod_parallelism_in_order(redis_server) -> None:
    rng = seeded("assignment")
    counts = [rng.randrange(1, 300) for _ in range(5)]
    written = fill(redis_server.client(), counts)
    client = redis_server.client()
    src = source(redis_server.url, partitions=5, set_bounded=True)
    assert src.get_boundedness().name == "BOUNDED"
    # bounded by the entries present at build: later ones are not read, and the source still
    # ends when its last entry was deleted in the meantime
    fill(client, [3] * 5, tag="later")
    last = client.xrevrange(stream_key(TOPIC, 0), max=src.end_ids[0], count=1)[0][0]
    client.xdel(stream_key(TOPIC, 0), last)
    written[0].pop()
    for subtask, mine in [(0, [0, 2, 4]), (1, [1, 3])]:
        reader = src.create_reader(ctx(subtask, 2))
        got = []
        while (batch := reader.poll(rng.randrange(1, 200))) is not None:
            got.extend(batch)
        reader.close()
        assert sorted({partition_of(v) for v in got}) == mine
        for p in mine:  # each partition in its stream's order
            assert [v for v in got if partition_of(v) == p] == written[p]
        assert len(got) == sum(len(written[p]) for p in mine)


@pytest.mark.timeout(20)
def test_restored_reader_resumes_after_its_offsets(redis_server) -> None:
    rng = seeded("resume")
    client = redis_server.client()
    written = fill(client, [rng.randrange(100, 400) for _ in range(4)])
    src = source(redis_server.url)
    reader = src.create_reader(ctx(0, 1))
    first = []
    for _ in range(rng.randrange(1, 6)):
        first.extend(reader.poll(rng.randrange(1, 100)))
    state = reader.snapshot_state()
    assert state["topic"] == TOPIC and [p for p, _ in state["offsets"]] == [0, 1, 2, 3]
    json.dumps(state)  # it goes into _metadata
    more = fill(client, [rng.randrange(0, 50) for _ in range(4)], tag="x")
    reader.close()

    restored = src.create_reader(ctx(0, 1, [state]))
    rest = drain(restored)
    restored.close()
    everything = [v for p in range(4) for v in written[p] + more[p]]
    assert Counter(first + rest) == Counter(everything)
    # the offsets are the ids of the last entries read, as XRANGE reports them
    last_ids = {p: client.xrevrange(stream_key(TOPIC, p), count=1)[0][0].decode() for p in range(4)}
    assert dict(restored.snapshot_state()["offsets"]) == last_ids


def read_some(readers: list, rng: random.Random) -> list:
    got: list = []
    for reader in readers:
        for _ in range(rng.randrange(0, 4)):
            got.extend(reader.poll(rng.randrange(1, 120)))
    return got


@pytest.mark.timeout(20)
@pytest.mark.parametrize("old, new", [(2, 3), (3, 2), (1, 4)])
def test_rescaled_readers_read_every_entry_exactly_once(redis_server, old: int, new: int) -> None:
    rng = seeded(f"rescale {old}->{new}")
    client = redis_server.client()
    written = fill(client, [rng.randrange(0, 300) for _ in range(7)])
    src = source(redis_server.url, partitions=7)
    readers = [src.create_reader(ctx(i, old)) for i in range(old)]
    before = read_some(readers, rng)
    states = [r.snapshot_state() for r in readers]
    for r in readers:
        r.close()
    rng.shuffle(states)  # the order of old states does not matter
    more = fill(client, [rng.randrange(0, 40) for _ in range(7)], tag="m")

    restored = [src.create_reader(ctx(i, new, states)) for i in range(new)]
    owned = [sorted(p for p, _ in r.snapshot_state()["offsets"]) for r in restored]
    assert owned == [[p for p in range(7) if p % new == i] for i in range(new)]
    after = [v for r in restored for v in drain(r)]
    for r in restored:
        r.close()
    everything = [v for p in range(7) for v in written[p] + more[p]]
    assert Counter(before + after) == Counter(everything)


@pytest.mark.timeout(20)
def test_latest_offsets_are_fixed_when_the_source_is_built(redis_server) -> None:
    client = redis_server.client()
    fill(client, [5, 0, 3])
    src = source(redis_server.url, partitions=3, set_starting_offsets=RedisStreamsOffsetsInitializer.latest())
    new = fill(client, [2, 4, 1], tag="n")
    expected = Counter(v for vs in new.values() for v in vs)
    # a restart before the first checkpoint (no state) starts from the same ids
    for attempt in range(2):
        reader = src.create_reader(ctx(0, 1))
        assert Counter(drain(reader)) == expected, attempt
        reader.close()


@pytest.mark.timeout(20)
def test_timestamp_and_explicit_offsets(redis_server) -> None:
    client = redis_server.client()
    key = stream_key(TOPIC, 0)
    for ms in (1000, 2000, 3000):
        client.xadd(key, {"value": f"t{ms}"}, id=f"{ms}-0")
    src = source(redis_server.url, partitions=1, set_starting_offsets=RedisStreamsOffsetsInitializer.timestamp(2000))
    assert drain(src.create_reader(ctx(0, 1))) == ["t2000", "t3000"]
    src = source(redis_server.url, partitions=1, set_starting_offsets=RedisStreamsOffsetsInitializer.offsets({0: "1000-0"}))
    assert drain(src.create_reader(ctx(0, 1))) == ["t2000", "t3000"]


@pytest.mark.timeout(20)
def test_whole_entries_and_a_missing_value_field(redis_server) -> None:
    client = redis_server.client()
    client.xadd(stream_key(TOPIC, 0), {"value": "a", "user": "u1"}, id="5-1")
    entries = drain(source(redis_server.url, partitions=1, set_emit_entries=True).create_reader(ctx(0, 1)))
    assert entries == [StreamEntry(0, "5-1", {"value": "a", "user": "u1"})]
    client.xadd(stream_key(TOPIC, 0), {"other": "b"}, id="6-0")
    with pytest.raises(UsageError, match=r"entry 6-0 of stream 'events:0' has no field 'value'"):
        drain(source(redis_server.url, partitions=1).create_reader(ctx(0, 1)))


@pytest.mark.timeout(20)
def test_a_trimmed_offset_fails_loudly_unless_skipping_is_allowed(redis_server) -> None:
    client = redis_server.client()
    fill(client, [10, 10])
    src = source(redis_server.url, partitions=2)
    reader = src.create_reader(ctx(0, 1))
    assert len(reader.poll(8)) == 8  # 4 from each partition
    state = reader.snapshot_state()
    reader.close()
    offset = dict(state["offsets"])[1]
    client.xtrim(stream_key(TOPIC, 1), maxlen=3, approximate=False)  # entries 4..6 of p1 are gone
    oldest = client.xrange(stream_key(TOPIC, 1), count=1)[0][0].decode()

    with pytest.raises(OffsetOutOfRangeError) as failure:
        src.create_reader(ctx(0, 1, [state]))
    message = str(failure.value)
    assert "partition 1 of topic 'events'" in message and offset in message and oldest in message
    assert "set_skip_trimmed_entries" in message

    skipping = source(redis_server.url, partitions=2, set_skip_trimmed_entries=True)
    got = drain(skipping.create_reader(ctx(0, 1, [state])))
    assert sorted(got) == sorted([f"p0-{i}" for i in range(4, 10)] + ["p1-7", "p1-8", "p1-9"])

    # an offset whose own entry was deleted (XDEL), with everything after it still there: fine
    # (partition 1 is not in this state: it starts at the earliest entry left)
    client.xdel(stream_key(TOPIC, 0), dict(state["offsets"])[0])
    got = drain(src.create_reader(ctx(0, 1, [{**state, "offsets": [state["offsets"][0]]}])))
    assert sorted(got) == sorted([f"p0-{i}" for i in range(4, 10)] + ["p1-7", "p1-8", "p1-9"])


@pytest.mark.timeout(20)
def test_unreachable_server_and_unknown_topic(redis_server) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    with pytest.raises(RedisUnreachableError) as failure:
        RedisStreamsSource.builder().set_url(url).set_topic(TOPIC).build()  # discovery needs Redis
    assert url in str(failure.value) and "redis-server" in str(failure.value)
    built = source(redis_server.url, partitions=2)
    built.url = url  # the server went away after the job was built
    with pytest.raises(RedisUnreachableError, match=url):
        built.create_reader(ctx(0, 1))
    with pytest.raises(RedisUnreachableError, match=url):
        RedisUpsertSink.builder().set_url(url).set_hash("h").set_key_selector(str).build().create_writer(ctx(0, 1))
    with pytest.raises(NotFoundError, match="topic 'nothing' has no partitions") as failure:
        source(redis_server.url, partitions=None, topic="nothing")
    assert "set_partitions" in str(failure.value)
    redis_server.client().set("text:0", "not a stream")
    reader = source(redis_server.url, partitions=1, topic="text").create_reader(ctx(0, 1))
    with pytest.raises(UsageError, match="must be streams"):
        reader.poll(10)


@pytest.mark.timeout(20)
def test_partitions_are_discovered_from_the_streams(redis_server) -> None:
    create_topic(redis_server.url, "a*b", 3)
    redis_server.client().xadd("a*b:x", {"value": "not a partition"})
    redis_server.client().xadd("a*bc:7", {"value": "another topic"})
    assert source(redis_server.url, partitions=None, topic="a*b").partitions == 3
    assert drain(source(redis_server.url, partitions=None, topic="a*b").create_reader(ctx(0, 1))) == []


# ---- sink unit tests ---------------------------------------------------------------------------


@pytest.mark.timeout(20)
def test_streams_sink_partitions_by_key_and_trims_exactly(redis_server) -> None:
    rng = seeded("sink")
    values = [f"k{rng.randrange(50)}-{i}" for i in range(500)]
    create_topic(redis_server.url, "out", 3)
    sink = RedisStreamsSink.builder().set_url(redis_server.url).set_topic("out").set_key_selector(lambda v: v.split("-")[0]).build()
    assert sink.partitions == 3 and sink.guarantee == "at-least-once"
    writer = sink.create_writer(ctx(0, 1))
    writer.write(values[:200])
    writer.write(values[200:])
    writer.close()
    client = redis_server.client()
    for p in range(3):
        got = [f[b"value"].decode() for _, f in client.xrange(stream_key("out", p))]
        assert got == [v for v in values if partition_for(v.split("-")[0], 3) == p]
    produce(redis_server.url, "rr", [str(i) for i in range(10)], partitions=4)
    assert [client.xlen(stream_key("rr", p)) for p in range(4)] == [3, 3, 2, 2]
    trimmed = RedisStreamsSink.builder().set_url(redis_server.url).set_topic("rr").set_partitions(4).set_max_len(2).build()
    writer = trimmed.create_writer(ctx(1, 2))
    writer.write(["a", "b", "c", "d", "e"])
    assert [client.xlen(stream_key("rr", p)) for p in range(4)] == [2, 2, 2, 2]
    assert [f[b"value"] for _, f in client.xrange(stream_key("rr", 1))] == [b"a", b"e"]


@pytest.mark.timeout(20)
def test_upsert_sink_keeps_the_last_value_per_key(redis_server) -> None:
    sink = (RedisUpsertSink.builder().set_url(redis_server.url).set_hash("totals")
            .set_key_selector(lambda r: r[0]).set_value_selector(lambda r: r[1]).build())
    writer = sink.create_writer(ctx(0, 1))
    writer.write([("a", 1), ("b", 2), ("a", 3)])
    writer.write([("b", 5)])
    assert redis_server.client().hgetall("totals") == {b"a": b"3", b"b": b"5"}
    plain = RedisUpsertSink.builder().set_url(redis_server.url).set_key_prefix("total:").set_key_selector(lambda r: r[0]).build()
    plain.create_writer(ctx(0, 1)).write([(7, "x")])
    assert redis_server.client().get("total:7") == b"(7, 'x')"


# ---- jobs on a cluster -------------------------------------------------------------------------


class Pace(MapFunction):
    """Sleeps 1 ms every ``every`` records: keeps a job running long enough for its checkpoints
    (pacing, not synchronisation)."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.n = 0

    def map(self, value: Any) -> Any:
        self.n += 1
        if self.n % self.every == 0:
            time.sleep(0.001)
        return value


def committed_lines(out: Path) -> list[str]:
    """The lines of the FileSink's committed part files (hidden files are not committed)."""
    lines: list[str] = []
    for path in sorted(out.rglob("*")):
        if path.is_file() and not path.name.startswith("."):
            lines.extend(path.read_text().splitlines())
    return lines


def redis_to_files_env(url: str, out: Path, *, parallelism: int, pace: int, partitions: int = 4) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(parallelism)
    env.enable_checkpointing(100)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    src = RedisStreamsSource.builder().set_url(url).set_topic(TOPIC).set_partitions(partitions).build()
    events = env.from_source(src, WatermarkStrategy.no_watermarks(), "events").uid("events")
    paced = events.map(Pace(pace), output_type=Types.STRING()).uid("pace")
    paced.sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()).uid("files")
    return env


def wait_committed(out: Path, count: int, timeout: float = 40) -> None:
    wait_for(lambda: len(committed_lines(out)) >= count, timeout=timeout, interval=0.05,
             message=f"{count} committed lines under {out}")


def cancel(client: Any) -> None:
    client.cancel()
    wait_for(lambda: client.get_job_status() in ("CANCELED", "FAILED", "FINISHED"), timeout=20, message="the job to end")
    assert client.get_job_status() == "CANCELED"


@pytest.mark.timeout(60)
def test_exactly_once_from_redis_streams_to_files_after_a_crash(redis_server, start, tmp_path: Path) -> None:
    rng = seeded("e2e")
    total = 40_000
    counts = [total // 4] * 4
    written = fill(redis_server.client(), counts)
    out = tmp_path / "out"
    env = redis_to_files_env(redis_server.url, out, parallelism=2, pace=10)
    subtask = rng.randrange(2)
    start(faults=[{"point": "upload", "vertex": vertex_id(env, "events"), "subtask": subtask, "checkpoint": 2}])
    client = env.execute_async("redis to files")

    wait_committed(out, total)
    cancel(client)
    expected = Counter(v for vs in written.values() for v in vs)
    got = Counter(committed_lines(out))
    assert got == expected, f"lost {sum((expected - got).values())}, duplicated {sum((got - expected).values())}"
    job = cli_json("job", "show", client.get_job_id())
    assert job["restarts"] >= 1, f"the fault never fired: {job['events']}"
    restored = cli_json("checkpoint", "list", client.get_job_id())["latest"]["restored"]
    assert restored and restored["id"] == 1, restored


@pytest.mark.timeout(60)
def test_stop_with_savepoint_and_resume_at_parallelism_3_reads_every_entry_once(redis_server, start, tmp_path: Path) -> None:
    from flinkpy.program.context import ExecutionContext, execution_context

    seeded("rescale job")
    client = redis_server.client()
    first_half = fill(client, [5_000] * 4)
    out = tmp_path / "out"
    info = start(slots=3)
    # slow, so that the stop (which takes a few seconds) falls while entries of the first half remain
    job = redis_to_files_env(redis_server.url, out, parallelism=2, pace=2).execute_async("redis rescale a")
    wait_committed(out, 1)  # running, with a checkpoint complete
    stop = run_cli("stop", "--json", "--savepoint-path", str(tmp_path / "sps"), job.get_job_id())
    assert stop.returncode == 0, stop.stderr
    location = json.loads(stop.stdout)["location"]
    by_first_run = len(committed_lines(out))
    second_half = fill(client, [5_000] * 4, tag="b")  # appended while no job runs
    offsets = source_offsets(location)
    assert sorted(p for s in offsets for p, _ in s["offsets"]) == [0, 1, 2, 3]
    print(f"first run: {by_first_run} of 20000 entries committed; savepoint offsets {offsets}")

    env = redis_to_files_env(redis_server.url, out, parallelism=3, pace=10)
    with execution_context(ExecutionContext(address=info.rest_address, savepoint_path=location)):
        resumed = env.execute_async("redis rescale b")
    total = 40_000
    wait_committed(out, total)
    cancel(resumed)
    expected = Counter(v for half in (first_half, second_half) for vs in half.values() for v in vs)
    got = Counter(committed_lines(out))
    assert got == expected, f"lost {sum((expected - got).values())}, duplicated {sum((got - expected).values())}"
    assert 0 < by_first_run < total


def source_offsets(savepoint: str) -> list[dict]:
    metadata = json.loads((Path(savepoint) / "_metadata").read_text())
    (op,) = [o for o in metadata["operators"] if o.get("uid") == "events"]
    return [s["source_offsets"] for s in op["subtasks"]]


def as_text(n: int) -> str:
    return str(n)


@pytest.mark.timeout(60)
def test_jobs_chained_through_a_topic_at_least_once_after_a_crash(redis_server, start) -> None:
    n = 30_000
    create_topic(redis_server.url, "chain", 3)
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(100)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    numbers = env.from_source(NumberSequenceSource(1, n), WatermarkStrategy.no_watermarks(), "numbers")
    text = numbers.map(Pace(10), output_type=Types.LONG()).map(as_text, output_type=Types.STRING())
    text.sink_to(RedisStreamsSink.builder().set_url(redis_server.url).set_topic("chain").set_key_selector(as_text).build())
    start(faults=[{"point": "upload", "vertex": vertex_id(env, "numbers"), "subtask": 1, "checkpoint": 2}])
    env.execute("into redis")

    client = redis_server.client()
    entries = {p: [f[b"value"].decode() for _, f in client.xrange(stream_key("chain", p))] for p in range(3)}
    appended = Counter(v for vs in entries.values() for v in vs)
    assert set(appended) == {str(i) for i in range(1, n + 1)}  # nothing lost
    assert sum(appended.values()) > n, "the crash should have replayed some records"
    assert all(partition_for(v, 3) == p for p, vs in entries.items() for v in vs)

    reader = StreamExecutionEnvironment.get_execution_environment()
    reader.set_parallelism(2)
    chained = RedisStreamsSource.builder().set_url(redis_server.url).set_topic("chain").set_bounded().build()
    got = reader.from_source(chained, WatermarkStrategy.no_watermarks(), "chain").execute_and_collect("from redis")
    assert Counter(got) == appended


def residue(n: int) -> tuple[int, int]:
    return (n % 97, n)


def first(pair: tuple) -> Any:
    return pair[0]


@pytest.mark.timeout(60)
def test_upsert_sink_ends_with_exact_values_per_key_after_a_crash(redis_server, start) -> None:
    n = 30_000
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(100)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 0))
    numbers = env.from_source(NumberSequenceSource(1, n), WatermarkStrategy.no_watermarks(), "numbers")
    pairs = numbers.map(Pace(10), output_type=Types.LONG()).map(residue, output_type=Types.TUPLE([Types.INT(), Types.LONG()]))
    sums = pairs.key_by(first).sum(1).name("sums")
    sums.sink_to(RedisUpsertSink.builder().set_url(redis_server.url).set_hash("sums")
                 .set_key_selector(first).set_value_selector(lambda r: r[1]).build())
    start(faults=[{"point": "upload", "vertex": vertex_id(env, "sums"), "subtask": 0, "checkpoint": 2}])
    env.execute("upsert sums")

    expected: Counter = Counter()
    for i in range(1, n + 1):
        expected[str(i % 97)] += i
    got = {k.decode(): int(v) for k, v in redis_server.client().hgetall("sums").items()}
    assert got == dict(expected)
    (job,) = cli_json("list", "-a")["jobs"]
    assert cli_json("job", "show", job["jid"])["restarts"] >= 1
