"""Spark's Delta (delta-spark's `DeltaTable`) for the product's tables: a table's history, Delta's MERGE builder and
a table's DELETE. With `rs_reads`/`rs_tables`/`rs_append` (delta-rs) and `runtime.delta_txn` (Delta's transaction
over py4j), the only places that import a Delta library; import-linter holds every other package to that.

A MERGE's clauses are its caller's (silver's fold, quarantine reprocess); the commit it makes takes its transaction
id and ledger record from `commit.committing`, which the caller wraps around `execute()`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyspark.sql import DataFrame, SparkSession

MATERIALIZE_SOURCE = "spark.databricks.delta.merge.materializeSource"


def history(spark: SparkSession, path: str, limit: int | None = None) -> DataFrame:
    """Delta's history of the table at `path`: its newest `limit` commits (None: all), one row per version."""
    from delta.tables import DeltaTable

    table = DeltaTable.forPath(spark, path)
    return table.history(limit) if limit else table.history()


def merge(spark: SparkSession, path: str, source: DataFrame, on: str, *, target: str = "t",
          source_alias: str = "s") -> Any:
    """Delta's MERGE builder of `source` (as `source_alias`) into the table at `path` (as `target`) on `on`: the
    caller adds its clauses and runs `execute()` inside `commit.committing`."""
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, path).alias(target).merge(source.alias(source_alias), on)


@contextmanager
def checkpointed_source(session: SparkSession) -> Iterator[None]:
    """MERGEs inside the block read their source as it is, twice (to find the files its keys touch, then to write
    them), instead of first copying it: for a source the caller has computed once already (a local checkpoint:
    deterministic, and read from memory), the copy is a second materialization of the same rows. (A cached source
    Delta refuses without its copy: the cache does not pin the versions of the tables it read.) The setting is the
    session's: use a session no other MERGE runs in meanwhile."""
    before = session.conf.get(MATERIALIZE_SOURCE, None)
    session.conf.set(MATERIALIZE_SOURCE, "none")
    try:
        yield
    finally:
        if before is None:
            session.conf.unset(MATERIALIZE_SOURCE)
        else:
            session.conf.set(MATERIALIZE_SOURCE, before)


def delete_all(spark: SparkSession, path: str) -> None:
    """Delete every row of the table at `path` in one commit (its files stay for time travel)."""
    from delta.tables import DeltaTable

    DeltaTable.forPath(spark, path).delete()
