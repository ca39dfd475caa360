"""SIGINT (Ctrl-C) and SIGTERM while a client runs a job and waits for it.

``flinkpy run JOB.py`` and ``python JOB.py`` run the job program in the client's own process. A
stop signal there must end the run in order — cancel the job when the cluster is the client's
own embedded one, stop that cluster, exit 130 (SIGINT) or 143 (SIGTERM) with one line — not
leave the client wherever the signal found it. :func:`stop_requests` installs, for the time of
one ``execute()``, handlers that raise :class:`~flinkpy.errors.Interrupted` once in the main
thread (as Python's own SIGINT handler raises KeyboardInterrupt), so that what the client was
blocked on is abandoned. While the client then carries the stop out the handlers are disarmed:
a second signal is not another exception in the middle of the clean-up; it ends the client at
once (the embedded cluster's supervisor then ends what is left of the cluster).

Only Python's default handlers are replaced, in the main thread only: a job program that
installed its own keeps it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Any, Iterator

from flinkpy.errors import Interrupted


class StopRequests:
    """The state of one run's handlers: armed (the first signal raises) or carrying it out."""

    def __init__(self) -> None:
        #: the first stop signal received (None while none arrived)
        self.signum: int | None = None
        self.armed = True

    def disarm(self) -> None:
        """From here on the run is ending anyway: a signal is noted, never raised."""
        self.armed = False

    def handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            # asked again while the first stop is carried out: leave now (os.write and _exit
            # take no lock, wherever this lands)
            os.write(2, b"flinkpy: stopped again: exiting at once\n")
            os._exit(Interrupted(signum).exit_code)
        self.signum = signum
        if self.armed:
            self.armed = False
            raise Interrupted(signum)


_DEFAULTS = ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL))


@contextlib.contextmanager
def stop_requests() -> Iterator[StopRequests]:
    """Around one run of a job: SIGINT and SIGTERM raise Interrupted while armed; a signal
    noted after :meth:`StopRequests.disarm` is raised when the block ends without an error."""
    stop = StopRequests()
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum, default in _DEFAULTS:
            if signal.getsignal(signum) is default:
                previous[signum] = signal.signal(signum, stop.handle)
    try:
        yield stop
    finally:
        stop.disarm()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if stop.signum is not None:
        raise Interrupted(stop.signum)
