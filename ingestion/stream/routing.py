"""A routed pipeline's writer: one query, each batch split by route, each route's table its own commit
(docs/routing.md).

A route's table is written exactly as a pipeline's bronze is, by the same write paths (`SparkWrite`,
`DriverWrite`) over its own `Targets`: its txnAppId is `<checkpoint id>.<table>` and its txnVersion the batch id, so a
batch Spark replays after a crash between two tables' commits is skipped by the tables that hold it and written by
the others. Each route has its own schemas (its record type's subjects, its topic's) and its table evolves on its
own; a route first seen mid-run gets its table then. The records of a batch that have no route go to the
pipeline's quarantine table (txnAppId `<checkpoint id>.quarantine`) as `RouteError`; every route's decode failures
go there too, under the route's own quarantine txnAppId.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel, inheritable_thread_target
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ingestion import faults
from ingestion.decode import bronze, routes
from ingestion.decode.routes import Route, RouteNames
from ingestion.delta import ledger
from ingestion.delta.append import DeltaAppend
from ingestion.delta.ledger import BatchKind, PartitionRange
from ingestion.errors import ConfigError, SchemaError, one_line
from ingestion.kafka.fetch import RangeFetcher, Span
from ingestion.stream import setup
from ingestion.stream.batch import (
    EMPTY,
    BatchResult,
    Declined,
    DecoderChoice,
    Empty,
    Targets,
    WritePath,
    log_result,
    quarantine_app_id,
)
from ingestion.stream.context import PipelineContext
from ingestion.stream.driver_write import DriverWrite
from ingestion.stream.spark_write import SparkWrite

log = logging.getLogger(__name__)

KEY = "__ingest_route_key"
# Route tables whose Spark jobs of one batch run at once: more overlapped nothing on 2 cores (docs/routing.md)
ROUTES_AT_ONCE = 4


def route_app_id(app_id: str, table: str) -> str:
    """A route table's txnAppId: the checkpoint's with the table's name."""
    return f"{app_id}.{table}"


@dataclass
class RouteTable:
    """One route's table and its writers."""

    table: str
    targets: Targets
    spark: SparkWrite
    driver: DriverWrite


