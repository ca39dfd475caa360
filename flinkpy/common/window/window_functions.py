"""The functions a window hands its contents to when it fires: ``apply`` over all of them
(:class:`WindowFunction`) or ``process`` with a context of the window, clocks and state
(:class:`ProcessWindowFunction`), keyed or not."""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import Any, Generic

from flinkpy.common.functions import IN, KEY, OUT, W2, Function, W
from flinkpy.common.window.windows import Window


class WindowFunction(Function, Generic[IN, OUT, KEY, W]):
    """``apply(key, window, inputs)`` returns (or yields) the outputs of one window firing."""

    @abc.abstractmethod
    def apply(self, key: Any, window: Window, inputs: Iterable[Any]) -> Iterable[Any]:
        ...


class AllWindowFunction(Function, Generic[IN, OUT, W]):
    """The non-keyed ``apply(window, inputs)``."""

    @abc.abstractmethod
    def apply(self, window: Window, inputs: Iterable[Any]) -> Iterable[Any]:
        ...


class ProcessWindowFunction(Function, Generic[IN, OUT, KEY, W]):
    """``process(key, context, elements)`` yields the outputs of one window firing; the context
    gives the window, the clocks, and per-window and per-key state. ``clear(context)`` runs
    when the window is purged for good, to clear per-window state."""

    class Context(abc.ABC, Generic[W2]):
        @abc.abstractmethod
        def window(self) -> Window:
            ...

        @abc.abstractmethod
        def current_processing_time(self) -> int:
            ...

        @abc.abstractmethod
        def current_watermark(self) -> int:
            ...

        @abc.abstractmethod
        def window_state(self) -> Any:
            """A keyed state store scoped to this key and window."""

        @abc.abstractmethod
        def global_state(self) -> Any:
            """A keyed state store scoped to this key, across windows."""

        @abc.abstractmethod
        def output(self, output_tag: Any, value: Any) -> None:
            ...

    @abc.abstractmethod
    def process(self, key: Any, context: ProcessWindowFunction.Context, elements: Iterable[Any]) -> Iterable[Any]:
        ...

    def clear(self, context: ProcessWindowFunction.Context) -> None:
        pass


class ProcessAllWindowFunction(Function, Generic[IN, OUT, W]):
    """The non-keyed ``process(context, elements)``."""

    Context = ProcessWindowFunction.Context

    @abc.abstractmethod
    def process(self, context: ProcessWindowFunction.Context, elements: Iterable[Any]) -> Iterable[Any]:
        ...

    def clear(self, context: ProcessWindowFunction.Context) -> None:
        pass
