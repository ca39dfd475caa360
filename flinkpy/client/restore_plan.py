"""Restoring from a savepoint, decided before anything runs: finding snapshots and dry-run plans.

``find_snapshots`` walks a directory (any fsspec URL) for checkpoints and savepoints — every
directory holding a ``_metadata`` a few levels down (:mod:`flinkpy.client.latest` picks the
one ``flinkpy run --from-latest`` restores). ``plan_restore`` compares a
program's plan with a savepoint's ``_metadata`` without a cluster: which operators get their
state back (matched by operator id: the uid, or the generated id), which state would be left
over (refused unless non-restored state is allowed), which operators start empty, how
parallelism changes and which old subtasks' key groups each new subtask reads.

>>> ranges = _key_group_sources(128, [(0, [0, 63]), (1, [64, 127])], 3)
>>> [(r["subtask"], r["key_groups"], [f["subtask"] for f in r["from"]]) for r in ranges]
[(0, [0, 42], [0]), (1, [43, 85], [0, 1]), (2, [86, 127], [1])]
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

from flinkpy.checkpoint.metadata import METADATA_FILE, CorruptCheckpointError
from flinkpy.checkpoint.storage import CheckpointStorage
from flinkpy.errors import NotFoundError, UsageError
from flinkpy.connectors.kafka_splits import split_plan
from flinkpy.state.key_groups import key_group_range_for_operator

#: How deep below a directory ``find_snapshots`` looks for ``_metadata`` by default:
#: ``<dir>/savepoint-x/_metadata`` is 2 levels, ``<dir>/<job>/chk-7/_metadata`` is 3.
DEFAULT_DEPTH = 4


@dataclass(frozen=True)
class Snapshot:
    """A directory holding ``_metadata``: its URL and the parsed document (None when it is corrupt)."""

    path: str
    metadata: dict[str, Any] | None
    problem: str | None = None

    @property
    def kind(self) -> str:
        return self.metadata["kind"] if self.metadata else "?"



def missing_uid_warning(name: str, operator_id: str) -> str:
    """The one wording of "state matched without a uid", for `savepoint plan` and `run -s`.

    >>> missing_uid_warning("running sums", "ab12")
    "operator 'running sums' has no uid: its state was matched by generated id ab12, which changes when the program upstream of it changes (set .uid(...) on stateful operators)"
    """
    return (f"operator {name!r} has no uid: its state was matched by generated id {operator_id}, which changes "
            "when the program upstream of it changes (set .uid(...) on stateful operators)")

def _url(fs: Any, path: str, base_url: str) -> str:
    """The URL of ``path`` (a file system path found under ``base_url``) in the base's own spelling."""
    protocol = base_url.split("://", 1)[0] if "://" in base_url else None
    if protocol is None:
        return path
    return fs.unstrip_protocol(path) if protocol != "file" else f"file://{path}"


def find_snapshots(directory: str, *, max_depth: int = DEFAULT_DEPTH) -> list[Snapshot]:
    """Every checkpoint or savepoint under ``directory`` (itself included), sorted by path.

    Raises ``NotFoundError`` when ``directory`` does not exist. A `_metadata` that cannot be
    read is listed with its problem rather than skipped.
    """
    storage = CheckpointStorage(directory)
    fs, root = storage.filesystem(directory)
    if not fs.exists(root):
        raise NotFoundError(f"no directory {directory}", remedy="pass a directory that holds checkpoints or savepoints")
    if fs.isfile(root):
        found = [root] if posixpath.basename(root) == METADATA_FILE else []
    else:
        found = [p for p in fs.find(root, maxdepth=max_depth) if posixpath.basename(p) == METADATA_FILE]
    out = []
    for meta_path in sorted(found):
        dir_url = _url(fs, posixpath.dirname(meta_path), directory)
        try:
            out.append(Snapshot(dir_url, storage.read_metadata(dir_url)))
        except CorruptCheckpointError as exc:
            out.append(Snapshot(dir_url, None, exc.problem))
        except NotFoundError:
            continue  # deleted while we looked
    return out


# --------------------------------------------------------------------------- the dry run


def _key_group_sources(max_parallelism: int, old: list[tuple[int, list[int]]], new_parallelism: int) -> list[dict[str, Any]]:
    """For each new subtask: its key-group range and the old subtasks (with the overlap) it reads."""
    result = []
    for i in range(new_parallelism):
        mine = key_group_range_for_operator(max_parallelism, new_parallelism, i)
        sources = []
        for old_subtask, (start, end) in old:
            lo, hi = max(start, mine.start), min(end, mine.stop - 1)
            if lo <= hi:
                sources.append({"subtask": old_subtask, "key_groups": [lo, hi]})
        result.append({"subtask": i, "key_groups": [mine.start, mine.stop - 1] if len(mine) else None, "from": sources})
    return result


