"""Refusing a job on Spark: :class:`UntranslatableError` names the operator Spark cannot run with
the engine's results, why, and what to do instead (raised before anything starts)."""

from __future__ import annotations

from flinkpy.errors import InvalidProgramError
from flinkpy.graph.stream_graph import StreamNode


class UntranslatableError(InvalidProgramError):
    """A job (one operator of it) that the Spark runner cannot run with the engine's results."""

    def __init__(self, operator: str, reason: str, *, uid: str | None = None, remedy: str | None = None) -> None:
        self.operator = operator
        self.uid = uid
        self.reason = reason
        where = f"operator {operator!r}" + (f" (uid {uid!r})" if uid else "")
        super().__init__(
            f"cannot run on Spark: {where}: {reason}",
            remedy=remedy or "run the job on flinkpy's engine (without --runner spark), or change that operator",
        )


def refuse(node: StreamNode, reason: str, remedy: str | None = None) -> UntranslatableError:
    return UntranslatableError(node.name, reason, uid=node.uid, remedy=remedy)
