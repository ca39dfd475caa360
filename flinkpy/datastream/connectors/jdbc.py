"""PyFlink's JDBC sink API (``pyflink.datastream.connectors.jdbc``), on PostgreSQL only.

A job written for PyFlink's ``JdbcSink`` runs unchanged against PostgreSQL: the JDBC URL
(``jdbc:postgresql://host:port/database``) becomes a libpq connection string and the statement's
``?`` placeholders become psycopg's ``%s``. What you get:

- :meth:`JdbcSink.sink` — statements committed in batches (``batch_size`` records, every
  ``batch_interval_ms``, at each checkpoint): **at-least-once**, a
  :class:`~flinkpy.connectors.postgres.PostgresBatchSink`. When the statement is an idempotent
  upsert (``INSERT ... ON CONFLICT ... DO UPDATE SET c = EXCLUDED.c`` or ``DO NOTHING``) replays
  change nothing, and the sink is **exactly-once for deterministic results per key**: a
  :class:`~flinkpy.connectors.postgres.PostgresUpsertSink`.
- :meth:`JdbcSink.exactly_once_sink` — **exactly-once** by two-phase commit (PostgreSQL's
  ``PREPARE TRANSACTION``), a :class:`~flinkpy.connectors.postgres.PostgresSink`.

Values are adapted by psycopg from their Python types; ``type_info`` (a ``RowTypeInfo``) is
checked against the statement's number of placeholders.

>>> options = (JdbcConnectionOptions.JdbcConnectionOptionsBuilder()
...            .with_url("jdbc:postgresql://db.example:5432/shop?ApplicationName=orders")
...            .with_user_name("app").build())
>>> options.dsn()
'host=db.example port=5432 dbname=shop application_name=orders user=app'
>>> from flinkpy.common import Types
>>> sink = JdbcSink.sink("INSERT INTO orders (id, amount) VALUES (?, ?)",
...                      Types.ROW([Types.LONG(), Types.DOUBLE()]), options)
>>> sink.guarantee, sink.sql
('at-least-once', 'INSERT INTO orders (id, amount) VALUES (%s, %s)')
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from flinkpy.connectors.drivers import POSTGRES, require
from flinkpy.connectors.postgres import PostgresBatchSink, PostgresSink, PostgresUpsertSink
from flinkpy.connectors.postgres_sql import is_idempotent_upsert, placeholder_count, translate_placeholders
from flinkpy.errors import ConfigurationError, InvalidProgramError

__all__ = ["JdbcConnectionOptions", "JdbcExactlyOnceOptions", "JdbcExecutionOptions", "JdbcSink"]

#: JDBC URL parameters of the PostgreSQL driver that libpq understands (others are ignored:
#: they tune the Java driver)
_JDBC_TO_LIBPQ = {
    "user": "user",
    "password": "password",
    "sslmode": "sslmode",
    "sslrootcert": "sslrootcert",
    "sslcert": "sslcert",
    "sslkey": "sslkey",
    "connecttimeout": "connect_timeout",
    "applicationname": "application_name",
    "options": "options",
    "targetservertype": "target_session_attrs",
}
_TARGET_SERVER = {"any": "any", "primary": "read-write", "master": "read-write", "secondary": "standby", "preferprimary": "prefer-standby"}


def jdbc_url_to_dsn(url: str, user: str | None = None, password: str | None = None) -> str:
    """The libpq connection string of a ``jdbc:postgresql:`` URL; other URLs are refused.

    >>> jdbc_url_to_dsn("jdbc:postgresql://h1:5432,h2:5433/db?ssl=true&reWriteBatchedInserts=true", "app")
    'host=h1,h2 port=5432,5433 dbname=db sslmode=require user=app'
    """
    make_conninfo = require(POSTGRES, "psycopg.conninfo").make_conninfo

    if not url.startswith("jdbc:postgresql:"):
        kind = url.split(":", 2)[1] if url.startswith("jdbc:") and url.count(":") >= 2 else url.split("://", 1)[0]
        raise ConfigurationError(
            f"JDBC URL {url.split('?', 1)[0]!r}: flinkpy's JdbcSink writes to PostgreSQL only, not {kind!r}",
            remedy="use a jdbc:postgresql://host:port/database URL, or write your own Sink for that database",
        )
    rest = url[len("jdbc:postgresql:") :]
    params: dict[str, str] = {}
    if rest.startswith("//"):
        parts = urlsplit("postgresql:" + rest)
        hosts, ports = [], []
        for hp in filter(None, parts.netloc.split(",")):
            host, _, port = hp.rpartition(":") if not hp.endswith("]") and ":" in hp else (hp, "", "")
            hosts.append(host.strip("[]"))
            ports.append(port or "5432")
        if hosts:
            params["host"] = ",".join(hosts)
            params["port"] = ",".join(ports)
        path, query = parts.path, parts.query
    else:  # jdbc:postgresql:database — the local server
        path, _, query = rest.partition("?")
    database = unquote(path.lstrip("/"))
    if database:
        params["dbname"] = database
    for key, value in parse_qsl(query):
        k = key.lower()
        if k == "ssl" and value.lower() in ("true", "1", "") and "sslmode" not in params:
            params["sslmode"] = "require"
        elif k == "currentschema":
            params["options"] = f"-c search_path={value}"
        elif k == "targetservertype":
            params["target_session_attrs"] = _TARGET_SERVER.get(value.lower(), "any")
        elif k in _JDBC_TO_LIBPQ:
            params[_JDBC_TO_LIBPQ[k]] = value
    if user:
        params["user"] = user
    if password:
        params["password"] = password
    return make_conninfo(**params)


class JdbcConnectionOptions:
    """Where the database is: a JDBC URL, and optionally a user and password."""

    def __init__(self, url: str, driver_name: str | None = None, user_name: str | None = None, password: str | None = None) -> None:
        if driver_name and driver_name != "org.postgresql.Driver":
            raise ConfigurationError(
                f"JDBC driver {driver_name!r}: flinkpy's JdbcSink writes to PostgreSQL only",
                remedy="leave the driver name unset, or use org.postgresql.Driver",
            )
        self._url = url
        self._driver_name = driver_name
        self._user_name = user_name
        self._password = password
        self._dsn = jdbc_url_to_dsn(url, user_name, password)

    def get_db_url(self) -> str:
        return self._url

    def get_driver_name(self) -> str | None:
        return self._driver_name

    def get_user_name(self) -> str | None:
        return self._user_name

    def get_password(self) -> str | None:
        return self._password

    def dsn(self) -> str:
        """The libpq connection string the sinks connect with."""
        return self._dsn

    class JdbcConnectionOptionsBuilder:
        def __init__(self) -> None:
            self._url: str | None = None
            self._driver_name: str | None = None
            self._user_name: str | None = None
            self._password: str | None = None

        def with_url(self, url: str) -> JdbcConnectionOptions.JdbcConnectionOptionsBuilder:
            self._url = url
            return self

        def with_driver_name(self, driver_name: str) -> JdbcConnectionOptions.JdbcConnectionOptionsBuilder:
            self._driver_name = driver_name
            return self

        def with_user_name(self, user_name: str) -> JdbcConnectionOptions.JdbcConnectionOptionsBuilder:
            self._user_name = user_name
            return self

        def with_password(self, password: str) -> JdbcConnectionOptions.JdbcConnectionOptionsBuilder:
            self._password = password
            return self

        def build(self) -> JdbcConnectionOptions:
            if not self._url:
                raise ConfigurationError("JdbcConnectionOptions need a URL", remedy="call with_url('jdbc:postgresql://host:port/database')")
            return JdbcConnectionOptions(self._url, self._driver_name, self._user_name, self._password)


class JdbcExecutionOptions:
    """How :meth:`JdbcSink.sink` batches: ``batch_size`` records per transaction (default
    5000), a batch written once its oldest record waited ``batch_interval_ms`` (0: no time
    limit; checked at the next record), ``max_retries`` after a broken connection (default 3).
    Every checkpoint writes what is buffered. The exactly-once sink writes every batch the
    engine hands it at once, inside the checkpoint's transaction, and ignores these."""

    def __init__(self, batch_size: int = 5000, batch_interval_ms: int = 0, max_retries: int = 3) -> None:
        self._batch_size = batch_size
        self._batch_interval_ms = batch_interval_ms
        self._max_retries = max_retries

    def get_batch_size(self) -> int:
        return self._batch_size

    def get_batch_interval_ms(self) -> int:
        return self._batch_interval_ms

    def get_max_retries(self) -> int:
        return self._max_retries

    @staticmethod
    def defaults() -> JdbcExecutionOptions:
        return JdbcExecutionOptions()

    @staticmethod
    def builder() -> JdbcExecutionOptions.Builder:
        return JdbcExecutionOptions.Builder()

    class Builder:
        def __init__(self) -> None:
            self._options: dict[str, int] = {}

        def with_batch_size(self, size: int) -> JdbcExecutionOptions.Builder:
            self._options["batch_size"] = size
            return self

        def with_batch_interval_ms(self, interval_ms: int) -> JdbcExecutionOptions.Builder:
            self._options["batch_interval_ms"] = interval_ms
            return self

        def with_max_retries(self, max_retries: int) -> JdbcExecutionOptions.Builder:
            self._options["max_retries"] = max_retries
            return self

        def build(self) -> JdbcExecutionOptions:
            return JdbcExecutionOptions(**self._options)