class Router:
    """The routed writer of one pipeline: its route tables (made as routes appear) and the batch split by route."""

    def __init__(self, ctx: PipelineContext, app_id: str, fetcher: RangeFetcher | None) -> None:
        self.ctx = ctx
        self.config = ctx.config
        self.app_id = app_id
        self.fetcher = fetcher
        self.names = RouteNames(self.config, ctx.schemas)
        self.tables: dict[str, RouteTable] = {}
        self.quarantine = DeltaAppend(self.config.quarantine_path, quarantine_app_id(app_id))

    def plan_ahead(self, kafka_rows: DataFrame) -> None:
        """Nothing to plan ahead: each route's table is made as its first records come."""

    def jvm_path(self, spark: SparkSession) -> bool:
        """False: whether a route table's records are decoded by the JVM is decided per table, as each is made."""
        return False

    def table_of(self, route: Route) -> str:
        return self.config.route_table(route.value)

    def route_table(self, spark: SparkSession | None, route: Route, topics: Sequence[str]) -> RouteTable | None:
        """The table of a route, made now when it is new (its schemas resolved, its table created and registered;
        without `spark`, None when it is new: the Spark path makes it)."""
        table = self.table_of(route)
        found = self.tables.get(table)
        if found is not None or spark is None:
            return found
        by_topic = self.config.routing is not None and self.config.routing.by == "topic"
        config = self.config.routed(route.value, record=route.record, topics=(route.value,) if by_topic else ())
        read = sorted(topics) if route.record or by_topic else list(self.ctx.partitions)
        sub = PipelineContext(config, self.ctx.kafka, {t: self.ctx.partitions.get(t, []) for t in read},
                              self.ctx.schemas)
        schemas = setup.resolver(spark, sub)
        try:  # the pipeline's expectations hold on every route table: each compiles against its columns
            setup.check_rules(config, schemas.spec)
        except ConfigError as exc:
            raise ConfigError(f"{exc} (route {route.value!r}, table {table}: every route table takes the "
                              f"pipeline's expectations)") from None
        setup.ensure_tables(spark, config, schemas.spec)
        setup.widen_table(spark, config, schemas)
        targets = Targets(config, schemas, route_app_id(self.app_id, table))
        decoder = DecoderChoice(targets)
        decoder.jvm(spark)
        found = RouteTable(table, targets, SparkWrite(targets, decoder), DriverWrite(targets, None))
        self.tables[table] = found
        log.info("%s: route %r writes table %s (%s), txnAppId %s", self.config.name, route.value, table,
                 config.table_path, targets.bronze.app_id)
        return found

    # --- the Spark path ---------------------------------------------------------------------------------------

    def write_spark(self, kafka_rows: DataFrame, batch_id: int, ingested_at: dt.datetime,
                    started: float) -> BatchResult | None:
        """The batch split by route with one pass over Kafka's rows (cached), each route's rows written by its
        table's Spark path, the rows without a route quarantined; None for a batch without records."""
        spark = kafka_rows.sparkSession
        keyed = kafka_rows.withColumn(KEY, routes.key_column(self.config)).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            found = keyed.groupBy(KEY, "topic").count().collect()
            if not found:
                return None
            by_table, unrouted = self.split([(r[KEY], r["topic"]) for r in found], spark)
            results = []
            tables: dict[str, BatchResult] = {}

            def write(n: int, table: str, keys: set[str]) -> BatchResult | None:
                if n:
                    faults.reached(faults.FaultPoint.BETWEEN_TABLES, batch_id)
                rows = keyed.where(F.col(KEY).isin(sorted(keys))).drop(KEY)
                result = self.tables[table].spark.write(rows, batch_id, ingested_at, started)
                if result is not None:
                    log_result(f"{self.config.name} -> {table}", result)
                return result

            # Each table's commit is its own (txnAppId per table), so after the first table's the others' jobs run
            # side by side: a job's planning and commit on the driver overlap another's tasks. Each thread
            # inherits this one's Spark properties (the pipeline's scheduler pool).
            work = sorted(by_table.items())
            done = [(work[0][0], write(0, *work[0]))] if work else []
            with ThreadPoolExecutor(max_workers=min(ROUTES_AT_ONCE, len(work)) or 1,
                                    thread_name_prefix=f"{self.config.name}-routes") as pool:
                futures = [pool.submit(inheritable_thread_target(spark)(write), n, table, keys)
                           for n, (table, keys) in enumerate(work) if n]
                done += [(table, future.result()) for (table, _), future in zip(work[1:], futures, strict=True)]
            for table, result in done:
                if result is not None:
                    results.append(result)
                    tables[table] = result
            if unrouted:
                no_key = None in unrouted
                known = sorted(k for k in unrouted if k is not None)
                where = F.col(KEY).isin(known) if known else F.lit(False)
                rows = keyed.where(F.col(KEY).isNull() | where if no_key else where)
                results.append(self._quarantine_spark(spark, rows, batch_id, ingested_at, started))
        finally:
            keyed.unpersist()
        return merged(batch_id, results, started, WritePath.SPARK, tables)

    def split(self, found: list[tuple[str | None, str]],
              spark: SparkSession | None) -> tuple[dict[str, set[str]], set[str | None]]:
        """The batch's keys by route table (tables of new routes made, with `spark`), and the keys without one."""
        topics: dict[str | None, set[str]] = {}
        for key, topic in found:
            topics.setdefault(key, set()).add(topic)
        by_table: dict[str, set[str]] = {}
        unrouted: set[str | None] = set()
        for key, seen in topics.items():
            route = self.names.route(key)
            if route is None or key is None:
                unrouted.add(key)
                continue
            try:
                table = self.route_table(spark, route, sorted(seen))
            except SchemaError as exc:  # its subjects cannot be read: its records wait in quarantine
                log.warning("%s: route %r has no table: %s; its records are quarantined", self.config.name,
                            route.value, exc)
                self.names.refuse(key, f"route {route.value!r}: {one_line(exc)}")
                unrouted.add(key)
                continue
            if table is None:
                return {}, set()  # a new route: the driver declines, the Spark path makes its table
            by_table.setdefault(table.table, set()).add(key)
        return by_table, unrouted

    def _quarantine_spark(self, spark: SparkSession, rows: DataFrame, batch_id: int, ingested_at: dt.datetime,
                          started: float) -> BatchResult:
        """The records without a route, to the pipeline's quarantine table as RouteError."""
        failed = self.route_errors(rows).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            stats = bronze.batch_stats(failed)
            _, record = ledger.batch_records(stats, pipeline=self.config.name, batch_id=batch_id,
                                             kind=BatchKind.STREAM, app_id=self.app_id,
                                             quarantine_app_id=self.quarantine.app_id)
            assert record is not None
            committed = self.quarantine.append(
                spark, bronze.quarantine_rows(failed, batch_id=batch_id, ingested_at=ingested_at), record)
        finally:
            failed.unpersist()
        log.info("%s batch %d: %d records without a route quarantined (%s)", self.config.name, batch_id,
                 record.rows, self.names.reason(None) if len(stats) else "")
        return BatchResult.of(record, stats, version=self.quarantine.version, committed=committed, started=started,
                              quarantine_only=True)

    def route_errors(self, rows: DataFrame) -> DataFrame:
        """Kafka rows (with the route key) that have no route, as decoded rows failed with RouteError and the
        reason (what `bronze.quarantine_rows` takes)."""
        reasons = F.lit(self.names.reason(None))
        for key in [r[KEY] for r in rows.select(KEY).distinct().collect() if r[KEY] is not None]:
            reasons = F.when(F.col(KEY) == key, F.lit(self.names.reason(key))).otherwise(reasons)
        return rows.select(
            "key", "topic", "partition", "offset", "timestamp", "timestampType", "headers",
            F.col("value").alias("_raw_value"), F.col("value").isNull().alias("_tombstone"),
            F.lit(None).cast("int").alias("_schema_id"), F.lit(routes.ROUTE_ERROR).alias("_error_class"),
            reasons.alias("_error_message"), F.length("value").cast("int").alias("_value_bytes"),
        )

    # --- the driver path --------------------------------------------------------------------------------------

    def write_driver(self, spans: Sequence[Span], batch_id: int, ingested_at: dt.datetime,
                     started: float) -> BatchResult | Empty | Declined:
        """The batch fetched once, split by route, each route's records committed by its table's driver path.
        A batch with records of a new route or without a route is declined (the Spark path makes the table and
        writes the quarantine); a route that declines leaves the rest to the Spark path too, where the tables
        that committed skip the batch by their txn."""
        assert self.fetcher is not None
        source = self.fetcher.fetch(spans, 5.0)
        if source is None:
            return Declined("its records did not arrive in time")
        if not source.num_rows:
            return EMPTY
        keys = routes.keys_of(self.config, source)
        by_table, unrouted = self.split(list(zip(keys, source.column("topic").to_pylist(), strict=True)), None)
        if unrouted or not by_table:
            return Declined("records without a route, or of a route that has no table yet")
        key_array = pa.array(keys, pa.string())
        results = []
        tables: dict[str, BatchResult] = {}
        for n, (table, table_keys) in enumerate(sorted(by_table.items())):
            if n:
                faults.reached(faults.FaultPoint.BETWEEN_TABLES, batch_id)
            part = source.filter(pc.is_in(key_array, value_set=pa.array(sorted(table_keys), pa.string())))
            written = self.tables[table].driver.write_source(part, spans, batch_id, ingested_at, started)
            if not isinstance(written, BatchResult):
                return written if isinstance(written, Declined) else Declined("a route's records vanished")
            log_result(f"{self.config.name} -> {table}", written)
            results.append(written)
            tables[table] = written
        result = merged(batch_id, results, started, WritePath.DRIVER, tables)
        assert result is not None
        return result


