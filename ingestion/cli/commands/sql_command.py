"""ingest sql: a query over the pipelines' tables by name, answered by DuckDB without a JVM where it can be."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from ingestion.cli.common import load, spark_session
from ingestion.errors import IngestionError, UsageError

log = logging.getLogger("ingestion")


def sql(args: argparse.Namespace) -> int:
    from ingestion.config import list_pipelines
    from ingestion.ops import sql_query

    if args.output and Path(args.output).suffix not in (".csv", ".parquet"):
        raise UsageError(f"--output must end in .csv or .parquet, got {args.output!r}")
    configs = [load(p) for p in list_pipelines()]
    if args.engine != "spark":
        try:
            return _sql_result(sql_query.duckdb_answer(args.query, configs), args)
        except sql_query.NotForDuckDB as why:
            if args.engine == "duckdb":
                raise IngestionError(f"DuckDB cannot answer this query ({why}); --engine spark or auto does") from None
            log.warning("DuckDB cannot answer this query (%s): Spark SQL answers it (a JVM starts)", why)
    from ingestion.ops import catalog  # Spark's side: imported only when Spark answers

    spark = spark_session("ingest-sql", configs, catalog=True)
    tables = catalog.register(spark, configs)
    log.debug("tables: %s", tables)
    try:
        result = spark.sql(args.query)
        return _sql_result(result.toArrow() if args.output else result.limit(args.limit).toArrow(), args)
    except Exception as exc:
        gone = catalog.time_travel_failure(spark, tables, args.query, exc)
        if gone is not None:
            raise gone from None
        missing = catalog.missing_table(exc, configs)
        if missing is not None:
            raise missing from None
        raise


def _sql_result(result: Any, args: argparse.Namespace) -> int:
    """Print or write a pyarrow table."""
    from ingestion.ops import sql_query

    if args.output:
        out = Path(args.output)
        sql_query.write(result, out)
        print(f"{result.num_rows} rows written to {out}")
        return 0
    print(sql_query.render(result.slice(0, args.limit)))
    return 0
