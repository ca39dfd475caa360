"""Shipping a job's code to Spark's executors, and checking what cannot be shipped is there.

On a cluster (``spark://...``, YARN, Kubernetes) the executors share neither the driver's disk
nor its working directory, so the driver ships, with the application (``SparkContext.addPyFile``:
executors fetch the files from the driver and put them on their Python workers' ``sys.path``,
ahead of site-packages):

- flinkpy itself, as ``flinkpy.zip`` (pure Python: the operators, state and records code the
  executors run), shipped by :func:`flinkpy.spark.session.spark_session` for every session on
  a cluster master (snapshot analysis too);
- the job file's directory, as ``job-<name>.zip``: the job file, the modules beside it and the
  packages below it (``import helpers`` in a job file works as with ``flinkpy run``);
- every ``python.files`` entry (``env.add_python_file``): modules and archives as they are,
  directories zipped.

What is not pure Python — PySpark, pandas, pyarrow, cloudpickle, protobuf, and the same Python
major.minor as the driver — must be installed on the executors. :func:`check_executors` runs a
one-task-per-executor Spark job before the query starts and fails, naming what is missing where,
instead of letting the query die on its first batch with an ImportError deep in a Python worker.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import uuid
import zipfile
from pathlib import Path
from typing import Any, Iterable

from flinkpy.program import archive
from flinkpy.errors import ConfigurationError, OperationTimeoutError

log = logging.getLogger("flinkpy.spark.shipping")

#: imported by the Spark runner's code on the executors (module name, pip package)
EXECUTOR_MODULES = (("pyspark", "pyspark[sql]"), ("pandas", "pandas"), ("pyarrow", "pyarrow"),
                    ("cloudpickle", "cloudpickle"), ("google.protobuf", "protobuf"))


def ships(master: str) -> bool:
    """Whether executors of ``master`` may lack the driver's disk: every master but local[...]."""
    return not master.startswith("local")


def flinkpy_zip(dest: Path) -> Path:
    """``dest/flinkpy.zip``: the flinkpy package this driver runs."""
    import flinkpy

    package = Path(flinkpy.__file__).resolve().parent
    target = dest / "flinkpy.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        archive.zip_tree(zf, package, "flinkpy", only_py=False)
    return target


def job_dir_zip(job_file: str, dest: Path) -> Path:
    """The job file's directory as ``dest/job-<stem>.zip``: its modules (``*.py``, the job file
    among them) and the packages below it (directories with ``__init__.py``), as the job file
    sees them on its ``sys.path``."""
    target = dest / f"job-{Path(job_file).stem}.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        archive.add_job_dir(zf, Path(job_file).resolve().parent)
    return target


def python_file_payload(path: str, dest: Path) -> Path:
    """What to ship for one ``python.files`` entry: a module or archive as it is; a package
    directory zipped with the package at the top; a plain directory zipped with its contents
    at the top (importable as if the directory were on ``sys.path``)."""
    p = Path(path).resolve()
    if p.is_file():
        return p
    target = dest / f"pyfiles-{p.name}-{uuid.uuid4().hex[:8]}.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        archive.add_python_file(zf, path, "")
    return target


def ship_flinkpy(spark_context: Any) -> Path:
    """Ship ``flinkpy.zip`` with the session's application (every session on a cluster master:
    the runner's driver and snapshot analysis alike); the archive lives in a temporary
    directory removed when this process exits."""
    import atexit
    import shutil
    import tempfile

    dest = Path(tempfile.mkdtemp(prefix="flinkpy-ship-"))
    atexit.register(shutil.rmtree, dest, True)
    target = flinkpy_zip(dest)
    spark_context.addPyFile(str(target))
    return target


def prepare(dest: Path, *, job_file: str, python_file_entries: Iterable[str]) -> list[Path]:
    """What to ship for one job besides flinkpy (:func:`ship_flinkpy`, done by every session),
    written into ``dest`` (the driver removes it at exit)."""
    dest.mkdir(parents=True, exist_ok=True)
    out = [job_dir_zip(job_file, dest)]
    out += [python_file_payload(p, dest) for p in python_file_entries]
    return out


def ship(spark_context: Any, files: Iterable[Path]) -> None:
    for f in files:
        spark_context.addPyFile(str(f))


# --------------------------------------------------------------------------- the executors' check


def _probe_function(modules: list[str]) -> Any:
    """The function one task runs on an executor. Built here as a closure so that cloudpickle
    sends it by value: unpickling it needs nothing on the executor, not even flinkpy."""

    def probe(_: Any) -> dict[str, Any]:
        import importlib
        import os as _os
        import socket
        import sys as _sys

        missing, found = [], {}
        for name in modules:
            try:
                mod = importlib.import_module(name)
                found[name] = getattr(mod, "__version__", "") or ""
            except Exception as e:  # noqa: BLE001 - any failure to import is "missing" to the job
                missing.append(f"{name} ({type(e).__name__}: {e})")
        flinkpy_file = None
        try:
            import flinkpy

            flinkpy_file = flinkpy.__file__
        except Exception as e:  # noqa: BLE001
            missing.append(f"flinkpy ({type(e).__name__}: {e})")
        executor = ""
        try:  # Linux: worker <- pyspark.daemon <- the executor's JVM, whose command line names it
            daemon = _os.getppid()
            with open(f"/proc/{daemon}/stat") as f:
                jvm = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{jvm}/cmdline", "rb") as f:
                args = f.read().decode(errors="replace").split("\0")
            executor = args[args.index("--executor-id") + 1] if "--executor-id" in args else ""
        except (OSError, ValueError, IndexError):
            pass
        return {"host": socket.gethostname(), "pid": _os.getpid(), "python": "%d.%d" % _sys.version_info[:2],
                "executable": _sys.executable, "missing": missing, "found": found, "flinkpy": flinkpy_file,
                "executor_id": executor}

    return probe


