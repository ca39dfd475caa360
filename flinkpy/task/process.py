"""The task process: one parallel subtask of one operator chain, in its own OS process.

Forked by its TaskManager's launcher (flinkpy.taskmanager.zygote), or started as
``python -m flinkpy.task.process FD PARENT_PID``, with one end of a socketpair as its control
connection. The life of a task (:class:`flinkpy.task.task.Task`):

1. receive the deployment descriptor; unpickle the chain (the only place user code is loaded);
2. open a listener for the consumers of its outputs and report the port (``TaskListening``);
3. receive the producers' addresses (``ConnectTask``), connect its input channels, wait for its
   consumers, open the operators, report ``TaskRunning``;
4. run: a source polls its reader (:mod:`.source_loop`); other tasks read frames from their
   input channels (:mod:`.input_processor`); control messages go to :mod:`.control`;
5. at the end of input: end the operators and send END_OF_DATA; with periodic checkpoints, wait
   (still taking checkpoints) until the job's final checkpoint completed
   (:mod:`flinkpy.jobmanager.final_checkpoint`); then flush, send END_OF_PARTITION, report
   ``TaskFinished``.

Any exception is reported as ``TaskFailed`` with the user's traceback, naming job, task and
subtask. If the TaskManager dies the control connection closes and the task exits at once (and
the kernel's parent-death signal covers a TaskManager killed with SIGKILL).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys

from flinkpy.network.connection import Connection
from flinkpy.protocol.deployment import DeployTask
from flinkpy.task.task import Task

#: exit code of a task process whose first message was not its deployment
EXIT_NOT_DEPLOYED = 2


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL us when our parent dies; exit now if it already has."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass
    if os.getppid() != parent_pid:
        os._exit(1)


def run_task(fd: int) -> int:
    """Run the task whose control socket is ``fd``; returns the process exit code."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the client; the TaskManager cancels us
    ctrl = Connection(socket.socket(fileno=fd))
    msg = ctrl.recv()
    if not isinstance(msg, DeployTask):
        return EXIT_NOT_DEPLOYED
    task = Task(msg.descriptor, ctrl)
    profile_dir = os.environ.get("FLINKPY_TASK_PROFILE_DIR")
    if not profile_dir:
        return task.run()
    # a developer's aid: one cProfile dump per task attempt, named after the job, the task and the
    # attempt, so that the tasks of several jobs (and restarts) writing into one directory keep theirs
    import cProfile

    profiler = cProfile.Profile()
    try:
        return profiler.runcall(task.run)
    finally:
        d = task.descriptor
        profiler.dump_stats(os.path.join(profile_dir, f"{d.job_id}-{d.vertex_id}-{d.subtask}-{d.attempt}.prof"))


def main() -> None:
    """Entry point when started as its own interpreter (the zygote forks tasks instead)."""
    fd, parent = int(sys.argv[1]), int(sys.argv[2])
    die_with_parent(parent)
    code = run_task(fd)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


if __name__ == "__main__":
    main()
