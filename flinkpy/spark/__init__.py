"""The Spark runner: a flinkpy job translated into one Spark Structured Streaming query.

``plan.translate`` turns a job's StreamGraph into a :class:`~flinkpy.spark.query.SparkPlan`;
``capture.capture_job`` runs a job file without executing it to get that graph. The modules
below hold one concept each: the row layout (records), sources, the batch-wise stateless chain,
keyed operators over Spark's arbitrary stateful processing (keyed, state), and sinks.
PySpark is imported only inside these modules' functions that need it, so ``flinkpy`` works
without the ``spark`` extra installed.
"""
