"""PyFlink's way to emit to a side output: a process function yields ``(output_tag, value)``.

Any pair whose first element is an :class:`OutputTag` goes to that tag's side output; every
other value goes down the main output. (``ctx.output(tag, value)`` does the same.)

>>> from flinkpy.common.output_tag import OutputTag
>>> late, main, side = OutputTag("late"), [], []
>>> collect(iter([1, (late, 2), (3, 4)]), main, lambda tag, value: side.append((tag.tag_id, value)))
2
>>> main, side
([1, (3, 4)], [('late', 2)])
"""

from __future__ import annotations

from typing import Any, Callable

from flinkpy.common.output_tag import OutputTag


def collect(result: Any, out: list, side: Callable[[OutputTag, Any], None]) -> int:
    """Append what a process function returned or yielded (None: nothing) to ``out``, routing
    ``(OutputTag, value)`` pairs to ``side``; returns how many values went to ``out``."""
    if result is None:
        return 0
    before = len(out)
    append = out.append
    for item in result:
        if type(item) is tuple and len(item) == 2 and type(item[0]) is OutputTag:
            side(item[0], item[1])
        else:
            append(item)
    return len(out) - before
