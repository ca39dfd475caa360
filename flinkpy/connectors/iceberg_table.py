"""The Iceberg side of :mod:`flinkpy.connectors.iceberg`: opening a catalog and a table with
errors an operator can act on, checking a stream's type against the table's schema, and turning
records into Arrow tables of the table's schema.

Everything here talks to pyiceberg and pyarrow (the ``iceberg`` extra); the sink's protocol lives
in :mod:`flinkpy.connectors.iceberg`.

>>> from flinkpy.common import Types
>>> columns = [("k", "long", True), ("v", "string", False)]
>>> type_mismatches(Types.ROW_NAMED(["k", "v"], [Types.LONG(), Types.STRING()]), columns)
[]
>>> type_mismatches(Types.ROW_NAMED(["key", "v"], [Types.INT(), Types.STRING()]), columns)
["the records have no field 'k' (the table's columns are k, v)", "the records' field 'key' is not a column of the table (its columns are k, v)"]
>>> type_mismatches(Types.ROW_NAMED(["k", "v"], [Types.STRING(), Types.STRING()]), columns)
["the records' field 'k' is STRING, column 'k' is long"]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flinkpy.common.typeinfo import BasicTypeInfo, RowTypeInfo, TupleTypeInfo
from flinkpy.common.types import Row
from flinkpy.connectors.drivers import ICEBERG, require
from flinkpy.errors import ConfigurationError, InvalidProgramError, NotFoundError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

#: the Iceberg primitive types a stream's basic type may be written to (promotions included)
_WRITES_TO: dict[str, tuple[str, ...]] = {
    "STRING": ("string",),
    "CHAR": ("string",),
    "BOOLEAN": ("boolean",),
    "BYTE": ("int", "long"),
    "SHORT": ("int", "long"),
    "INT": ("int", "long"),
    "LONG": ("long",),
    "BIG_INT": ("long",),
    "FLOAT": ("float", "double"),
    "DOUBLE": ("double",),
    "SQL_DATE": ("date",),
    "SQL_TIME": ("time",),
    "SQL_TIMESTAMP": ("timestamp", "timestamp_ns"),
    "INSTANT": ("timestamptz", "timestamptz_ns"),
    "PRIMITIVE_ARRAY(BYTE)": ("binary",),
}


#: the Iceberg type of a column created for a stream's basic type (see :func:`create_table`)
_CREATES: dict[str, str] = {
    "STRING": "string", "CHAR": "string", "BOOLEAN": "boolean", "BYTE": "int", "SHORT": "int", "INT": "int",
    "LONG": "long", "BIG_INT": "long", "FLOAT": "float", "DOUBLE": "double", "BIG_DEC": "decimal(38, 18)",
    "SQL_DATE": "date", "SQL_TIME": "time", "SQL_TIMESTAMP": "timestamp", "INSTANT": "timestamptz",
    "PRIMITIVE_ARRAY(BYTE)": "binary",
}


class IcebergSchemaError(InvalidProgramError):
    """The records do not fit the table's schema (exit 7, like any other program error)."""


def open_catalog(name: str, properties: dict[str, str]) -> Catalog:
    """pyiceberg's ``load_catalog(name, **properties)``; a ConfigurationError (exit 8) naming the
    catalog when it cannot be opened."""
    catalog = require(ICEBERG, "pyiceberg.catalog")
    try:
        return catalog.load_catalog(name, **properties)
    except Exception as e:  # noqa: BLE001 - every catalog implementation fails in its own way
        kind = properties.get("type", "from ~/.pyiceberg.yaml or PYICEBERG_CATALOG__* variables")
        raise ConfigurationError(
            f"cannot open the Iceberg catalog {name!r} (type {kind}): {_first_line(e)}",
            remedy="correct the catalog properties given to IcebergSink (type, uri, warehouse, ...)",
        ) from None


def load_table(catalog: Catalog, catalog_name: str, identifier: str) -> Table:
    """The table; a NotFoundError (exit 4) naming table and catalog when it does not exist."""
    exceptions = require(ICEBERG, "pyiceberg.exceptions")
    try:
        return catalog.load_table(identifier)
    except (exceptions.NoSuchTableError, exceptions.NoSuchNamespaceError, exceptions.NoSuchIdentifierError):
        raise NotFoundError(
            f"the Iceberg table {identifier!r} does not exist in catalog {catalog_name!r}",
            remedy="create it first (catalog.create_table(...)) or correct the table name given to IcebergSink",
        ) from None
    except Exception as e:  # noqa: BLE001
        raise ConfigurationError(
            f"cannot load the Iceberg table {identifier!r} from catalog {catalog_name!r}: {_first_line(e)}",
            remedy="check that the catalog is reachable and its properties are right",
        ) from None


