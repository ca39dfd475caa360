"""TaskLauncher: the TaskManager's side of the zygote (see ``zygote.py``).

``spawn(sock)`` hands a task's control socket to the zygote and returns a :class:`ForkedProcess`,
a handle with the parts of ``subprocess.Popen`` the TaskManager uses (pid, poll, wait, terminate,
kill). Exit codes arrive from the zygote, which is the tasks' parent and reaps them.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading

from flinkpy.processes import module_command
from flinkpy.protocol import HandlerTable, ProtocolError, decode, encode
from flinkpy.protocol.messages import LauncherReady, SpawnTask, TaskExited, TaskSpawned


class ForkedProcess:
    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None
        self._done = threading.Event()

    def _exited(self, code: int) -> None:
        self.returncode = code
        self._done.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(f"task pid {self.pid}", timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class LauncherFailed(RuntimeError):
    """The launcher is gone or did not fork a task in time (the TaskManager starts another)."""


class TaskLauncher:
    """The TaskManager's handle on its zygote: asks it to fork tasks, learns of their exits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[int, tuple[threading.Event, list[int]]] = {}
        self._procs: dict[int, ForkedProcess] = {}
        self._early_exits: dict[int, int] = {}
        self._next = 0
        self._handlers = HandlerTable(
            "the TaskManager's task launcher client",
            {LauncherReady: self._on_ready, TaskSpawned: self._on_spawned, TaskExited: self._on_exited},
        )
        self._start()

    def _start(self) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen(
            module_command("flinkpy.taskmanager.zygote", str(child.fileno()), str(os.getpid())),
            pass_fds=(child.fileno(),),
            stdin=subprocess.DEVNULL,
            close_fds=True,
        )
        child.close()
        self.sock = parent
        # the zygote imports the engine while the TaskManager registers; spawn() waits for it
        self._ready = threading.Event()
        threading.Thread(target=self._read, name="launcher", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            try:
                msg = decode(data)
                with self._lock:
                    self._handlers(msg)
            except ProtocolError:
                continue  # the launcher runs the same code as we do: cannot happen
        # the zygote is gone: its children died with it; report them so nobody waits forever
        with self._lock:
            for proc in self._procs.values():
                proc._exited(-signal.SIGKILL)
            self._procs.clear()
            for event, _ in self._pending.values():
                event.set()
            self._ready.set()

    # -- the launcher's messages (lock held) -------------------------------------------------

    def _on_ready(self, msg: LauncherReady) -> None:
        self._ready.set()

    def _on_spawned(self, msg: TaskSpawned) -> None:
        event, box = self._pending.pop(msg.token)
        box.append(msg.pid)
        event.set()

    def _on_exited(self, msg: TaskExited) -> None:
        proc = self._procs.pop(msg.pid, None)
        if proc is not None:
            proc._exited(msg.code)
        else:
            self._early_exits[msg.pid] = msg.code

    def spawn(self, task_socket: socket.socket, timeout_s: float = 10.0) -> ForkedProcess:
        if not self._ready.wait(timeout_s) or self.proc.poll() is not None:
            raise LauncherFailed(f"the task launcher (pid {self.proc.pid}) is not running (exit code {self.proc.poll()})")
        with self._lock:
            token = self._next
            self._next += 1
            event = threading.Event()
            box: list[int] = []
            self._pending[token] = (event, box)
        socket.send_fds(self.sock, [encode(SpawnTask(token))], [task_socket.fileno()])
        if not event.wait(timeout_s) or not box:
            raise LauncherFailed("the task launcher did not fork the task")
        pid = box[0]
        proc = ForkedProcess(pid)
        with self._lock:
            if pid in self._early_exits:
                proc._exited(self._early_exits.pop(pid))
            else:
                self._procs[pid] = proc
        return proc

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        if self.proc.poll() is None:
            self.proc.terminate()
