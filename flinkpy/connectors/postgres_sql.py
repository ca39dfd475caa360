"""SQL text for the PostgreSQL sinks: JDBC placeholders translated, statements recognised
(plain INSERTs go through COPY; idempotent upserts), identifiers quoted, DSNs redacted."""

from __future__ import annotations

import re
from collections.abc import Sequence

from flinkpy.connectors.drivers import POSTGRES, require
from flinkpy.errors import InvalidProgramError

# ---- SQL text ------------------------------------------------------------------------------

#: the parts of a statement where ``?`` and ``%`` are not placeholders, and the placeholders
_TOKENS = re.compile(
    r"""
      '(?:[^']|'')*'              # a string literal
    | "(?:[^"]|"")*"              # a quoted identifier
    | \$(\w*)\$.*?\$\1\$          # a dollar-quoted string
    | --[^\n]*                    # a comment
    | /\*.*?\*/                   # a block comment
    | (?P<escaped>\?\?)           # JDBC's escape of a literal ? (jsonb operators)
    | (?P<jdbc>\?)                # a JDBC placeholder
    | (?P<psycopg>%(?:\(\w+\))?[sbt])  # a psycopg placeholder
    """,
    re.S | re.X,
)

_IDENT = r'(?:"(?:[^"]|"")+"|[A-Za-z_][\w$]*)'
_PLAIN_INSERT = re.compile(
    rf"""^\s*INSERT\s+INTO\s+(?P<table>{_IDENT}(?:\s*\.\s*{_IDENT})?)
    \s*\((?P<columns>\s*{_IDENT}(?:\s*,\s*{_IDENT})*\s*)\)
    \s*VALUES\s*\((?P<values>\s*%s(?:\s*,\s*%s)*\s*)\)\s*;?\s*$""",
    re.I | re.X,
)
_ON_CONFLICT = re.compile(r"\bON\s+CONFLICT\b(?P<target>.*?)\bDO\s+(?P<action>NOTHING|UPDATE\s+SET\b(?P<set>.*))", re.I | re.S)
_EXCLUDED_ASSIGNMENT = re.compile(rf"^\s*{_IDENT}\s*=\s*EXCLUDED\s*\.\s*{_IDENT}\s*$", re.I)


def translate_placeholders(sql: str) -> str:
    """Turn a JDBC statement (``?`` placeholders) into psycopg's (``%s``); leave psycopg's alone.

    ``?`` inside string literals, quoted identifiers and comments stays, ``??`` is JDBC's escape
    of a literal ``?``, and ``%`` is doubled (psycopg reads ``%%`` as ``%``). A statement that
    already has ``%s`` or ``%(name)s`` placeholders, or none of either kind, is returned as is.

    >>> translate_placeholders("INSERT INTO t (a, b) VALUES (?, ?)")
    'INSERT INTO t (a, b) VALUES (%s, %s)'
    >>> translate_placeholders("UPDATE t SET note = 'why?', pct = 5 WHERE doc ?? 'k' AND id = ?")
    "UPDATE t SET note = 'why?', pct = 5 WHERE doc ? 'k' AND id = %s"
    >>> translate_placeholders("UPDATE t SET s = 'x%' WHERE id = ?")
    "UPDATE t SET s = 'x%%' WHERE id = %s"
    """
    kinds = {m.lastgroup for m in _TOKENS.finditer(sql)}
    if "psycopg" in kinds or "jdbc" not in kinds:
        return sql

    def replace(m: re.Match[str]) -> str:
        if m.lastgroup == "jdbc":
            return "%s"
        if m.lastgroup == "escaped":
            return "?"
        return m.group(0).replace("%", "%%")

    out: list[str] = []
    pos = 0
    for m in _TOKENS.finditer(sql):
        out.append(sql[pos : m.start()].replace("%", "%%"))
        out.append(replace(m))
        pos = m.end()
    out.append(sql[pos:].replace("%", "%%"))
    return "".join(out)


def _code_only(sql: str) -> str:
    """The statement with literals, quoted identifiers and comments blanked out."""
    return _TOKENS.sub(lambda m: m.group(0) if m.lastgroup else " ", sql)


def placeholder_count(sql: str) -> int:
    """How many psycopg placeholders ``sql`` has (outside literals and comments)."""
    return sum(1 for m in _TOKENS.finditer(sql) if m.lastgroup == "psycopg")


