"""Moving a job's state between flinkpy's engine and the Spark runner: one converter.

The two runners keep state differently. The engine's snapshot is per operator id and subtask:
keyed state files by key group (``max_parallelism`` of them, 128 by default), operator state
(a sink's pre-committed output, functions' list state) and each source subtask's reader
position, all described by `_metadata`. The Spark runner's is Spark's checkpoint location: the
source offsets of the last committed micro-batch (each subtask's reader position inside) and
Spark's state store, where a keyed reduce keeps ``{key: running value}`` per Spark key group
(:data:`~flinkpy.spark.keyed.KEY_GROUPS` of them).

What both have in common is small and typed here: a :class:`MovedState` per operator — the
running values of a keyed reduce by key, the reader positions of a source (every old subtask's:
a reader restored with them takes its share, at any parallelism, as on the engine), and a
sink's pre-committed output. Everything else is decided per operator by :func:`plan_move`,
which says what moves and refuses, naming the operator, what would not:

- engine -> Spark: a source's positions become its readers' restored state on Spark
  (:class:`RestoredSource`); a keyed reduce's running values become the initial value of each
  Spark key group's state (:func:`seed_groups`), read where the group has no Spark state yet;
  a sink's pre-committed output is committed by the sink's own writer before the query starts
  (the engine's recovery contract); keyed state of keyed functions and of windows the engine
  runs on its general path and an interval join's buffered sides, with their timers
  (:mod:`.keyed_move`; states with a time-to-live keep each value's last-access timestamp,
  checked against the job's TTL config by :mod:`.ttl_move`), becomes the initial state of
  their Spark step; a window the engine runs on slices is given the general window
  layout first (:func:`sliced_window`). A broadcast operator's broadcast states (the copy the
  engine's restore gives subtask 0) and keyed state become the initial state of its one Spark
  group (:mod:`.broadcast_move`). Functions' other operator state is refused.
- Spark -> engine: when a Spark job takes a savepoint, the driver also writes the engine's
  layout into it (:func:`engine_operators`): the sources' positions from the committed batch's
  offsets, and the keyed reduces' running values and other keyed operators' states and timers
  read back from Spark's state store, under the engine's operator ids; a broadcast operator's
  broadcast states as the operator state of one old subtask, which every new subtask restores.
  The engine restores such a savepoint as one of its own, at any parallelism; what the driver
  could not convert is listed in its ``"moved"`` section, and the engine's restore plan refuses it.

Pure functions over typed records; reading and writing files happens in the callers (the Spark
driver, the client).

>>> plan = plan_move({"operators": [{"operator_id": "sums", "name": "sums", "uid": "sums", "subtasks": [
...     {"subtask": 0, "keyed_state": {"states": {"_reduce": {"kind": "value"}}}, "operator_state": None,
...      "source_offsets": None}]}]}, [ProgramOperator("sums", "sums", "sums", "keyed_reduce", True)], runner="spark")
>>> [(d.operator, d.move.value) for d in plan.decisions], plan.movable
([('sums', 'moves')], True)
"""

from __future__ import annotations

import enum
import pickle
import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from flinkpy.errors import InvalidProgramError
from flinkpy.spark import keyed_move
from flinkpy.spark.keyed import BROADCAST_KINDS
from flinkpy.spark.keyed_move import KeyedStates
from flinkpy.spark.ttl_move import describe_keyed, snapshot_ttl, ttl_mismatch

#: the engine's KeyedReduceOperator keeps each key's running value in this value state
REDUCE_STATE = "_reduce"
ENGINE, SPARK = "engine", "spark"


class Move(enum.Enum):
    MOVES = "moves"
    REFUSED = "refused"


