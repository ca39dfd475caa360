"""Orders from files into PostgreSQL, exactly once end to end.

Lines ``order_id,customer,amount`` in files dropped into an inbox directory (write each file
elsewhere, then move it in) are read by a FileSource — monitored for new files, or the files
present at start with ``--static`` — and written to two tables:

- ``orders``: every order once, through the two-phase-commit PostgresSink (rows appear when
  the checkpoint that covers them completes);
- ``totals``: each customer's running total, through the upsert sink (idempotent: a replay
  rewrites the same totals).

Malformed lines (not UTF-8, wrong number of fields, an amount that is not a number) go to a
side output and are printed, with the file and byte offset when the file source rejected them.
Run it against a PostgreSQL with ``max_prepared_transactions`` > 0; the tables are created if
missing::

    python examples/orders_to_postgres.py --dsn postgresql://postgres@127.0.0.1:5432/postgres --inbox /data/inbox
    flinkpy run -d examples/orders_to_postgres.py --dsn ... --inbox /data/inbox   # on a cluster; try `flinkpy fault kill-task`
"""

import argparse
import sys

from flinkpy.common import Duration, WatermarkStrategy
from flinkpy.datastream import OutputTag, ProcessFunction, StreamExecutionEnvironment
from flinkpy.datastream.connectors import FileSource, PostgresSink, StreamFormat

BAD = OutputTag("bad-lines")


class ParseOrder(ProcessFunction):
    def process_element(self, line, ctx):
        parts = line.split(",")
        try:
            order_id, customer, amount = parts[0].strip(), parts[1].strip(), int(parts[2])
            if len(parts) != 3:
                raise ValueError
        except (IndexError, ValueError):
            ctx.output(BAD, f"bad order line: {line!r}")
            return
        yield order_id, customer, amount


def create_tables(dsn):
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS orders (order_id text PRIMARY KEY, customer text, amount bigint)")
        conn.execute("CREATE TABLE IF NOT EXISTS totals (customer text PRIMARY KEY, total bigint)")


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True, help="PostgreSQL connection string (libpq URL or key=value).")
    parser.add_argument("--inbox", required=True, help="Directory (any fsspec URL) of order files.")
    parser.add_argument("--static", action="store_true", help="Read the files present now, then end.")
    args, _ = parser.parse_known_args(argv)
    create_tables(args.dsn)

    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(500)
    builder = FileSource.for_record_stream_format(StreamFormat.text_line_format(), args.inbox).with_malformed_line_output(BAD)
    if not args.static:
        builder = builder.monitor_continuously(Duration.of_seconds(1))
    lines = env.from_source(builder.build(), WatermarkStrategy.no_watermarks(), "inbox").uid("inbox")
    orders = lines.process(ParseOrder()).uid("parse")
    orders.sink_to(
        PostgresSink.builder().set_dsn(args.dsn).set_sql("INSERT INTO orders (order_id, customer, amount) VALUES (?, ?, ?)").build()
    ).name("orders").uid("orders-sink")
    (orders.map(lambda o: (o[1], o[2])).key_by(lambda c: c[0]).sum(1).uid("totals")
        .sink_to(PostgresSink.upsert(args.dsn, "totals", ["customer", "total"], ["customer"])).name("totals").uid("totals-sink"))
    lines.get_side_output(BAD).union(orders.get_side_output(BAD)).map(str).print()
    env.execute("orders to postgres")


if __name__ == "__main__":
    main(sys.argv[1:])
