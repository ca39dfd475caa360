"""The I/O edges of :mod:`flinkpy.spark.state_move`: moving state into a Spark job
(:func:`move_in`: an engine snapshot's files read into the plan before its query starts) and out
of one (:func:`move_out`: a Spark savepoint given the engine's layout of its state).

Out of Spark, a stopped query's state is read back into the runners' common terms.

Source positions come from the offsets of the last committed micro-batch (each subtask's reader
state is inside a flinkpy data source's offset; a bounded source read whole in one micro-batch
has read everything once that batch committed, so its end positions are planned again). A keyed
reduce's running values are read from Spark's state store with Spark's state data source
(``spark.read.format("statestore")``), one row per Spark key group holding its pickled
``{key: running value}``; other keyed operators' states and timers are read the same way, one
state variable at a time, by the names Spark's operator metadata lists (``state-metadata``), and
decoded by :mod:`flinkpy.spark.keyed_move`. Whatever cannot be read so is returned as a refusal
naming the operator.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from flinkpy.spark import keyed_move, state_move
from flinkpy.errors import InvalidProgramError
from flinkpy.spark.keyed import BROADCAST_KINDS
from flinkpy.spark.state_move import Move, MoveDecision, MovedState, decode_positions, merge_group_tables, program_operators

log = logging.getLogger(__name__)


def _refused(p: Any, what: str, reason: str) -> MoveDecision:
    return MoveDecision(p.name, p.uid, p.operator_id, what, Move.REFUSED, reason)


def _whole_positions(step: Any) -> list[Any]:
    """The end positions of a bounded source read whole in its query's first micro-batch."""
    from flinkpy.spark.sources import SourceOffsets

    offsets = SourceOffsets(step.node.fn, index=step.index, parallelism=step.parallelism)
    end = offsets.plan(offsets.initial(), 1 << 62)
    return decode_positions(end) or []


def _binary(row: Any) -> bytes | None:
    """The first binary field of a (nested) state row: the pickled table."""
    if row is None:
        return None
    if isinstance(row, (bytes, bytearray)):
        return bytes(row)
    for value in row:
        found = _binary(value) if not isinstance(value, (int, float, str)) else None
        if found is not None:
            return found
    return None


def _group_tables(spark: Any, location: str, operator: int, level: Any, index: int = 0) -> list[bytes]:
    from flinkpy.spark.processors import KeyGroupReduce

    reader = spark.read.format("statestore").option("operatorId", operator)
    if not level.on_group_state:  # beside other keyed operators, its variable carries its prefix (processors._PrefixedHandle)
        reader = reader.option("stateVarName", (f"o{index}_" if level.routed else "") + KeyGroupReduce.STATE)
    rows = reader.load(location).select("value").collect()
    return [blob for blob in (_binary(r["value"]) for r in rows) if blob is not None]


class _Inert:
    """A state variable that holds nothing (see :class:`_Declarations`)."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


class _Declarations:
    """A processor handle that only takes note of the state variables a processor declares:
    Spark runs a processor's init() on the driver the same way to learn them."""

    #: what the processor asks of it is not run (SparkKeyedBackend warns about nothing here)
    noting = True

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: _Inert() if name.startswith("get") else []


def declared_kinds(spec: Any) -> tuple[dict[str, str], dict[str, int]]:
    """(the engine's kind of each state a keyed operator declares in open(), the time-to-live
    in ms of those that have one): what Spark's state variables alone do not tell (a reducing
    state is a value state there; a broadcast operator keeps its keyed states' tables as
    pickles)."""
    from flinkpy.spark.processors import make_processor

    processor = make_processor(spec)
    processor.init(_Declarations())
    backend = processor.backend  # None: a broadcast operator without keyed state
    return (dict(backend.kinds), dict(backend.ttl_states)) if backend is not None else ({}, {})


def state_variables(spark: Any, location: str, operator: int) -> dict[str, str]:
    """The state variables of the transformWithState operator ``operator`` in a checkpoint
    location, by name (their Spark types: ValueState, ListState, MapState, TimerState...), as
    Spark's operator metadata lists them."""
    rows = spark.read.format("state-metadata").load(location).collect()
    out: dict[str, str] = {}
    for row in rows:
        if int(row["operatorId"]) != operator:
            continue
        props = json.loads(row["operatorProperties"] or "{}")
        for var in props.get("stateVariables", []):
            out[var["stateName"]] = var.get("stateVariableType", "")
    return out