def plain_insert(sql: str) -> tuple[str, list[str]] | None:
    """``(table, [column, ...])`` when ``sql`` is ``INSERT INTO table (columns) VALUES (%s, ...)``
    with one placeholder per column — a statement COPY can replace — else None."""
    m = _PLAIN_INSERT.match(sql)
    if not m:
        return None
    columns = [c.strip() for c in m.group("columns").split(",")]
    if m.group("values").count("%s") != len(columns):
        return None
    return m.group("table").strip(), columns


def is_idempotent_upsert(sql: str) -> bool:
    """Whether replaying ``sql`` with the same values leaves the table unchanged: an
    ``INSERT ... ON CONFLICT ... DO NOTHING``, or ``DO UPDATE SET`` whose every assignment takes
    an ``EXCLUDED`` value (``SET total = t.total + EXCLUDED.total`` accumulates: not idempotent).

    >>> is_idempotent_upsert("INSERT INTO t (k, v) VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v")
    True
    >>> is_idempotent_upsert("INSERT INTO t (k, v) VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET v = t.v + EXCLUDED.v")
    False
    """
    code = _code_only(sql)
    if not re.match(r"^\s*INSERT\b", code, re.I):
        return False
    m = _ON_CONFLICT.search(code)
    if not m:
        return False
    if m.group("set") is None:
        return True
    assignments = re.split(r"\b(?:WHERE|RETURNING)\b|;", m.group("set"), maxsplit=1, flags=re.I)[0]
    return all(_EXCLUDED_ASSIGNMENT.match(a) for a in assignments.split(","))


def quote_identifier(name: str) -> str:
    """``"name"`` (case kept as given); ``schema.table`` quotes each part; quoted parts stay."""
    parts = re.findall(r'"(?:[^"]|"")+"|[^.]+', name)
    return ".".join(p if p.startswith('"') else '"' + p.replace('"', '""') + '"' for p in parts)


def _unquote(identifier: str) -> str:
    """A column's name as dict records key it: as written in the statement, without quotes."""
    if identifier.startswith('"'):
        return identifier[1:-1].replace('""', '"')
    return identifier


def _literal(text: str) -> str:
    """A SQL string literal (transaction ids cannot be bound as parameters)."""
    return "'" + text.replace("'", "''") + "'"


def upsert_statement(table: str, columns: Sequence[str], key_columns: Sequence[str]) -> str:
    """The ``INSERT ... ON CONFLICT (keys) DO UPDATE SET`` statement of an upsert sink."""
    if not columns:
        raise InvalidProgramError("an upsert sink needs at least one column", remedy="pass the table's columns to write")
    missing = [k for k in key_columns if k not in columns]
    if not key_columns or missing:
        raise InvalidProgramError(
            f"upsert into {table}: key columns {list(key_columns)} must be a non-empty subset of the columns {list(columns)}",
            remedy="list the columns of the table's primary key or of a unique constraint as key_columns",
        )
    cols = ", ".join(quote_identifier(c) for c in columns)
    values = ", ".join(["%s"] * len(columns))
    keys = ", ".join(quote_identifier(k) for k in key_columns)
    rest = [c for c in columns if c not in key_columns]
    assignments = ", ".join(f"{quote_identifier(c)} = EXCLUDED.{quote_identifier(c)}" for c in rest)
    action = f"DO UPDATE SET {assignments}" if rest else "DO NOTHING"
    return f"INSERT INTO {quote_identifier(table)} ({cols}) VALUES ({values}) ON CONFLICT ({keys}) {action}"


def redact_dsn(dsn: str) -> str:
    """The connection string without its password, for messages and logs.

    >>> redact_dsn("postgresql://app:secret@db:5432/shop")
    'host=db port=5432 user=app dbname=shop'
    """
    conninfo = require(POSTGRES, "psycopg.conninfo")
    conninfo_to_dict, make_conninfo = conninfo.conninfo_to_dict, conninfo.make_conninfo

    try:
        params = conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001 - an unparsable DSN: show nothing of it that may be secret
        return "<unparsable DSN>"
    params.pop("password", None)
    first = [k for k in ("host", "hostaddr", "port", "user", "dbname") if k in params]
    ordered = {k: str(params[k]) for k in first + sorted(set(params) - set(first))}
    return make_conninfo(**ordered)
