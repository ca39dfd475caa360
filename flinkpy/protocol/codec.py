"""Encoding control messages at the wire edge, and dispatching them by type.

A message on the wire is a small header — the protocol version (uint16) and the length of the
message's wire name (uint8) — then the wire name in UTF-8, then the pickled fields. The header
and the name are read before anything is unpickled, so a peer of another version, or a message
type this process does not know, is refused with a :class:`ProtocolError` that names both
instead of failing somewhere inside a handler. (Pickling the fields is safe only because the
control connection proved both ends hold the cluster secret before the first message.)

Each endpoint keeps a :class:`HandlerTable`: message type -> handler, one lookup per message.

>>> from dataclasses import dataclass
>>> @message("example_ping")
... @dataclass(frozen=True)
... class Ping(Message):
...     seq: int
>>> decode(encode(Ping(seq=7)))
Ping(seq=7)
>>> HandlerTable("an example endpoint", {Ping: lambda m: m.seq + 1})(Ping(seq=1))
2
"""

from __future__ import annotations

import dataclasses
import pickle
import struct
from typing import Any, Callable, ClassVar, Mapping, TypeVar

from flinkpy.errors import FlinkpyError

#: bumped whenever a message's fields change meaning or a message type is removed
PROTOCOL_VERSION = 1

_HEADER = struct.Struct(">HB")


class ProtocolError(FlinkpyError):
    """A control message this process cannot understand: another protocol version, an unknown
    type, or fields its type does not have."""


class Message:
    """Base of every control message. Subclasses are frozen dataclasses registered with
    :func:`message`, which gives them their ``wire_name``."""

    wire_name: ClassVar[str] = ""


_REGISTRY: dict[str, type[Message]] = {}

M = TypeVar("M", bound=type[Message])


def message(name: str) -> Callable[[M], M]:
    """Register a message dataclass under ``name`` (unique, at most 255 bytes of UTF-8)."""

    def register(cls: M) -> M:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"message {name!r}: {cls.__name__} must be a dataclass")
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"message name {name!r} is already taken by {_REGISTRY[name].__name__}")
        cls.wire_name = name
        _REGISTRY[name] = cls
        return cls

    return register


def encode(msg: Message) -> bytes:
    """The bytes of ``msg`` on the wire (header, wire name, pickled fields)."""
    name = msg.wire_name.encode()
    if not name or _REGISTRY.get(msg.wire_name) is not type(msg):
        raise ProtocolError(f"{type(msg).__name__} is not a registered message type")
    fields = {f.name: getattr(msg, f.name) for f in dataclasses.fields(msg)}  # type: ignore[arg-type]
    return _HEADER.pack(PROTOCOL_VERSION, len(name)) + name + pickle.dumps(fields, protocol=pickle.HIGHEST_PROTOCOL)


def _catalog() -> dict[str, type[Message]]:
    """The registry with every message type of flinkpy's catalog in it. The catalog's modules are
    imported on the first name that is not yet registered, not with the package: a process that
    only talks REST (the CLI) never pays for the dataclasses of fifty messages it cannot receive."""
    from flinkpy.protocol import deployment, messages  # noqa: F401  (their classes register on import)

    return _REGISTRY


def decode(data: bytes) -> Message:
    """The message in ``data``; raises :class:`ProtocolError` for anything else."""
    if len(data) < _HEADER.size:
        raise ProtocolError(f"a control message of {len(data)} bytes is shorter than its header")
    version, length = _HEADER.unpack_from(data)
    start = _HEADER.size
    name = bytes(data[start : start + length]).decode("utf-8", "replace")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(
            f"received a {name!r} message of protocol version {version}; this process speaks version {PROTOCOL_VERSION}",
            remedy="run the same flinkpy version on the JobManager, the TaskManagers and their tasks",
        )
    cls = _REGISTRY.get(name) or _catalog().get(name)
    if cls is None:
        raise ProtocolError(
            f"received a message of unknown type {name!r} (protocol version {version})",
            remedy="run the same flinkpy version on the JobManager, the TaskManagers and their tasks",
        )
    try:
        fields = pickle.loads(data[start + length :])
        return cls(**fields)
    except Exception as e:  # noqa: BLE001 - whatever is wrong with the body, say which message it was
        raise ProtocolError(f"cannot decode a {name!r} message: {type(e).__name__}: {e}") from e


class HandlerTable:
    """One endpoint's table from message type to handler.

    ``endpoint`` names the receiver in the error a message without a handler raises (a message
    sent to the wrong process is a bug, and the error says where it landed).
    """

    def __init__(self, endpoint: str, handlers: Mapping[type[Message], Callable[[Any], Any]]):
        self.endpoint = endpoint
        self._handlers = dict(handlers)

    def __contains__(self, kind: type[Message]) -> bool:
        return kind in self._handlers

    def __call__(self, msg: Message) -> Any:
        handler = self._handlers.get(type(msg))
        if handler is None:
            raise ProtocolError(f"{self.endpoint} does not handle {msg.wire_name or type(msg).__name__!r} messages")
        return handler(msg)
