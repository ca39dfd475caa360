"""Which snapshot ``flinkpy run --from-latest DIR`` restores: the newest that the runner asked for took.

``--from-latest`` resumes a job on the runner it ran on. Under DIR it considers

- for the engine (``--runner local``, the default): its complete checkpoints and savepoints,
  directories with a ``_metadata`` (:func:`~flinkpy.client.restore_plan.find_snapshots`);
- for Spark (``--runner spark``): Spark savepoints (a ``_metadata`` with ``"runner": "spark"``)
  and Spark jobs' checkpoint locations, ``<dir>/<job_id>/spark`` with a committed batch, the
  form ``run -s`` resumes a job whose driver was killed from
  (:func:`~flinkpy.spark.restore.retained_checkpoints`); a location completed when the commit
  of its last batch was written;

and picks the one that completed last (on a tie, the higher checkpoint id, then the later path).
A snapshot the other runner took is never picked: moving a job between the runners is a step
of its own (``savepoint plan --runner``, then ``run -s PATH``). A directory that holds nothing
of the runner asked for is refused with one line that says what it does hold.

>>> engine = Candidate("/c/3f2a/chk-7", Runner.ENGINE, "checkpoint", 7, "3f2a", 2_000)
>>> spark = Candidate("/c/9b1e/spark", Runner.SPARK, "checkpoint", 4, "9b1e", 1_000, spark_location=True)
>>> choose([engine, spark], Runner.SPARK, "/c").describe()
'Spark checkpoint 4 of job 9b1e'
>>> choose([engine, spark], Runner.ENGINE, "/c").describe()
'checkpoint 7 of job 3f2a'
"""

from __future__ import annotations

from dataclasses import dataclass

from flinkpy.client.upgrade import Runner
from flinkpy.client.upgrade_moves import EXECUTION_RUNNER
from flinkpy.errors import NotFoundError

#: how the refusals name each runner
_NAMES = {Runner.ENGINE: "the engine", Runner.SPARK: "the Spark runner"}
#: where a move takes the state
_TARGETS = {Runner.ENGINE: "the engine", Runner.SPARK: "Spark"}


@dataclass(frozen=True)
class Candidate:
    """A snapshot ``--from-latest`` could restore."""

    #: what ``run -s`` takes for it: a snapshot's directory, or a Spark checkpoint location
    path: str
    #: the runner that took it
    runner: Runner
    #: checkpoint or savepoint
    kind: str
    #: its checkpoint id; a Spark checkpoint location's: its last committed batch
    checkpoint_id: int
    job_id: str | None
    #: when it completed (ms)
    completed_ms: int
    #: a Spark job's checkpoint location rather than a directory with ``_metadata``
    spark_location: bool = False

    def describe(self) -> str:
        """Its words in ``Restoring from PATH (...)``."""
        what = f"Spark checkpoint {self.checkpoint_id}" if self.spark_location else f"{self.kind} {self.checkpoint_id}"
        return f"{what} of job {self.job_id}" if self.job_id else what


def choose(candidates: list[Candidate], runner: Runner, directory: str) -> Candidate:
    """The newest of ``candidates`` that ``runner`` took (see the module docstring); NotFoundError
    when there is none, naming the other runner's newest where there is one."""
    mine = [c for c in candidates if c.runner is runner]
    if mine:
        return _newest(mine)
    others = [c for c in candidates if c.runner is not runner]
    if not others:
        raise NotFoundError(
            f"no complete checkpoint or savepoint under {directory}",
            remedy="pass the directory that holds the job's checkpoints (execution.checkpointing.dir) or savepoints",
        )
    newest = _newest(others)
    if newest.spark_location:  # a location holds Spark's state only: it moves through a savepoint
        move = "then stop it with a savepoint, which -s moves to the engine"
    else:
        move = (f"or move its state to {_TARGETS[runner]} with -s {newest.path} "
                f"(dry-run it first: flinkpy savepoint plan --runner {runner.value} {newest.path} JOB.py)")
    raise NotFoundError(
        f"no complete checkpoint or savepoint of {_NAMES[runner]} under {directory}, only {len(others)} of "
        f"{_NAMES[newest.runner]} (newest: {newest.path})",
        remedy=f"resume there with --runner {EXECUTION_RUNNER[newest.runner]}, {move}",
    )


def _newest(candidates: list[Candidate]) -> Candidate:
    return max(candidates, key=lambda c: (c.completed_ms, c.checkpoint_id, c.path))


def candidates(directory: str) -> list[Candidate]:
    """Every complete snapshot under ``directory`` of either runner (NotFoundError when the
    directory does not exist)."""
    from flinkpy.client.restore_plan import find_snapshots
    from flinkpy.spark.restore import retained_checkpoints

    out = []
    for snap in find_snapshots(directory):
        doc = snap.metadata
        if doc is None:
            continue  # corrupt: not complete
        runner = Runner.SPARK if doc.get("runner") == Runner.SPARK.value else Runner.ENGINE
        out.append(Candidate(snap.path, runner, doc["kind"], doc["checkpoint_id"], doc.get("job_id"), doc["completion_timestamp"]))
    for chk in retained_checkpoints(directory):
        out.append(Candidate(chk.location, Runner.SPARK, "checkpoint", chk.batch_id, chk.job_id, chk.completed_ms, spark_location=True))
    return out


def latest_snapshot(directory: str, runner: Runner) -> Candidate:
    """What ``flinkpy run --from-latest directory`` restores on ``runner``."""
    return choose(candidates(directory), runner, directory)
