"""Idempotent appends through Delta's DataFrame writer: `txnAppId`/`txnVersion` and the ledger record as the
commit's `userMetadata`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import DataFrame, SparkSession

from ingestion.delta.ledger import BatchRecord
from ingestion.runtime.delta_txn import table_version


def right_sized(rows: DataFrame) -> DataFrame:
    """At most one file per core per batch instead of one per Kafka partition: fewer, larger files for readers
    and less per-file work for the writer (docs/performance.md#right-sized-output-files)."""
    return rows.coalesce(rows.sparkSession.sparkContext.defaultParallelism)


class DeltaAppend:
    """Idempotent appends to one Delta table, remembering the version its last append left."""

    def __init__(self, path: str, app_id: str) -> None:
        self.path = path
        self.app_id = app_id
        self.version: int | None = None

    def append(self, spark: SparkSession, rows: DataFrame, record: BatchRecord, merge_schema: bool = False) -> bool:
        """Append with (app id, batch id) as Delta txn; False when Delta skipped it as already committed."""
        before = self.version if self.version is not None else table_version(spark, self.path)
        (right_sized(rows).write.format("delta").mode("append")
         .option("txnAppId", self.app_id).option("txnVersion", record.batch_id)
         .option("userMetadata", record.to_user_metadata())
         .option("mergeSchema", str(merge_schema).lower())
         .save(self.path))
        self.version = table_version(spark, self.path)
        return self.version != before


@contextmanager
def commit_metadata(spark: SparkSession, record: BatchRecord) -> Iterator[None]:
    """Delta commits made inside the block (RESTORE, MERGE, DELETE: operations without a `userMetadata` option)
    carry the ledger record as their commit info's `userMetadata`."""
    key = "spark.databricks.delta.commitInfo.userMetadata"
    spark.conf.set(key, record.to_user_metadata())
    try:
        yield
    finally:
        spark.conf.unset(key)
