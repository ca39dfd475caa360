"""Rows as PyFlink has them, and the JSON and CSV row formats, through real jobs.

- ``map`` / ``flat_map`` / ``process`` / keyed ``process`` with ``output_type=Types.ROW(...)`` or
  ``Types.ROW_NAMED(...)`` hand Rows to the next operator (``row.f0``, ``row.name``,
  ``as_dict``), on the embedded cluster and on Spark; a record that is not such a row fails the
  job naming the operator.
- ``print()`` of a row-typed stream prints ``+I[1, a]`` as PyFlink does; other streams print
  ``str(record)``, for a Row its PyFlink repr.
- JSON and CSV rows round-trip through a real FileSink and FileSource (bad lines skipped with
  ``ignore_parse_errors``, or failing the job naming the field) and through a real Redis server.

Expected results are computed here in plain Python, not with the formats under test.
"""

from __future__ import annotations

import csv
import datetime
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli

from flinkpy.common import Row, Types
from flinkpy.common.serialization import Encoder
from flinkpy.common.watermark_strategy import WatermarkStrategy
from flinkpy.datastream import KeyedProcessFunction, ProcessFunction, StreamExecutionEnvironment
from flinkpy.datastream.connectors.file_system import FileSink, FileSource, StreamFormat
from flinkpy.datastream.formats.csv import CsvRowDeserializationSchema, CsvRowSerializationSchema
from flinkpy.datastream.formats.json import JsonRowDeserializationSchema, JsonRowSerializationSchema
from flinkpy.errors import JobExecutionError

ORDER = Types.ROW_NAMED(
    ["id", "customer", "amount", "day", "tags"],
    [Types.LONG(), Types.STRING(), Types.DOUBLE(), Types.SQL_DATE(), Types.LIST(Types.STRING())],
)


def orders(n: int) -> list[tuple]:
    """Orders whose text needs care: commas, quotes, non-ASCII, None, empty tags."""
    names = ["Ada", 'Grace "Amazing" Hopper', "Lovelace, Ada", "Émilie", None]
    return [
        (i, names[i % len(names)], round(i * 1.25, 2), datetime.date(2024, 1, 1) + datetime.timedelta(days=i),
         ["vip", "new"] if i % 3 == 0 else (["x"] if i % 3 == 1 else None))
        for i in range(n)
    ]


def env1() -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    return env


def part_files(out: Path) -> list[Path]:
    return sorted(p for p in out.rglob("*") if p.is_file() and not p.name.startswith("."))


# -- Rows from output types ---------------------------------------------------------------------


class Tag(ProcessFunction):
    def process_element(self, value, ctx):
        yield value.name, value.n % 2 == 0


class RunningTotal(KeyedProcessFunction):
    def open(self, runtime_context):
        from flinkpy.datastream.state import ValueStateDescriptor

        self.total = runtime_context.get_state(ValueStateDescriptor("total", Types.LONG()))

    def process_element(self, value, ctx):
        total = (self.total.value() or 0) + value.f1
        self.total.update(total)
        yield [value.f0, total]


@pytest.mark.timeout(60)
def test_operators_with_a_row_output_type_hand_rows_downstream(flinkpy_home) -> None:
    words = ["a", "bb", "a", "ccc", "bb", "a"]
    env = env1()
    named = env.from_collection(words).map(
        lambda w: (w, len(w)), output_type=Types.ROW_NAMED(["name", "n"], [Types.STRING(), Types.INT()]))
    tagged = named.process(Tag(), output_type=Types.ROW([Types.STRING(), Types.BOOLEAN()]))
    split = named.flat_map(lambda r: [(r.name, c) for c in r.name], output_type=Types.ROW_NAMED(["w", "c"], [Types.STRING(), Types.STRING()]))
    totals = named.map(lambda r: (r.name, r.n), output_type=Types.ROW([Types.STRING(), Types.LONG()])) \
        .key_by(lambda r: r.f0).process(RunningTotal(), output_type=Types.ROW_NAMED(["word", "total"], [Types.STRING(), Types.LONG()]))
    got = list(
        named.map(lambda r: ("named", r.name, r.n, r.as_dict(), repr(r)))
        .union(tagged.map(lambda r: ("tagged", r.f0, r.f1, r.as_dict(), repr(r))))
        .union(split.map(lambda r: ("split", r.w, r["c"], r.as_dict(), repr(r))))
        .union(totals.map(lambda r: ("total", r.word, r.total, r.as_dict(), repr(r))))
        .execute_and_collect("rows")
    )
    expected = []
    running: dict[str, int] = {}
    for w in words:
        expected.append(("named", w, len(w), {"name": w, "n": len(w)}, f"Row(name={w!r}, n={len(w)})"))
        even = len(w) % 2 == 0
        expected.append(("tagged", w, even, {"f0": w, "f1": even}, f"Row(f0={w!r}, f1={even!r})"))
        expected += [("split", w, c, {"w": w, "c": c}, f"Row(w={w!r}, c={c!r})") for c in w]
        running[w] = running.get(w, 0) + len(w)
        expected.append(("total", w, running[w], {"word": w, "total": running[w]}, f"Row(word={w!r}, total={running[w]})"))
    assert sorted(got, key=repr) == sorted(expected, key=repr)


