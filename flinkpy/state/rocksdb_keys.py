"""The byte layout of keyed state in the RocksDB backend (flinkpy.state.rocksdb).

Every entry of every state of a subtask lives in one RocksDB key space, ordered by bytes::

    key group (2 bytes, big endian) | state id (4 bytes) | len(key) (4 bytes) | key [| user key]

- the key group comes first, so the entries of a key group are one contiguous range: a rescale
  keeps its own groups with one range scan per old subtask, and nothing else is read;
- the state id is the first 4 bytes of BLAKE2b of the state's name, the same in every subtask
  and every run, so DB files of different subtasks can be merged without renumbering;
- the key is ``pickle.dumps(key, protocol=5)``, length-prefixed so that the entries of one key
  of a map state (one per user key, pickled after it) are one prefix scan.

Keys therefore compare **by their serialized bytes**, as in Flink's RocksDB backend: keys that
are equal in Python but pickle differently (``1``, ``1.0`` and ``True``; or a key object whose
pickle is not deterministic) are different keys here, while the heap backend's dicts merge them.
Use keys of one type per keyed stream (str, int, bytes, tuples of them, Rows).

Values are ``pickle.dumps(value, protocol=5)``; list state keeps its elements as concatenated
pickles, so ``add`` appends bytes without decoding the list. The names, kinds and time-to-live
of the states are kept under :data:`META` (after every key group), so a DB directory restored
from a native checkpoint describes itself.

>>> k = entry_key(group_prefix(5, state_id("count")), key_part("a"))
>>> decode(k)[0], decode(k)[1] == state_id("count"), decode(k)[2]
(5, True, 'a')
>>> load_list(dump_element(1) + dump_element("two"))
[1, 'two']
"""

from __future__ import annotations

import io
import pickle
import struct
from hashlib import blake2b
from typing import Any

PROTOCOL = 5
#: prefix of the per-state metadata entries, after every key group (max parallelism <= 2**15)
META = b"\xff\xff"
_LEN = struct.Struct(">I")
_dumps = pickle.dumps
_loads = pickle.loads


def state_id(name: str) -> bytes:
    """The 4-byte id of a state, stable across subtasks and runs."""
    return blake2b(name.encode("utf-8"), digest_size=4).digest()


def group_bytes(key_group: int) -> bytes:
    return key_group.to_bytes(2, "big")


def group_prefix(key_group: int, sid: bytes) -> bytes:
    """The prefix of all entries of one state in one key group."""
    return key_group.to_bytes(2, "big") + sid


def key_part(key: Any) -> bytes:
    """The length-prefixed serialized key."""
    kb = _dumps(key, PROTOCOL)
    return _LEN.pack(len(kb)) + kb


def entry_key(prefix: bytes, kpart: bytes, user_key: Any = None, *, has_user_key: bool = False) -> bytes:
    if has_user_key:
        return prefix + kpart + _dumps(user_key, PROTOCOL)
    return prefix + kpart


def user_key_bytes(user_key: Any) -> bytes:
    return _dumps(user_key, PROTOCOL)


def decode(raw: bytes) -> tuple[int, bytes, Any, bytes]:
    """(key group, state id, key, user-key bytes or b"") of an entry's RocksDB key."""
    n = _LEN.unpack_from(raw, 6)[0]
    return int.from_bytes(raw[:2], "big"), raw[2:6], _loads(raw[10 : 10 + n]), raw[10 + n :]


def split_key_part(raw: bytes) -> tuple[bytes, bytes]:
    """(the entry's key part, what follows it) without unpickling."""
    n = _LEN.unpack_from(raw, 6)[0]
    return raw[6 : 10 + n], raw[10 + n :]


def successor(prefix: bytes) -> bytes:
    """The smallest byte string greater than every string starting with ``prefix``."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        return b"\xff" * (len(prefix) + 1)
    p[-1] += 1
    return bytes(p)


def dump(value: Any) -> bytes:
    return _dumps(value, PROTOCOL)


dump_element = dump
load = _loads


def dump_list(values: list[Any]) -> bytes:
    return b"".join([_dumps(v, PROTOCOL) for v in values])


def load_list(raw: bytes) -> list[Any]:
    """The elements of a list state's concatenated pickles."""
    f = io.BytesIO(raw)
    end = len(raw)
    out = []
    load_one = pickle.load
    while f.tell() < end:
        out.append(load_one(f))
    return out


def meta_key(name: str) -> bytes:
    return META + name.encode("utf-8")