@dataclass(frozen=True)
class ProgramOperator:
    """One operator of the program that would be restored, as the converter needs to know it."""

    operator_id: str
    name: str
    uid: str | None
    kind: str
    #: on Spark, a keyed reduce kept per key group (its running values move both ways)
    key_group_reduce: bool = False
    #: a source whose readers restore from positions (not Kafka on Spark, not a socket)
    restorable_source: bool = False
    #: a keyed operator whose per-key state and timers move (:mod:`.keyed_move`)
    keyed_state_moves: bool = False
    #: a window the engine runs on slices (:func:`sliced_window`): its WindowSpec, else None
    sliced_window: Any = None
    #: the keyed states the function declares in open() on Spark, and those of them with a
    #: time-to-live (None: not known, a plan without the Spark translation)
    declared_states: frozenset[str] | None = None
    ttl_states: frozenset[str] = frozenset()


@dataclass(frozen=True)
class MoveDecision:
    operator: str
    uid: str | None
    operator_id: str
    what: str
    move: Move
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"operator": self.operator, "uid": self.uid, "operator_id": self.operator_id, "state": self.what,
                "move": self.move.value, "reason": self.reason}


@dataclass(frozen=True)
class MovePlan:
    runner: str
    decisions: tuple[MoveDecision, ...]

    @property
    def movable(self) -> bool:
        return all(d.move is Move.MOVES for d in self.decisions)

    @property
    def problems(self) -> list[str]:
        return [f"operator {d.operator!r}: {d.reason}" for d in self.decisions if d.move is Move.REFUSED]

    def to_json(self) -> dict[str, Any]:
        return {"runner": self.runner, "movable": self.movable, "operators": [d.to_json() for d in self.decisions],
                "problems": self.problems}


@dataclass
class MovedState:
    """One operator's state in the runners' common terms (see the module docstring)."""

    operator_id: str
    #: a keyed reduce's running value per key
    running_values: dict[Any, Any] | None = None
    #: a source's reader positions, one per old subtask
    source_positions: list[Any] = field(default_factory=list)
    #: a sink's pre-committed output, one per old subtask (None: nothing held)
    sink_states: list[Any] = field(default_factory=list)
    #: a keyed operator's state by key and its timers (process functions, general-path windows)
    keyed: KeyedStates | None = None
    #: a broadcast operator's broadcast states by name, one subtask's copy (:mod:`.broadcast_move`)
    broadcast: dict[str, dict[Any, Any]] | None = None


#: keyed operators whose state the Spark runner keeps per key under the engine's state names
#: (the engine's own operator classes over SparkKeyedBackend), so that it moves both ways
KEYED_STATE_KINDS = frozenset({"keyed_process", "keyed_map", "keyed_flat_map", "keyed_filter", "keyed_reduce", "window",
                               "keyed_co_process", "keyed_co_map", "keyed_co_flat_map", "keyed_broadcast_process",
                               "interval_join"})


def keyed_refusal(kind: str, what: str, runner: str) -> str:
    """Why ``what`` (keyed state) of an operator of ``kind`` cannot move onto ``runner``."""
    if kind in KEYED_STATE_KINDS:  # a keyed reduce by key group on Spark, given another operator's state
        return f"it is a {kind} that keeps running values by key group on Spark, where {what} of another operator has no place"
    return f"it is a {kind}, which has no place for {what} on {runner}"


def foreign_keyed_state(kind: str, names: set[str]) -> str:
    """Why keyed state of these ``names`` does not fit an operator of ``kind`` ("" when it may):
    a window's state given to another operator, or another operator's to a window (its uid was
    another operator's)."""
    windowed = {n for n in names if n.startswith("_window")}
    if kind == "window" and not windowed:
        return (f"its keyed state ({', '.join(sorted(names))}) is not a window's: an operator of another kind had this id; "
                "give the window another uid, or pass -n")
    if kind != "window" and windowed:
        return (f"its keyed state ({', '.join(sorted(windowed))}) is a window's, and it is a {kind}: give it another uid, or pass -n")
    return ""


def ttl_refusals(program: Iterable[ProgramOperator], states: Mapping[str, MovedState]) -> tuple[MoveDecision, ...]:
    """The TTL disagreements (:func:`ttl_mismatch`) between the loaded keyed state of an engine
    snapshot and the program, by its state files' own TTLs."""
    out = []
    for p in program:
        keyed = states[p.operator_id].keyed if p.operator_id in states else None
        if keyed is None:
            continue
        if reason := ttl_mismatch({name: keyed.ttl.get(name) for name in keyed.states}, p):
            out.append(MoveDecision(p.name, p.uid, p.operator_id, describe_keyed(keyed.states, keyed.ttl), Move.REFUSED, reason))
    return tuple(out)


