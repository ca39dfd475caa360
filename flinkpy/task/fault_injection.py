"""Faults injected into a running task through the cluster (`flinkpy fault ...`).

Unlike the named fault points (:mod:`flinkpy.task.fault_points`, fixed when the cluster
starts), these arrive as control messages while the task runs: a user function that raises,
a slow or broken network link. Both act where the real failure would come from — inside the
operator's process call, on the output channels' sockets — so the engine's reaction is the
one a real failure gets.
"""

from __future__ import annotations

import socket
import time
from typing import Any, Callable

from flinkpy.network.channels import OutputChannel


def arm_raise(operators: list[Any], has_source: bool, operator: str | None, after: int, describe: str) -> tuple[Any, Callable[..., None]]:
    """Make the ``after``-th next record of ``operator`` (default: the first operator after
    the source, else the head) raise InjectedFault from inside the operator's process call.

    Wraps the operator's ``process`` once and returns ``(operator, wrapped process)``: a caller
    that cached the head's ``process`` must call the wrapper instead.
    """
    from flinkpy.faults import InjectedFault

    if operator:
        named = [o for o in operators if o.name == operator]
        target = named[0] if named else operators[0]
    else:
        target = operators[1] if has_source and len(operators) > 1 else operators[0]
    inner = target.process
    left = [after]

    def process(values: list, timestamps: list[int] | None) -> None:
        if left[0] >= len(values):
            left[0] -= len(values)
            return inner(values, timestamps)
        n = left[0]
        if n:
            inner(values[:n], timestamps[:n] if timestamps is not None else None)
        target.process = inner  # one shot: a restarted attempt is a fresh process anyway
        raise InjectedFault(f"injected fault (flinkpy fault raise) in operator {target.name} of {describe} at record {after} after arming")

    target.process = process
    return target, process


def network_fault(channels: list[OutputChannel], drop: bool, delay_ms: float, seconds: float) -> None:
    """`flinkpy fault network`: a slow or a broken link on the task's output channels.

    Delay: each data buffer waits ``delay_ms`` before it is sent, for ``seconds`` (control
    frames do not wait: a slow link, not a stuck one). Drop: the sockets are shut down at
    once, without END_OF_PARTITION, as a lost connection would be; the consumers see a
    broken channel and this task fails at its next send, and the job restarts.
    """
    if drop:
        for ch in channels:
            try:
                ch.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return
    until = time.monotonic() + seconds
    for ch in channels:
        ch.delay_s, ch.delay_until = delay_ms / 1000.0, until