def _read_variable(spark: Any, location: str, operator: int, name: str, spark_type: str) -> list[tuple[bytes, Any]]:
    """(grouping key, payload) rows of one state variable (see keyed_move.from_spark)."""
    reader = spark.read.format("statestore").option("operatorId", operator).option("stateVarName", name)
    # a list whole in one row (list_value), in its order; a map one row per entry
    rows = reader.option("flattenCollectionTypes", str(spark_type != "ListState").lower()).load(location).collect()
    # a variable with Spark's state TTL nests each value beside its expiry: (value, ttlExpirationMs)
    if spark_type == "ListState":
        return [(bytes(r["key"][0]), [_binary(e) for e in (r["list_value"] or [])]) for r in rows]
    if spark_type == "MapState":
        by_key: dict[bytes, list] = {}
        for r in rows:
            by_key.setdefault(bytes(r["key"][0]), []).append((r["user_map_key"][0], _binary(r["user_map_value"])))
        if name.endswith(keyed_move.LATE_STATES):
            return [(k, entry) for k, entries in by_key.items() for entry in entries]
        return [(k, [(bytes(mk), mv) for mk, mv in entries]) for k, entries in by_key.items()]
    return [(bytes(r["key"][0]), _binary(r["value"])) for r in rows if r["value"] is not None]


def _keyed_states(spark: Any, location: str, operator: int, level: Any, index: int, spec: Any,
                  variables: dict[str, str]) -> keyed_move.KeyedStates:
    """A process function's or window's state read back from Spark's state store."""
    kinds, ttl = declared_kinds(spec)
    prefix = f"o{index}_" if level.routed else ""
    values = {}
    for var, spark_type in variables.items():
        if not var.startswith(prefix) or spark_type not in ("ValueState", "ListState", "MapState"):
            continue
        values[var[len(prefix):]] = _read_variable(spark, location, operator, var, spark_type)
    return keyed_move.from_spark(kinds, values, prefix=spec.prefix, ttl=ttl)


def _broadcast_states(spark: Any, location: str, operator: int, level: Any, index: int, spec: Any,
                      variables: dict[str, str]) -> tuple[keyed_move.KeyedStates, dict[str, dict[Any, Any]]]:
    """A broadcast operator's keyed state and broadcast states read back from its two Spark map
    states (:mod:`flinkpy.spark.broadcast_move`)."""
    from flinkpy.spark import broadcast_move

    kinds, ttl = declared_kinds(spec)
    if ttl:
        raise ValueError(f"its keyed states {sorted(ttl)} have a time-to-live, which a broadcast operator's keyed state does not "
                         "move with yet")
    prefix = f"o{index}_" if level.routed else ""

    def entries(name: str) -> list[tuple[Any, bytes]]:
        if prefix + name not in variables:
            return []
        rows = (spark.read.format("statestore").option("operatorId", operator).option("stateVarName", prefix + name)
                .option("flattenCollectionTypes", "true").load(location).collect())
        return [(tuple(r["user_map_key"]), bytes(r["user_map_value"][0])) for r in rows]

    keyed = [(name, kg, blob) for (name, kg), blob in entries(broadcast_move.KEYED_CELLS)]
    broadcast = [(name, bytes(key), value) for (name, key), value in entries(broadcast_move.BROADCAST_CELLS)]
    return broadcast_move.from_spark(keyed, broadcast, kinds)


