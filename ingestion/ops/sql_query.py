"""`ingest sql`: a read-only query answered by DuckDB over the pipelines' tables (no JVM, about a second), by Spark
SQL only where DuckDB cannot; and a result written to Parquet (nested types intact) or CSV (nested values as JSON
text).

DuckDB sees each pipeline table the query names, by its SQL name (`names.pipeline_tables`: the catalog names of
`sink.catalogTable` and `silver.catalogTable`, else the short `orders` / `orders_quarantine` / `orders_silver`), at
its latest version or at the version `VERSION AS OF n` names: the Parquet files delta-rs lists from the Delta log
for that version. Spark's `backquoted` identifiers become DuckDB's "quoted" ones, and a column whose name DuckDB
reserves (`at`, `left`, `order`) is quoted when the query does not parse otherwise. A table no pipeline has is an
`UnknownTable` naming the ones there are. Spark answers the rest (`NotForDuckDB` says why): statements other than
SELECT / WITH / VALUES, `TIMESTAMP AS OF`, tables by path, partitioned tables, tables on object storage, and what
DuckDB refuses to parse or plan (a function of Spark's dialect).
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
from ingestion.delta import rs_reads
from ingestion.errors import IngestionError, one_line
from ingestion.ops.names import pipeline_tables, unknown_table

log = logging.getLogger(__name__)

_LITERAL = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"")
_COMMENT_OR_LITERAL = re.compile(r"('(?:[^']|'')*'|\"(?:[^\"]|\"\")*\")|--[^\n]*|/\*.*?\*/", re.S)
_READ_ONLY = re.compile(r"^\s*\(*\s*(SELECT|WITH|VALUES)\b", re.I)
_SPARK_ONLY = re.compile(r"\bTIMESTAMP\s+AS\s+OF\b|\bdelta\s*\.\s*`", re.I)


class NotForDuckDB(Exception):  # a reason to use Spark, not an error the user sees
    """Why DuckDB does not answer a query (Spark does)."""


class UnknownTable(IngestionError):
    """The query names a table no pipeline has (one line naming the ones there are)."""

    def __init__(self, name: str, tables: dict[str, str]) -> None:
        super().__init__(unknown_table(name, tables, hint=" (`--engine spark` asks Spark's catalog for others)"))
        self.name = name


@dataclass(frozen=True)
class TableRef:
    name: str  # as Spark's catalog knows it
    path: str
    version: int | None


def rewrite(query: str, tables: dict[str, str]) -> tuple[str, list[TableRef]]:
    """The query with each pipeline table (and its `VERSION AS OF n`) replaced by a view name DuckDB gets, and
    Spark's `backquoted` identifiers quoted as DuckDB quotes them; the tables in the order of their view names.
    NotForDuckDB when Spark must answer; UnknownTable for `VERSION AS OF` on a table no pipeline has."""
    bare = _COMMENT_OR_LITERAL.sub(lambda m: m.group(1) or " ", query)  # comments out, literals kept
    if not _READ_ONLY.match(_LITERAL.sub("''", bare)):
        raise NotForDuckDB("not a SELECT or WITH query")
    if _SPARK_ONLY.search(_LITERAL.sub("''", bare)):
        raise NotForDuckDB("TIMESTAMP AS OF or a table by path")
    names = "|".join(re.escape(n) for n in sorted(tables, key=len, reverse=True)) or r"(?!x)x"
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

    def outside_literals(text: str) -> str:
        text = pattern.sub(replace, text)
        stray = re.search(r"([\w.`]+)\s+VERSION\s+AS\s+OF\b", text, re.I)
        if stray:
            raise UnknownTable(stray.group(1).replace("`", ""), tables)
        return re.sub(r"`((?:[^`]|``)*)`", lambda m: _identifier(m.group(1).replace("``", "`")), text)

    parts, last = [], 0
    for literal in _LITERAL.finditer(bare):  # names inside string literals stay as they are
        parts.append(outside_literals(bare[last:literal.start()]))
        parts.append(literal.group(0))
        last = literal.end()
    parts.append(outside_literals(bare[last:]))
    return "".join(parts), [refs[k] for k in views]


class UnknownColumn(IngestionError):
    """The query names a column none of its tables has (DuckDB's words, with the columns it could mean)."""


def duckdb_answer(query: str, configs: list[PipelineConfig]) -> pa.Table:
    """The query's result from DuckDB over the tables' Parquet files (at the version asked for, as the Delta log
    read by delta-rs lists them); NotForDuckDB when Spark must answer, UnknownTable when it names a table no
    pipeline has."""
    import duckdb

    tables = pipeline_tables(configs)
    text, refs = rewrite(query, tables)
    con = duckdb.connect()
    # Spark's order of nulls (first when ascending, last when descending) and its session time zone.
    con.execute("SET default_null_order = 'nulls_first_on_asc_last_on_desc'")
    con.execute("SET TimeZone = 'UTC'")
    columns: set[str] = set()
    for i, ref in enumerate(refs):
        con.execute(f"CREATE TEMP VIEW __ingest_{i} AS {_scan(con, ref)}")
        columns |= {str(row[0]) for row in con.sql(f"DESCRIBE __ingest_{i}").fetchall()}
    try:
        return con.sql(text).fetch_arrow_table()
    except duckdb.ParserException as exc:
        quoted = quote_reserved(text, columns, _reserved(con))
        if quoted != text:  # a column named like one of DuckDB's keywords (`at`, `left`): quoted, it parses
            try:
                return con.sql(quoted).fetch_arrow_table()
            except Exception:  # noqa: BLE001 - the first refusal is the one to tell
                pass
        raise NotForDuckDB(_first_line(exc)) from None
    except duckdb.BinderException as exc:
        column = re.search(r'Referenced column "(.+?)" not found', str(exc))
        # A column none of the tables has: Spark would not find it either, unless the query writes it in double
        # quotes, which are a column's to DuckDB and a string's to Spark (`status = "paid"`).
        if column is not None and f'"{column.group(1)}"' not in query:
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            raise UnknownColumn(" ".join(lines[:2]).removeprefix("Binder Error: ")) from None
        raise NotForDuckDB(_first_line(exc)) from None
    except duckdb.CatalogException as exc:
        missing = re.search(r"Table with name (.+?) does not exist", str(exc))
        if missing:
            raise UnknownTable(_as_named(missing.group(1), text), tables) from None
        raise NotForDuckDB(_first_line(exc)) from None
    except Exception as exc:  # noqa: BLE001 - DuckDB's or Arrow's (a data file gone): Spark answers, or says why
        raise NotForDuckDB(_first_line(exc)) from None


def _first_line(exc: BaseException) -> str:
    return f"DuckDB: {(str(exc).splitlines() or [type(exc).__name__])[0]}"


def _as_named(table: str, text: str) -> str:
    """A table DuckDB did not find as the query names it (with its database: `silver.customers`)."""
    found = re.search(rf"(?<![\w.\"])((?:\w+\.)*{re.escape(table)})(?![\w\"])", text)
    return found.group(1) if found else table


def _reserved(con: Any) -> set[str]:
    """The words DuckDB does not take as a bare column name."""
    rows = con.sql("SELECT keyword_name FROM duckdb_keywords() WHERE keyword_category IN ('reserved', "
                   "'type_function')").fetchall()
    return {str(row[0]).lower() for row in rows}


def quote_reserved(text: str, columns: set[str], reserved: set[str]) -> str:
    """`text` with each bare word that is both a column of the query's tables and a word DuckDB reserves quoted
    (`min(at)` -> `min("at")`), outside string literals and quoted names; not a function's name (`left(s, 1)`)."""
    words = {c.lower() for c in columns} & reserved
    if not words:
        return text
    word = re.compile(r"(?<![\w.\"])(\w+)(?![\w\"])(?!\s*\()")

    def quote(match: re.Match[str]) -> str:
        return _identifier(match.group(1)) if match.group(1).lower() in words else match.group(1)

    parts, last = [], 0
    for literal in re.finditer(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"", text):
        parts.append(word.sub(quote, text[last:literal.start()]))
        parts.append(literal.group(0))
        last = literal.end()
    parts.append(word.sub(quote, text[last:]))
    return "".join(parts)


def _scan(con: Any, ref: TableRef) -> str:
    """A SELECT of the table's columns, in the table's order, over its data files at the version (a column no file
    holds yet is null; a table without files, none). The tables this project writes have neither deletion vectors
    nor column mapping, so a version's rows are its files' rows. Not through delta-rs's pyarrow dataset: its threads
    aborted the process at exit 1 time in 20 here ("terminate called without an active exception",
    docs/performance.md)."""
    if "://" in ref.path and not ref.path.startswith("file:"):
        raise NotForDuckDB(f"{ref.name} is on object storage")
    try:
        table = rs_reads.snapshot(ref.path, ref.version)
    except Exception as exc:  # noqa: BLE001 - a version gone, a feature delta-rs lacks: Spark says which
        raise NotForDuckDB(f"delta-rs cannot read {ref.name}: {exc}") from None
    if table is None:
        if ref.version is None:
            raise IngestionError(f"table {ref.name} has no Delta table at {ref.path} yet (`ingest onboard` or "
                                 "`ingest run` its pipeline)")
        raise NotForDuckDB(f"delta-rs cannot read {ref.name} at version {ref.version}")
    if table.partition_columns:
        raise NotForDuckDB(f"{ref.name} is partitioned")
    if not table.files:
        return _empty(ref, table.schema_json)
    listed = "[" + ", ".join(_literal(f.removeprefix("file://")) for f in table.files) + "]"
    scan = f"read_parquet({listed}, union_by_name = true)"
    present = {row[0] for row in con.sql(f"DESCRIBE SELECT * FROM {scan}").fetchall()}
    names = table.columns
    columns = ", ".join(_identifier(n) if n in present else f"NULL AS {_identifier(n)}" for n in names)
    return f"SELECT {columns} FROM {scan}"


def _empty(ref: TableRef, schema: str) -> str:
    """A SELECT of no rows with the table's columns and types (a table with no data files yet)."""
    from pyspark.sql import types as T

    from ingestion.silver.fold_sql import NotInDuckDB, sql_type

    try:
        fields = T.StructType.fromJson(json.loads(schema)).fields
        columns = ", ".join(f"CAST(NULL AS {sql_type(f.dataType)}) AS {_identifier(f.name)}" for f in fields)
    except NotInDuckDB as exc:
        raise NotForDuckDB(f"{ref.name}: {exc}") from None
    return f"SELECT {columns} WHERE FALSE"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def write(table: pa.Table, out: Path) -> None:
    """Parquet with the result's types as they are (arrays of records, maps); CSV with nested values as JSON text
    and binary values as base64. Missing folders are made (as `report --output`'s); a path that cannot be written
    is one IngestionError naming it."""
    if out.suffix not in (".parquet", ".csv"):
        raise IngestionError(f"--output must end in .csv or .parquet, got {str(out)!r}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix == ".parquet":
            import pyarrow.parquet as pq

            pq.write_table(table, out)
        else:
            as_text(table).to_pandas().to_csv(out, index=False)
    except OSError as exc:
        raise IngestionError(f"cannot write {str(out)!r}: {exc.strerror or one_line(exc)}") from None


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
