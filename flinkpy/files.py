"""Writing a local file so that readers see the old file or the whole new one, never half of it.

Write beside the target under a name no reader takes for a finished file, then rename into
place (``os.replace`` is atomic on one file system). A process that dies half way leaves only a
``<name>.tmp-<random>`` file behind. ``durable=True`` also fsyncs the file before the rename and
the directory after it, so the new file survives a machine crash, not only a process crash:
what checkpoint storage and committed sink output need; a cluster's records are rewritten by
the processes that own them and do without.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> write_json_atomically(d / "cluster.json", {"port": 8081})
>>> (d / "cluster.json").read_text()
'{"port": 8081}'
>>> read_json(d / "cluster.json"), read_json(d / "none.json")
({'port': 8081}, None)
>>> write_atomically(d / "offset", "42", durable=True)
>>> sorted(p.name for p in d.iterdir())
['cluster.json', 'offset']
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

PathLike = str | os.PathLike[str]


def write_atomically(path: PathLike, data: bytes | str, *, durable: bool = False, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` (str is written as UTF-8) in one step; the file is private
    to its owner unless ``mode`` says otherwise (clusters keep their records and logs private)."""
    path = os.fspath(path)
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    try:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        fsync_directory(os.path.dirname(path) or ".")


def write_json_atomically(path: PathLike, doc: Any, *, indent: int | None = None, durable: bool = False) -> None:
    """Replace ``path`` with ``doc`` as JSON in one step (see :func:`write_atomically`)."""
    write_atomically(path, json.dumps(doc, indent=indent), durable=durable)


def read_json(path: PathLike) -> Any | None:
    """The JSON document at ``path``, or None when there is none (or it is not JSON)."""
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except (FileNotFoundError, ValueError):
        return None


def fsync_directory(directory: PathLike) -> None:
    """Make a rename in ``directory`` survive a crash."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