class JdbcExactlyOnceOptions:
    """Options of :meth:`JdbcSink.exactly_once_sink`: ``max_commit_attempts`` of a
    ``COMMIT PREPARED`` whose connection broke (default 3; then the task fails and its recovery
    commits). ``transaction_per_connection`` is accepted for portability: PostgreSQL's prepared
    transactions never need a connection of their own."""

    def __init__(self, max_commit_attempts: int = 3, transaction_per_connection: bool = False) -> None:
        self._max_commit_attempts = max_commit_attempts
        self._transaction_per_connection = transaction_per_connection

    def get_max_commit_attempts(self) -> int:
        return self._max_commit_attempts

    def is_transaction_per_connection(self) -> bool:
        return self._transaction_per_connection

    @staticmethod
    def defaults() -> JdbcExactlyOnceOptions:
        return JdbcExactlyOnceOptions()

    @staticmethod
    def builder() -> JdbcExactlyOnceOptions.Builder:
        return JdbcExactlyOnceOptions.Builder()

    class Builder:
        def __init__(self) -> None:
            self._options: dict[str, Any] = {}

        def with_max_commit_attempts(self, attempts: int) -> JdbcExactlyOnceOptions.Builder:
            self._options["max_commit_attempts"] = attempts
            return self

        def with_transaction_per_connection(self, enabled: bool) -> JdbcExactlyOnceOptions.Builder:
            self._options["transaction_per_connection"] = enabled
            return self

        def build(self) -> JdbcExactlyOnceOptions:
            return JdbcExactlyOnceOptions(**self._options)


