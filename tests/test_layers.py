"""flinkpy's layers: every import points down, no two parts import each other, none imports the CLI.

The units are flinkpy's subpackages (``flinkpy/state/``, ``flinkpy/task/``, ...) and its root
modules (``config.py``, ``errors.py``, ``processes.py``; ``flinkpy/__init__.py`` is the unit
``flinkpy``). Every import counts, wherever it stands: at the top of a module, inside a function
(where a cycle likes to hide because it works at run time), under ``if TYPE_CHECKING``, and a
module named in a string for a later import (``"flinkpy.x:Name"`` in a catalog, the literal
argument of ``importlib.import_module``). Each module is parsed with :mod:`ast`, nothing is
imported, so the check takes well under a second of CPU.

The layers, bottom to top (:data:`LAYERS`); a unit may import any unit of a lower layer and none
of its own layer or above:

1. ``errors`` (the one exception hierarchy), ``processes`` (process identity), ``signals`` (stop
   signals noted by the handler, acted on by the process), ``clock`` (the one ``now_ms``),
   ``units`` (the one duration and memory-size parser), ``logfiles`` (a process's log files,
   rotated by size, read from the end), ``files`` (writing a local file atomically): what
   everything may use; then ``unsupported`` (the registry of PyFlink names flinkpy lacks, and
   its import hook) and ``flinkpy`` (the version; it installs that hook on first import).
2. ``config`` (the YAML schema and its parsers), ``protocol`` (the typed, versioned messages
   and deployment descriptors that JobManager, TaskManager and tasks exchange) and ``addresses``
   (where each endpoint binds and what it advertises, from Flink's address keys: pure).
3. ``common``: the definitions user code and the runtime share, as Flink keeps them in
   flink-core: types, time, serialization, configuration objects, and the user-function,
   state-descriptor and window definitions (``flinkpy.datastream.functions``/``state``/``window``
   re-export them under PyFlink's paths); and ``program``: a job program's execution context,
   its Python files and running its file, which the Spark runner, the client and the API share;
   and ``metrics``: user metric groups, Flink's metric names, the JobManager's metric store.
4. The engine's parts that know nothing of each other: ``network`` (framing, channels, credit,
   the REST transport every process that talks to a JobManager uses, and the REST endpoint
   with no routes that the JobManager and a Spark driver serve),
   ``faults`` (pure fault planning), ``graph`` (StreamGraph -> JobGraph), ``state`` (key groups,
   keyed state backends).
5. ``checkpoint`` (storage, ``_metadata`` and snapshot analysis, over state), ``connectors``
   (sources and sinks), ``ha`` (HA services and the ZooKeeper test server).
6. ``task``: one subtask's process, running the operator chain.
7. ``taskmanager`` and ``jobmanager``: the engine's two kinds of processes; and
   ``state_processor``: reading and rewriting snapshots offline (over checkpoint and state).
8. ``cluster``: starting, finding and stopping the processes of a local (or HA) cluster.
9. ``spark``: the Spark runner, a runner beside the engine; it reuses the engine's operators
   (``task``), the restart strategies (``common``), the REST endpoint (``network``) and a
   cluster's home.
10. ``client``: the one way to drive flinkpy, over both runners (submit, savepoints, analysis).
11. ``datastream``: the user's API; ``execute()`` hands the job to the client.
12. ``benchmarks``: measurements over everything; ``testing``: the harness that runs user
    functions on the engine's operators in a test (it builds their graph with ``datastream``).

``commands/`` (the CLI) stands on top of all of it: flinkpy never imports it.

A new subpackage or root module fails this test until it is given its place in :data:`LAYERS`.
An import that has to point up is a design question, not an exception to list: move the shared
definition down, or let the upper layer register a hook with the lower one.

:data:`PENDING` lists the upward imports that are being removed in parallel work of issue #18
(each with the fix); the test fails when one of them is gone, so that the list only shrinks.
"""

from __future__ import annotations

import ast
import collections
import functools
import subprocess
import sys
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "flinkpy"

#: bottom to top; a unit imports only units of lower layers
LAYERS: list[tuple[str, ...]] = [
    ("errors", "processes", "signals", "clock", "units", "logfiles", "files"),
    ("unsupported",),
    ("flinkpy",),
    ("config", "protocol", "addresses"),
    ("common", "program", "metrics"),
    ("network", "faults", "graph", "state", "formats"),
    ("checkpoint", "connectors", "ha"),
    ("task",),
    ("taskmanager", "jobmanager", "state_processor"),
    ("cluster",),
    ("spark",),
    ("client",),
    ("datastream",),
    ("benchmarks", "testing"),
]

#: (importing module, imported module) pairs against the layers, each being removed by other work
#: of issue #18; remove an entry with the import it names
PENDING: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. flinkpy.task.chain
    target: str  # the imported module, e.g. flinkpy.datastream.functions
    path: Path
    line: int

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line} imports {self.target}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def unit_of(module: str) -> str | None:
    """The unit a flinkpy module belongs to; None outside flinkpy."""
    parts = module.split(".")
    if parts[0] != "flinkpy":
        return None
    return parts[1] if len(parts) > 1 else "flinkpy"


