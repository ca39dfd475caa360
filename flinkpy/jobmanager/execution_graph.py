"""ExecutionGraph: one job's parallel subtasks and the job's status, as a pure state machine.

Events go in (slots assigned, a task listening, a task's state changed, cancel requested), actions
come out (deploy this execution, send these addresses, cancel that one, the job terminated). No
sockets, no clock: time is passed in, so every transition is testable without a cluster.

Job status follows Flink: CREATED -> RUNNING -> FINISHED; RUNNING -> FAILING -> FAILED when a task
fails (the others are canceled first); RUNNING -> CANCELLING -> CANCELED.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flinkpy.graph.job_graph import consumers_of, producers_of

if TYPE_CHECKING:
    from flinkpy.common.restart_backoff import RestartBackoffTimeStrategy

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


@dataclass(frozen=True)
class Restart:
    """The executions of a failover region are all stopped and their backoff has passed:
    the I/O layer finds slots, restores them from the latest checkpoint and deploys them."""

    keys: frozenset[tuple[int, int]]


@dataclass(frozen=True)
class Failover:
    """Executions are about to be restarted (the checkpoint coordinator aborts pending checkpoints)."""

    keys: frozenset[tuple[int, int]]


@dataclass(frozen=True)
class Rescaled:
    """The graph now has other subtasks (``keys``): the checkpoint coordinator waits for
    them, and the slots of subtasks that are gone (their TaskManagers, ``freed``) are released."""

    keys: frozenset[tuple[int, int]]
    freed: tuple[str, ...]


Action = Deploy | SendConnect | Cancel | JobTerminated | Restart | Failover | Rescaled


class ExecutionGraph:
    """``strategy`` is a pure restart backoff strategy (notify_failure / can_restart /
    backoff_ms), ``failover`` is "full" (restart every task) or "region" (restart the failed
    task's pipelined region: the connected part of the job graph it belongs to)."""

    def __init__(self, job_id: str, meta: dict[str, Any], now_ms: int, *, strategy: RestartBackoffTimeStrategy | None = None, failover: str = "region"):
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
        self.strategy = strategy
        self.failover = failover
        self.restarts = 0
        #: region index -> {"keys": frozenset, "at_ms": earliest restart time}
        self.pending_restarts: dict[int, dict[str, Any]] = {}
        #: what happened to the job besides task states (restarts, strategy changes), oldest first
        self.events: list[dict[str, Any]] = []
        self.regions = self._pipelined_regions()
        self.region_of = {key: i for i, region in enumerate(self.regions) for key in region}
        #: subtask index -> TaskManager of its slot (slot sharing: subtask i of every vertex)
        self.slot_of_subtask: dict[int, str] = {}
        #: an in-place rescale under way: {"from", "to" (vertex id -> parallelism), "checkpoint_id", "timestamp"}
        self.pending_rescale: dict[str, Any] | None = None
        #: the rescales done, oldest first: {"timestamp", "from", "to" (vertex name -> parallelism), "checkpoint_id"}
        self.rescales: list[dict[str, Any]] = []

    def _pipelined_regions(self) -> list[frozenset[tuple[int, int]]]:
        """Connected components of the job graph (every edge is pipelined in a streaming job)."""
        parent = {vid: vid for vid in self.vertices}

        def find(v: int) -> int:
            while parent[v] != v:
                parent[v] = parent[parent[v]]
                v = parent[v]
            return v

        for e in self.edges:
            parent[find(e["source"])] = find(e["target"])
        groups: dict[int, set[tuple[int, int]]] = {}
        for key in self.executions:
            groups.setdefault(find(key[0]), set()).add(key)
        return [frozenset(g) for _, g in sorted(groups.items())]

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
                    "type_number": e.get("type_number", 1),
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
        self.slot_of_subtask = dict(slot_of_subtask)
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
        region = [self.executions[k] for k in self.regions[self.region_of[(ex.vertex_id, ex.subtask)]]]
        if self.state != "RUNNING" or any(e.address is None or e.state != "INITIALIZING" for e in region):
            return []
        # every task of the region listens: tell each where its producers are
        peers = {f"{e.vertex_id}:{e.subtask}": e.address for e in region if e.address and e.address[1]}
        return [SendConnect(e, peers) for e in region]  # type: ignore[arg-type]

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
                "subtask": ex.subtask,
                "attempt": ex.attempt,
                "location": tm_id or ex.tm_id,
                "taskManagerId": tm_id or ex.tm_id,
                "restarted": False,
            }
            self.exceptions.append(entry)
            region = self.region_of[(ex.vertex_id, ex.subtask)]
            if region in self.pending_restarts:
                # a consequence of the failure the region already restarts for
                entry["restarted"] = True
                if _is_consequence(self.root_exception) and not _is_consequence(entry):
                    # a consumer noticed its producer die before the producer's own report (its
                    # process killed, with the signal) arrived: that report is the cause
                    self._adopt_cause(entry)
            elif self.state in ("RUNNING", "RESTARTING"):
                actions += self._handle_failure(ex, entry, now_ms)
            elif self.state == "FAILING" and _is_consequence(self.root_exception) and not _is_consequence(entry):
                # a consumer noticed its producer die before the producer's own report arrived
                self.root_exception = entry
        actions += self._check_terminal(now_ms)
        return actions

    def _adopt_cause(self, entry: dict[str, Any]) -> None:
        """Make ``entry`` the root exception of the restart under way (and of its event)."""
        self.root_exception = entry
        for event in reversed(self.events):
            if event["type"] == "restarting":
                event["cause"] = f"{entry['exceptionName']}: {entry['message']}"
                break

    def _handle_failure(self, ex: Execution, entry: dict[str, Any], now_ms: int) -> list[Action]:
        """Ask the restart strategy; restart the failed task's region (or all) or fail the job."""
        strategy = self.strategy
        if strategy is not None:
            strategy.notify_failure(now_ms)
        if strategy is None or not strategy.can_restart():
            self.root_exception = entry
            self._transition("FAILING", now_ms)
            self.events.append({"timestamp": now_ms, "type": "failed", "reason": "the restart strategy gave up" if strategy is not None else "no restart strategy",
                                "cause": f"{entry['exceptionName']}: {entry['message']}"})
            return self._cancel_others()
        if self.failover == "full":
            regions = list(range(len(self.regions)))
        else:
            regions = [self.region_of[(ex.vertex_id, ex.subtask)]]
        return self._restart_regions(regions, entry, self.failover, now_ms)

    def _restart_regions(self, regions: list[int], entry: dict[str, Any], failover: str, now_ms: int) -> list[Action]:
        """Cancel the regions' tasks; they are redeployed, restored, after the strategy's backoff."""
        entry["restarted"] = True
        self.root_exception = entry
        # only reached when the strategy allowed a restart, so there is one
        assert self.strategy is not None
        backoff = self.strategy.backoff_ms()
        keys: set[tuple[int, int]] = set()
        actions: list[Action] = []
        for r in regions:
            self.pending_restarts[r] = {"keys": self.regions[r], "at_ms": now_ms + backoff}
            keys |= self.regions[r]
            for key in self.regions[r]:
                other = self.executions[key]
                if other.state not in TERMINAL_TASK and other.state != "CANCELING":
                    other.state = "CANCELING"
                    actions.append(Cancel(other))
        if len(keys) == len(self.executions):
            self._transition("RESTARTING", now_ms)
        self.events.append(
            {
                "timestamp": now_ms,
                "type": "restarting",
                "failover": failover,
                "tasks": len(keys),
                "backoff_ms": backoff,
                "cause": f"{entry['exceptionName']}: {entry['message']}",
            }
        )
        return [Failover(frozenset(keys)), *actions]

    def rescale(self, parallelism: dict[int, int], checkpoint_id: int, now_ms: int) -> list[Action]:
        """Restart every task at ``parallelism`` (vertex id -> subtasks, see
        :func:`flinkpy.jobmanager.rescaling.target_parallelism`), restored from the latest
        checkpoint (``checkpoint_id``): the tasks are cancelled now and redeployed, at the new
        parallelism, once all have stopped. Not a failure: the restart strategy is not asked and
        the restart count stays."""
        keys = frozenset(self.executions)
        self.pending_rescale = {"from": {vid: v["parallelism"] for vid, v in self.vertices.items()}, "to": dict(parallelism),
                                "checkpoint_id": checkpoint_id, "timestamp": now_ms}
        actions: list[Action] = [Failover(keys)]
        for ex in self.executions.values():
            if ex.state not in TERMINAL_TASK and ex.state != "CANCELING":
                ex.state = "CANCELING"
                actions.append(Cancel(ex))
        self.pending_restarts = {0: {"keys": keys, "at_ms": now_ms}}
        self._transition("RESTARTING", now_ms)
        self.events.append({"timestamp": now_ms, "type": "rescaling", "checkpoint_id": checkpoint_id,
                            "parallelism": {self.vertices[vid]["name"]: p for vid, p in sorted(parallelism.items())}})
        return actions

    def _apply_rescale(self, now_ms: int) -> list[Action]:
        """Every old task has stopped: the vertices take their new parallelism, with new
        executions (their attempts after every old one, so no old report can be mistaken for theirs)."""
        assert self.pending_rescale is not None
        first_attempt = max((ex.attempt for ex in self.executions.values()), default=0) + 1
        for vid, p in self.pending_rescale["to"].items():
            self.vertices[vid]["parallelism"] = p
        self.executions = {(vid, i): Execution(vid, i, attempt=first_attempt - 1)
                           for vid, v in self.vertices.items() for i in range(v["parallelism"])}
        self.regions = self._pipelined_regions()
        self.region_of = {key: i for i, region in enumerate(self.regions) for key in region}
        gone = sorted(i for i in self.slot_of_subtask if i >= self.required_slots)
        freed = tuple(self.slot_of_subtask.pop(i) for i in gone)
        keys = frozenset(self.executions)
        self.pending_restarts = {0: {"keys": keys, "at_ms": now_ms, "waiting": True}}
        return [Rescaled(keys, freed), Restart(keys)]

    def due_restarts(self, now_ms: int) -> list[Action]:
        """Regions whose tasks have all stopped and whose backoff has passed."""
        if self.pending_rescale is not None and self.pending_restarts.get(0, {}).get("waiting") is None:
            if all(ex.state in TERMINAL_TASK for ex in self.executions.values()):
                return self._apply_rescale(now_ms)
            return []
        actions: list[Action] = []
        for r, pending in sorted(self.pending_restarts.items()):
            if now_ms < pending["at_ms"] or pending.get("waiting"):
                continue
            if all(self.executions[k].state in TERMINAL_TASK for k in pending["keys"]):
                pending["waiting"] = True
                actions.append(Restart(pending["keys"]))
        return actions

    def restart(self, keys: frozenset[tuple[int, int]], slot_of_subtask: dict[int, str], now_ms: int) -> list[Action]:
        """Deploy new attempts of ``keys`` (the I/O layer found their slots)."""
        for r in [r for r, p in self.pending_restarts.items() if p["keys"] <= keys]:
            del self.pending_restarts[r]
        self.slot_of_subtask.update(slot_of_subtask)
        actions: list[Action] = []
        for key in sorted(keys):
            ex = self.executions[key]
            ex.attempt += 1
            ex.state = "DEPLOYING"
            ex.address = None
            ex.pid = None
            ex.tm_id = self.slot_of_subtask[ex.subtask]
            ex.timestamps = {"DEPLOYING": now_ms}
            actions.append(Deploy(ex))
        if self.state == "RESTARTING" and not self.pending_restarts:
            self._transition("RUNNING", now_ms)
        if self.pending_rescale is not None:
            r, self.pending_rescale = self.pending_rescale, None
            names = {vid: v["name"] for vid, v in self.vertices.items()}
            self.rescales.append({"timestamp": now_ms, "checkpoint_id": r["checkpoint_id"], "duration_ms": now_ms - r["timestamp"],
                                  "from": {names[v]: p for v, p in sorted(r["from"].items())},
                                  "to": {names[v]: p for v, p in sorted(r["to"].items())}})
            self.events.append({"timestamp": now_ms, "type": "rescaled", "tasks": len(keys), "checkpoint_id": r["checkpoint_id"]})
            return actions
        self.restarts += 1
        self.events.append({"timestamp": now_ms, "type": "restarted", "tasks": len(keys), "restarts": self.restarts})
        return actions

    def waiting_for_slots(self, keys: frozenset[tuple[int, int]], message: str, now_ms: int, timeout_ms: int | None = None) -> list[Action]:
        """No slots for a due restart yet: try again shortly (a TaskManager may come back). After
        ``timeout_ms`` of waiting (slot.request.timeout) the wait counts as a failed attempt of the
        restart strategy, as in Flink: the restart backs off and waits again, or the job fails."""
        for p in self.pending_restarts.values():
            if p["keys"] != keys:
                continue
            since = p.setdefault("waiting_since_ms", now_ms)
            if timeout_ms is not None and now_ms - since >= timeout_ms:
                return self._slot_request_timed_out(p, message, now_ms, timeout_ms)
            p["waiting"] = False
            p["at_ms"] = now_ms + 200
            if p.get("message") != message:
                p["message"] = message
                self.events.append({"timestamp": now_ms, "type": "waiting-for-resources", "message": message})
        return []

    def _slot_request_timed_out(self, pending: dict[str, Any], message: str, now_ms: int, timeout_ms: int) -> list[Action]:
        text = f"could not restart job {self.job_id} ({self.name}) within slot.request.timeout ({timeout_ms} ms): {message}"
        entry = {
            "exceptionName": "flinkpy.NoResourceAvailableException",
            "message": text,
            "stacktrace": f"NoResourceAvailableException: {text}\n",
            "timestamp": now_ms,
            "taskName": None,
            "location": None,
            "taskManagerId": None,
            "restarted": False,
        }
        self.exceptions.append(entry)
        self.root_exception = entry
        strategy = self.strategy
        if strategy is not None:
            strategy.notify_failure(now_ms)
        if strategy is not None and strategy.can_restart():
            entry["restarted"] = True
            backoff = strategy.backoff_ms()
            for key in ("waiting_since_ms", "message"):
                pending.pop(key, None)
            pending.update(waiting=False, at_ms=now_ms + backoff)
            self.events.append({"timestamp": now_ms, "type": "restarting", "failover": self.failover, "tasks": len(pending["keys"]),
                                "backoff_ms": backoff, "cause": f"NoResourceAvailableException: {text}"})
            return []
        self.pending_restarts.clear()
        self._transition("FAILING", now_ms)
        self.events.append({"timestamp": now_ms, "type": "failed",
                            "reason": "the restart strategy gave up" if strategy is not None else "no restart strategy"})
        return self._cancel_others() + self._check_terminal(now_ms)

    def set_restart_strategy(self, strategy: RestartBackoffTimeStrategy, description: dict[str, Any], previous: dict[str, Any], now_ms: int) -> None:
        self.strategy = strategy
        self.events.append({"timestamp": now_ms, "type": "restart-strategy-changed", "from": previous, "to": description})

    def cancel(self, now_ms: int) -> list[Action]:
        if self.is_terminal() or self.state in ("CANCELLING", "FAILING"):
            return []
        if self.state == "CREATED":  # still waiting for slots: nothing was deployed
            for ex in self.executions.values():
                ex.state = "CANCELED"
            self._transition("CANCELED", now_ms)
            return [JobTerminated("CANCELED")]
        self.pending_restarts.clear()
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
        if self.is_terminal() or self.pending_restarts or not all(ex.state in TERMINAL_TASK for ex in self.executions.values()):
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
        entry["restarted"] = False
        strategy = self.strategy
        if strategy is not None and self.state == "RUNNING" and not self.pending_restarts:
            # a global failure restarts every task, if the restart strategy allows (as Flink)
            strategy.notify_failure(now_ms)
            if strategy.can_restart():
                return self._restart_regions(list(range(len(self.regions))), entry, "full", now_ms)
        self.root_exception = entry
        self.pending_restarts.clear()
        self._transition("FAILING", now_ms)
        return self._cancel_others() + self._check_terminal(now_ms)

    def all_running(self) -> bool:
        return self.state == "RUNNING" and not self.pending_restarts and all(ex.state == "RUNNING" for ex in self.executions.values())

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
