"""The order of a Debezium connector's own log, the default sequence of an `envelope: debezium` silver that leaves
`sequenceBy` unset: chosen from the fields bronze's `source` record has, and written once, as SQL both engines
parse (`sequence_sql`), for Spark's fold and MERGE (`changes`) and for DuckDB's fold (`fold_sql`, `verify`).

The sequence is a record of the position's parts, compared part by part (lexicographically, in both engines):
- PostgreSQL: `{lsn}`, the change's WAL position (`source.lsn`, int64).
- MySQL, MariaDB: `{file, pos, row}`: the binlog file by its number (`mysql-bin.000003` is 3, as Debezium
  compares binlog files), the event's position in it (`pos`, int64) and the row within the event (`row`).
- SQL Server: `{commit_lsn, change_lsn, event_serial_no}`: the LSNs are fixed-width hex text
  (`0000002d:00000c58:0003`), so their text (lowercased) orders as the LSNs do; `event_serial_no` orders the two
  events of one change (an update's).
- Oracle: `{scn, commit_scn}`, decimal digits as text, compared as DECIMAL(38,0).

A part a record lacks (null: a snapshot's `change_lsn`, a `commit_scn`) sorts lowest (-1, ''); a record without
the first part has no position: its `_sequence` is null, which the fold orders as any null sequence (lowest, then
Kafka order), and a truncate without one is placed by Kafka order (`truncates`). Equal positions (the rows of one
snapshot, two events of one MySQL transaction that Debezium gives the same `pos`) fall back to Kafka order: offset
within a partition, then topic and partition (`changes._order`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import types as T

from ingestion.errors import ConfigError

SOURCE = "source"  # the envelope's source block


@dataclass(frozen=True)
class Part:
    name: str  # the field of `_sequence` (and of `source`)
    kind: str  # long | binlog (a binlog file name, by its number) | hex (fixed-width hex text) | decimal (digits)
    required: bool = True  # the connector is recognised only when `source` has it


@dataclass(frozen=True)
class Connector:
    name: str
    parts: tuple[Part, ...]


# Most specific first: SQL Server's commit/change LSNs before PostgreSQL's single `lsn`.
CONNECTORS = (
    Connector("sqlserver", (Part("commit_lsn", "hex"), Part("change_lsn", "hex"),
                            Part("event_serial_no", "long", required=False))),
    Connector("mysql", (Part("file", "binlog"), Part("pos", "long"), Part("row", "long", required=False))),
    Connector("oracle", (Part("scn", "decimal"), Part("commit_scn", "decimal", required=False))),
    Connector("postgresql", (Part("lsn", "long"),)),
)


@dataclass(frozen=True)
class SourceOrder:
    """The connector recognised and the parts of its position `source` has, in order."""

    connector: str
    parts: tuple[Part, ...]

    @property
    def fields(self) -> str:
        """The position's fields as the docs and messages name them: `source.file, source.pos, source.row`."""
        return ", ".join(f"{SOURCE}.{p.name}" for p in self.parts)


def of(bronze: T.StructType, file: str) -> SourceOrder:
    """The order of the connector whose position fields bronze's `source` record has; a ConfigError naming the file,
    the key and what `source` holds when it has none of them."""
    source = bronze[SOURCE].dataType if SOURCE in bronze.fieldNames() else None
    names = source.fieldNames() if isinstance(source, T.StructType) else []
    found = find(source) if isinstance(source, T.StructType) else None
    if found is None:
        raise ConfigError(
            f"{file}: key 'silver.sequenceBy' is unset, and with 'silver.envelope: debezium' the order is the "
            f"connector's position in bronze's 'source' record, which has none that silver knows (source fields: "
            f"{names or 'no source column'}; known: PostgreSQL's lsn, MySQL's file and pos, SQL Server's commit_lsn "
            f"and change_lsn, Oracle's scn): set 'silver.sequenceBy' to a field that orders a key's changes, or to "
            f"'kafka' for Kafka's order")
    return found


def find(source: T.StructType) -> SourceOrder | None:
    """The first connector (`CONNECTORS`) whose required fields `source` has, with those of its parts it has."""
    names = set(source.fieldNames())
    for connector in CONNECTORS:
        if all(p.name in names for p in connector.parts if p.required):
            kept = tuple(_as_typed(p, source[p.name].dataType) for p in connector.parts if p.name in names)
            return SourceOrder(connector.name, kept)
    return None


def _as_typed(part: Part, kind: T.DataType) -> Part:
    """A part whose field is a number is compared as one, whatever its connector's text form would be."""
    if isinstance(kind, T.ByteType | T.ShortType | T.IntegerType | T.LongType) and part.kind != "long":
        return Part(part.name, "long", part.required)
    return part


def sequence_sql(order: SourceOrder, field: Callable[[str], str],
                 pack: Callable[[list[tuple[str, str]]], str]) -> str:
    """The sequence as one SQL expression of Spark's and DuckDB's common dialect: `field(name)` is the expression of
    `source.<name>` in the engine, `pack([(name, expression), ...])` its named record. Null when the record has no
    position (its first part is null)."""
    parts = []
    for part in order.parts:
        column = field(part.name)
        if part.kind == "long":
            value = f"coalesce(CAST({column} AS BIGINT), CAST(-1 AS BIGINT))"
        elif part.kind == "binlog":  # mysql-bin.000012 -> 12; a name without a number -> -1
            value = (f"coalesce(TRY_CAST(regexp_extract(CAST({column} AS STRING), '[0-9]+$', 0) AS BIGINT), "
                     f"CAST(-1 AS BIGINT))")
        elif part.kind == "hex":
            value = f"coalesce(lower(CAST({column} AS STRING)), '')"
        elif part.kind == "decimal":
            value = (f"coalesce(TRY_CAST(CAST({column} AS STRING) AS DECIMAL(38,0)), "
                     f"CAST(-1 AS DECIMAL(38,0)))")
        else:
            raise ValueError(f"unknown part kind {part.kind!r}")
        parts.append((part.name, value))
    first = field(order.parts[0].name)
    return f"CASE WHEN {first} IS NULL THEN NULL ELSE {pack(parts)} END"


def spark_type(order: SourceOrder) -> T.StructType:
    """The sequence's type: each part nullable (as Delta reads it back), though the expression never yields a null
    part."""
    kinds = {"long": T.LongType(), "binlog": T.LongType(), "hex": T.StringType(), "decimal": T.DecimalType(38, 0)}
    return T.StructType([T.StructField(p.name, kinds[p.kind], True) for p in order.parts])


def spark_sql(order: SourceOrder) -> str:
    """`sequence_sql` in Spark's SQL, over a bronze row."""
    return sequence_sql(order, lambda n: f"`{SOURCE}`.`{n}`",
                        lambda parts: "named_struct(" + ", ".join(f"'{n}', {e}" for n, e in parts) + ")")


def duckdb_sql(order: SourceOrder, field: Callable[[str], str]) -> str:
    """`sequence_sql` in DuckDB's SQL; `field(path)`: the expression of a dotted field path of bronze's row."""
    return sequence_sql(order, lambda n: field(f"{SOURCE}.{n}"),
                        lambda parts: "struct_pack(" + ", ".join(f'"{n}" := {e}' for n, e in parts) + ")")