@pytest.mark.timeout(60)
def test_a_record_that_is_not_a_row_of_the_output_type_fails_naming_the_operator(flinkpy_home) -> None:
    env = env1()
    env.from_collection([1, 2]).map(lambda x: x, output_type=Types.ROW([Types.INT()])).name("not-a-row").print()
    with pytest.raises(JobExecutionError, match=r"'not-a-row' declares output_type ROW\(INT\)"):
        env.execute("bad rows")


PRINT_JOB = '''
from flinkpy.common import Row, Types
from flinkpy.datastream import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
rows = env.from_collection([(1, "a b", None), (2, "c", True)],
                           type_info=Types.ROW_NAMED(["id", "s", "ok"], [Types.INT(), Types.STRING(), Types.BOOLEAN()]))
rows.print()
rows.map(lambda r: r).print("untyped")
rows.map(lambda r: Row(r.id, r.s)).print("positional")
rows.filter(lambda r: r.id > 1).print("filtered")
env.execute("printing rows")
'''


@pytest.mark.timeout(90)
def test_print_shows_row_typed_streams_as_pyflink_does(flinkpy_home, tmp_path) -> None:
    job = tmp_path / "print_rows.py"
    job.write_text(PRINT_JOB)
    res = subprocess.run([sys.executable, str(job)], capture_output=True, text=True, timeout=80)
    assert res.returncode == 0, res.stderr
    lines = sorted(line for line in res.stdout.splitlines() if line.strip())
    assert lines == sorted([
        "+I[1, a b, null]", "+I[2, c, true]",  # ROW_NAMED stream: row kind, the values as Java prints them
        "untyped> Row(id=1, s='a b', ok=None)", "untyped> Row(id=2, s='c', ok=True)",
        "positional> <Row(1, 'a b')>", "positional> <Row(2, 'c')>",
        "filtered> +I[2, c, true]",  # filter keeps its input's type
    ])


# -- JSON and CSV through real files ------------------------------------------------------------


def expected_json_line(o: tuple) -> dict:
    return {"id": o[0], "customer": o[1], "amount": o[2], "day": o[3].isoformat(), "tags": o[4]}


def expected_csv_fields(o: tuple) -> list[str]:
    return [str(o[0]), "" if o[1] is None else o[1], repr(o[2]), o[3].isoformat(), ";".join(o[4] or [])]