def executor_modules(config: dict[str, str]) -> list[str]:
    """The modules the executors need for this job's configuration."""
    names = [m for m, _ in EXECUTOR_MODULES]
    if str(config.get("state.backend.type", "")).lower() == "rocksdb":
        names.append("rocksdict")
    return names


def _pip_name(module: str) -> str:
    return dict(EXECUTOR_MODULES).get(module, module)


def check_executors(spark_context: Any, modules: list[str], *, timeout_s: float, master: str) -> list[dict[str, Any]]:
    """Run the probe once per executor core (a task each) and check every answer.

    Raises ConfigurationError (exit 8) naming what the executors lack and how to install it, or
    OperationTimeoutError (exit 6) when no executor ran the probe within ``timeout_s`` (the
    cluster has no free cores or memory for this application).
    """
    slots = max(1, int(spark_context.defaultParallelism))
    group = f"flinkpy-executor-check-{uuid.uuid4().hex[:8]}"
    timed_out = threading.Event()

    def cancel() -> None:
        timed_out.set()
        spark_context.cancelJobGroup(group)

    timer = threading.Timer(timeout_s, cancel)
    timer.daemon = True
    spark_context.setJobGroup(group, "flinkpy: checking the executors' Python", interruptOnCancel=True)
    timer.start()
    try:
        answers = spark_context.parallelize(range(slots), slots).map(_probe_function(modules)).collect()
    except Exception as e:  # noqa: BLE001 - translated below
        if timed_out.is_set():
            raise OperationTimeoutError(
                f"no Spark executor ran a task within {timeout_s:.0f}s on {master}",
                remedy="the cluster has no free cores or memory for this job: see 'flinkpy spark status' (or the "
                       "master's web UI), stop other applications, or lower spark.executor.memory") from None
        raise _translate(e, master) from None
    finally:
        timer.cancel()
        spark_context.setLocalProperty("spark.jobGroup.id", None)
    driver_python = "%d.%d" % sys.version_info[:2]
    versions = sorted({f"Python {a['python']} ({a['executable']} on {a['host']})" for a in answers if a["python"] != driver_python})
    missing: list[str] = []
    for a in answers:
        for m in a["missing"]:
            # "pandas (ModuleNotFoundError: No module named 'pandas')" says no more than "pandas"
            short = m.split(" ", 1)[0] if "ModuleNotFoundError" in m and f"'{m.split(' ', 1)[0]}'" in m else m
            if short not in missing:
                missing.append(short)
    if versions:
        raise ConfigurationError(f"the Spark executors of {master} run {', '.join(versions)}, the driver Python {driver_python}",
                                 remedy="run the same Python major.minor on both (PYSPARK_PYTHON names the executors' interpreter)")
    if missing:
        names = [m.split(" ", 1)[0] for m in missing if m.split(" ", 1)[0] != "flinkpy"]
        where = f"{answers[0]['executable']} on {answers[0]['host']}"
        remedy = (f"install them into the executors' Python: {answers[0]['executable']} -m pip install "
                  f"{' '.join(_pip_name(n) for n in names)}" if names else "see the driver's log")
        raise ConfigurationError(f"the Spark executors of {master} lack {', '.join(missing)} (Python {where})", remedy=remedy)
    for a in answers:
        log.info("executor %s on %s: Python %s (%s), flinkpy from %s", a["executor_id"] or "?", a["host"], a["python"],
                 a["executable"], a["flinkpy"])
    return answers


def _translate(exc: BaseException, master: str) -> ConfigurationError:
    """A failed probe job as the one-line reason: the executors' Python could not start, or
    runs another version."""
    text = str(exc)
    python = os.environ.get("PYSPARK_PYTHON") or sys.executable
    if "PYTHON_VERSION_MISMATCH" in text or "different version" in text:
        import re

        m = re.search(r"Python in worker has different version:? \(?([\d.]+)\)? than that in driver:? \(?([\d.]+)", text)
        seen = f": Python {m.group(1)} on the executors, {m.group(2)} on the driver" if m else ""
        return ConfigurationError(f"the Spark executors of {master} run another Python than the driver{seen}",
                                  remedy="run the same Python major.minor on both (spark.pyspark.python / PYSPARK_PYTHON)")
    if "Cannot run program" in text or "No such file or directory" in text:
        return ConfigurationError(f"the Spark executors of {master} cannot start Python {python}",
                                  remedy="install the same Python and packages on the executors at that path, or set "
                                         "spark.pyspark.python / PYSPARK_PYTHON to the executors' interpreter")
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    return ConfigurationError(f"checking the Spark executors of {master} failed: {first[:300]}",
                              remedy="see the driver's log and the executors' stderr (flinkpy spark status: the workers' logs)")
