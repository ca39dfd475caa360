"""The JobManager: dispatcher, per-job ExecutionGraphs, slot pool, REST API."""
