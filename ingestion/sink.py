"""The exactly-once writer, called by `foreachBatch` once per micro-batch.

Per batch: decode once (cached), summarize the offset ranges, append bronze rows with
`txnAppId`/`txnVersion = batch id` and the ranges in the same commit's `userMetadata`. When Spark replays a batch
after a crash between the Delta commit and its own checkpoint, the batch id is the same, so Delta sees the
(txnAppId, txnVersion) it already holds and writes nothing: the table version does not move, which is logged.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import DataFrame

from ingestion import bronze, ledger
from ingestion.config import PipelineConfig
from ingestion.decode import DecodeSpec
from ingestion.ledger import BatchRecord, PartitionRange

log = logging.getLogger(__name__)

# Test-only fault injection: INGEST_TEST_FAULT="<point>:<batch id>" makes the writer write the file named by
# INGEST_TEST_FAULT_FILE and then hang at that point, so a test can SIGKILL the process exactly there.
FAULT_ENV = "INGEST_TEST_FAULT"
FAULT_FILE_ENV = "INGEST_TEST_FAULT_FILE"


@dataclass(frozen=True)
class BatchResult:
    batch_id: int
    rows: int
    errors: int
    version: int | None
    committed: bool  # False when Delta skipped the write because this (app id, batch id) was already committed
    ranges: tuple[PartitionRange, ...]
    max_timestamp: dt.datetime | None
    seconds: float


class BronzeWriter:
    """`foreachBatch` function of one pipeline."""

    def __init__(self, *, config: PipelineConfig, app_id: str, spec: DecodeSpec,
                 on_batch: Callable[[BatchResult], None] | None = None) -> None:
        self.config = config
        self.app_id = app_id
        self.spec = spec
        self.on_batch = on_batch
        self._version: int | None = None  # the table version after this writer's last batch

    def __call__(self, kafka_rows: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        spark = kafka_rows.sparkSession
        ingested_at = dt.datetime.now(dt.UTC)
        decoded = bronze.decode(kafka_rows, self.spec).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            stats = bronze.offset_ranges(decoded).collect()
            log.debug("batch %d: decoded and summarized in %.2fs", batch_id, time.monotonic() - started)
            if not stats:
                return
            ranges = tuple(sorted((PartitionRange(s["topic"], s["partition"], s["first"], s["last"], s["count"])
                                   for s in stats), key=lambda r: (r.topic, r.partition)))
            errors = sum(s["errors"] for s in stats)
            schema_ids = tuple(sorted({i for s in stats for i in s["schema_ids"] if i is not None}))
            rows = sum(r.count for r in ranges) - errors
            record = BatchRecord(pipeline=self.config.name, app_id=self.app_id, batch_id=batch_id, kind="stream",
                                 rows=rows, schema_ids=schema_ids, ranges=ranges)
            path = self.config.table_path
            before = self._version if self._version is not None else ledger.table_version(spark, path)
            _fault_point("before_commit", batch_id)
            (bronze.bronze_rows(decoded, batch_id=batch_id, ingested_at=ingested_at,
                                key_format=self.config.key.format)
             .write.format("delta").mode("append")
             .option("txnAppId", self.app_id).option("txnVersion", batch_id)
             .option("userMetadata", record.to_user_metadata())
             .save(path))
            after = self._version = ledger.table_version(spark, path)
            log.debug("batch %d: written in %.2fs", batch_id, time.monotonic() - started)
            committed = after != before
            _fault_point("after_commit", batch_id)
        finally:
            decoded.unpersist()
        result = BatchResult(batch_id, rows, errors, after, committed, ranges,
                             max(s["max_timestamp"] for s in stats), time.monotonic() - started)
        _log_result(self.config.name, result)
        if self.on_batch is not None:
            self.on_batch(result)


def _log_result(pipeline: str, r: BatchResult) -> None:
    spans = ", ".join(f"{x.topic}/{x.partition} {x.first}-{x.last}" for x in r.ranges)
    if r.committed:
        log.info("%s batch %d: %d rows in %.2fs (%.0f rows/s), table version %s, offsets %s",
                 pipeline, r.batch_id, r.rows, r.seconds, r.rows / max(r.seconds, 1e-9), r.version, spans)
    else:
        log.warning("%s batch %d: skipped by Delta, (txnAppId, txnVersion=%d) is already committed; "
                    "table version stays %s (offsets %s)", pipeline, r.batch_id, r.batch_id, r.version, spans)


def _fault_point(point: str, batch_id: int) -> None:
    if os.environ.get(FAULT_ENV) != f"{point}:{batch_id}":
        return
    marker = os.environ.get(FAULT_FILE_ENV)
    if marker:
        Path(marker).write_text(f"{point}:{batch_id}\n")
    log.warning("test fault point %s reached for batch %d: waiting to be killed", point, batch_id)
    while True:
        time.sleep(1)
