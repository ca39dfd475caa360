"""The messages flinkpy's processes exchange: typed, versioned, decoded at the wire edge.

Three endpoints talk over control connections (:mod:`flinkpy.network.connection`): the
JobManager, each TaskManager, and each task process. Every message is a frozen dataclass
registered under a wire name (:mod:`.codec`); the deployment descriptor a task is started from
lives in :mod:`.deployment`, the control messages in :mod:`.messages`. A peer that speaks
another protocol version, or sends a type this process does not know, gets a
:class:`ProtocolError` naming both, never a ``KeyError`` deep inside a handler. Importing the
package loads neither catalog: :func:`decode` loads them on the first name it has not seen, so a
process that only speaks REST (the CLI) does not build their dataclasses.

This package is the bottom of the runtime's layers: it imports nothing from flinkpy, so the
JobManager, the TaskManager, the task and the network layer may all import it.
"""

from flinkpy.protocol.codec import PROTOCOL_VERSION, HandlerTable, Message, ProtocolError, decode, encode

__all__ = ["PROTOCOL_VERSION", "HandlerTable", "Message", "ProtocolError", "decode", "encode"]
