"""One conformance suite, two keyed state backends.

The fixture ``state_backend`` is parametrized over ``heap`` and ``rocksdb``: a test that uses it
runs once per backend. It yields a factory ``make(max_parallelism=128, key_group_range=None)``
that builds a backend of the parameter's kind (RocksDB working directories under the test's
tmp_path) and closes every backend it made at teardown.

Modules whose every test is a backend test use ``use_backend(state_backend)`` from an autouse
fixture and call :func:`new_backend` wherever they used to build a heap backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

BACKENDS = ("heap", "rocksdb")


def engine_backend(kind: str) -> Any:
    """The PyFlink-style backend object for ``env.set_state_backend`` of a parameter's kind."""
    from flinkpy.datastream.state_backend import EmbeddedRocksDBStateBackend, HashMapStateBackend

    return EmbeddedRocksDBStateBackend() if kind == "rocksdb" else HashMapStateBackend()


class BackendFactory:
    def __init__(self, kind: str, local_dir: Path) -> None:
        self.kind = kind
        self.local_dir = local_dir
        self.made: list[Any] = []

    def __call__(self, max_parallelism: int = 128, key_group_range: range | None = None) -> Any:
        kg_range = range(0, max_parallelism) if key_group_range is None else key_group_range
        if self.kind == "rocksdb":
            from flinkpy.state.rocksdb import RocksDBKeyedStateBackend

            b: Any = RocksDBKeyedStateBackend(max_parallelism, kg_range, local_dir=str(self.local_dir))
        else:
            from flinkpy.state.heap import HeapKeyedStateBackend

            b = HeapKeyedStateBackend(max_parallelism, kg_range)
        self.made.append(b)
        return b

    def close_all(self) -> None:
        for b in self.made:
            b.close()


_current: list[BackendFactory] = []


def new_backend(max_parallelism: int = 128, key_group_range: range | None = None) -> Any:
    """A backend of the kind the running test is parametrized with."""
    return _current[-1](max_parallelism, key_group_range)


def use_backend(factory: BackendFactory) -> None:
    _current.append(factory)


@pytest.fixture(params=BACKENDS)
def state_backend(request: pytest.FixtureRequest, tmp_path: Path):
    factory = BackendFactory(request.param, tmp_path / "rocksdb")
    yield factory
    if factory in _current:
        _current.remove(factory)
    factory.close_all()
