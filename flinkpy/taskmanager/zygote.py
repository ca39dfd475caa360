"""The task launcher: a single-threaded process that forks task processes on request.

Starting a task with ``python -m ...`` costs ~100 ms of interpreter start and imports, per task,
and on a restart (recovery) every task pays it again. The zygote pays it once: it imports the
engine's modules (never user code) and then forks one child per task, which starts in a few
milliseconds with everything loaded. It is single-threaded, so forking it is safe (forking the
multi-threaded TaskManager would not be).

Protocol on a SOCK_SEQPACKET socketpair with the TaskManager (one :mod:`flinkpy.protocol`
message per packet): the zygote announces ``LauncherReady``; the TaskManager sends
``SpawnTask(token)`` carrying the task's control socket as SCM_RIGHTS; the zygote answers
``TaskSpawned(token, pid)`` and, when the task ends, ``TaskExited(pid, code)`` (a negative code
is the signal that ended it, as subprocess reports it).

The zygote dies with the TaskManager (parent-death signal), and each task with the zygote.

What the zygote imported is frozen out of the cyclic garbage collector (``gc.freeze``) before a
task is forked. A forked task shares the zygote's pages until it writes one, and a collection
writes to every object it visits: without the freeze, a task's first full collection would copy
the pages of every module the zygote imported, and each later one would walk them again. With
it, a task's collections visit only what the task made: less CPU and less unique memory per
task.
"""

from __future__ import annotations

import gc
import os
import select
import signal
import socket
import sys

from flinkpy.protocol import Message, ProtocolError, decode, encode
from flinkpy.protocol.messages import LauncherReady, SpawnTask, TaskExited, TaskSpawned

#: what the zygote imports before it forks: the engine a task runs, so that no task pays for it
#: again. Every module of :data:`PRELOAD_PACKAGES` is imported besides these (see :func:`_preload`).
PRELOAD = (
    "cloudpickle",
    "encodings.idna",  # a channel's host name is encoded with it when the task connects
    "rocksdict",  # the RocksDB state backend's binding (a dependency; it starts no thread on import)
    "flinkpy.config",
    "flinkpy.task.process",
    "flinkpy.common.window_spec",
    "flinkpy.datastream",
    "flinkpy.datastream.aggregations",
    "flinkpy.common",
    "flinkpy.connectors.file_source",
    "flinkpy.connectors.file_sink",
    "flinkpy.connectors.number_sequence",
    "flinkpy.connectors.collection",
    "flinkpy.connectors.print_sink",
)
#: packages whose every module is imported: the task's runtime and the state backends, whose
#: parts (windows, joins, async I/O, checkpointing, RocksDB) are otherwise imported by each task
#: that uses them
PRELOAD_PACKAGES = ("flinkpy.task", "flinkpy.state")


def _preload() -> None:
    import importlib
    import pkgutil

    names = list(PRELOAD)
    for package in PRELOAD_PACKAGES:
        path = importlib.import_module(package).__path__
        names += [module.name for module in pkgutil.iter_modules(path, package + ".")]
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:  # a connector's optional dependency: the task imports it if it needs it
            pass


def _send(sock: socket.socket, message: Message) -> None:
    try:
        sock.send(encode(message))
    except OSError:
        os._exit(0)  # the TaskManager is gone


def serve(sock: socket.socket) -> None:
    from flinkpy.task.process import die_with_parent, run_task

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    me = os.getpid()
    while True:
        try:
            readable, _, _ = select.select([sock, wake_r], [], [])
        except InterruptedError:
            readable = [wake_r]
        if wake_r in readable:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
        while True:  # reap every child that ended
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            _send(sock, TaskExited(pid=pid, code=os.waitstatus_to_exitcode(status)))
        if sock not in readable:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, 65536, 1)
        except OSError:
            data, fds = b"", []
        if not data:
            os._exit(0)
        try:
            request = decode(data)
        except ProtocolError:
            request = None
        if not isinstance(request, SpawnTask) or not fds:
            for fd in fds:
                os.close(fd)
            continue
        gc.freeze()  # what the zygote made since the last fork: still nothing a task's collector visits
        pid = os.fork()
        if pid == 0:
            # the child: forget the zygote's plumbing, become the task
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.close(wake_r)
            os.close(wake_w)
            sock.close()
            code = 1
            try:
                die_with_parent(me)
                code = run_task(fds[0])
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        os.close(fds[0])
        _send(sock, TaskSpawned(token=request.token, pid=pid))


def main() -> None:
    fd, parent = int(sys.argv[1]), int(sys.argv[2])
    from flinkpy.task.process import die_with_parent

    die_with_parent(parent)
    sock = socket.socket(fileno=fd)
    gc.disable()  # no collection frees holes into the pages the tasks will share
    _preload()
    gc.freeze()
    gc.enable()
    _send(sock, LauncherReady(pid=os.getpid()))
    serve(sock)


if __name__ == "__main__":
    main()
