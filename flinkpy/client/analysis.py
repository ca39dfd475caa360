"""Snapshot analysis, the Python API of ``flinkpy state analyze``: one call, either engine.

``analyze(path)`` reports what a checkpoint's or savepoint's state holds, by operator, state and
key group (:mod:`flinkpy.checkpoint.analysis` defines the report and its figures);
``engine="spark"`` computes the same report in Spark tasks (:mod:`flinkpy.spark.analysis`), for
snapshots too large for one process. ``diff(a, b)`` compares two snapshots key by key
(:mod:`flinkpy.checkpoint.state_diff`). The choice lives here, with the client, because the client
stands over both runners; the engines themselves never import each other.

>>> analyze("/nonexistent", engine="hadoop")
Traceback (most recent call last):
    ...
flinkpy.errors.UsageError: unknown analysis engine 'hadoop' (use one of local, spark)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flinkpy.checkpoint import analysis as local
from flinkpy.checkpoint.analysis import COLUMNS, key_group_rows, to_dataframe
from flinkpy.checkpoint.state_diff import diff
from flinkpy.errors import UsageError

#: ``--engine`` values: ``local`` (this process) and ``spark`` (Spark tasks, see flinkpy.spark.analysis)
ENGINES = ("local", "spark")

__all__ = ["COLUMNS", "ENGINES", "analyze", "diff", "key_group_rows", "to_dataframe"]


def analyze(
    path: str,
    *,
    top: int = 10,
    engine: str = "local",
    storage_options: Mapping[str, Any] | None = None,
    spark: Any = None,
    master: str = "local[*]",
    conf: Mapping[str, str] | None = None,
    trusted: bool = False,
) -> dict[str, Any]:
    """Analyze the checkpoint or savepoint at ``path`` (its directory or `_metadata`, any fsspec URL).

    Returns the report :func:`flinkpy.checkpoint.analysis.analyze` documents. ``top`` is how many
    keys ``top_keys`` lists. ``engine="local"`` reads the files one at a time in this process.
    ``engine="spark"`` reads them in Spark tasks (one per state file) and computes the same
    report with DataFrame aggregations: pass a ``SparkSession`` as ``spark``, or one is started
    on ``master`` (``local[*]`` by default) with the Spark properties ``conf``, and stopped at
    the end. Both engines give the same result, ``engine`` aside. State files are
    decoded with a restricted unpickler (plain values and flinkpy's types; other classes are
    refused) unless ``trusted`` (see :mod:`flinkpy.state.safe_pickle`).
    """
    if engine not in ENGINES:
        raise UsageError(f"unknown analysis engine {engine!r}", remedy=f"use one of {', '.join(ENGINES)}")
    if top < 0:
        raise UsageError(f"top must be 0 or more, got {top}")
    if engine == "spark":
        # imported only when asked for: pyspark is a heavy import, and optional
        from flinkpy.spark.analysis import analyze as analyze_with_spark

        return analyze_with_spark(path, top=top, storage_options=storage_options, spark=spark, master=master, conf=conf, trusted=trusted)
    return local.analyze(path, top=top, storage_options=storage_options, trusted=trusted)