def columns_of(type_info: Any, identifier: str) -> list[tuple[str, str]]:
    """``(name, Iceberg type)`` of the columns a table for records of ``type_info`` gets: a named
    Row's fields by name; a Tuple's or unnamed Row's as ``f0, f1, ...`` (Flink's names); a basic
    type as the one column ``f0``. An IcebergSchemaError names what has no Iceberg column type.

    >>> from flinkpy.common import Types
    >>> columns_of(Types.ROW_NAMED(["id", "ts"], [Types.LONG(), Types.SQL_TIMESTAMP()]), "db.t")
    [('id', 'long'), ('ts', 'timestamp')]
    >>> columns_of(Types.TUPLE([Types.INT(), Types.STRING()]), "db.t")
    [('f0', 'int'), ('f1', 'string')]
    """
    if isinstance(type_info, RowTypeInfo) and type_info._named:
        fields = list(zip(type_info.get_field_names(), type_info.get_field_types()))
    elif isinstance(type_info, (RowTypeInfo, TupleTypeInfo)):
        fields = [(f"f{i}", t) for i, t in enumerate(type_info.get_field_types())]
    elif isinstance(type_info, BasicTypeInfo) and type(type_info) is BasicTypeInfo:
        fields = [("f0", type_info)]
    else:
        raise IcebergSchemaError(
            f"cannot create Iceberg table {identifier!r}: the stream's type {type_info} says no columns",
            remedy="give the stream an output_type (Types.ROW_NAMED([...names], [...types])), or create the table first",
        )
    out = []
    for name, t in fields:
        iceberg_type = _CREATES.get(str(t))
        if iceberg_type is None:
            raise IcebergSchemaError(
                f"cannot create Iceberg table {identifier!r}: field {name!r} is {t}, which has no Iceberg column type here",
                remedy=f"map the field to one of {', '.join(sorted(_CREATES))}, or create the table first",
            )
        out.append((name, iceberg_type))
    return out


def create_table(catalog: Catalog, catalog_name: str, identifier: str, type_info: Any,
                 partition_by: list[tuple[str, str]]) -> Table:
    """Create ``identifier`` with a column per field of ``type_info`` (all optional: a stream's
    type does not say which fields are never null), partitioned by ``(column, transform)`` pairs
    in Iceberg's transform names (``identity``, ``truncate[4]``, ``year``, ``month``, ``day``,
    ``hour``; not ``bucket[N]``, which the sink's commit cannot take). A table someone created meanwhile is loaded instead."""
    schema_mod = require(ICEBERG, "pyiceberg.schema")
    types = require(ICEBERG, "pyiceberg.types")
    transforms = require(ICEBERG, "pyiceberg.transforms")
    exceptions = require(ICEBERG, "pyiceberg.exceptions")
    columns = columns_of(type_info, identifier)
    names = [n for n, _ in columns]
    fields = [types.NestedField(i, n, _iceberg_type(types, t), required=False) for i, (n, t) in enumerate(columns, start=1)]
    parsed = []
    for column, transform in partition_by:
        if column not in names:
            raise IcebergSchemaError(
                f"cannot partition Iceberg table {identifier!r} by {column!r}: the stream has no such field (its fields are {', '.join(names)})",
                remedy="name a field of the stream's type in set_partition_by",
            )
        try:
            parsed_transform = transforms.parse_transform(transform)
        except Exception as e:  # noqa: BLE001 - pyiceberg raises ValueError or its own
            raise ConfigurationError(
                f"cannot partition Iceberg table {identifier!r} by {transform!r} of {column!r}: {_first_line(e)}",
                remedy="use one of Iceberg's transforms: identity, truncate[W], year, month, day, hour",
            ) from None
        if not parsed_transform.preserves_order:
            # the sink commits with pyiceberg's add_files, which reads a file's partition from its
            # column statistics: only an order-preserving transform can be read back that way
            raise ConfigurationError(
                f"cannot partition Iceberg table {identifier!r} by {transform!r} of {column!r}: the IcebergSink commits"
                " through pyiceberg's add_files, which cannot commit files of a transform that does not preserve order",
                remedy="use identity, truncate[W], year, month, day or hour",
            )
        parsed.append((column, parsed_transform))
    try:
        txn = catalog.create_table_transaction(identifier, schema_mod.Schema(*fields))
        if parsed:
            with txn.update_spec() as spec:
                for column, transform in parsed:
                    spec.add_field(column, transform)
        return txn.commit_transaction()
    except exceptions.TableAlreadyExistsError:
        return load_table(catalog, catalog_name, identifier)
    except exceptions.NoSuchNamespaceError:
        raise NotFoundError(
            f"cannot create Iceberg table {identifier!r}: its namespace does not exist in catalog {catalog_name!r}",
            remedy="create the namespace first (catalog.create_namespace(...)) or correct the table name",
        ) from None
    except ValueError as e:  # a transform the column's type does not take
        raise ConfigurationError(
            f"cannot create Iceberg table {identifier!r} partitioned by {partition_by}: {_first_line(e)}",
            remedy="choose a transform that the column's type takes (day of a timestamp, bucket or truncate of a number or string)",
        ) from None


def _iceberg_type(types: Any, name: str) -> Any:
    if name.startswith("decimal"):
        return types.DecimalType(38, 18)
    return {
        "string": types.StringType(), "boolean": types.BooleanType(), "int": types.IntegerType(), "long": types.LongType(),
        "float": types.FloatType(), "double": types.DoubleType(), "date": types.DateType(), "time": types.TimeType(),
        "timestamp": types.TimestampType(), "timestamptz": types.TimestamptzType(), "binary": types.BinaryType(),
    }[name]


