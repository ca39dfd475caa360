"""A job's Python dependencies (``python.files``, ``env.add_python_file``): what makes them importable.

PyFlink's ``python.files`` names files a job's functions import where they run: a module
(``helpers.py``), a package directory (one with ``__init__.py``), a directory of modules, or an
archive (``.zip``, ``.whl``, ``.egg``). On the client each entry becomes a ``sys.path`` entry
(:func:`import_root`), so the job file imports them too; where the job's functions run they are
shipped with the job: in one archive to flinkpy's TaskManagers (:mod:`flinkpy.program.archive`),
with the application to Spark's executors (:mod:`flinkpy.spark.shipping`).

>>> import_root("/jobs/lib/helpers.py"), import_root("/jobs/deps.zip")
('/jobs/lib', '/jobs/deps.zip')
>>> add_entry("a.py", "/x/b.py")
'a.py,/x/b.py'
"""

from __future__ import annotations

import os

KEY = "python.files"
ARCHIVES = (".zip", ".whl", ".egg")


def entries(value: str | None) -> list[str]:
    """The comma-separated ``python.files`` value as a list of paths."""
    return [p.strip() for p in (value or "").split(",") if p.strip()]


def add_entry(value: str | None, path: str) -> str:
    """``value`` with ``path`` appended (once)."""
    items = entries(value)
    if path not in items:
        items.append(path)
    return ",".join(items)


def is_package(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, "__init__.py"))


def import_root(path: str) -> str:
    """The ``sys.path`` entry that makes ``path`` importable on this machine: a module's or a
    package's parent directory, a plain directory itself, an archive itself."""
    path = os.path.abspath(path)
    if path.endswith(ARCHIVES) or (os.path.isdir(path) and not is_package(path)):
        return path
    return os.path.dirname(path)


def import_roots(value: str | None) -> list[str]:
    """:func:`import_root` of every entry, without repeats, in order."""
    out: list[str] = []
    for p in entries(value):
        root = import_root(p)
        if root not in out:
            out.append(root)
    return out
