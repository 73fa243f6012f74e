"""The exactly-once writer, called by `foreachBatch` once per micro-batch.

Every commit carries `txnAppId` (bronze: the checkpoint's id; quarantine: the same with `.quarantine`),
`txnVersion = batch id`, and the batch's offset ranges (the ledger) as the commit's `userMetadata`. A batch is
written by one of three strategies over the same decode API:

- **Direct** (`direct.DirectWrite`, batches of at most `sink.directWriteMaxOffsets` offsets): no Spark job; the
  driver fetches the planned offset ranges, decodes them in Python and commits one Parquet file. A batch it does
  not handle goes on to the next two, nothing written.
- **One pass** (`one_pass.OnePassWrite`, most batches): one Spark job decodes, verifies, summarizes and writes the
  bronze files, committed through Delta's transaction API only if the JVM verified every record.
- **Settled** (`settled.SettledWrite`): decode once into a cache (the JVM where it can verify, the Python decoder
  for the rest), append the records that failed to quarantine, then the rest to bronze. A batch the one-pass write
  gives back is settled, and so is the next one, until a batch has nothing for the Python decoder.

When Spark replays a batch after a crash between the Delta commits and its own checkpoint, the batch id is the
same, so Delta sees a (txnAppId, txnVersion) it already holds and writes nothing; the writer logs the skip.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from ingestion.config import PipelineConfig
from ingestion.decode.resolver import SchemaResolver
from ingestion.errors import IngestionError
from ingestion.stream.batch import BatchResult, DecoderChoice, Targets, log_result
from ingestion.stream.direct import EMPTY, DirectWrite
from ingestion.stream.one_pass import OnePassWrite
from ingestion.stream.settled import SettledWrite

__all__ = ["BatchResult", "BronzeWriter", "StopRequested"]


log = logging.getLogger(__name__)


class StopRequested(IngestionError):
    """Raised where a batch would start once a stop was asked for: the query ends between batches, never in the
    middle of a write (Spark's own stop interrupts the running batch's jobs). The batch is redone by the next run,
    exactly once like any other."""


class BronzeWriter:
    """`foreachBatch` function of one pipeline."""

    def __init__(self, *, config: PipelineConfig, app_id: str, resolver: SchemaResolver,
                 on_batch: Callable[[BatchResult], None] | None = None,
                 on_topics: Callable[[Mapping[str, Iterable[int]]], list[str]] | None = None,
                 kafka_client: Mapping[str, Any] | None = None) -> None:
        self.config = config
        self.app_id = app_id
        self.resolver = resolver
        self.on_batch = on_batch
        # The topics and partitions each batch held, to the run's context; it answers with the topics new to the
        # run (a pattern's, found by Spark's listing), which the schema resolver follows from then on.
        self.on_topics = on_topics
        self.targets = Targets(config, resolver, app_id)
        self.bronze = self.targets.bronze
        self.quarantine = self.targets.quarantine
        self.decoder = DecoderChoice(self.targets)
        # the direct strategy needs the run's consumer settings; without them every batch is a Spark job
        self.direct = DirectWrite(self.targets, kafka_client)
        self.one_pass = OnePassWrite(self.targets)
        self.settled = SettledWrite(self.targets, self.decoder)
        self._one_pass_next = True
        self.stop_requested = threading.Event()
        self.idle = threading.Event()  # no batch is being written
        self.idle.set()

    def __call__(self, kafka_rows: DataFrame, batch_id: int) -> None:
        if self.stop_requested.is_set():
            raise StopRequested(f"pipeline {self.config.name!r} stops before batch {batch_id}")
        self.idle.clear()
        try:
            self._write(kafka_rows, batch_id)
        finally:
            self.idle.set()

    def _write(self, kafka_rows: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        spark = kafka_rows.sparkSession
        ingested_at = dt.datetime.now(dt.UTC)
        direct = self.direct.write(kafka_rows, batch_id, ingested_at, started)
        if direct is EMPTY:
            log.debug("%s batch %d: no records, nothing to write", self.config.name, batch_id)
            return
        result = direct if isinstance(direct, BatchResult) else None
        if result is None and self.jvm_path(spark) and self._one_pass_next and self.one_pass.usable(spark):
            result = self.one_pass.write(kafka_rows, batch_id, ingested_at, started)
            self._one_pass_next = not self.one_pass.needs_python
        if result is None:
            result = self.settled.write(kafka_rows, batch_id, ingested_at, started)
            # The next batch tries the one-pass write again once a batch had nothing for the Python decoder.
            self._one_pass_next = not self.settled.had_python_records
        if result is None:
            return
        log_result(self.config.name, result)
        if self.on_topics is not None:
            held: dict[str, set[int]] = {}
            for span in result.ranges:
                held.setdefault(span.topic, set()).add(span.partition)
            new = self.on_topics(held)
            if new:
                self.resolver.follow(new)
        if self.on_batch is not None:
            self.on_batch(result)

    def close(self) -> None:
        """Close what the writer holds between batches (the direct strategy's consumer)."""
        self.direct.close()

    def jvm_path(self, spark: SparkSession) -> bool:
        """Whether records are decoded by Spark's from_avro first (decided once per schema version)."""
        return self.decoder.jvm(spark)