def table_columns(table: Table) -> list[tuple[str, str, bool]]:
    """``(name, Iceberg type, required)`` per top-level column, in the table's order."""
    return [(f.name, str(f.field_type), f.required) for f in table.schema().fields]


def type_mismatches(type_info: Any, columns: list[tuple[str, str, bool]]) -> list[str]:
    """What keeps records of ``type_info`` from being written to a table of ``columns``; empty
    when they fit or when the type says too little to tell (pickled Python objects)."""
    names = [c[0] for c in columns]
    listed = ", ".join(names)
    if isinstance(type_info, RowTypeInfo) and type_info._named:
        fields = dict(zip(type_info.get_field_names(), type_info.get_field_types()))
        out = [f"the records have no field {n!r} (the table's columns are {listed})"
               for n, _, required in columns if required and n not in fields]
        out += [f"the records' field {n!r} is not a column of the table (its columns are {listed})" for n in fields if n not in names]
        for n, iceberg_type, _ in columns:
            if n in fields and not _fits(fields[n], iceberg_type):
                out.append(f"the records' field {n!r} is {fields[n]}, column {n!r} is {iceberg_type}")
        return out
    if isinstance(type_info, (RowTypeInfo, TupleTypeInfo)):
        types = type_info.get_field_types()
        if len(types) != len(columns):
            return [f"the records have {len(types)} fields, the table has {len(columns)} columns ({listed})"]
        return [f"field {i} of the records is {t}, column {n!r} is {iceberg_type}"
                for i, (t, (n, iceberg_type, _)) in enumerate(zip(types, columns)) if not _fits(t, iceberg_type)]
    if isinstance(type_info, BasicTypeInfo) and type(type_info) is BasicTypeInfo:
        if len(columns) != 1:
            return [f"the records are single {type_info} values, the table has {len(columns)} columns ({listed})"]
        return [] if _fits(type_info, columns[0][1]) else [f"the records are {type_info}, column {names[0]!r} is {columns[0][1]}"]
    return []


def _fits(type_info: Any, iceberg_type: str) -> bool:
    allowed = _WRITES_TO.get(str(type_info))
    if allowed is None:
        return True  # a nested or pickled type: pyarrow judges each record
    return iceberg_type in allowed or (iceberg_type.startswith("decimal") and str(type_info) == "BIG_DEC")


def arrow_schema(table: Table) -> pa.Schema:
    """The table's schema in Arrow without Iceberg's field ids: ``add_files`` takes only files
    whose columns are matched by name."""
    pa = require(ICEBERG, "pyarrow")
    return pa.schema([f.remove_metadata() for f in table.schema().as_arrow()])


def to_arrow(records: list, schema: pa.Schema, identifier: str) -> pa.Table:
    """Records (dicts or named Rows by column name; tuples, lists or unnamed Rows by position; a
    single value for a one-column table) as an Arrow table of ``schema``."""
    pa = require(ICEBERG, "pyarrow")
    names = schema.names
    columns: list[list] = [[] for _ in names]
    for record in records:
        values = _values(record, names, identifier)
        for column, value in zip(columns, values):
            column.append(value)
    arrays = []
    for field, column in zip(schema, columns):
        try:
            arrays.append(pa.array(column, type=field.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
            raise IcebergSchemaError(
                f"column {field.name!r} of Iceberg table {identifier!r} is {field.type}, a record holds a value it cannot take: {_first_line(e)}",
                remedy="map the records to the table's column types, or change the table's schema",
            ) from None
    try:
        return pa.Table.from_arrays(arrays, schema=schema)
    except (pa.ArrowInvalid, ValueError) as e:  # a required column with a null
        raise IcebergSchemaError(
            f"records do not fit Iceberg table {identifier!r}: {_first_line(e)}",
            remedy="give every required column a value, or make the column optional",
        ) from None


def _values(record: Any, names: list[str], identifier: str) -> list:
    if isinstance(record, Row) and record._fields is not None:
        record = record.as_dict()
    if isinstance(record, dict):
        unknown = [k for k in record if k not in names]
        if unknown:
            raise IcebergSchemaError(
                f"a record has field {unknown[0]!r}, which is not a column of Iceberg table {identifier!r} (its columns are {', '.join(names)})",
                remedy="rename or drop the field, or add the column to the table",
            )
        return [record.get(n) for n in names]
    if isinstance(record, (tuple, list, Row)):
        if len(record) != len(names):
            raise IcebergSchemaError(
                f"a record has {len(record)} fields, Iceberg table {identifier!r} has {len(names)} columns ({', '.join(names)})",
                remedy="map the records to one value per column, in the table's order (or to dicts by column name)",
            )
        return list(record)
    if len(names) == 1:
        return [record]
    raise IcebergSchemaError(
        f"a record of type {type(record).__name__} cannot fill the {len(names)} columns of Iceberg table {identifier!r}",
        remedy="map the records to tuples, Rows or dicts of the table's columns",
    )


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]