def is_unit(name: str) -> bool:
    return (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file()


#: a module named in a string, "flinkpy.x.y:Name" (a catalog or registry entry, imported later)
REFERENCE = re.compile(r"^(flinkpy(?:\.[A-Za-z_]\w*)+):[A-Za-z_]\w*$")


def named_module(node: ast.AST) -> str | None:
    """The flinkpy module a string names for a later import: ``"flinkpy.x:Name"``, or the literal
    argument of ``importlib.import_module`` / ``__import__``. Importing by name is still importing."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and (m := REFERENCE.match(node.value)):
        return m.group(1)
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        arg = node.args[0].value
        if name in ("import_module", "__import__") and isinstance(arg, str) and arg.split(".")[0] in ("flinkpy", "commands"):
            return arg
    return None


def imports_of(path: Path) -> list[Import]:
    """Every import in the module at ``path``, with its target resolved to a module name."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            # `from flinkpy import state` imports the unit state, not flinkpy's __init__
            targets = [f"{base}.{alias.name}" if base == "flinkpy" and is_unit(alias.name) else base for alias in node.names]
        elif (named := named_module(node)) is not None:
            targets = [named]
        found += [Import(module, target, path, node.lineno) for target in dict.fromkeys(targets)]
    return found


@functools.cache  # parsed once for the module's tests
def all_imports() -> list[Import]:
    return [imp for path in sorted(PACKAGE.rglob("*.py")) for imp in imports_of(path)]


def unit_edges(imports: list[Import]) -> dict[tuple[str, str], list[Import]]:
    """(importing unit, imported unit) -> the imports that make the edge."""
    edges: dict[tuple[str, str], list[Import]] = collections.defaultdict(list)
    for imp in imports:
        src, dst = unit_of(imp.module), unit_of(imp.target)
        if src and dst and src != dst:
            edges[(src, dst)].append(imp)
    return edges


def level_of() -> dict[str, int]:
    return {unit: i for i, layer in enumerate(LAYERS) for unit in layer}


def shortest_cycle(edges: dict[tuple[str, str], list[Import]]) -> list[str] | None:
    """The shortest cycle of units (first unit repeated at the end), or None."""
    graph: dict[str, set[str]] = collections.defaultdict(set)
    for src, dst in edges:
        graph[src].add(dst)
    best: list[str] | None = None
    for start in sorted(graph):
        parent: dict[str, str] = {start: start}
        queue = collections.deque([start])
        while queue:
            node = queue.popleft()
            if start in graph[node]:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                cycle = path[::-1] + [start]
                if best is None or len(cycle) < len(best):
                    best = cycle
                break
            for nxt in sorted(graph[node]):
                if nxt not in parent:
                    parent[nxt] = node
                    queue.append(nxt)
    return best


def chain_text(cycle: list[str], edges: dict[tuple[str, str], list[Import]]) -> str:
    return "\n".join(f"  {a} -> {b}: {edges[(a, b)][0].where}" for a, b in zip(cycle, cycle[1:]))


def test_every_unit_has_a_layer() -> None:
    units = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    units |= {p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py"} | {"flinkpy"}
    placed = level_of()
    assert not units - set(placed), f"give these units a place in LAYERS (tests/test_layers.py): {sorted(units - set(placed))}"
    assert not set(placed) - units, f"LAYERS names units that do not exist: {sorted(set(placed) - units)}"


def test_flinkpy_never_imports_commands() -> None:
    bad = [imp.where for imp in all_imports() if imp.target.split(".")[0] == "commands"]
    assert not bad, "flinkpy imports the CLI (commands/ stands on flinkpy, never the other way):\n" + "\n".join(bad)


def test_imports_point_down() -> None:
    level = level_of()
    against = []
    for (src, dst), imps in sorted(unit_edges(all_imports()).items()):
        if src in level and dst in level and level[dst] >= level[src]:
            against += [imp for imp in imps if (imp.module, imp.target) not in PENDING]
    lines = [
        f"  {imp.where}  ({unit_of(imp.module)} is in layer {level[unit_of(imp.module)] + 1}, "  # type: ignore[index]
        f"{unit_of(imp.target)} in layer {level[unit_of(imp.target)] + 1})"  # type: ignore[index]
        for imp in against
    ]
    assert not lines, "imports against the layer order (see LAYERS in tests/test_layers.py):\n" + "\n".join(lines)


def test_no_import_cycles() -> None:
    edges = unit_edges([imp for imp in all_imports() if (imp.module, imp.target) not in PENDING])
    cycle = shortest_cycle(edges)
    assert cycle is None, "an import cycle between flinkpy's units:\n" + chain_text(cycle, edges)  # type: ignore[arg-type]


def test_pending_imports_still_exist() -> None:
    """An entry of PENDING whose import is gone must leave the list (it only shrinks)."""
    present = {(imp.module, imp.target) for imp in all_imports()}
    gone = sorted(PENDING - present)
    assert not gone, "remove these from PENDING in tests/test_layers.py, their imports are gone:\n" + "\n".join(f"  {m} -> {t}" for m, t in gone)


_IMPORT_EACH = """
import importlib, sys, traceback
failed = []
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "flinkpy" or m.startswith("flinkpy.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception:
        failed.append(name + ": " + traceback.format_exc().strip().splitlines()[-1])
print("\\n".join(failed))
"""


@pytest.mark.timeout(120)
def test_every_module_imports_first() -> None:
    """Each module imports when it is the first of flinkpy's to be imported, as in a Spark
    executor or a task process unpickling a class by reference: a cycle inside a unit (two
    modules of ``common`` importing each other at their tops) passes the unit checks above but
    breaks there, depending on which module comes first. One interpreter; flinkpy's modules are
    forgotten before each import, third-party ones stay loaded."""
    names = sorted(module_name(p) for p in PACKAGE.rglob("*.py") if p.name != "__main__.py")
    done = subprocess.run([sys.executable, "-c", _IMPORT_EACH, *names], capture_output=True, text=True, timeout=110, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not done.stdout.strip(), "modules that fail to import first:\n" + done.stdout
