"""Records print as PyFlink prints them: Java's ``toString`` of the converted value for a stream
with type information, Python's ``str`` for one without.

The expected texts are Java's (Flink's Tuple ``(a,1)``, Row ``+I[a, 1]``, ``Boolean.toString``,
``Double.toString``, ``Float.toString``, ``java.util.List`` and ``Map``, ``java.sql`` dates, times
and timestamps, ``Instant``), written out by hand, not computed with the module under test. A real
job checks that ``print()`` and FileSink's ``SimpleStringEncoder`` use them, and that part files
are named as Flink names them (``prefix-<uuid>-<counter>.ext``).
"""

from __future__ import annotations

import datetime
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from flinkpy.common.printed_forms import printer
from flinkpy.common.serialization import Encoder
from flinkpy.common.typeinfo import Types
from flinkpy.common.types import Row, RowKind

T = Types

#: (type information, value, what PyFlink prints)
CASES = [
    # PyFlink's word count example prints its Types.TUPLE counts as (word,count)
    (T.TUPLE([T.STRING(), T.INT()]), ("hello", 3), "(hello,3)"),
    (T.TUPLE([T.STRING(), T.LONG(), T.BOOLEAN()]), ("hi", 9, False), "(hi,9,false)"),
    (T.TUPLE([T.STRING(), T.STRING()]), ("a", None), "(a,null)"),
    (T.TUPLE([T.TUPLE([T.INT(), T.INT()]), T.STRING()]), ((1, 2), "x"), "((1,2),x)"),
    # a Row prints its kind, then its fields joined by ", "
    (T.ROW([T.STRING(), T.INT()]), Row("hi", 9), "+I[hi, 9]"),
    (T.ROW_NAMED(["k", "v"], [T.STRING(), T.DOUBLE()]), Row.of_kind(RowKind.UPDATE_AFTER, "k", 2.5), "+U[k, 2.5]"),
    (T.ROW([T.STRING(), T.INT()]), Row.of_kind(RowKind.DELETE, "gone", None), "-D[gone, null]"),
    (T.ROW([T.STRING(), T.INT()]), ("from", 1), "+I[from, 1]"),  # a tuple on a row-typed stream
    (T.ROW([T.ROW([T.INT()]), T.LIST(T.STRING())]), Row(Row(1), ["a", "b"]), "+I[+I[1], [a, b]]"),
    # basic types
    (T.BOOLEAN(), True, "true"),
    (T.BOOLEAN(), False, "false"),
    (T.STRING(), "héllo, world", "héllo, world"),
    (T.INT(), -7, "-7"),
    (T.LONG(), 2**40, "1099511627776"),
    (T.BIG_INT(), 10**30, "1000000000000000000000000000000"),
    (T.BIG_DEC(), Decimal("1.50"), "1.50"),
    (T.BIG_DEC(), Decimal("1E+3"), "1E+3"),
    (T.CHAR(), "c", "c"),
    (T.DOUBLE(), 1.0, "1.0"),
    (T.DOUBLE(), 100.0, "100.0"),
    (T.DOUBLE(), 0.1, "0.1"),
    (T.DOUBLE(), 0.001, "0.001"),
    (T.DOUBLE(), 0.0001, "1.0E-4"),
    (T.DOUBLE(), 9999999.0, "9999999.0"),
    (T.DOUBLE(), 10000000.0, "1.0E7"),
    (T.DOUBLE(), 1.5e300, "1.5E300"),
    (T.DOUBLE(), -3.25e-8, "-3.25E-8"),
    (T.DOUBLE(), -0.0, "-0.0"),
    (T.DOUBLE(), float("nan"), "NaN"),
    (T.DOUBLE(), float("-inf"), "-Infinity"),
    (T.DOUBLE(), 3, "3.0"),  # an int on a DOUBLE stream converts to a double
    (T.FLOAT(), 0.1, "0.1"),
    (T.FLOAT(), 3.14159265358979, "3.1415927"),  # rounded to single precision first
    (T.FLOAT(), 1e10, "1.0E10"),
    (T.FLOAT(), 16777217.0, "1.6777216E7"),
    (T.SQL_DATE(), datetime.date(2024, 2, 29), "2024-02-29"),
    (T.SQL_TIME(), datetime.time(7, 8, 9, 123456), "07:08:09"),
    (T.SQL_TIMESTAMP(), datetime.datetime(2024, 2, 29, 7, 8, 9), "2024-02-29 07:08:09.0"),
    (T.SQL_TIMESTAMP(), datetime.datetime(2024, 2, 29, 7, 8, 9, 500000), "2024-02-29 07:08:09.5"),
    (T.INSTANT(), datetime.datetime(2024, 2, 29, 7, 8, 9, tzinfo=datetime.timezone.utc), "2024-02-29T07:08:09Z"),
    (T.INSTANT(), datetime.datetime(2024, 2, 29, 7, 8, 9, 120000), "2024-02-29T07:08:09.120Z"),
    # collections: java.util.List / arrays [a, b], java.util.Map {k=v}
    (T.LIST(T.STRING()), ["a", "b"], "[a, b]"),
    (T.LIST(T.BOOLEAN()), [True, None], "[true, null]"),
    (T.BASIC_ARRAY(T.INT()), [1, 2, 3], "[1, 2, 3]"),
    (T.PRIMITIVE_ARRAY(T.DOUBLE()), [1.0, 2.5], "[1.0, 2.5]"),
    (T.OBJECT_ARRAY(T.TUPLE([T.STRING(), T.INT()])), [("a", 1)], "[(a,1)]"),
    (T.MAP(T.STRING(), T.INT()), {"a": 1, "b": 2}, "{a=1, b=2}"),
    (T.MAP(T.STRING(), T.LIST(T.BOOLEAN())), {"k": [False]}, "{k=[false]}"),
    (T.TUPLE([T.STRING(), T.MAP(T.INT(), T.STRING())]), ("m", {1: None}), "(m,{1=null})"),
    # pickled values: PyFlink turns them into Python's str before printing
    (T.PICKLED_BYTE_ARRAY(), ("a", True), "('a', True)"),
    (T.TUPLE([T.STRING(), T.PICKLED_BYTE_ARRAY()]), ("a", {"x": 1}), "(a,{'x': 1})"),
    # a typed stream's missing value
    (T.INT(), None, "null"),
]


