"""Stop signals for flinkpy's long-running processes: the handler notes, the process acts.

A Python signal handler runs in the main thread between two bytecodes of whatever that thread
was doing — possibly inside a ``with lock:`` of that very thread, or inside the handler of an
earlier signal. A handler that takes a lock (``threading.Lock``, ``Event.set``, ``Queue.put``,
``print`` to a buffered stream) can therefore deadlock its own process: two SIGTERMs a few
microseconds apart left a TaskManager hanging in its stop handler until it was SIGKILLed.

:class:`StopSignals` installs handlers that only record the signal and write one byte to a
pipe (``os.write`` takes no Python lock, so a second signal inside the first handler is
harmless). The process waits for the request where it chooses — its main loop, or a thread that
does the stopping — and stops there, with every lock free.

>>> import os, signal
>>> stop = StopSignals(signal.SIGUSR1)
>>> stop.wait(0)
False
>>> os.kill(os.getpid(), signal.SIGUSR1); os.kill(os.getpid(), signal.SIGUSR1)
>>> stop.wait(5), stop.received == signal.SIGUSR1
(True, True)
>>> stop.restore()
"""

from __future__ import annotations

import os
import select
import signal
import threading
from typing import Any, Callable


class StopSignals:
    """Handlers for ``signums`` that note the first signal received and wake :meth:`wait`.

    Install it in the main thread (Python's rule for ``signal.signal``); wait in any thread.
    """

    def __init__(self, *signums: int) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        #: the first stop signal received (None while none arrived)
        self.received: int | None = None
        self._previous = {s: signal.signal(s, self._note) for s in signums}

    def _note(self, signum: int, frame: Any) -> None:
        # no lock, no allocation that could block: safe however often and wherever it lands
        if self.received is None:
            self.received = signum
        try:
            os.write(self._w, b"\0")
        except OSError:  # the pipe is full: a wake-up is pending anyway
            pass

    @property
    def requested(self) -> bool:
        return self.received is not None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a stop signal arrived (or ``timeout`` seconds passed); whether one did."""
        if self.received is None:
            try:
                select.select([self._r], [], [], timeout)
            except (OSError, ValueError):  # closed by restore() in another thread
                pass
            try:
                while os.read(self._r, 512):
                    pass
            except OSError:
                pass
        return self.received is not None

    def on_stop(self, action: Callable[[int], None], name: str = "stop-signal") -> threading.Thread:
        """Run ``action(signum)`` in a daemon thread of its own once a stop signal arrives (where
        it may take locks: the main thread is wherever the signal found it)."""

        def waiter() -> None:
            while not self.wait():
                pass
            assert self.received is not None
            action(self.received)

        thread = threading.Thread(target=waiter, name=name, daemon=True)
        thread.start()
        return thread

    def restore(self) -> None:
        """Put the previous handlers back (tests, and code that installs these for a while)."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}
