"""ExecutionGraph: one job's parallel subtasks and the job's status, as a pure state machine.

Events go in (slots assigned, a task listening, a task's state changed, cancel requested), actions
come out (deploy this execution, send these addresses, cancel that one, the job terminated). No
sockets, no clock: time is passed in, so every transition is testable without a cluster.

Job status follows Flink: CREATED -> RUNNING -> FINISHED; RUNNING -> FAILING -> FAILED when a task
fails (the others are canceled first); RUNNING -> CANCELLING -> CANCELED.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flinkpy.graph.job_graph import consumers_of, producers_of

TERMINAL_TASK = {"FINISHED", "FAILED", "CANCELED"}
GLOBALLY_TERMINAL = {"FINISHED", "FAILED", "CANCELED"}


@dataclass
class Execution:
    vertex_id: int
    subtask: int
    attempt: int = 0
    state: str = "CREATED"
    tm_id: str | None = None
    address: tuple[str, int | None] | None = None
    timestamps: dict[str, int] = field(default_factory=dict)
    records_in: int = 0
    records_out: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    #: the task process's pid, as its TaskManager reported it (for operators and fault injection)
    pid: int | None = None

    @property
    def exec_id(self) -> str:
        return f"{self.vertex_id}_{self.subtask}_{self.attempt}"


#: failures that are the consequence of another task's failure, never its cause
CONSEQUENCES = ("ChannelBroken", "ConnectionResetError", "BrokenPipeError", "FrameError")


def _is_consequence(entry: dict[str, Any] | None) -> bool:
    return entry is not None and str(entry.get("exceptionName", "")).rsplit(".", 1)[-1] in CONSEQUENCES


@dataclass(frozen=True)
class Deploy:
    execution: Execution


@dataclass(frozen=True)
class SendConnect:
    execution: Execution
    peers: dict[str, tuple[str, int]]


@dataclass(frozen=True)
class Cancel:
    execution: Execution


@dataclass(frozen=True)
class JobTerminated:
    state: str


Action = Deploy | SendConnect | Cancel | JobTerminated


class ExecutionGraph:
    def __init__(self, job_id: str, meta: dict[str, Any], now_ms: int):
        self.job_id = job_id
        self.meta = meta
        self.name: str = meta["name"]
        self.state = "CREATED"
        self.timestamps: dict[str, int] = {"CREATED": now_ms}
        self.vertices = {v["id"]: v for v in meta["vertices"]}
        self.edges = meta["edges"]
        self.executions: dict[tuple[int, int], Execution] = {
            (v["id"], i): Execution(v["id"], i) for v in meta["vertices"] for i in range(v["parallelism"])
        }
        self.exceptions: list[dict[str, Any]] = []
        self.root_exception: dict[str, Any] | None = None

    # -- queries -----------------------------------------------------------------------------

    @property
    def required_slots(self) -> int:
        return max(v["parallelism"] for v in self.vertices.values())

    def by_exec_id(self, exec_id: str) -> Execution | None:
        vid, sub, attempt = (int(x) for x in exec_id.split("_"))
        ex = self.executions.get((vid, sub))
        return ex if ex is not None and ex.attempt == attempt else None

    def is_terminal(self) -> bool:
        return self.state in GLOBALLY_TERMINAL

    def task_counts(self, vertex_id: int | None = None) -> dict[str, int]:
        counts = {s: 0 for s in ("CREATED", "SCHEDULED", "DEPLOYING", "INITIALIZING", "RUNNING", "FINISHED", "CANCELING", "CANCELED", "FAILED")}
        for ex in self.executions.values():
            if vertex_id is None or ex.vertex_id == vertex_id:
                counts[ex.state] = counts.get(ex.state, 0) + 1
        return counts

    def vertex_status(self, vertex_id: int) -> str:
        states = {ex.state for ex in self.executions.values() if ex.vertex_id == vertex_id}
        for s in ("FAILED", "CANCELING", "DEPLOYING", "INITIALIZING", "RUNNING", "CANCELED", "CREATED"):
            if s in states:
                return s
        return "FINISHED" if states == {"FINISHED"} else next(iter(states))

    def inputs_of(self, ex: Execution) -> list[dict[str, Any]]:
        out = []
        for e in self.edges:
            if e["target"] != ex.vertex_id:
                continue
            up = self.vertices[e["source"]]
            out.append(
                {
                    "edge_id": e["id"],
                    "source_vertex": e["source"],
                    "partitioner": e["partitioner"],
                    "producers": producers_of(e["partitioner"], up["parallelism"], self.vertices[ex.vertex_id]["parallelism"], ex.subtask),
                }
            )
        return out

    def outputs_of(self, ex: Execution) -> list[dict[str, Any]]:
        out = []
        for e in self.edges:
            if e["source"] != ex.vertex_id:
                continue
            down = self.vertices[e["target"]]
            out.append(
                {
                    "edge_id": e["id"],
                    "target_vertex": e["target"],
                    "partitioner": e["partitioner"],
                    "target_parallelism": down["parallelism"],
                    "target_max_parallelism": down["max_parallelism"],
                    "consumers": consumers_of(e["partitioner"], self.vertices[ex.vertex_id]["parallelism"], down["parallelism"], ex.subtask),
                }
            )
        return out

    # -- transitions -------------------------------------------------------------------------

    def _transition(self, state: str, now_ms: int) -> None:
        self.state = state
        self.timestamps[state] = now_ms

    def schedule(self, slot_of_subtask: dict[int, str], now_ms: int) -> list[Action]:
        """Slots are assigned: subtask i of every vertex goes to the TaskManager of slot i."""
        if self.state != "CREATED":
            return []
        self._transition("RUNNING", now_ms)
        actions: list[Action] = []
        for ex in self.executions.values():
            ex.tm_id = slot_of_subtask[ex.subtask]
            ex.state = "DEPLOYING"
            ex.timestamps["DEPLOYING"] = now_ms
            actions.append(Deploy(ex))
        return actions

    def on_listening(self, exec_id: str, host: str, port: int | None, now_ms: int, pid: int | None = None) -> list[Action]:
        ex = self.by_exec_id(exec_id)
        if ex is None or ex.state != "DEPLOYING":
            return []
        ex.address = (host, port)
        ex.pid = pid
        ex.state = "INITIALIZING"
        ex.timestamps["INITIALIZING"] = now_ms
        if self.state != "RUNNING" or any(e.address is None for e in self.executions.values()):
            return []
        peers = {f"{e.vertex_id}:{e.subtask}": e.address for e in self.executions.values() if e.address and e.address[1]}
        return [SendConnect(e, peers) for e in self.executions.values()]  # type: ignore[arg-type]

    def on_task_state(self, exec_id: str, state: str, info: Any, now_ms: int, tm_id: str | None = None) -> list[Action]:
        ex = self.by_exec_id(exec_id)
        if ex is None or ex.state in TERMINAL_TASK:
            return []
        ex.state = state
        ex.timestamps[state] = now_ms
        if isinstance(info, dict):
            ex.records_in = int(info.get("records_in", ex.records_in) or 0)
            ex.records_out = int(info.get("records_out", ex.records_out) or 0)
            ex.metrics.update({k: v for k, v in info.items() if k.endswith("_ms")})
        actions: list[Action] = []
        if state == "FAILED":
            entry = {
                "exceptionName": (info or {}).get("exception", "Exception"),
                "message": (info or {}).get("message", ""),
                "stacktrace": (info or {}).get("stacktrace", ""),
                "timestamp": now_ms,
                "taskName": f"{self.vertices[ex.vertex_id]['name']} ({ex.subtask + 1}/{self.vertices[ex.vertex_id]['parallelism']})",
                "location": tm_id or ex.tm_id,
                "taskManagerId": tm_id or ex.tm_id,
            }
            self.exceptions.append(entry)
            if self.state == "RUNNING":
                self.root_exception = entry
                self._transition("FAILING", now_ms)
                actions += self._cancel_others()
            elif self.state == "FAILING" and _is_consequence(self.root_exception) and not _is_consequence(entry):
                # a consumer noticed its producer die before the producer's own report arrived
                self.root_exception = entry
        actions += self._check_terminal(now_ms)
        return actions

    def cancel(self, now_ms: int) -> list[Action]:
        if self.is_terminal() or self.state in ("CANCELLING", "FAILING"):
            return []
        self._transition("CANCELLING", now_ms)
        actions = self._cancel_others()
        return actions + self._check_terminal(now_ms)

    def on_taskmanager_lost(self, tm_id: str, reason: str, now_ms: int) -> list[Action]:
        actions: list[Action] = []
        for ex in list(self.executions.values()):
            if ex.tm_id == tm_id and ex.state not in TERMINAL_TASK:
                actions += self.on_task_state(
                    ex.exec_id,
                    "FAILED",
                    {"exception": "flinkpy.TaskManagerLost", "message": reason, "stacktrace": f"TaskManagerLost: {reason}\n"},
                    now_ms,
                    tm_id,
                )
        return actions

    def _cancel_others(self) -> list[Action]:
        actions: list[Action] = []
        for ex in self.executions.values():
            if ex.state not in TERMINAL_TASK and ex.state != "CANCELING":
                ex.state = "CANCELING"
                actions.append(Cancel(ex))
        return actions

    def _check_terminal(self, now_ms: int) -> list[Action]:
        if self.is_terminal() or not all(ex.state in TERMINAL_TASK for ex in self.executions.values()):
            return []
        if self.state == "FAILING":
            final = "FAILED"
        elif self.state == "CANCELLING":
            final = "CANCELED"
        else:
            final = "FINISHED"
        self._transition(final, now_ms)
        return [JobTerminated(final)]

    def fail_global(self, exception_name: str, message: str, now_ms: int) -> list[Action]:
        """A failure of the job as a whole (e.g. too many failed checkpoints), not of one task."""
        if self.is_terminal() or self.state in ("FAILING", "CANCELLING"):
            return []
        entry = {
            "exceptionName": exception_name,
            "message": message,
            "stacktrace": f"{exception_name.rsplit('.', 1)[-1]}: {message}\n",
            "timestamp": now_ms,
            "taskName": None,
            "location": None,
            "taskManagerId": None,
        }
        self.exceptions.append(entry)
        self.root_exception = entry
        self._transition("FAILING", now_ms)
        return self._cancel_others() + self._check_terminal(now_ms)

    def all_running(self) -> bool:
        return self.state == "RUNNING" and all(ex.state == "RUNNING" for ex in self.executions.values())

    def fail_before_running(self, message: str, now_ms: int) -> list[Action]:
        """The job cannot be scheduled (not enough slots)."""
        entry = {
            "exceptionName": "flinkpy.NoResourceAvailableException",
            "message": message,
            "stacktrace": f"NoResourceAvailableException: {message}\n",
            "timestamp": now_ms,
            "taskName": None,
            "location": None,
            "taskManagerId": None,
        }
        self.exceptions.append(entry)
        self.root_exception = entry
        for ex in self.executions.values():
            ex.state = "CANCELED"
        self._transition("FAILED", now_ms)
        return [JobTerminated("FAILED")]