def _program_operators(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The program's operators, one entry each, from the plan JSON of ``plan_program``."""
    ops = []
    for node in plan.get("nodes", []):
        names = node.get("operators") or [node.get("contents", "?")]
        uids = node.get("uids") or [None] * len(names)
        ids = node.get("operator_ids")
        for pos, name in enumerate(names):
            uid = uids[pos] if pos < len(uids) else None
            op_id = ids[pos] if ids and pos < len(ids) else uid
            ops.append(
                {
                    "operator_id": op_id,
                    "uid": uid,
                    "name": name,
                    "vertex_id": node.get("id"),
                    "parallelism": node.get("parallelism"),
                    "max_parallelism": node.get("max_parallelism"),
                }
            )
    return ops


def _has_state(op: dict[str, Any]) -> bool:
    return any(s.get("keyed_state") or s.get("operator_state") or s.get("source_offsets") is not None for s in op["subtasks"])


def _ttl_unknown(op: dict[str, Any]) -> list[str]:
    """The keyed states of ``op`` whose time-to-live its snapshot could not record (moved from Spark)."""
    return sorted({name for s in op["subtasks"] for name, entry in ((s.get("keyed_state") or {}).get("states") or {}).items()
                   if isinstance(entry, dict) and entry.get("ttl_unknown")})


def ttl_unknown_warning(name: str, states: list[str]) -> str:
    """What a restore plan says of states Spark kept without a record of their time-to-live.

    >>> ttl_unknown_warning("window", ["fired"])
    "operator 'window': Spark could not carry the time-to-live of its state 'fired' (declared after open()): the restore fails if the job asks for it with a StateTtlConfig"
    """
    listed = ", ".join(map(repr, states))
    return (f"operator {name!r}: Spark could not carry the time-to-live of its state{'s' if len(states) > 1 else ''} {listed} "
            "(declared after open()): the restore fails if the job asks for "
            f"{'them' if len(states) > 1 else 'it'} with a StateTtlConfig")


def _state_names(op: dict[str, Any]) -> list[str]:
    names: set[str] = set()
    for s in op["subtasks"]:
        for kind in ("keyed_state", "operator_state"):
            if s.get(kind):
                names.update(s[kind].get("states", {}))
    return sorted(names)


def compare(metadata: dict[str, Any], plan: dict[str, Any], *, allow_non_restored_state: bool = False) -> dict[str, Any]:
    """The restore plan of a program's ``plan`` against a snapshot's ``metadata`` (both JSON)."""
    old_by_id = {op["operator_id"]: op for op in metadata["operators"]}
    new_ops = _program_operators(plan)
    claimed: set[str] = set()
    operators: list[dict[str, Any]] = []
    warnings: list[str] = []
    problems: list[str] = []
    for new in new_ops:
        label = new["name"] + (f" [uid {new['uid']}]" if new["uid"] else "")
        entry: dict[str, Any] = {
            "operator_id": new["operator_id"],
            "uid": new["uid"],
            "name": new["name"],
            "vertex_id": new["vertex_id"],
            "new_parallelism": new["parallelism"],
            "new_max_parallelism": new["max_parallelism"],
        }
        old = old_by_id.get(new["operator_id"]) if new["operator_id"] else None
        if old is None:
            entry.update(status="empty", matched_by=None, old_parallelism=None, old_max_parallelism=None, states=[], key_groups=None)
            if new["operator_id"] is None:
                warnings.append(f"operator {label} has a generated id this flinkpy cannot compute offline; it is treated as new")
            operators.append(entry)
            continue
        claimed.add(old["operator_id"])
        keyed = sorted(
            (s["subtask"], s["keyed_state"]["key_groups"]) for s in old["subtasks"] if s.get("keyed_state")
        )
        entry.update(
            status="restored" if _has_state(old) else "matched (no state)",
            matched_by="uid" if new["uid"] else "generated id",
            old_parallelism=old["parallelism"],
            old_max_parallelism=old["max_parallelism"],
            states=_state_names(old),
            key_groups=None,
        )
        if not new["uid"] and _has_state(old):
            warnings.append(missing_uid_warning(new["name"], new["operator_id"]))
        if unknown := _ttl_unknown(old):
            warnings.append(ttl_unknown_warning(new["name"], unknown))
        max_ok = old["max_parallelism"] == new["max_parallelism"]
        entry["max_parallelism_matches"] = max_ok
        if keyed and not max_ok:
            problems.append(
                f"operator {label} has keyed state for max parallelism {old['max_parallelism']} but the program "
                f"sets {new['max_parallelism']}: the key groups cannot be split"
            )
        elif keyed:
            try:
                entry["key_groups"] = _key_group_sources(new["max_parallelism"], keyed, new["parallelism"])
            except UsageError as exc:
                problems.append(f"operator {label}: {exc.message}")
        splits = split_plan([s.get("source_offsets") for s in old["subtasks"]], new["parallelism"])
        if splits is not None:  # a Kafka source: the partitions each new subtask resumes
            entry["splits"] = splits
        operators.append(entry)
    dropped = []
    for op in metadata["operators"]:
        if op["operator_id"] in claimed or not _has_state(op):
            continue
        dropped.append(
            {"operator_id": op["operator_id"], "uid": op.get("uid"), "name": op.get("name"), "parallelism": op["parallelism"], "states": _state_names(op)}
        )
    if dropped:
        names = ", ".join(d["name"] + (f" [uid {d['uid']}]" if d["uid"] else f" [id {d['operator_id']}]") for d in dropped)
        if allow_non_restored_state:
            warnings.append(f"state of {len(dropped)} operator(s) the program no longer has will be dropped: {names}")
        else:
            problems.append(
                f"the savepoint has state for {len(dropped)} operator(s) the program does not have: {names} "
                "(allow dropping it with -n/--allowNonRestoredState)"
            )
    return {
        "operators": operators,
        "dropped": dropped,
        "warnings": warnings,
        "problems": problems,
        "allow_non_restored_state": allow_non_restored_state,
        "restorable": not problems,
    }


def check_code(savepoint_path: str, job_path: str, *, timeout_s: float | None = None) -> dict[str, Any]:
    """Decode every state value of the snapshot with the classes of the program ``job_path``, in
    a process of its own (``python -m flinkpy.checkpoint.code_check``, the program's directory
    first on its ``sys.path``, as in a task), so the program's modules are never imported here.

    Returns that module's document: ``{"path", "values_checked", "failures"}``. Raises the
    error the check met (``NotFoundError``, ``CorruptCheckpointError``, ...: the same exit
    codes) when it could not check, ``OperationTimeoutError`` after ``timeout_s``.
    """
    import json
    import subprocess
    import sys
    from pathlib import Path

    from flinkpy import errors

    job_dir = str(Path(job_path).resolve().parent)
    cmd = [sys.executable, "-m", "flinkpy.checkpoint.code_check", savepoint_path, "--sys-path", job_dir]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise errors.OperationTimeoutError(f"decoding the state of {savepoint_path} took more than {timeout_s} s") from None
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        raise errors.InvalidProgramError(
            f"decoding the state of {savepoint_path} with the classes of {job_path} failed (exit {done.returncode})",
            remedy="run with --debug for its output", details=done.stderr) from None
    if "error" in doc:
        err = doc["error"]
        cls = getattr(errors, err["kind"], None)
        if isinstance(cls, type) and issubclass(cls, errors.FlinkpyError) and cls.exit_code == err["exit_code"]:
            raise cls(err["message"], remedy=err["remedy"])
        exc = errors.FlinkpyError(err["message"], remedy=err["remedy"])  # e.g. a damaged file (exit 9)
        exc.exit_code = err["exit_code"]
        raise exc
    return doc


def plan_restore(
    savepoint_path: str,
    job_path: str,
    args: list[str],
    *,
    parallelism: int | None = None,
    allow_non_restored_state: bool = False,
    code_check: bool = False,
) -> dict[str, Any]:
    """The dry-run plan of restoring ``job_path`` (run with ``args``) from ``savepoint_path``.

    Reads the savepoint's `_metadata` (``NotFoundError`` / ``CorruptCheckpointError`` when it
    is missing or bad), checks that every state file it references is there with the size and
    sha256 it records (``damaged_files``: a plan that says "would succeed" must not meet a
    missing file at restore), and runs the program up to execute() to get its plan; no cluster.
    With ``code_check``, also :func:`check_code`: ``"code_check"`` holds its document, and
    each failure is a problem that makes the plan not restorable.
    """
    from flinkpy.client.program import plan_program

    storage = CheckpointStorage(savepoint_path)
    dir_url, _ = storage.locate(savepoint_path)
    metadata = storage.read_metadata(savepoint_path)
    files = storage.verify(dir_url)
    if files.metadata is None:  # changed between the two reads: report it as the first read would
        raise CorruptCheckpointError(files.problems[0].path, files.problems[0].problem)
    plan = plan_program(job_path, list(args), parallelism=parallelism)
    doc = compare(metadata, plan, allow_non_restored_state=allow_non_restored_state)
    damaged = [p.to_dict() for p in files.problems]
    if damaged:
        doc["problems"] = [f"{p['path']}: {p['problem']}" for p in damaged] + doc["problems"]
        doc["restorable"] = False
    doc["code_check"] = None
    if code_check and not damaged:
        doc["code_check"] = checked = check_code(dir_url, job_path)
        for f in checked["failures"]:
            label = f["operator"] + (f" [uid {f['uid']}]" if f["uid"] else f" [id {f['operator_id']}]")
            doc["problems"].append(f"{f['keys']} value(s) of state {f['state']!r} of operator {label} would not restore "
                                   f"with the program's classes: {f['error']} (e.g. {', '.join(f['examples'])})")
        doc["restorable"] = doc["restorable"] and not checked["failures"]
    return {
        "files_checked": files.files_checked,
        "bytes_checked": files.bytes_checked,
        "damaged_files": damaged,
        "savepoint": dir_url,
        "kind": metadata["kind"],
        "job_id": metadata["job_id"],
        "job_name": metadata["job_name"],
        "checkpoint_id": metadata["checkpoint_id"],
        "program": job_path,
        "program_name": plan.get("name"),
        **doc,
    }