def read_moved_state(spark: Any, plan: Any, location: str, spark_doc: dict[str, Any]) -> tuple[dict[str, MovedState], list[MoveDecision]]:
    """(moved state by engine operator id, refusals) of the stopped query at ``location``;
    ``spark_doc``: the savepoint's "spark" section (batch id and source offsets)."""
    program = {p.operator_id: p for p in program_operators(plan)}
    from flinkpy.graph.job_graph import operator_ids
    from flinkpy.spark.keyed import by_key_group

    ids = operator_ids(plan.graph)
    states: dict[str, MovedState] = {}
    refused: list[MoveDecision] = []
    committed = spark_doc.get("batch_id", -1) >= 0
    offsets = spark_doc.get("source_offsets") or []
    for branch in plan.branches:
        step = branch[0].payload
        p = program[ids[step.node.id]]
        if not committed:
            continue
        saved = offsets[step.index] if step.index < len(offsets) else None
        if not p.restorable_source:
            refused.append(_refused(p, "source positions", "its Spark offsets are not reader positions the engine can restore"))
            continue
        positions = decode_positions(saved)
        if positions is None:
            positions = _whole_positions(step)
        try:
            json.dumps(positions)
        except (TypeError, ValueError):
            refused.append(_refused(p, "source positions", "its reader positions are not JSON, which the engine's _metadata keeps them in"))
            continue
        states[p.operator_id] = MovedState(p.operator_id, source_positions=[x for x in positions if x is not None])
    keyed = [s for s in plan.stages if s.kind == "keyed"]
    for operator, step in enumerate(keyed):
        level = step.payload
        variables: dict[str, str] | None = None  # Spark's operator metadata, read once per keyed step
        for index, (node, spec) in enumerate(zip(step.operators, level.specs)):
            p = program[ids[node.id]]
            if committed and variables is None and (spec.kind in BROADCAST_KINDS or p.keyed_state_moves):
                variables = state_variables(spark, location, operator)
            if spec.kind in BROADCAST_KINDS:
                try:
                    keyed_states, broadcast = (_broadcast_states(spark, location, operator, level, index, spec, variables or {}) if committed
                                               else (keyed_move.KeyedStates(), {}))
                except ValueError as e:
                    refused.append(_refused(p, "keyed state", str(e)))
                    continue
                states[p.operator_id] = MovedState(p.operator_id, keyed=keyed_states if p.keyed_state_moves else None, broadcast=broadcast)
                continue
            if p.keyed_state_moves:
                try:
                    keyed_states = _keyed_states(spark, location, operator, level, index, spec, variables or {}) if committed else keyed_move.KeyedStates()
                    if p.sliced_window is not None:  # the engine's restore converts it: refused now where it could not
                        from flinkpy.task.window_layouts import general_to_sliced

                        general_to_sliced(keyed_move.to_engine(keyed_states, plan.max_parallelism), p.sliced_window, plan.max_parallelism)
                except ValueError as e:
                    refused.append(_refused(p, "keyed state", str(e)))
                    continue
                except InvalidProgramError as e:
                    refused.append(_refused(p, "keyed state", e.message))
                    continue
                states[p.operator_id] = MovedState(p.operator_id, keyed=keyed_states)
                continue
            if not by_key_group(spec):
                refused.append(_refused(p, "keyed state", state_move.keyed_refusal(spec.kind, "its keyed state", "the engine")))
                continue
            values = merge_group_tables(_group_tables(spark, location, operator, level, index)) if committed else {}
            states[p.operator_id] = MovedState(p.operator_id, running_values=values)
    return states, refused


def move_in(plan: Any, directory: str, doc: dict[str, Any], *, allow_non_restored_state: bool) -> list[str]:
    """Restore an engine snapshot into ``plan`` before its query first starts (refused, naming
    the operators, when some state cannot move). Returns the operator ids whose state moved."""
    from flinkpy.checkpoint.analysis import StateFileReader
    from flinkpy.checkpoint.storage import CheckpointStorage

    program = state_move.program_operators(plan)
    state_move.refuse(state_move.plan_move(doc, program, runner=state_move.SPARK, allow_non_restored_state=allow_non_restored_state),
                      where=directory)
    reader = StateFileReader(CheckpointStorage(directory), directory, trusted=True)
    states = state_move.engine_states(doc, reader.load, [p.operator_id for p in program if p.keyed_state_moves],
                                      sliced_windows={p.operator_id: p.sliced_window for p in program if p.sliced_window is not None},
                                      max_parallelism=plan.max_parallelism)
    # the files' own TTLs (a snapshot older than the TTLs in its `_metadata` summary is checked here)
    state_move.refuse(state_move.MovePlan(state_move.SPARK, state_move.ttl_refusals(program, states)), where=directory)
    state_move.apply_moved(plan, states)
    state_move.settle_sinks(state_move.sinks_of(plan), states)
    return sorted(states)


def move_out(spark: Any, plan: Any, location: str, doc: dict[str, Any], url: str) -> None:
    """Add the engine's layout to a Spark savepoint being written at ``url`` (see
    :mod:`flinkpy.spark.state_move`): its `_metadata` operators become the engine's, or, where
    some state cannot be converted, stay Spark's (the engine then refuses it) with the reasons."""
    from flinkpy.checkpoint.storage import CheckpointStorage

    storage = CheckpointStorage(url)
    try:
        states, refused = read_moved_state(spark, plan, location, doc["spark"])
    except Exception as e:  # noqa: BLE001 - the Spark savepoint stands; only the engine's layout is missing
        log.warning("savepoint %s: the engine's layout of its state could not be written: %s: %s", url, type(e).__name__, e)
        states, refused = {}, [state_move.MoveDecision("Spark state store", None, "spark-state", "Spark's state", state_move.Move.REFUSED,
                                                       f"it could not be read back for the engine: {type(e).__name__}: {e}")]
    doc["moved"] = {"runner": state_move.ENGINE, "refused": [r.to_json() for r in refused]}
    if refused:
        return
    program = state_move.program_operators(plan)
    doc["operators"] = state_move.engine_operators(program, states, max_parallelism=plan.max_parallelism,
                                                   write=lambda name, data: storage.write_state_in(url, name, data))
    doc["max_parallelism"] = plan.max_parallelism
