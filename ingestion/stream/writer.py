"""The exactly-once writer, called by `foreachBatch` once per micro-batch: the planner (`planner`) picks one of the
two write paths.

Every commit carries `txnAppId` (bronze: the checkpoint's id; quarantine: the same with `.quarantine`),
`txnVersion = batch id`, and the batch's offset ranges (the ledger) as the commit's `userMetadata`, whichever path
makes it (docs/architecture.md#two-write-paths):

- **Driver** (`driver_write.DriverWrite`, a batch of at most `sink.directWriteMaxOffsets` offsets): no Spark job;
  the driver fetches the planned offset ranges, decodes them in Python and commits with delta-rs. A batch it does
  not write (`Declined`) goes to the Spark path, nothing written.
- **Spark** (`spark_write.SparkWrite`, every other batch): one Spark job decodes and writes the batch, the few
  records its JVM decoder cannot vouch for decoded in Python by the driver and added to the same transaction.

The writer asks its tables, whatever they are, for either path: one table (`TableWriter`: bronze's two paths) or
a routed pipeline's (`routing.Router`: the batch split by route, each route table's two paths); it holds no branch
on routing. What happens to a decoded batch is `stages`'.

When Spark replays a batch after a crash between the Delta commits and its own checkpoint, the batch id is the
same, so the table holds its (txnAppId, txnVersion) already and nothing is written; the writer logs the skip.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from ingestion.config import PipelineConfig
from ingestion.decode.resolver import SchemaResolver
from ingestion.errors import IngestionError
from ingestion.kafka.fetch import RangeFetcher, Span
from ingestion.runtime import batch_plan
from ingestion.stream.batch import BatchResult, Declined, DecoderChoice, Empty, Targets, WritePath, log_result
from ingestion.stream.context import PipelineContext
from ingestion.stream.driver_write import DriverWrite
from ingestion.stream.planner import Planner
from ingestion.stream.routing import Router
from ingestion.stream.spark_write import SparkWrite

__all__ = ["BatchResult", "BronzeWriter", "StopRequested"]


log = logging.getLogger(__name__)


class StopRequested(IngestionError):
    """Raised where a batch would start once a stop was asked for: the query ends between batches, never in the
    middle of a write (Spark's own stop interrupts the running batch's jobs). The batch is redone by the next run,
    exactly once like any other."""


class BronzeWriter:
    """`foreachBatch` function of one pipeline."""

    def __init__(self, *, config: PipelineConfig, app_id: str, resolver: SchemaResolver | None,
                 on_batch: Callable[[BatchResult], None] | None = None,
                 on_topics: Callable[[Mapping[str, Iterable[int]]], list[str]] | None = None,
                 kafka_client: Mapping[str, Any] | None = None, context: PipelineContext | None = None) -> None:
        self.config = config
        self.app_id = app_id
        self.resolver = resolver
        self.on_batch = on_batch
        # The topics and partitions each batch held, to the run's context; it answers with the topics new to the
        # run (a pattern's, found by Spark's listing), which the schema resolver follows from then on.
        self.on_topics = on_topics
        self.stop_requested = threading.Event()
        self.idle = threading.Event()  # no batch is being written
        self.idle.set()
        # the driver-side path needs the run's consumer settings; without them every batch is a Spark job
        self.max_driver_offsets = config.sink.direct_write_max_offsets if kafka_client is not None else 0
        self.fetcher = RangeFetcher(kafka_client, config.consumer_group) \
            if kafka_client is not None and self.max_driver_offsets else None
        self.planner = Planner(config.name, self.max_driver_offsets if self.fetcher is not None else 0)
        if config.routing is not None:  # a table per route, each written through these same two paths
            if context is None:
                raise IngestionError(f"pipeline {config.name!r}: a routed pipeline's writer needs its context")
            self.tables: TableWriter | Router = Router(context, app_id, self.fetcher)
        elif resolver is None:
            raise IngestionError(f"pipeline {config.name!r}: the writer needs the pipeline's schemas")
        else:
            self.tables = TableWriter(Targets(config, resolver, app_id), self.fetcher)

    @property
    def targets(self) -> Targets:
        """The one table's targets (not a routed pipeline's: each route table has its own)."""
        assert isinstance(self.tables, TableWriter)
        return self.tables.targets

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
        ingested_at = dt.datetime.now(dt.UTC)
        result: BatchResult | None = None
        spans = batch_plan.kafka_offset_ranges(kafka_rows) if self.fetcher is not None else None
        if spans == []:  # Spark plans no input partition for a batch without offsets (a new query's first, say)
            log.debug("%s batch %d: no records, nothing to write", self.config.name, batch_id)
            return
        if self.planner(spans, batch_id).engine is WritePath.DRIVER and spans:
            written = self.tables.write_driver(spans, batch_id, ingested_at, started)
            if isinstance(written, Empty):
                log.debug("%s batch %d: no records, nothing to write", self.config.name, batch_id)
                return
            result = written if isinstance(written, BatchResult) else None  # Declined: Spark writes it
        if result is None:
            result = self.tables.write_spark(kafka_rows, batch_id, ingested_at, started)
        if result is None:
            return
        log_result(self.config.name, result)
        if self.on_topics is not None:
            held: dict[str, set[int]] = {}
            for span in result.ranges:
                held.setdefault(span.topic, set()).add(span.partition)
            new = self.on_topics(held)
            if new and self.resolver is not None:
                self.resolver.follow(new)
        if self.on_batch is not None:
            self.on_batch(result)

    def close(self) -> None:
        """Close what the writer holds between batches (the driver path's consumer)."""
        if self.fetcher is not None:
            self.fetcher.close()

    def plan_ahead(self, kafka_rows: DataFrame) -> None:
        """The Spark path's first-batch plan built and its table's log loaded ahead (`SparkWrite.plan_ahead`); a
        routed pipeline's tables are each route's, made as records come: nothing to do ahead."""
        self.tables.plan_ahead(kafka_rows)

    def jvm_path(self, spark: SparkSession) -> bool:
        """Whether records are decoded by Spark's JVM decoder first (decided once per schema version; a routed
        pipeline decides per route table, as each is made)."""
        return self.tables.jvm_path(spark)


class TableWriter:
    """One table's two write paths (a pipeline's bronze; a routed pipeline's `Router` answers the same calls for
    its route tables)."""

    def __init__(self, targets: Targets, fetcher: RangeFetcher | None) -> None:
        self.targets = targets
        self.decoder = DecoderChoice(targets)
        self.driver = DriverWrite(targets, fetcher)
        self.spark = SparkWrite(targets, self.decoder)

    def write_driver(self, spans: Sequence[Span], batch_id: int, ingested_at: dt.datetime,
                     started: float) -> BatchResult | Empty | Declined:
        return self.driver.write(spans, batch_id, ingested_at, started)

    def write_spark(self, kafka_rows: DataFrame, batch_id: int, ingested_at: dt.datetime,
                    started: float) -> BatchResult | None:
        return self.spark.write(kafka_rows, batch_id, ingested_at, started)

    def plan_ahead(self, kafka_rows: DataFrame) -> None:
        if self.jvm_path(kafka_rows.sparkSession):
            self.spark.plan_ahead(kafka_rows)

    def jvm_path(self, spark: SparkSession) -> bool:
        return self.decoder.jvm(spark)
