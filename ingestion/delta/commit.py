"""A data commit's identity: every commit the product makes to a table it owns carries a Delta transaction id
(`SetTransaction(app id, version)`) and its ledger record (the commit's `userMetadata`), whoever makes it.

The stream's batches are numbered by Spark (txnVersion = batch id, one app id per checkpoint). Commands that write
outside the stream (`replay`, `quarantine reprocess`) number their own runs: a run's version is one more than the
newest its app id committed to any of the tables it writes (`next_version`), taken once before its first commit,
so every commit of one run carries the same (app id, version) and a commit repeated within the run is skipped by
Delta, not by luck. (A rerun after a crash is a new run: it writes only what no table holds yet, as before.)

Two ways to commit, one identity: a DataFrame append takes the id as writer options (`append`); Delta's DML (MERGE,
UPDATE, DELETE) takes it from the session's SQL settings, set only for the block (`committing`). A RESTORE carries
no transaction id in Delta (it undoes commits, it adds no data of its own), only the record.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from ingestion.runtime.delta_txn import DeltaTxn, is_table

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


@dataclass(frozen=True)
class Txn:
    """A commit's transaction id: Delta skips a second commit of the same (app id, version) to a table."""

    app_id: str
    version: int


def right_sized(rows: DataFrame) -> DataFrame:
    """At most one file per core per batch instead of one per Kafka partition: fewer, larger files for readers
    and less per-file work for the writer (docs/performance.md#right-sized-output-files)."""
    return rows.coalesce(rows.sparkSession.sparkContext.defaultParallelism)


def append(rows: DataFrame, path: str, txn: Txn, metadata: str, *, merge_schema: bool = False) -> None:
    """Append `rows` to the Delta table at `path` in one commit carrying `txn` and `metadata` (skipped by Delta when
    the table holds that transaction already); `merge_schema`: columns of newer schema versions are added."""
    (right_sized(rows).write.format("delta").mode("append")
     .option("txnAppId", txn.app_id).option("txnVersion", txn.version)
     .option("userMetadata", metadata)
     .option("mergeSchema", str(merge_schema).lower())
     .save(path))


def overwrite(rows: DataFrame, path: str, txn: Txn, metadata: str) -> None:
    """Replace the rows and the schema of the table at `path` (made if there is none) with `rows`, in one commit
    carrying `txn` and `metadata`."""
    (rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
     .option("txnAppId", txn.app_id).option("txnVersion", txn.version)
     .option("userMetadata", metadata)
     .save(path))


def create_empty(rows: DataFrame, path: str) -> None:
    """A table at `path` with the columns of `rows` and no rows (no data: no transaction id)."""
    rows.where("false").write.format("delta").save(path)


@contextmanager
def committing(session: SparkSession, txn: Txn | None, metadata: str) -> Iterator[None]:
    """Delta commits made inside the block (MERGE, UPDATE, DELETE; RESTORE with `txn` None) carry `txn` and
    `metadata`. The settings are the session's: use a session no other writer commits through meanwhile."""
    settings = {USER_METADATA: metadata}
    if txn is not None:
        settings.update({TXN_APP_ID: txn.app_id, TXN_VERSION: str(txn.version)})
    for key, value in settings.items():
        session.conf.set(key, value)
    try:
        yield
    finally:
        for key in settings:
            session.conf.unset(key)


def committed_version(spark: SparkSession, path: str, app_id: str) -> int:
    """The newest version `app_id` committed to the table at `path`, -1 when none (or no table)."""
    return DeltaTxn(spark, path).committed_version(app_id) if is_table(spark, path) else -1


def next_version(spark: SparkSession, paths: Iterable[str], app_id: str) -> int:
    """A new run's version of `app_id`: one more than the newest it committed to any of `paths`."""
    return max((committed_version(spark, path, app_id) for path in paths), default=-1) + 1
