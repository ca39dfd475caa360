"""Every ``>>>`` example in the flinkpy package runs and shows what its docstring says.

One test per module that has examples. They run as a user would type them: at a prompt, in a
module ``__main__`` (so classes and functions defined in an example are the user's code, not
flinkpy's: the Spark runner's time-mode choice, for one, tells the two apart), and with
an embedded cluster's printed job output going to this process's real standard output (doctest
replaces ``sys.stdout`` with an object that has no file descriptor to hand to the TaskManager).
Examples that run jobs start real embedded clusters; those that start ZooKeeper need the
distribution's package, which ``tests/run`` installs (like the high-availability tests).
"""

from __future__ import annotations

import contextlib
import doctest
import importlib
import pkgutil
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

import flinkpy
from flinkpy.program.context import ExecutionContext, execution_context

FLAGS = doctest.ELLIPSIS
#: modules whose examples are not run, with the reason; none today: each example that needs a
#: server starts a real one (an embedded cluster, ZooKeeper), and PySpark is in the test extra
NOT_RUN: dict[str, str] = {}


def _doctests() -> dict[str, list[doctest.DocTest]]:
    found: dict[str, list[doctest.DocTest]] = {}
    finder = doctest.DocTestFinder()
    for info in pkgutil.walk_packages(flinkpy.__path__, "flinkpy."):
        module = importlib.import_module(info.name)
        tests = [t for t in finder.find(module) if t.examples]
        if tests:
            found[info.name] = sorted(tests, key=lambda t: t.lineno or 0)
    return found


DOCTESTS = _doctests()


@contextlib.contextmanager
def prompt_namespace(module_globals: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The module's names in a fresh ``__main__`` module, installed as ``sys.modules["__main__"]``
    while its examples run, as at an interactive prompt (no ``__file__``)."""
    main = types.ModuleType("__main__")
    main.__dict__.update({k: v for k, v in module_globals.items() if k not in ("__file__", "__cached__")})
    main.__dict__.update(__name__="__main__", __spec__=None, __loader__=None, __package__=None)
    saved = sys.modules["__main__"]
    sys.modules["__main__"] = main
    try:
        yield main.__dict__
    finally:
        sys.modules["__main__"] = saved


@contextlib.contextmanager
def _restored(path: list[str]) -> Iterator[None]:
    try:
        yield
    finally:
        sys.path[:] = path


def test_the_examples_are_found() -> None:
    # a finder that found nothing would make every other test here pass vacuously
    examples = sum(len(t.examples) for tests in DOCTESTS.values() for t in tests)
    assert examples >= 300 and len(DOCTESTS) >= 60, (examples, len(DOCTESTS))
    for module in ("flinkpy.datastream.data_stream", "flinkpy.datastream.window_stream",
                   "flinkpy.datastream.stream_execution_environment", "flinkpy.connectors.drivers"):
        assert module in DOCTESTS


def test_the_api_classes_document_every_public_method_and_show_a_runnable_example() -> None:
    from flinkpy.datastream import AllWindowedStream, DataStream, KeyedStream, StreamExecutionEnvironment, WindowedStream

    for cls in (DataStream, KeyedStream, WindowedStream, AllWindowedStream, StreamExecutionEnvironment):
        assert ">>>" in (cls.__doc__ or ""), f"{cls.__name__} has no example"
        undocumented = [name for name, member in vars(cls).items()
                        if not name.startswith("_") and callable(getattr(member, "__func__", member))
                        and not getattr(member, "__doc__", None)]
        assert not undocumented, f"{cls.__name__}: {undocumented}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("module", sorted(DOCTESTS))
def test_examples_run(module: str) -> None:
    if module in NOT_RUN:
        pytest.skip(NOT_RUN[module])
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report: list[str] = []
    context = ExecutionContext(address=None, job_stdout=sys.__stdout__.fileno())
    saved_path = list(sys.path)  # an example may make a module importable (add_python_file)
    with execution_context(context), _restored(saved_path):
        for test in DOCTESTS[module]:
            with prompt_namespace(test.globs) as globs:
                runner.run(doctest.DocTest(test.examples, globs, test.name, test.filename, test.lineno, test.docstring),
                           out=report.append)
    if runner.failures:
        pytest.fail(f"{runner.failures} of {runner.tries} examples of {module} failed:\n" + "".join(report), pytrace=False)
