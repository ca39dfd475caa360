"""Durations and memory sizes in Flink's spelling: the one parser and formatter of each.

Every place that reads a duration (``'10 s'``, ``'500 ms'``, a bare number of milliseconds) or a
memory size (``'32 kb'``, ``'64mb'``, a bare number of bytes) goes through this module, whether
it is the configuration schema, a restart strategy, the Spark runner or a CLI flag: one spelling
is accepted everywhere, and a value written back as a string reads back the same.

This module sits at the bottom of the package (it imports nothing from flinkpy), so every layer
may use it.

>>> parse_duration_ms("10 min"), parse_duration_ms("100ms"), parse_duration_ms(250)
(600000, 100, 250)
>>> format_duration_ms(90_000), parse_memory_size("32 kb"), format_memory_size(64 << 20)
('90 s', 32768, '64 mb')
"""

from __future__ import annotations

import re

def _unit_table(*units: tuple[tuple[str, ...], int]) -> dict[str, int]:
    """Every spelling of every unit -> its size in the base unit."""
    return {name: size for names, size in units for name in names}


_DURATION_UNITS_MS = _unit_table(
    (("ms", "milli", "millis", "millisecond", "milliseconds"), 1),
    (("s", "sec", "secs", "second", "seconds"), 1000),
    (("m", "min", "mins", "minute", "minutes"), 60_000),
    (("h", "hour", "hours"), 3_600_000),
    (("d", "day", "days"), 86_400_000),
)
#: Flink's memory units are binary: 1 kb = 1024 bytes
_MEMORY_UNITS = _unit_table(
    (("b", "bytes"), 1),
    (("k", "kb", "kibibytes"), 1 << 10),
    (("m", "mb", "mebibytes"), 1 << 20),
    (("g", "gb", "gibibytes"), 1 << 30),
    (("t", "tb", "tebibytes"), 1 << 40),
)

#: a whole number and an optional unit, blanks around and between allowed
_NUMBER_AND_UNIT = re.compile(r"\s*(\d+)\s*([a-zA-Z]*)\s*")


def parse_duration_ms(raw: object) -> int:
    """Parse Flink's duration syntax into whole milliseconds; a bare number means milliseconds.

    Raises ValueError (callers turn it into an error that names their key or flag).

    >>> parse_duration_ms(" 2 s "), parse_duration_ms("3 h")
    (2000, 10800000)
    """
    if isinstance(raw, bool):
        raise ValueError(f"not a duration: {raw!r}")
    if isinstance(raw, int):
        if raw < 0:
            raise ValueError(f"negative duration: {raw!r}")
        return raw
    match = _NUMBER_AND_UNIT.fullmatch(str(raw))
    if not match:
        raise ValueError(f"not a duration: {raw!r}")
    number, unit = int(match.group(1)), match.group(2).lower()
    if not unit:
        return number
    if unit not in _DURATION_UNITS_MS:
        raise ValueError(f"unknown duration unit {unit!r}")
    return number * _DURATION_UNITS_MS[unit]


def format_duration_ms(ms: int) -> str:
    """The shortest exact Flink-syntax spelling, so values survive a round trip through strings.

    >>> format_duration_ms(0), format_duration_ms(1500), format_duration_ms(3_600_000)
    ('0 ms', '1500 ms', '1 h')
    """
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size} {unit}"
    return f"{ms} ms"


def parse_memory_size(raw: object) -> int:
    """Parse Flink's memory sizes into bytes: binary units (1 kb = 1024 bytes), bare numbers are
    bytes. Raises ValueError.

    >>> parse_memory_size("1 g"), parse_memory_size(512), parse_memory_size("8mb")
    (1073741824, 512, 8388608)
    """
    if isinstance(raw, bool):
        raise ValueError(f"not a memory size: {raw!r}")
    if isinstance(raw, int):
        if raw < 0:
            raise ValueError(f"negative memory size: {raw!r}")
        return raw
    match = _NUMBER_AND_UNIT.fullmatch(str(raw))
    if not match:
        raise ValueError(f"not a memory size: {raw!r}")
    unit = match.group(2).lower() or "b"
    if unit not in _MEMORY_UNITS:
        raise ValueError(f"unknown memory unit {unit!r}")
    return int(match.group(1)) * _MEMORY_UNITS[unit]


def format_memory_size(size: int) -> str:
    """The largest binary unit that spells ``size`` exactly.

    >>> format_memory_size(32 * 1024), format_memory_size(3 << 30), format_memory_size(1000)
    ('32 kb', '3 gb', '1000 b')
    """
    for unit, step in (("gb", 1 << 30), ("mb", 1 << 20), ("kb", 1 << 10)):
        if size and size % step == 0:
            return f"{size // step} {unit}"
    return f"{size} b"
