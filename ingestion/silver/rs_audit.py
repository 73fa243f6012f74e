"""`ingest verify` for silver without a JVM: bronze as of the version silver's ledger records and silver itself, read
with delta-rs; bronze's fold (`fold_sql`) and the row-by-row comparison in DuckDB. The same findings as
`audit.audit` (Spark), which is what the caller uses when this cannot answer: `JvmFreeReadError` (delta-rs cannot
read a table) or `fold_sql.NotInDuckDB` (the fold is not DuckDB's to compute here).

The rows are held in memory (Arrow, then DuckDB): bronze's as of that version and silver's.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import types as T

from ingestion.config import PipelineConfig
from ingestion.delta import rs_reads
from ingestion.delta.reader import JvmFreeReadError
from ingestion.silver import fold_sql
from ingestion.silver import ledger as silver_ledger
from ingestion.silver.audit import MAX_SHOWN, SilverAudit
from ingestion.silver.fold_sql import NotInDuckDB, name, path
from ingestion.silver.spec import SilverSpec


def audit(config: PipelineConfig) -> SilverAudit:
    """Silver against the fold of bronze as of the version silver's ledger records, row by row."""
    spec = SilverSpec.of(config)
    options = config.storage_options() or None
    at = position(spec.path, options)
    if at is None:
        return SilverAudit(spec.pipeline, spec.path, None)
    con = _connect()
    columns = _expected(con, spec, at.bronze_version, options)
    silver = rs_reads.read_rows(spec.path, None, options)
    if silver is None:
        raise JvmFreeReadError(f"delta-rs finds no table at {spec.path}")
    con.register("__silver", silver[0])
    expected_types = _types(con, "__expected")
    actual_types = _types(con, "__silver")
    shared = [c for c in columns if c in actual_types]
    left = ", ".join(name(c) for c in shared)
    right = ", ".join(name(c) if actual_types[c] == expected_types[c] else
                      f"CAST({name(c)} AS {expected_types[c]}) AS {name(c)}" for c in shared)
    con.execute(f"CREATE TEMP TABLE __missing AS SELECT {left} FROM __expected EXCEPT ALL "
                f"SELECT {right} FROM __silver")
    con.execute(f"CREATE TEMP TABLE __unexpected AS SELECT {right} FROM __silver EXCEPT ALL "
                f"SELECT {left} FROM __expected")
    missing, unexpected = _count(con, "__missing"), _count(con, "__unexpected")
    return SilverAudit(spec.pipeline, spec.path, at.bronze_version, rows=_count(con, "__silver"),
                       expected_rows=_count(con, "__expected"), missing=_keys(con, "__missing", spec),
                       unexpected=_keys(con, "__unexpected", spec), differing=missing + unexpected)


def fold(config: PipelineConfig, bronze_version: int) -> Any:
    """What silver holds for bronze as of `bronze_version` (`changes.fold`'s rows), computed by DuckDB: a pyarrow
    Table."""
    con = _connect()
    columns = _expected(con, SilverSpec.of(config), bronze_version, config.storage_options() or None)
    return con.sql(f"SELECT {', '.join(name(c) for c in columns)} FROM __expected").fetch_arrow_table()


def _expected(con: Any, spec: SilverSpec, bronze_version: int, options: dict[str, str] | None) -> list[str]:
    """Bronze's fold as of `bronze_version` into the connection's table `__expected`; its columns."""
    bronze = rs_reads.read_rows(spec.bronze_path, bronze_version, options)
    if bronze is None:
        raise JvmFreeReadError(f"delta-rs finds no table at {spec.bronze_path}")
    query, columns = fold_sql.fold_query(spec, T.StructType.fromJson(json.loads(bronze[1])))
    con.register(fold_sql.BRONZE, bronze[0])
    try:
        con.execute(f"CREATE TEMP TABLE __expected AS {query}")
    except Exception as exc:  # noqa: BLE001 - DuckDB's refusal (a condition in Spark's dialect): Spark folds
        raise NotInDuckDB(f"DuckDB: {(str(exc).splitlines() or [type(exc).__name__])[0]}") from None
    return columns


def position(path_: str, storage_options: dict[str, str] | None) -> silver_ledger.SilverRecord | None:
    """The newest record of silver's ledger (`ledger.position`), read with delta-rs."""
    try:
        found = (silver_ledger.rs_records(path_, storage_options, limit=20)
                 or silver_ledger.rs_records(path_, storage_options, limit=None))
    except Exception as exc:  # noqa: BLE001 - a feature or store delta-rs lacks: Spark reads it
        raise JvmFreeReadError(f"delta-rs cannot read {path_}: {(str(exc).splitlines() or [repr(exc)])[0]}") from None
    return found[0][1] if found else None


def _connect() -> Any:
    import duckdb

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")  # Spark's session time zone here (runtime/session.py)
    return con


def _types(con: Any, table: str) -> dict[str, str]:
    return {str(row[0]): str(row[1]) for row in con.sql(f"DESCRIBE {table}").fetchall()}


def _count(con: Any, table: str) -> int:
    return int(con.sql(f"SELECT count(*) FROM {table}").fetchall()[0][0])


def _keys(con: Any, table: str, spec: SilverSpec) -> list[str]:
    """The keys of the rows in `table`, as `audit._keys` names them (`id=5, region='eu'`), the first MAX_SHOWN."""
    keys = ", ".join(path(p) for p in spec.key)
    rows = con.sql(f"SELECT DISTINCT {keys} FROM {table} ORDER BY ALL LIMIT {MAX_SHOWN}").fetchall()
    return [", ".join(f"{p}={v!r}" for p, v in zip(spec.key, row, strict=True)) for row in rows]
