"""State an operator keeps in its own layout, read as keyed state when a snapshot is taken.

The heap backend keeps a state as ``{key group: {key: value}}``: what snapshots and rescaling
need. A hot path may prefer another layout, one dict of every key's value for the rolling
reduce, ``{slice end: {key: value}}`` for sliced windows, and keep it in the operator. It then
attaches a *view* to the backend
(:meth:`~flinkpy.state.heap.HeapKeyedStateBackend.attach_view`); at each snapshot the view's
``freeze()`` hands over the operator's containers, which the operator stops writing (it copies
one before its next write), and the mappings here lay them out by key group, on the snapshot's
thread when the snapshot is asynchronous.

>>> values = {"a": 1, "b": 2}
>>> groups = ByKeyGroup(values, {}, 128)
>>> sorted((kg, sorted(m.items())) for kg, m in groups.items()) == sorted(
...     (assign_to_key_group(k, 128), [(k, v)]) for k, v in values.items())
True
>>> slices = SlicesByKeyGroup({1000: {"a": 1}, 2000: {"a": 3}}, {}, 128)
>>> slices[assign_to_key_group("a", 128)]
{'a': {1000: 1, 2000: 3}}
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from flinkpy.state.key_groups import assign_to_key_group


class _Layout(Mapping):
    """``{key group: {key: value}}``, computed when first read."""

    def __init__(self, memo: dict, max_parallelism: int) -> None:
        self._memo = memo  # the task's key -> key group memo: only read here
        self._max_parallelism = max_parallelism
        self._groups: dict[int, dict] | None = None

    def _key_group(self, key: Any) -> int:
        kg = self._memo.get(key)
        return assign_to_key_group(key, self._max_parallelism) if kg is None else kg

    def _layout(self) -> dict[int, dict]:
        raise NotImplementedError

    def _get(self) -> dict[int, dict]:
        if self._groups is None:
            self._groups = self._layout()
        return self._groups

    def __getitem__(self, kg: int) -> dict:
        return self._get()[kg]

    def __iter__(self) -> Iterator[int]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


class ByKeyGroup(_Layout):
    """A frozen ``{key: value}`` dict as keyed state."""

    def __init__(self, values: dict, memo: dict, max_parallelism: int) -> None:
        super().__init__(memo, max_parallelism)
        self._values = values

    def _layout(self) -> dict[int, dict]:
        groups: dict[int, dict] = {}
        key_group = self._key_group
        for k, v in self._values.items():
            kg = key_group(k)
            m = groups.get(kg)
            if m is None:
                groups[kg] = {k: v}
            else:
                m[k] = v
        return groups


class SlicesByKeyGroup(_Layout):
    """Frozen ``{slice end: {key: value}}`` as keyed state whose value per key is
    ``{slice end: value}`` (the layout of :mod:`flinkpy.task.window_slicing`'s store path)."""

    def __init__(self, slices: dict[int, dict], memo: dict, max_parallelism: int) -> None:
        super().__init__(memo, max_parallelism)
        self._slices = slices

    def _layout(self) -> dict[int, dict]:
        per_key: dict = {}
        for se in sorted(self._slices):
            for k, v in self._slices[se].items():
                d = per_key.get(k)
                if d is None:
                    per_key[k] = {se: v}
                else:
                    d[se] = v
        return ByKeyGroup(per_key, self._memo, self._max_parallelism)._layout()
