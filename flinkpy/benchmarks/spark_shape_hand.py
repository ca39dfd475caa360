"""The hand-written PySpark queries of :mod:`flinkpy.benchmarks.spark_shapes`, as one process each:
``python -m flinkpy.benchmarks.spark_shape_hand SHAPE INPUT_DIR CHECKPOINT_DIR``.

What a PySpark user writes for each shape of :mod:`flinkpy.benchmarks.spark_shape_jobs`: a
``local[2]`` session with two shuffle partitions, ``readStream.text`` of the input directory, a
Python UDF where the job has a Python function that Spark has no Column expression for (the
split), Column expressions elsewhere, ``groupBy(...).count()`` / ``sum()`` in update mode,
checkpointing on, ``trigger(availableNow=True)``, and ``foreachBatch`` bringing the rows to the
driver (printed where the job prints).
"""

from __future__ import annotations

import sys
from typing import Any

from flinkpy.benchmarks.spark import hand_w1, hand_w2


def frame(spark: Any, shape: str, directory: str) -> Any:
    from pyspark.sql import functions as F

    if shape in ("w1", "w1-peers"):  # the peers' form: the rows reach the driver's Python all the same
        return hand_w1(spark, directory)
    if shape in ("w2", "w2-peers"):
        return hand_w2(spark, directory)
    if shape == "wc-sum-print":
        return hand_w1(spark, directory).where(F.col("count") % 1000 == 0)
    if shape == "ints-sum-print":
        return hand_w2(spark, directory).where(F.col("sum") % 100_000 == 0)
    raise SystemExit(f"unknown shape {shape!r}")


def main(shape: str, directory: str, checkpoint: str) -> None:
    from flinkpy.spark.analysis import spark_session

    spark = spark_session("local[2]", {"spark.sql.shuffle.partitions": "2"}, app_name=f"hand-written {shape}")
    printing = shape.endswith("-print")

    def write(df: Any, batch_id: int) -> None:
        rows = df.collect()
        if printing and rows:
            sys.stdout.write("".join(f"{tuple(row)}\n" for row in rows))
            sys.stdout.flush()

    query = (frame(spark, shape, directory).writeStream.outputMode("update").foreachBatch(write)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    failure = query.exception()
    spark.stop()
    if failure is not None:
        raise SystemExit(f"hand-written {shape} failed: {failure}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