@pytest.mark.parametrize("type_info,value,expected", CASES, ids=[f"{t}={e}" for t, _, e in CASES])
def test_each_type_prints_as_pyflink_prints_it(type_info, value, expected) -> None:
    assert printer(type_info)(value) == expected
    # SimpleStringEncoder writes the same text, and a newline
    assert Encoder.simple_string_encoder().for_type(type_info).encode(value) == (expected + "\n").encode()


@pytest.mark.parametrize("value", [("hi", 9), Row(id=1, name="a"), Row(1, "a"), True, 2.0, None, [1, "a"], {"k": 1}])
def test_a_stream_without_type_information_prints_python_str(value) -> None:
    assert printer(None)(value) == str(value)
    assert Encoder.simple_string_encoder().encode(value) == (str(value) + "\n").encode()


def test_the_spark_runners_print_and_file_writers_print_the_same(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The Spark runner writes a batch through the same sinks (no Spark needed to check it)."""
    from flinkpy.connectors.print_sink import PrintSink
    from flinkpy.datastream.connectors.file_system import FileSink
    from flinkpy.spark.sinks import writer_for

    pair = T.TUPLE([T.STRING(), T.BOOLEAN()])
    writer_for(PrintSink("s", type_info=pair), "sink", "print").write([("hi", True)], 0)
    writer_for(PrintSink("u"), "sink", "print").write([("hi", True)], 1)
    assert capsys.readouterr().out == "s> (hi,true)\nu> ('hi', True)\n"
    sink = FileSink.for_row_format(str(tmp_path), Encoder.simple_string_encoder()).build().for_record_type(pair)
    writer_for(sink, "sink", "files").write([("hi", False)], 3)
    assert [p.read_text() for p in tmp_path.rglob("*") if p.is_file()] == ["(hi,false)\n"]


JOB = '''
import sys
from flinkpy.common import Encoder, Types
from flinkpy.datastream import StreamExecutionEnvironment
from flinkpy.datastream.connectors.file_system import FileSink, OutputFileConfig

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
pairs = env.from_collection([("hi", 9), ("yes", 1)]).map(
    lambda p: (p[0], p[1], p[1] > 5, p[1] / 4), output_type=Types.TUPLE([Types.STRING(), Types.INT(), Types.BOOLEAN(), Types.DOUBLE()]))
pairs.print("tuple")
pairs.map(lambda p: {p[0]: [p[1]]}, output_type=Types.MAP(Types.STRING(), Types.LIST(Types.INT()))).print("map")
pairs.map(lambda p: p[:2]).print("untyped")
pairs.key_by(lambda p: p[0]).reduce(lambda a, b: a).print("keyed")
pairs.sink_to(FileSink.for_row_format(sys.argv[1], Encoder.simple_string_encoder())
              .with_output_file_config(OutputFileConfig.builder().with_part_prefix("pre").with_part_suffix(".txt").build())
              .build())
env.execute("printed forms")
'''


@pytest.mark.timeout(90)
def test_a_job_prints_and_writes_files_in_pyflink_forms(flinkpy_home, tmp_path: Path) -> None:
    job = tmp_path / "forms.py"
    job.write_text(JOB)
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, str(job), str(out)], capture_output=True, text=True, timeout=80)
    assert res.returncode == 0, res.stderr
    assert sorted(line for line in res.stdout.splitlines() if line.strip()) == sorted([
        "tuple> (hi,9,true,2.25)", "tuple> (yes,1,false,0.25)",
        "map> {hi=[9]}", "map> {yes=[1]}",
        "untyped> ('hi', 9)", "untyped> ('yes', 1)",  # no type information: Python's str, as PyFlink
        "keyed> (hi,9,true,2.25)", "keyed> (yes,1,false,0.25)",  # key_by and reduce keep the type
    ])
    files = [p for p in out.rglob("*") if p.is_file()]
    # Flink's part file names: prefix-<writer uuid>-<part counter>suffix, one part here
    assert len(files) == 1 and re.fullmatch(r"pre-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}-0\.txt", files[0].name), files
    assert files[0].read_text().splitlines() == ["(hi,9,true,2.25)", "(yes,1,false,0.25)"]
