"""Idempotent appends of one writer to one Delta table through Delta's DataFrame writer (`commit.append`):
`txnAppId` = the writer's app id, `txnVersion` = the batch id, the ledger record as the commit's `userMetadata`."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from ingestion.delta import commit
from ingestion.delta.ledger import BatchRecord
from ingestion.runtime.delta_txn import table_version


class DeltaAppend:
    """Idempotent appends to one Delta table, remembering the version its last append left."""

    def __init__(self, path: str, app_id: str) -> None:
        self.path = path
        self.app_id = app_id
        self.version: int | None = None

    def append(self, spark: SparkSession, rows: DataFrame, record: BatchRecord, merge_schema: bool = False) -> bool:
        """Append with (app id, batch id) as Delta txn; False when Delta skipped it as already committed."""
        before = self.version if self.version is not None else table_version(spark, self.path)
        commit.append(rows, self.path, commit.Txn(self.app_id, record.batch_id), record.to_user_metadata(),
                      merge_schema=merge_schema)
        self.version = table_version(spark, self.path)
        return self.version != before
