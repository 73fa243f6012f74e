"""`ingest sql`: a read-only query answered by DuckDB over the pipelines' tables when it can (no JVM, about a
second), by Spark SQL otherwise; and a result written to Parquet (nested types intact) or CSV (nested values as
JSON text).

DuckDB sees each table the query names, by the name Spark's catalog gives it (`sink.catalogTable`, else the short
`orders` / `orders_quarantine`), at its latest version or at the version `VERSION AS OF n` names: the Parquet
files delta-rs lists from the Delta log for that version. Spark answers whatever else: statements other than
SELECT / WITH, `TIMESTAMP AS OF`, tables that are not a pipeline's, partitioned tables, tables on object storage,
and anything DuckDB refuses to parse or plan.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import logging
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from ingestion.config import PipelineConfig
from ingestion.errors import IngestionError
from ingestion.ops.names import table_name

log = logging.getLogger(__name__)

_LITERAL = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"")
_COMMENT_OR_LITERAL = re.compile(r"('(?:[^']|'')*'|\"(?:[^\"]|\"\")*\")|--[^\n]*|/\*.*?\*/", re.S)
_READ_ONLY = re.compile(r"^\s*\(*\s*(SELECT|WITH|VALUES)\b", re.I)
_SPARK_ONLY = re.compile(r"\bTIMESTAMP\s+AS\s+OF\b|\bdelta\s*\.\s*`", re.I)


class NotForDuckDB(Exception):  # a reason to use Spark, not an error the user sees
    """Why DuckDB does not answer a query (Spark does)."""


@dataclass(frozen=True)
class TableRef:
    name: str  # as Spark's catalog knows it
    path: str
    version: int | None


def pipeline_tables(configs: list[PipelineConfig]) -> dict[str, str]:
    """The tables' names as `ingest sql` registers them in Spark ({name: path}), lower case."""
    out: dict[str, str] = {}
    for config in configs:
        if config.catalog_names is not None:
            for name, path in zip(config.catalog_names, (config.table_path, config.quarantine_path), strict=True):
                out[name.lower()] = path
        else:
            out[table_name(config).lower()] = config.table_path
            out[table_name(config, "_quarantine").lower()] = config.quarantine_path
    return out


def rewrite(query: str, tables: dict[str, str]) -> tuple[str, list[TableRef]]:
    """The query with each pipeline table (and its `VERSION AS OF n`) replaced by a view name DuckDB gets; the
    tables in the order of their view names. NotForDuckDB when Spark must answer."""
    bare = _COMMENT_OR_LITERAL.sub(lambda m: m.group(1) or " ", query)  # comments out, literals kept
    if not _READ_ONLY.match(_LITERAL.sub("''", bare)):
        raise NotForDuckDB("not a SELECT or WITH query")
    if _SPARK_ONLY.search(_LITERAL.sub("''", bare)):
        raise NotForDuckDB("TIMESTAMP AS OF or a table by path")
    names = "|".join(re.escape(n) for n in sorted(tables, key=len, reverse=True))
    if not names:
        raise NotForDuckDB("no pipeline tables")
    pattern = re.compile(rf"(?<![\w.`])`?({names})`?(?![\w`])(\s+VERSION\s+AS\s+OF\s+(\d+))?", re.I)
    refs: dict[tuple[str, int | None], TableRef] = {}
    views: dict[tuple[str, int | None], str] = {}

    def replace(match: re.Match[str]) -> str:
        name = match.group(1).lower()
        version = int(match.group(3)) if match.group(3) else None
        key = (name, version)
        if key not in views:
            views[key] = f"__ingest_{len(views)}"
            refs[key] = TableRef(name, tables[name], version)
        return views[key]

    parts, last = [], 0
    for literal in _LITERAL.finditer(bare):  # names inside string literals stay as they are
        parts.append(pattern.sub(replace, bare[last:literal.start()]))
        parts.append(literal.group(0))
        last = literal.end()
    parts.append(pattern.sub(replace, bare[last:]))
    if not views:
        raise NotForDuckDB("the query names no pipeline table")
    if re.search(r"\bVERSION\s+AS\s+OF\b", "".join(parts), re.I):
        raise NotForDuckDB("VERSION AS OF on a table that is not a pipeline's")
    return "".join(parts), [refs[k] for k in views]