@pytest.mark.timeout(90)
def test_json_rows_round_trip_through_a_file_sink_and_source(flinkpy_home, tmp_path) -> None:
    data = orders(40)
    out = tmp_path / "json-out"
    env = env1()
    ser = JsonRowSerializationSchema.builder().with_type_info(ORDER).build()
    env.from_collection(data, type_info=ORDER) \
        .sink_to(FileSink.for_row_format(str(out), Encoder.for_serialization_schema(ser)).build())
    env.execute("write json")
    files = part_files(out)
    assert files
    written = [json.loads(line) for f in files for line in f.read_text(encoding="utf-8").splitlines()]
    assert sorted(written, key=lambda d: d["id"]) == [expected_json_line(o) for o in data]

    # a line that is not JSON and one whose amount is not a number: skipped with ignore_parse_errors
    (out / "zz-bad.json").write_text('{"id": 999, "amount": "lots"}\nnot json\n', encoding="utf-8")
    env = env1()
    de = JsonRowDeserializationSchema.builder().type_info(ORDER).ignore_parse_errors().build()
    src = FileSource.for_record_stream_format(StreamFormat.for_deserialization_schema(de), str(out)).build()
    got = list(env.from_source(src, WatermarkStrategy.no_watermarks(), "json files", type_info=ORDER)
               .map(lambda r: (r.id, r.customer, r.amount, r.day, r.tags, r.get_field_names())).execute_and_collect("read json"))
    names = ORDER.get_field_names()
    assert sorted(got) == sorted((*o, names) for o in data)

    # without it the job fails, naming the file, the record and the field
    env = env1()
    strict = JsonRowDeserializationSchema.builder().type_info(ORDER).build()
    src = FileSource.for_record_stream_format(StreamFormat.for_deserialization_schema(strict), str(out / "zz-bad.json")).build()
    env.from_source(src, WatermarkStrategy.no_watermarks(), "json files").print()
    with pytest.raises(JobExecutionError, match=r"zz-bad\.json: cannot read JSON record .*field 'amount' \(DOUBLE\)"):
        env.execute("strict json")


@pytest.mark.timeout(90)
def test_csv_rows_round_trip_through_a_file_sink_and_source(flinkpy_home, tmp_path) -> None:
    data = orders(40)
    out = tmp_path / "csv-out"
    env = env1()
    ser = CsvRowSerializationSchema.Builder(ORDER).set_field_delimiter("|").build()
    env.from_collection(data, type_info=ORDER) \
        .sink_to(FileSink.for_row_format(str(out), Encoder.for_serialization_schema(ser)).build())
    env.execute("write csv")
    text = "".join(f.read_text(encoding="utf-8") for f in part_files(out))
    parsed = list(csv.reader(io.StringIO(text), delimiter="|"))
    assert sorted(parsed, key=lambda f: int(f[0])) == [expected_csv_fields(o) for o in data]

    (out / "zz-bad.csv").write_text("# a comment\n1000|too|few\nx|Ada|1.0|2024-01-01|\n", encoding="utf-8")
    env = env1()
    de = CsvRowDeserializationSchema.Builder(ORDER).set_field_delimiter("|").set_allow_comments(True) \
        .set_ignore_parse_errors(True).build()
    src = FileSource.for_record_stream_format(StreamFormat.for_deserialization_schema(de), str(out)).build()
    got = list(env.from_source(src, WatermarkStrategy.no_watermarks(), "csv files")
               .map(lambda r: (r.id, r.customer, r.amount, r.day, r.tags)).execute_and_collect("read csv"))
    # CSV cannot tell None from "" in a text field, nor an empty list from None: both read as written
    assert sorted(got) == sorted((o[0], o[1] or "", o[2], o[3], o[4]) for o in data)

    env = env1()
    strict = CsvRowDeserializationSchema.Builder(ORDER).set_field_delimiter("|").set_allow_comments(True).build()
    src = FileSource.for_record_stream_format(StreamFormat.for_deserialization_schema(strict), str(out / "zz-bad.csv")).build()
    env.from_source(src, WatermarkStrategy.no_watermarks(), "csv files").print()
    with pytest.raises(JobExecutionError, match=r"zz-bad\.csv: cannot read CSV record '1000\|too\|few': 3 field\(s\)"):
        env.execute("strict csv")


