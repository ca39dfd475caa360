"""A job's Python files as one archive that travels with the job, as Flink ships ``python.files``.

The task processes that run a job's functions may share neither the client's disk nor its
working directory (another machine, a TaskManager started elsewhere, files deleted after the
submission). So the client packs what the functions may import into one zip, sent with the
submission; the JobManager keeps it as a job artifact and every TaskManager fetches and unpacks
it once per job, putting its import roots on the tasks' ``sys.path``. The archive holds:

- ``job/``: the job's own directory (the job file's, when the program is a file): its modules
  and the packages below it, as the job file sees them on its ``sys.path``;
- ``files/<n>/``: the n-th ``python.files`` entry (``env.add_python_file``): a module as it is, a
  package directory with the package at the top, a plain directory with its contents at the top,
  an archive (``.zip``/``.whl``/``.egg``) as it is (then the archive itself is the import root);
- ``MANIFEST.json``: the import roots in ``sys.path`` order, and where each came from.

Its SHA-256 travels beside it: a damaged or substituted archive is refused, never imported.
The Spark runner ships the same trees with ``SparkContext.addPyFile`` (:mod:`flinkpy.spark.shipping`),
built by the same functions.

>>> import os, tempfile
>>> d = tempfile.mkdtemp(); _ = open(os.path.join(d, "helpers.py"), "w").write("K = 1\\n")
>>> archive = build([], [os.path.join(d, "helpers.py")])
>>> archive.roots, len(archive.sha256)
(['files/0'], 64)
>>> out = tempfile.mkdtemp()
>>> unpack(archive.data, out, archive.sha256) == [os.path.join(out, "files/0")]
True
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from flinkpy.errors import ConfigurationError
from flinkpy.program import python_files

log = logging.getLogger("flinkpy.program")

MANIFEST = "MANIFEST.json"
#: a job directory with more modules than this is not shipped whole (a data directory beside the job)
MAX_JOB_DIR_BYTES = 64 << 20
_SKIP_DIRS = {"__pycache__", "node_modules", "site-packages"}


class DamagedArchiveError(ConfigurationError):
    """The archive's bytes do not match its checksum, or are not an archive of this format."""


def zip_tree(zf: zipfile.ZipFile, root: Path, arc_prefix: str, *, only_py: bool) -> int:
    """Add the files below ``root`` as ``arc_prefix/...`` (hidden directories, caches and
    bytecode left out); returns the bytes added."""
    added = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith(".") and not d.endswith(".egg-info"))
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")) or (only_py and not name.endswith(".py")):
                continue
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            zf.write(path, f"{arc_prefix}/{rel}" if arc_prefix else rel)
            added += path.stat().st_size
    return added


def add_job_dir(zf: zipfile.ZipFile, directory: Path, arc_prefix: str = "") -> int:
    """Add a job's directory: its modules (``*.py``) and the packages below it (directories with
    ``__init__.py``, flinkpy itself excepted), up to :data:`MAX_JOB_DIR_BYTES`; returns the bytes
    added."""
    total = 0
    for entry in sorted(directory.iterdir()):
        if entry.name.startswith(".") or entry.name in _SKIP_DIRS:
            continue
        name = f"{arc_prefix}/{entry.name}" if arc_prefix else entry.name
        if entry.is_file() and entry.suffix == ".py":
            zf.write(entry, name)
            total += entry.stat().st_size
        elif python_files.is_package(str(entry)) and entry.name != "flinkpy":
            total += zip_tree(zf, entry, name, only_py=False)
        if total > MAX_JOB_DIR_BYTES:
            log.warning("the job directory %s holds more than %d MiB of modules: shipping stops there; "
                        "ship large dependencies with env.add_python_file", directory, MAX_JOB_DIR_BYTES >> 20)
            break
    return total


def add_python_file(zf: zipfile.ZipFile, path: str, arc_prefix: str) -> str:
    """Add one ``python.files`` entry below ``arc_prefix``; returns its import root in the archive.

    A module, an archive or any other file goes in as it is (an archive is its own root); a
    package directory keeps its name; a plain directory's contents go to the top (importable as
    if the directory were on ``sys.path``)."""
    p = Path(path).resolve()
    if not p.exists():
        raise ConfigurationError(f"python.files names {path}, which does not exist",
                                 remedy="fix env.add_python_file(...), --pyFiles or -D python.files")
    if p.is_file():
        zf.write(p, f"{arc_prefix}/{p.name}" if arc_prefix else p.name)
        return f"{arc_prefix}/{p.name}" if p.name.endswith(python_files.ARCHIVES) else arc_prefix
    if python_files.is_package(str(p)):
        zip_tree(zf, p, f"{arc_prefix}/{p.name}" if arc_prefix else p.name, only_py=False)
    else:
        zip_tree(zf, p, arc_prefix, only_py=False)
    return arc_prefix


@dataclass(frozen=True)
class PythonArchive:
    """The packed archive, its import roots (relative to where it is unpacked) and sources."""

    data: bytes
    roots: list[str]
    sources: list[str] = field(default_factory=list)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def size(self) -> int:
        return len(self.data)

    def describe(self) -> str:
        """What went in, for messages: ``/jobs/wc (job directory), /lib/helpers.py``."""
        return ", ".join(self.sources) or "nothing"


def build(job_dirs: list[str], entries: list[str]) -> PythonArchive:
    """Pack ``job_dirs`` (the job's own directories, first on the tasks' ``sys.path``) and the
    ``python.files`` ``entries`` into one archive."""
    buf = io.BytesIO()
    roots: list[str] = []
    sources: list[str] = []
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for i, directory in enumerate(job_dirs):
            prefix = "job" if i == 0 else f"job{i}"
            add_job_dir(zf, Path(directory), prefix)
            roots.append(prefix)
            sources.append(f"{directory} (job directory)")
        for i, entry in enumerate(entries):
            roots.append(add_python_file(zf, entry, f"files/{i}"))
            sources.append(entry)
        zf.writestr(MANIFEST, json.dumps({"format": 1, "roots": roots, "sources": sources}))
    return PythonArchive(buf.getvalue(), roots, sources)


def verify(data: bytes, sha256: str, what: str) -> None:
    """Raise :class:`DamagedArchiveError` unless ``data`` has the checksum ``sha256``."""
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise DamagedArchiveError(f"{what} is damaged: its SHA-256 is {actual[:16]}..., the job was submitted with {sha256[:16]}...",
                                  remedy="submit the job again")


def unpack(data: bytes, dest: str | Path, sha256: str) -> list[str]:
    """Check ``data`` against ``sha256``, unpack it into ``dest``; returns the absolute
    ``sys.path`` entries it provides, in order."""
    verify(data, sha256, "the job's Python files archive")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            manifest = json.loads(zf.read(MANIFEST))
            zf.extractall(dest)  # names with '..' or a leading '/' are made safe by zipfile
    except (zipfile.BadZipFile, KeyError, ValueError) as e:
        raise DamagedArchiveError(f"the job's Python files archive cannot be read: {e}", remedy="submit the job again") from None
    return [os.path.join(str(dest), r) for r in manifest["roots"]]