def duckdb_answer(query: str, configs: list[PipelineConfig]) -> pa.Table:
    """The query's result from DuckDB over the tables' Parquet files (at the version asked for, as the Delta log
    read by delta-rs lists them); NotForDuckDB when Spark must answer."""
    import duckdb

    text, refs = rewrite(query, pipeline_tables(configs))
    con = duckdb.connect()
    # Spark's order of nulls (first when ascending, last when descending) and its session time zone.
    con.execute("SET default_null_order = 'nulls_first_on_asc_last_on_desc'")
    con.execute("SET TimeZone = 'UTC'")
    for i, ref in enumerate(refs):
        con.execute(f"CREATE TEMP VIEW __ingest_{i} AS {_scan(con, ref)}")
    try:
        return con.sql(text).fetch_arrow_table()
    except Exception as exc:  # noqa: BLE001 - DuckDB's or Arrow's (a data file gone): Spark answers, or says why
        raise NotForDuckDB(f"DuckDB: {(str(exc).splitlines() or [type(exc).__name__])[0]}") from None


def _scan(con: Any, ref: TableRef) -> str:
    """A SELECT of the table's columns, in the table's order, over its data files at the version (a column no file
    holds yet is null). The tables this project writes have neither deletion vectors nor column mapping, so a
    version's rows are its files' rows. Not through delta-rs's pyarrow dataset: its threads aborted the process at
    exit 1 time in 20 here ("terminate called without an active exception", docs/performance.md)."""
    from deltalake import DeltaTable

    if "://" in ref.path and not ref.path.startswith("file:"):
        raise NotForDuckDB(f"{ref.name} is on object storage")
    try:
        table = DeltaTable(ref.path, version=ref.version)
    except Exception as exc:  # noqa: BLE001 - no table, a version gone, a feature delta-rs lacks: Spark says which
        raise NotForDuckDB(f"delta-rs cannot read {ref.name}: {exc}") from None
    if table.metadata().partition_columns:
        raise NotForDuckDB(f"{ref.name} is partitioned")
    files = table.file_uris()
    if not files:
        raise NotForDuckDB(f"{ref.name} has no data files at that version")
    listed = "[" + ", ".join(_literal(f.removeprefix("file://")) for f in files) + "]"
    scan = f"read_parquet({listed}, union_by_name = true)"
    present = {row[0] for row in con.sql(f"DESCRIBE SELECT * FROM {scan}").fetchall()}
    names = [field.name for field in table.schema().fields]
    columns = ", ".join(_identifier(n) if n in present else f"NULL AS {_identifier(n)}" for n in names)
    return f"SELECT {columns} FROM {scan}"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def write(table: pa.Table, out: Path) -> None:
    """Parquet with the result's types as they are (arrays of records, maps); CSV with nested values as JSON text
    and binary values as base64."""
    if out.suffix == ".parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, out)
    elif out.suffix == ".csv":
        as_text(table).to_pandas().to_csv(out, index=False)
    else:
        raise IngestionError(f"--output must end in .csv or .parquet, got {str(out)!r}")


def render(table: pa.Table, width: int = 60) -> str:
    """The rows as a text table (right-aligned columns, values cut at `width` characters, nested values as JSON):
    printed without importing pandas, a second of the command's time."""
    if not table.num_columns:
        return "(no columns)"
    flat = as_text(table)
    columns = [[_cell(v, width) for v in column.to_pylist()] for column in flat.columns]
    sizes = [max([len(name), *map(len, cells)]) for name, cells in zip(flat.column_names, columns, strict=True)]
    lines = [" ".join(name.rjust(size) for name, size in zip(flat.column_names, sizes, strict=True))]
    lines += [" ".join(cells[i].rjust(size) for cells, size in zip(columns, sizes, strict=True))
              for i in range(flat.num_rows)]
    return "\n".join(lines)


def _cell(value: Any, width: int) -> str:
    text = "NULL" if value is None else str(value).replace("\n", " ")
    return text if len(text) <= width else text[:width - 3] + "..."


def as_text(table: pa.Table) -> pa.Table:
    """The table with nested columns as JSON text and binary columns as base64, for a flat file."""
    columns = []
    for column, field in zip(table.columns, table.schema, strict=True):
        kind = field.type
        if pa.types.is_nested(kind):
            column = pa.array([None if v is None else json.dumps(v, default=_json_value, ensure_ascii=False)
                               for v in column.to_pylist(maps_as_pydicts="strict")], pa.string())
        elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            column = pa.array([None if v is None else base64.b64encode(v).decode() for v in column.to_pylist()],
                              pa.string())
        columns.append(column)
    return pa.table(columns, names=table.column_names)


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON")
