"""A task's traceback for the person who wrote the job: their frames, not the engine's.

A failing user function is called from deep inside the task process (the source loop, the
operator chain, the operator), so its traceback opened with half a dozen flinkpy frames before
the one line that matters. :func:`user_first` drops the engine frames *above* the job's first
frame of each traceback — what the job's code called (a library, or flinkpy's API) stays, as
Python shows it — and says how many it left out; ``--debug`` shows the whole traceback. A
traceback with no frame outside flinkpy (an engine failure) is kept whole.

>>> trace = '''Traceback (most recent call last):
...   File "/usr/lib/python3/site-packages/flinkpy/task/task.py", line 198, in run
...     self.loop.run()
...   File "/usr/lib/python3/site-packages/flinkpy/task/operators.py", line 137, in process
...     self.output.process([f(r) for r in values], timestamps)
...   File "/home/ada/jobs/parse.py", line 6, in parse
...     raise ValueError(f"cannot parse {n}")
... ValueError: cannot parse 3
... '''
>>> print(user_first(trace), end="")
Traceback (most recent call last):
  File "/home/ada/jobs/parse.py", line 6, in parse
    raise ValueError(f"cannot parse {n}")
ValueError: cannot parse 3
(2 flinkpy frames above the job's code not shown: --debug shows the whole traceback)
"""

from __future__ import annotations

import os
import re
from typing import Callable

import flinkpy

_FRAME = re.compile(r'^  File "(?P<file>[^"]*)", line \d+, in ')
_PACKAGE = os.path.dirname(os.path.abspath(flinkpy.__file__)) + os.sep


def is_engine_file(path: str) -> bool:
    """Whether ``path`` is one of flinkpy's own files (here, or in an installed flinkpy on the
    cluster's machines)."""
    return path.startswith(_PACKAGE) or f"{os.sep}site-packages{os.sep}flinkpy{os.sep}" in path


def user_first(trace: str, engine: Callable[[str], bool] = is_engine_file) -> str:
    """``trace`` (Python's formatted traceback, chained ones included) without the engine
    frames above the job's first frame in each of its tracebacks, and a line that counts them."""
    lines = trace.splitlines()
    out: list[str] = []
    hidden = 0
    i = 0
    while i < len(lines):
        if not _FRAME.match(lines[i]):
            out.append(lines[i])
            i += 1
            continue
        frames: list[tuple[str, list[str]]] = []  # one traceback's frames: (file, their lines)
        while i < len(lines) and (m := _FRAME.match(lines[i])):
            j = i + 1
            while j < len(lines) and lines[j].startswith("    "):  # its source and caret lines
                j += 1
            frames.append((m.group("file"), lines[i:j]))
            i = j
        first = next((k for k, (path, _) in enumerate(frames) if not engine(path)), 0)
        hidden += first
        out.extend(line for _, frame in frames[first:] for line in frame)
    if hidden:
        out.append(f"({hidden} flinkpy frame{'s' if hidden > 1 else ''} above the job's code not shown: "
                   "--debug shows the whole traceback)")
    return "\n".join(out) + "\n" if out else ""
