"""The SparkSession every part of flinkpy starts (the runner's driver, snapshot analysis, tests).

Python workers run this interpreter (``PYSPARK_PYTHON``): in ``local[N]`` they share this
machine's flinkpy and the job's modules; on a cluster every session ships flinkpy to its
executors, and the runner's driver the job's modules too (:mod:`flinkpy.spark.shipping`). A local
master binds to loopback; the Spark UI is off; a Python worker may take
up to 120 s to connect back (a loaded 2-core machine is slower than Spark's 15 s default).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from flinkpy.errors import ConfigurationError

DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.python.authenticate.socketTimeout": "120s",
}


def spark_session(master: str = "local[*]", conf: Mapping[str, str] | None = None, *, app_name: str = "flinkpy", log_level: str = "ERROR") -> Any:
    """A SparkSession on ``master`` with flinkpy's defaults, ``conf`` on top.

    Raises ConfigurationError (exit 8) when PySpark is missing or the JVM does not start.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise ConfigurationError(
            "Spark needs PySpark, which is not installed",
            remedy="run \"pip install 'flinkpy[spark]'\" (PySpark 4 with Arrow; Spark needs Java 17)",
        ) from None
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**DEFAULTS, **dict(conf or {})}.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # noqa: BLE001 - the JVM did not start: say what to check
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigurationError(
            f"could not start Spark on {master}: {first}",
            remedy="check that Java 17 is installed (JAVA_HOME) and that the master URL is right",
        ) from None
    spark.sparkContext.setLogLevel(log_level)
    from flinkpy.spark.shipping import ship_flinkpy, ships

    if ships(master):
        ship_flinkpy(spark.sparkContext)
    return spark