def _check_arity(sql: str, type_info: Any) -> None:
    arity = getattr(type_info, "get_arity", None)
    if arity is None:
        return
    wanted = placeholder_count(sql)
    if wanted and arity() != wanted:
        raise InvalidProgramError(
            f"the statement has {wanted} placeholders but the type {type_info} has {arity()} fields: {sql!r}",
            remedy="give the statement one placeholder per field of the records",
        )


class JdbcSink:
    """Factories of PostgreSQL sinks with PyFlink's JDBC signatures (use with ``add_sink`` or
    ``sink_to``)."""

    @staticmethod
    def sink(
        sql: str,
        type_info: Any,
        jdbc_connection_options: JdbcConnectionOptions,
        jdbc_execution_options: JdbcExecutionOptions | None = None,
    ) -> PostgresBatchSink:
        """Batches in ordinary transactions: at-least-once, or exactly-once for deterministic
        results per key when ``sql`` is an idempotent upsert (see the module docstring)."""
        sql = translate_placeholders(sql)
        _check_arity(sql, type_info)
        options = jdbc_execution_options or JdbcExecutionOptions.defaults()
        kw = {
            "batch_size": options.get_batch_size(),
            "batch_interval_ms": options.get_batch_interval_ms(),
            "max_retries": options.get_max_retries(),
        }
        dsn = jdbc_connection_options.dsn()
        if is_idempotent_upsert(sql):
            return PostgresUpsertSink.of_sql(dsn, sql, **kw)
        return PostgresBatchSink(dsn, sql, **kw)

    @staticmethod
    def exactly_once_sink(
        sql: str,
        type_info: Any,
        jdbc_execution_options: JdbcExecutionOptions,
        jdbc_exactly_once_options: JdbcExactlyOnceOptions,
        jdbc_connection_options: JdbcConnectionOptions,
    ) -> PostgresSink:
        """Two-phase commit: rows show when the checkpoint that covers them completes."""
        sql = translate_placeholders(sql)
        _check_arity(sql, type_info)
        options = jdbc_exactly_once_options or JdbcExactlyOnceOptions.defaults()
        return PostgresSink(jdbc_connection_options.dsn(), sql, max_commit_attempts=options.get_max_commit_attempts())