def sliced_window(spec: Any) -> Any:
    """The WindowSpec of a window the engine runs on slices, None for any other operator. Spark
    runs every window on the engine's general WindowOperator, whose state is laid out otherwise:
    such a window's state is converted on the way (:mod:`flinkpy.task.window_layouts`), to the
    general layout when it moves to Spark, and back by the engine's restore."""
    from flinkpy.common.window_spec import SLICED, execution_path

    return spec if execution_path(spec)[0] == SLICED else None


def merged_states(documents: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``states`` of several canonical keyed-state documents of one operator (its old
    subtasks, each with its own key groups) as one."""
    out: dict[str, Any] = {}
    for doc in documents:
        for name, entry in (doc.get("states") or {}).items():
            merged = out.setdefault(name, {**{k: v for k, v in entry.items() if k != "key_groups"}, "key_groups": {}})
            merged["key_groups"].update(entry.get("key_groups") or {})
    return out


# --------------------------------------------------------------------------- planning


def _snapshot_contents(op: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str], bool]:
    """(keyed state name -> kind, operator state part -> kind, has source positions) of a `_metadata` operator."""
    keyed: dict[str, str] = {}
    parts: dict[str, str] = {}
    positions = False
    for s in op.get("subtasks", []):
        handle = s.get("keyed_state") or {}
        for name, entry in (handle.get("states") or {}).items():
            entry = entry if isinstance(entry, Mapping) else {}
            if entry.get("entries", 1):  # an empty state (a reduce's timer tables) holds nothing to move
                keyed[name] = entry.get("kind", "?")
        states = (s.get("operator_state") or {}).get("states") or {}
        parts.update((name, (entry.get("kind") if isinstance(entry, Mapping) else None) or "?") for name, entry in states.items())
        positions = positions or s.get("source_offsets") is not None
    return keyed, parts, positions


def _broadcast_names(parts: Mapping[str, str]) -> str:
    """The broadcast states among an operator's operator state parts, named ("" if none)."""
    return ", ".join(sorted(name for name, kind in parts.items() if kind == "broadcast"))


def plan_move(doc: Mapping[str, Any], program: Iterable[ProgramOperator], *, runner: str,
              allow_non_restored_state: bool = False) -> MovePlan:
    """What of the engine snapshot ``doc`` (its `_metadata`) moves into ``program`` on ``runner``
    "spark"; a Spark savepoint's own refusals for the engine (its ``"moved"`` section)."""
    by_id = {p.operator_id: p for p in program}
    decisions: list[MoveDecision] = []
    if runner == ENGINE:
        if doc.get("moved") is not None:  # a Spark savepoint: what its engine layout holds moves
            for op in doc.get("operators", []):
                keyed, parts, positions = _snapshot_contents(op)
                name, uid, oid = op.get("name") or op["operator_id"], op.get("uid"), op["operator_id"]
                if positions:
                    decisions.append(MoveDecision(name, uid, oid, "source positions", Move.MOVES))
                if keyed:
                    ttl = [n for n, ms in snapshot_ttl(op).items() if ms is not None and n in keyed]
                    what = "running values per key" if set(keyed) == {REDUCE_STATE} else describe_keyed(keyed, ttl)
                    decisions.append(MoveDecision(name, uid, oid, what, Move.MOVES))
                if broadcast := _broadcast_names(parts):
                    decisions.append(MoveDecision(name, uid, oid, f"broadcast state ({broadcast})", Move.MOVES))
        for r in (doc.get("moved") or {}).get("refused", []):
            decisions.append(MoveDecision(r["operator"], r.get("uid"), r.get("operator_id", ""), r.get("state", ""), Move.REFUSED, r["reason"]))
        return MovePlan(runner, tuple(decisions))
    for op in doc.get("operators", []):
        keyed, parts, positions = _snapshot_contents(op)
        if not keyed and not parts and not positions:
            continue
        target = by_id.get(op["operator_id"])
        name = target.name if target else (op.get("name") or op["operator_id"])
        uid = target.uid if target else op.get("uid")

        def decide(what: str, reason: str = "") -> None:
            decisions.append(MoveDecision(name, uid, op["operator_id"], what, Move.REFUSED if reason else Move.MOVES, reason))

        if target is None:
            if not allow_non_restored_state:
                decide("state of an operator the program no longer has",
                       "the program has no operator with this id (set the same uid), or pass -n to drop its state")
            continue
        if positions:
            decide("source positions", "" if target.restorable_source else
                   "its reader positions cannot be handed to this source on Spark (Kafka offsets move through the topic's "
                   "committed offsets, a socket has none)")
        if keyed:
            names = ", ".join(sorted(keyed))
            stored_ttl = snapshot_ttl(op)
            ttl = [n for n, ms in stored_ttl.items() if ms is not None and n in keyed]
            if set(keyed) == {REDUCE_STATE} and target.kind == "keyed_reduce" and target.key_group_reduce:
                decide("running values per key")
            elif foreign := foreign_keyed_state(target.kind, set(keyed)):
                decide(f"keyed state ({names})", foreign)
            elif ttl and target.kind in BROADCAST_KINDS:
                decide(describe_keyed(keyed, ttl), f"it is a {target.kind}, whose keyed state with a time-to-live "
                       f"({', '.join(sorted(ttl))}) does not move to Spark: give the state a new name, or keep the job on the engine")
            elif target.keyed_state_moves:
                decide(describe_keyed(keyed, ttl), ttl_mismatch(stored_ttl, target))
            else:
                decide(f"keyed state ({names})", keyed_refusal(target.kind, f"keyed state ({names})", "Spark"))
        if broadcast := _broadcast_names(parts):
            decide(f"broadcast state ({broadcast})", "" if target.kind in BROADCAST_KINDS else
                   f"it is a {target.kind}, which has no place for broadcast state ({broadcast}) on Spark")
        for part in sorted(p for p, kind in parts.items() if kind != "broadcast"):
            if part == "sink":
                decide("pre-committed output", "" if target.kind == "sink" else f"a {target.kind} holds sink state")
            else:
                decide(f"operator state ({part})",
                       f"its operator state ({part}) has no place on Spark, where a function's list state is not kept")
    return MovePlan(runner, tuple(decisions))


def program_operators(plan: Any) -> list[ProgramOperator]:
    """The operators of a translated Spark plan (:class:`~flinkpy.spark.query.SparkPlan`), with
    the engine's operator ids, in the program's order."""
    from flinkpy.graph.job_graph import operator_ids
    from flinkpy.spark.keyed import by_key_group

    graph = plan.graph
    ids = operator_ids(graph)
    keyed_specs = {id(node): spec for step in plan.stages if step.kind == "keyed"
                   for node, spec in zip(step.operators, step.payload.specs)}
    reduces = {n for n, spec in keyed_specs.items() if by_key_group(spec)}
    moving = {n for n, spec in keyed_specs.items() if spec.kind in KEYED_STATE_KINDS and n not in reduces}
    windows = {n: sliced_window(spec.fn) for n, spec in keyed_specs.items() if spec.kind == "window"}
    sources = {id(step.payload.node) for branch in plan.branches for step in branch
               if step.kind == "source" and _restorable(step.payload)}
    declared = {n: _declared(keyed_specs[n]) for n in moving}
    return [ProgramOperator(ids[n], node.name, node.uid, "source" if node.is_source else "sink" if node.is_sink else node.kind,
                            key_group_reduce=id(node) in reduces, restorable_source=id(node) in sources,
                            keyed_state_moves=id(node) in moving, sliced_window=windows.get(id(node)),
                            **declared.get(id(node), {}))
            for n in graph.topological_order() for node in [graph.nodes[n]]]


def _declared(spec: Any) -> dict[str, Any]:
    """The states a keyed operator declares in open() on Spark and those with a time-to-live, as
    :class:`ProgramOperator` fields (none where PySpark is missing: nothing runs there anyway)."""
    try:
        from flinkpy.spark.state_reading import declared_kinds

        kinds, ttl = declared_kinds(spec)
    except ImportError:
        return {}
    return {"declared_states": frozenset(kinds), "ttl_states": frozenset(ttl)}


def _restorable(step: Any) -> bool:
    from flinkpy.spark.kafka import is_kafka_source

    return step.fusable and not is_kafka_source(step.node.fn)


def apply_moved(plan: Any, states: Mapping[str, MovedState]) -> None:
    """Hand moved state to a translated plan before its query first starts: sources' positions
    to their source steps, keyed reduces' running values to their specs as seeds, other keyed
    and broadcast operators' state to their steps' initial state."""
    from flinkpy.graph.job_graph import operator_ids
    from flinkpy.spark.keyed import KEY_GROUPS

    ids = operator_ids(plan.graph)
    for branch in plan.branches:
        for step in branch:
            if step.kind == "source":
                moved = states.get(ids[step.payload.node.id])
                if moved is not None and moved.source_positions:
                    step.payload.positions = list(moved.source_positions)
    for step in plan.stages:
        if step.kind == "keyed":
            for node, spec in zip(step.operators, step.payload.specs):
                moved = states.get(ids[node.id])
                if moved is not None and spec.kind in BROADCAST_KINDS:  # the one group's state (flinkpy.spark.broadcast)
                    from flinkpy.spark import broadcast_move

                    step.payload.initial_state.extend(broadcast_move.initial_rows(moved.keyed, moved.broadcast or {}, spec.prefix))
                    continue
                if moved is not None and moved.running_values is not None:
                    spec.seed = seed_groups(moved.running_values, KEY_GROUPS)
                if moved is not None and moved.keyed is not None:
                    step.payload.initial_state.extend(keyed_move.initial_rows(moved.keyed, spec.prefix))


def sinks_of(plan: Any) -> dict[str, Any]:
    """The program's sinks by engine operator id (a moved sink state is settled by its writer)."""
    from flinkpy.graph.job_graph import operator_ids

    ids = operator_ids(plan.graph)
    return {ids[n]: node.fn for n, node in plan.graph.nodes.items() if node.is_sink}


def settle_sinks(sinks: Mapping[str, Any], states: Mapping[str, MovedState]) -> list[str]:
    """Commit what an engine snapshot's sinks had pre-committed, as the engine's restore does:
    each old subtask's writer is created with its state (it commits that, and aborts the rest)
    and closed before Spark writes anything. Returns the operator ids settled."""
    from flinkpy.connectors.base import ReaderContext

    done = []
    for operator_id, sink in sinks.items():
        moved = states.get(operator_id)
        if moved is None or not moved.sink_states:
            continue
        n = len(moved.sink_states)
        for i, state in enumerate(moved.sink_states):
            if state is None:
                continue
            writer = sink.create_writer(ReaderContext(subtask_index=i, parallelism=n, operator_name="moved sink",
                                                      restored_state=[state]))
            writer.close()
        done.append(operator_id)
    return done


# --------------------------------------------------------------------------- engine -> Spark


def engine_states(doc: Mapping[str, Any], load: Callable[[Mapping[str, Any]], Any],
                  keyed_operators: Iterable[str] = (), *, sliced_windows: Mapping[str, Any] | None = None,
                  max_parallelism: int = 128) -> dict[str, MovedState]:
    """The movable state of an engine snapshot, by operator id; ``load(handle)`` reads a state
    file (a keyed-state document, or an operator-state object). The keyed state of
    ``keyed_operators`` moves whole (:mod:`.keyed_move`), the others' as running values; that of
    ``sliced_windows`` (operator id -> WindowSpec) in the general window layout, as Spark keeps it;
    a broadcast operator's broadcast states as one copy."""
    from flinkpy.task.window_layouts import sliced_to_general

    keyed_ids = set(keyed_operators)
    sliced = dict(sliced_windows or {})
    out: dict[str, MovedState] = {}
    for op in doc.get("operators", []):
        moved = MovedState(op["operator_id"])
        subtasks = sorted(op.get("subtasks", []), key=lambda s: s["subtask"])
        if op["operator_id"] in keyed_ids:
            handles = [s["keyed_state"] for s in subtasks if s.get("keyed_state")]
            if handles:
                documents: Iterable[Mapping[str, Any]] = (load(h) for h in handles)
                if op["operator_id"] in sliced:
                    states = sliced_to_general(merged_states(documents), sliced[op["operator_id"]], int(op.get("max_parallelism") or max_parallelism))
                    documents = [{"states": states}]
                moved.keyed = keyed_move.from_engine(documents, operator=op.get("name") or op["operator_id"])
        for s in subtasks:
            handle = s.get("keyed_state")
            if moved.keyed is None and handle and REDUCE_STATE in (handle.get("states") or {}):
                snapshot = load(handle)
                groups = snapshot["states"].get(REDUCE_STATE, {}).get("key_groups", {})
                values = moved.running_values if moved.running_values is not None else {}
                for mapping in groups.values():
                    values.update(mapping)
                moved.running_values = values
            if s.get("source_offsets") is not None:
                moved.source_positions.append(s["source_offsets"])
        op_states = [s.get("operator_state") for s in subtasks]
        if any(_holds_broadcast(h) for h in op_states):
            from flinkpy.state.operator import broadcast_copies

            # the copy the engine's restore gives new subtask 0 of 1: Spark runs the operator in one group
            moved.broadcast = broadcast_copies([(load(h) or {}).get("functions") if h else None for h in op_states], 0)
        if any(h and "sink" in (h.get("states") or {}) for h in op_states):
            for h in op_states:
                state = load(h) if h else None
                moved.sink_states.append(state.get("sink") if isinstance(state, Mapping) else None)
        if (moved.running_values is not None or moved.source_positions or moved.sink_states or moved.keyed is not None
                or moved.broadcast is not None):
            out[op["operator_id"]] = moved
    return out


def _holds_broadcast(handle: Mapping[str, Any] | None) -> bool:
    """Whether an operator-state handle of `_metadata` holds broadcast state."""
    return any(isinstance(e, Mapping) and e.get("kind") == "broadcast" for e in ((handle or {}).get("states") or {}).values())


def seed_groups(values: Mapping[Any, Any], key_groups: int) -> dict[int, dict[Any, Any]]:
    """Running values by key into Spark's key groups (the grouping the chain before a keyed
    reduce uses: :class:`~flinkpy.state.key_groups.KeyGroupAssigner`).

    >>> seed_groups({"a": 1, "b": 2}, 1)
    {0: {'a': 1, 'b': 2}}
    """
    from flinkpy.state.key_groups import KeyGroupAssigner

    assign = KeyGroupAssigner(key_groups)
    out: dict[int, dict[Any, Any]] = {}
    for key, value in values.items():
        out.setdefault(assign(key), {})[key] = value
    return out


def group_index(grouping_key: bytes) -> int:
    """The key group of a Spark grouping key of a keyed reduce (its last two bytes)."""
    return struct.unpack(">H", grouping_key[-2:])[0]


class RestoredSource:
    """A source whose readers start from moved positions where they have none of their own (a
    query's first micro-batch); after that Spark's offsets carry the readers' own state."""

    def __init__(self, source: Any, positions: list[Any]) -> None:
        self.source = source
        self.positions = list(positions)

    def create_reader(self, ctx: Any) -> Any:
        from dataclasses import replace

        if not ctx.restored_state:
            ctx = replace(ctx, restored_state=list(self.positions))
        return self.source.create_reader(ctx)

    def __getattr__(self, name: str) -> Any:
        if name in ("source", "positions"):
            raise AttributeError(name)
        return getattr(self.source, name)

    def __repr__(self) -> str:
        return f"RestoredSource({self.source!r})"


# --------------------------------------------------------------------------- Spark -> engine


def decode_positions(offset: Any) -> list[Any] | None:
    """The reader positions in a flinkpy data source's Spark offset (one per subtask), or None
    where the offset is not one (a bounded source read whole, Kafka, a socket)."""
    from flinkpy.spark.sources import decode, is_data_source_offset

    if not is_data_source_offset(offset):
        return None
    out = []
    for k in sorted((k for k in offset if k.isdigit()), key=int):
        state = offset[k]["s"]
        out.append(decode(state) if state else None)
    return out


def engine_operators(program: Iterable[ProgramOperator], states: Mapping[str, MovedState], *, max_parallelism: int,
                     write: Callable[[str, bytes], dict[str, Any]]) -> list[dict[str, Any]]:
    """`_metadata` operator entries of ``states`` in the engine's layout; ``write(name, data)``
    stores a state file and returns its handle. A keyed reduce's values go into one file of
    every key group, which the engine's restore splits at any parallelism."""
    import io

    from flinkpy.checkpoint.metadata import keyed_state, new_operator, new_subtask, operator_state
    from flinkpy.state import canonical
    from flinkpy.state.key_groups import assign_to_key_group

    out = []
    for position, p in enumerate(program):
        moved = states.get(p.operator_id)
        if moved is None:
            continue
        subtasks = []
        document = None
        if moved.running_values is not None:
            groups: dict[int, dict[Any, Any]] = {}
            for key, value in moved.running_values.items():
                groups.setdefault(assign_to_key_group(key, max_parallelism), {})[key] = value
            document = {REDUCE_STATE: {"kind": "value", "key_groups": groups}}
        elif moved.keyed is not None:
            document = keyed_move.to_engine(moved.keyed, max_parallelism)
        if document is not None:
            buf = io.BytesIO()
            counts = canonical.write_document(buf, {"version": _snapshot_version(), "states": document})
            handle = write(f"{p.operator_id}-moved-keyed", buf.getvalue())
            summary = {name: {"kind": entry["kind"], "entries": counts.get(name, 0),
                              **({"ttl_ms": entry["ttl_ms"]} if "ttl_ms" in entry else {}),
                              **({"ttl_unknown": True} if entry.get("ttl_unknown") else {})} for name, entry in document.items()}
            subtasks.append(new_subtask(0, keyed_state=keyed_state(handle, (0, max_parallelism - 1), summary)))
        if moved.broadcast is not None:  # one old subtask's copy: the engine's restore gives it to every new subtask
            from flinkpy.spark.broadcast_move import engine_operator_state

            content, summary = engine_operator_state(moved.broadcast)
            entry = operator_state(write(f"{p.operator_id}-moved-operator", pickle.dumps(content, protocol=5)), summary)
            if subtasks:
                subtasks[0]["operator_state"] = entry
            else:
                subtasks.append(new_subtask(0, operator_state=entry))
        for i, position_i in enumerate(moved.source_positions):
            if i < len(subtasks):
                subtasks[i]["source_offsets"] = position_i
            else:
                subtasks.append(new_subtask(i, source_offsets=position_i))
        if subtasks:
            out.append(new_operator(operator_id=p.operator_id, uid=p.uid, name=p.name, vertex_id=position,
                                    parallelism=len(subtasks), max_parallelism=max_parallelism, subtasks=subtasks))
    return out


def _snapshot_version() -> int:
    from flinkpy.state.backend import SNAPSHOT_VERSION

    return SNAPSHOT_VERSION


def merge_group_tables(blobs: Iterable[bytes]) -> dict[Any, Any]:
    """``{key: running value}`` of a keyed reduce from its Spark key groups' pickled tables."""
    out: dict[Any, Any] = {}
    for blob in blobs:
        out.update(pickle.loads(blob))
    return out


def refuse(plan: MovePlan, *, where: str) -> None:
    """Raise the refusal of a move that is not possible (the first few operators named)."""
    if plan.movable:
        return
    problems = plan.problems
    raise InvalidProgramError(
        f"the state of {where} cannot move to the {plan.runner} runner: " + "; ".join(problems[:3])
        + ("; ..." if len(problems) > 3 else ""),
        remedy=f"run 'flinkpy savepoint plan --runner {plan.runner} {where} JOB.py' for every operator; "
        "change or drop (-n with a new uid) what cannot move, or keep the job on the runner it runs on",
    )
