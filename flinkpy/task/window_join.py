"""The runtime pieces of window joins and co-groups, built (as Flink builds them) on one window.

``a.join(b).where(k1).equal_to(k2).window(w).apply(f)`` is not an operator of its own: each
input's records are tagged with their side (:class:`TagInput`), the two tagged streams are
united and keyed by the key of each record's own side (:class:`UnionKey`), and an ordinary
window operator collects them; when a window fires, :class:`CoGroupWindow` splits its records by
side again and hands them to the user's function. So a window join's state, timers, triggers,
lateness and checkpoints are those of the window operator, and it runs wherever windows run.

>>> from flinkpy.common.functions import JoinFunction
>>> class Pair(JoinFunction):
...     def join(self, first, second):
...         return first + second
>>> tagged = [TagInput(0).map("a"), TagInput(1).map("x"), TagInput(0).map("b"), TagInput(1).map("y")]
>>> list(CoGroupWindow(Pair(), JOIN).apply("key", None, tagged))
['ax', 'ay', 'bx', 'by']
"""

from __future__ import annotations

import types
from collections.abc import Iterable
from typing import Any, Callable

from flinkpy.errors import InvalidProgramError

#: how the user's function is called when a window fires
JOIN = "join"  # a JoinFunction (or a function of two records): one output per pair
FLAT_JOIN = "flat_join"  # a FlatJoinFunction: an iterable per pair
CO_GROUP = "co_group"  # a CoGroupFunction: once per window and key, with both sides' records

FIRST, SECOND = 0, 1


class TagInput:
    """Tags a record with the input it came from: ``(side, record)``."""

    def __init__(self, side: int):
        self.side = side

    def map(self, value: Any) -> tuple[int, Any]:
        return (self.side, value)


class UnionKey:
    """Keys a tagged record by its own side's key selector: equal keys of both inputs meet."""

    def __init__(self, key1: Callable[[Any], Any], key2: Callable[[Any], Any]):
        self.key1 = key1
        self.key2 = key2

    def get_key(self, tagged: tuple[int, Any]) -> Any:
        side, value = tagged
        return self.key1(value) if side == FIRST else self.key2(value)


def _user_method(fn: Any, name: str) -> Callable:
    method = getattr(fn, name, None)
    if callable(method) and not isinstance(fn, types.FunctionType):
        return method  # type: ignore[no-any-return]
    if callable(fn):
        return fn  # type: ignore[no-any-return]
    raise InvalidProgramError(f"{type(fn).__name__} has no {name}() method")


class CoGroupWindow:
    """The window function (``apply(key, window, elements)``) of a window join or co-group: the
    window's tagged records, split by side in arrival order, go to the user's function."""

    def __init__(self, function: Any, kind: str):
        self.function = function
        self.kind = kind
        self._call = _user_method(function, "co_group" if kind == CO_GROUP else "join")

    def __getstate__(self) -> dict[str, Any]:
        return {"function": self.function, "kind": self.kind}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["function"], state["kind"])  # type: ignore[misc]

    def open(self, runtime_context: Any) -> None:
        opener = getattr(self.function, "open", None)
        if callable(opener) and not isinstance(self.function, types.FunctionType):
            opener(runtime_context)

    def close(self) -> None:
        closer = getattr(self.function, "close", None)
        if callable(closer) and not isinstance(self.function, types.FunctionType):
            closer()

    def apply(self, key: Any, window: Any, elements: Iterable[tuple[int, Any]]) -> Iterable[Any]:
        firsts: list = []
        seconds: list = []
        for side, value in elements:
            (firsts if side == FIRST else seconds).append(value)
        if self.kind == CO_GROUP:
            return self._call(firsts, seconds) or ()  # type: ignore[no-any-return]
        return self._pairs(firsts, seconds)

    def _pairs(self, firsts: list, seconds: list) -> Iterable[Any]:
        call, flat = self._call, self.kind == FLAT_JOIN
        for first in firsts:
            for second in seconds:
                if flat:
                    yield from call(first, second) or ()
                else:
                    yield call(first, second)
