"""Capturing a job file's jobs without running them: what the Spark runner translates.

The job file runs as ``flinkpy run`` would run it (as ``__main__``, with its arguments), but in a
capturing execution context: each ``env.execute()`` hands its environment over and returns at
once, without starting anything. ``execute_and_collect()`` then returns no records.

>>> import pathlib, tempfile
>>> job = pathlib.Path(tempfile.mkdtemp()) / "job.py"
>>> _ = job.write_text(
...     "from flinkpy.datastream import StreamExecutionEnvironment\\n"
...     "env = StreamExecutionEnvironment.get_execution_environment()\\n"
...     "env.from_collection([1, 2]).map(lambda x: x * 2).print()\\n"
...     "env.execute('doubled')\\n")
>>> [(c.job_name, len(c.stream_graph.nodes)) for c in capture_job(str(job), [])]
[('doubled', 3)]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple


class CapturedJob(NamedTuple):
    """One ``execute()`` of a job file: its environment and job name."""

    env: Any
    job_name: str

    @property
    def stream_graph(self) -> Any:
        return self.env._graph

    @property
    def settings(self) -> dict[str, str]:
        """The configuration the job ran with, including what the program set itself."""
        return dict(self.env._settings)

    @property
    def parallelism(self) -> int:
        """The job's default parallelism: what the program set (``set_parallelism``, ``-p``), else
        its configuration's ``parallelism.default``."""
        return int(getattr(self.env, "_parallelism", 0) or self.env._settings.get("parallelism.default") or 1)


def capture_job(path: str, args: list[str], *, config: dict[str, str] | None = None, parallelism: int | None = None) -> list[CapturedJob]:
    """Run the job file ``path`` with ``args`` in a capturing context; its jobs, in order.

    ``config`` defaults to flinkpy.yaml (and the environment) as ``flinkpy run`` reads them;
    ``parallelism`` is ``-p``. Errors of the program are raised as ``flinkpy run`` raises them.
    """
    from flinkpy.program.context import ExecutionContext
    from flinkpy.program.invocation import job_config, run_file

    if config is None:
        from flinkpy.cluster import ClusterHome

        config = job_config(ClusterHome.resolve(), {})
    captured: list = []
    ctx = ExecutionContext(mode="plan", parallelism=parallelism, config=dict(config), capture=captured)
    run_file(Path(path), list(args), ctx)
    return [CapturedJob(env, name) for env, name in captured]