def merged(batch_id: int, results: Sequence[BatchResult], started: float, path: WritePath,
           tables: Mapping[str, BatchResult]) -> BatchResult | None:
    """The pipeline's result of a batch from its tables' results (`tables`: the route tables', by name): counts
    summed, each partition's offsets from the first to the last any table took."""
    if not results:
        return None
    spans: dict[tuple[str, int], PartitionRange] = {}
    for result in results:
        for r in result.ranges:
            old = spans.get((r.topic, r.partition))
            spans[(r.topic, r.partition)] = r if old is None else PartitionRange(
                r.topic, r.partition, min(old.first, r.first), max(old.last, r.last), old.count + r.count)
    violated: dict[str, int] = {}
    for result in results:
        for name, count in result.violated.items():
            violated[name] = violated.get(name, 0) + count
    return BatchResult(batch_id, sum(r.rows for r in results), sum(r.quarantined for r in results),
                       sum(r.bytes for r in results), None, any(r.committed for r in results),
                       tuple(spans[k] for k in sorted(spans)),
                       max((r.max_timestamp for r in results if r.max_timestamp is not None), default=None),
                       time.monotonic() - started, path, sum(r.checked for r in results), violated,
                       {t: (r.rows if r.committed else 0, r.version) for t, r in tables.items()})
