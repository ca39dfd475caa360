"""How the PostgreSQL sinks' writers talk to the server: statements, connections, errors.

What the three sinks of :mod:`flinkpy.connectors.postgres` share below their delivery
protocols: how records become a statement's parameters and are written (``COPY`` for a plain
INSERT, pipelined ``executemany`` otherwise), how a writer connects (naming itself in
``application_name``), and how psycopg's errors become flinkpy's, naming the sink's subtask, the
server (without its password) and what to do. psycopg is imported through
:mod:`flinkpy.connectors.drivers`, so a missing driver reports the extra that installs it.

>>> statement = Statement("INSERT INTO t (a, b) VALUES (%s, %s)", row_mapper=None)
>>> statement.copy, statement.columns
(('t', ['a', 'b']), ['a', 'b'])
>>> statement.params([(1, 2), {"a": 3, "b": 4}, [5, 6]])
[(1, 2), (3, 4), (5, 6)]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from flinkpy.common.types import Row
from flinkpy.connectors.base import ReaderContext
from flinkpy.connectors.drivers import POSTGRES, require
from flinkpy.connectors.postgres_sql import _unquote, placeholder_count, plain_insert, redact_dsn
from flinkpy.errors import ClusterUnreachableError, ConfigurationError, FlinkpyError, InvalidProgramError

if TYPE_CHECKING:
    import psycopg

RowMapper = Callable[[Any], Any]

# ---- records to parameters -----------------------------------------------------------------


class Statement:
    """One statement and how records become its parameters; writes batches on a connection."""

    def __init__(self, sql: str, row_mapper: RowMapper | None, columns: list[str] | None = None) -> None:
        self.sql = sql
        self.row_mapper = row_mapper
        self.copy = plain_insert(sql)
        quoted = columns or (self.copy[1] if self.copy else None)
        #: column names, to map dict records by name (None: dicts go to ``%(name)s`` placeholders)
        self.columns = [_unquote(c) for c in quoted] if quoted else None
        self.arity = len(self.columns) if self.columns else placeholder_count(sql)

    def params(self, records: list) -> list:
        mapper = self.row_mapper
        out = []
        for r in records:
            if mapper is not None:
                r = mapper(r)
            if type(r) is tuple:
                out.append(r)
            elif isinstance(r, Mapping):
                out.append(self._by_name(r))
            elif isinstance(r, (tuple, list, Row)):
                out.append(tuple(r))
            else:
                out.append((r,))
        return out

    def _by_name(self, record: Mapping) -> Any:
        if self.columns is None:
            return record
        try:
            return tuple(record[c] for c in self.columns)
        except KeyError as e:
            raise InvalidProgramError(
                f"a record has no field {e.args[0]!r} for the column of that name: {record!r}",
                remedy=f"give dict records the keys {self.columns}, or set a row_mapper",
            ) from None

    def check(self, rows: list) -> None:
        first = rows[0]
        if isinstance(first, tuple) and self.arity and len(first) != self.arity:
            raise InvalidProgramError(
                f"a record has {len(first)} fields for the {self.arity} placeholders of {self.sql!r}: {first!r}",
                remedy="make records match the statement's columns, or set a row_mapper",
            )

    def write(self, cur: psycopg.Cursor, rows: list) -> None:
        if self.copy is not None:
            table, columns = self.copy
            with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            cur.executemany(self.sql, rows)


# ---- connections and errors ----------------------------------------------------------------


class Connections:
    """Connections of one writer, and the errors that name the sink, the server and the remedy."""

    def __init__(self, dsn: str, ctx: ReaderContext, sql: str, connect_timeout: float) -> None:
        self.dsn = dsn
        self.ctx = ctx
        self.sql = sql
        self.connect_timeout = connect_timeout

    @property
    def who(self) -> str:
        c = self.ctx
        return f"sink {c.operator_name or 'PostgresSink'!r} (subtask {c.subtask_index + 1}/{c.parallelism})"

    def connect(self) -> psycopg.Connection:
        psycopg = require(POSTGRES)
        conninfo_to_dict = require(POSTGRES, "psycopg.conninfo").conninfo_to_dict

        extra: dict[str, Any] = {"autocommit": True, "connect_timeout": max(1, round(self.connect_timeout))}
        if "application_name" not in conninfo_to_dict(self.dsn):
            extra["application_name"] = f"flinkpy {self.ctx.operator_name} {self.ctx.subtask_index + 1}/{self.ctx.parallelism}"[:63]
        try:
            return psycopg.connect(self.dsn, **extra)
        except psycopg.OperationalError as e:
            raise ClusterUnreachableError(
                f"{self.who} cannot connect to PostgreSQL at {redact_dsn(self.dsn)}: {first_line(e)}",
                remedy="check that the server runs and accepts connections there"
                " (host, port, database, user, password, pg_hba.conf)",
            ) from e

    def error(self, e: Exception, doing: str) -> Exception:
        """A flinkpy error for a psycopg error raised while ``doing``; others as they are."""
        psycopg = require(POSTGRES)

        where = f"{self.who} at {redact_dsn(self.dsn)}"
        if isinstance(e, FlinkpyError):
            return e
        if isinstance(e, psycopg.errors.ObjectNotInPrerequisiteState) and "prepared transactions are disabled" in str(e):
            return two_phase_disabled(where)
        if isinstance(e, psycopg.errors.OutOfMemory) and "prepared transactions" in str(e):
            return ConfigurationError(
                f"{where}: {doing} failed: {first_line(e)}",
                remedy="raise max_prepared_transactions (each sink subtask holds one prepared transaction "
                "per checkpoint not yet committed), or check that checkpoints complete",
            )
        if isinstance(e, psycopg.ProgrammingError):
            return InvalidProgramError(
                f"{where}: {doing} failed, PostgreSQL rejected {self.sql!r}: {first_line(e)}",
                remedy="fix the statement: table and column names, one placeholder per record field"
                + (", and a unique constraint or primary key on the ON CONFLICT columns" if "ON CONFLICT" in self.sql.upper() else ""),
            )
        if isinstance(e, psycopg.OperationalError):
            return ClusterUnreachableError(
                f"{where}: {doing} failed, the connection broke: {first_line(e)}",
                remedy="check the server; the job restarts from its last checkpoint and nothing uncommitted is lost",
            )
        if isinstance(e, psycopg.Error):
            return FlinkpyError(
                f"{where}: {doing} failed: {type(e).__name__}: {first_line(e)}",
                remedy="check the records against the table's types and constraints",
            )
        return e


def first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def two_phase_disabled(where: str) -> ConfigurationError:
    return ConfigurationError(
        f"{where}: the server has max_prepared_transactions = 0, so it cannot prepare transactions (two-phase commit)",
        remedy="set max_prepared_transactions > 0 in postgresql.conf (at least twice the sink's parallelism) "
        "and restart PostgreSQL, or use an upsert sink",
    )


def is_alive(conn: psycopg.Connection | None) -> bool:
    return conn is not None and not conn.closed and not conn.broken


def close_quietly(conn: psycopg.Connection | None) -> None:
    if conn is not None:
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - closing a broken connection
            pass