# -- JSON and CSV through a real Redis server -----------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_rows_round_trip_through_redis_streams(flinkpy_home, redis_server, fmt) -> None:
    from flinkpy.datastream.connectors.redis import RedisStreamsSink, RedisStreamsSource, create_topic

    data = orders(30)
    if fmt == "json":
        ser = JsonRowSerializationSchema.builder().with_type_info(ORDER).build()
        de = JsonRowDeserializationSchema.builder().type_info(ORDER).ignore_parse_errors().build()
    else:
        ser = CsvRowSerializationSchema.Builder(ORDER).build()
        de = CsvRowDeserializationSchema.Builder(ORDER).set_ignore_parse_errors(True).build()
    topic = f"orders-{fmt}"
    create_topic(redis_server.url, topic, 2)
    env = env1()
    sink = RedisStreamsSink.builder().set_url(redis_server.url).set_topic(topic).set_partitions(2) \
        .set_key_selector(lambda r: r.id).set_value_serialization_schema(ser).build()
    env.from_collection(data, type_info=ORDER).sink_to(sink)
    env.execute(f"orders to redis as {fmt}")

    client = redis_server.client()
    raw = [fields[b"value"] for p in range(2) for _, fields in client.xrange(_key(topic, p))]
    assert len(raw) == len(data)
    if fmt == "json":
        assert sorted((json.loads(v) for v in raw), key=lambda d: d["id"]) == [expected_json_line(o) for o in data]
    else:
        assert sorted((next(csv.reader([v.decode()])) for v in raw), key=lambda f: int(f[0])) == [expected_csv_fields(o) for o in data]
    client.xadd(_key(topic, 0), {"value": b"garbage, not a row"})  # skipped by ignore_parse_errors

    env = env1()
    src = RedisStreamsSource.builder().set_url(redis_server.url).set_topic(topic).set_partitions(2) \
        .set_bounded().set_value_only_deserializer(de).build()
    got = list(env.from_source(src, WatermarkStrategy.no_watermarks(), "orders", type_info=ORDER)
               .map(lambda r: (r.id, r.customer, r.amount, r.day, r.tags)).execute_and_collect("orders from redis"))
    want = [o if fmt == "json" else (o[0], o[1] or "", o[2], o[3], o[4]) for o in data]
    assert sorted(got) == sorted(want)


def _key(topic: str, p: int) -> str:
    from flinkpy.datastream.connectors.redis import stream_key

    return stream_key(topic, p)


# -- on Spark ------------------------------------------------------------------------------------


SPARK_JOB = '''
from flinkpy.common import Types
from flinkpy.datastream import KeyedProcessFunction, StreamExecutionEnvironment


class Total(KeyedProcessFunction):
    def process_element(self, value, ctx):
        yield value.word, value.n * 10


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
words = env.from_collection(["a", "bb", "a"]).map(
    lambda w: (w, len(w)), output_type=Types.ROW_NAMED(["word", "n"], [Types.STRING(), Types.INT()]))
out = words.key_by(lambda r: r.word).process(Total(), output_type=Types.ROW([Types.STRING(), Types.INT()]))
out.map(lambda r: f"{r.f0}:{r.f1}:{r!r}").print()
out.print()
env.execute("rows on spark")
'''


@pytest.mark.timeout(300)
def test_row_output_types_give_the_same_rows_on_spark(flinkpy_home, tmp_path) -> None:
    pytest.importorskip("pyspark", reason="PySpark is not installed (pip install -e '.[spark]')")
    job = tmp_path / "rows_on_spark.py"
    job.write_text(SPARK_JOB)
    expected = sorted(["+I[a, 10]", "+I[a, 10]", "+I[bb, 20]",
                       "a:10:Row(f0='a', f1=10)", "a:10:Row(f0='a', f1=10)", "bb:20:Row(f0='bb', f1=20)"])
    engine = subprocess.run([sys.executable, str(job)], capture_output=True, text=True, timeout=80)
    assert engine.returncode == 0, engine.stderr
    assert sorted(line for line in engine.stdout.splitlines() if line.strip()) == expected
    spark = run_cli("run", "--runner", "spark", str(job), timeout=280)
    assert spark.returncode == 0, spark.stderr
    printed = sorted(line for line in spark.stdout.splitlines() if line.startswith(("+I[", "a:", "bb:")))
    assert printed == expected


def test_avro_writes_rows_by_position_as_flink_does() -> None:
    """Rows named f0, f1 (``Types.ROW`` without names) fill an Avro record's fields in order."""
    from flinkpy.datastream.formats.avro import AvroRowDeserializationSchema, AvroRowSerializationSchema

    schema = '{"type": "record", "name": "TestRecord", "fields": [{"name": "id", "type": "int"}, {"name": "name", "type": "string"}]}'
    write, read = AvroRowSerializationSchema(avro_schema_string=schema), AvroRowDeserializationSchema(avro_schema_string=schema)
    assert tuple(read.deserialize(write.serialize(Row(f0=6, f1="hello")))) == (6, "hello")
    assert tuple(read.deserialize(write.serialize(Row(name="hi", id=1)))) == (1, "hi")  # named alike: by name
