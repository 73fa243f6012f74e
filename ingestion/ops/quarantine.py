"""The quarantine table: what is in it, and re-decoding it into bronze once the cause is fixed.

Re-decoding appends to bronze only the records whose (topic, partition, offset) bronze does not hold yet, then
removes from quarantine every record bronze now holds and updates the error of those that still fail, in one
MERGE. Both commits carry the run's transaction id (txnAppId `redecode`, or `redecode.<table>` for a route's
table; txnVersion the run's number, `delta.commit.next_version`), so a commit repeated within a run is skipped by
Delta. A crash between the two steps leaves records in both tables for a moment; the next run appends nothing new
and finishes the removal. Nothing changes (no new table version) when there is nothing to do.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ingestion import faults
from ingestion.columns import COORDINATES
from ingestion.config import PipelineConfig
from ingestion.decode import bronze, routes
from ingestion.decode.resolver import SchemaResolver
from ingestion.delta import commit, ledger, reads, spark_tables
from ingestion.delta.ledger import REDECODE_BATCH_ID, BatchKind, BatchRecord
from ingestion.delta.reader import QuarantinedRecord, QuarantineGroup
from ingestion.ops.readers import Source, as_reader
from ingestion.stream import context, setup
from ingestion.stream.batch import decode_range
from ingestion.stream.context import PipelineContext
from ingestion.stream.routing import KEY, Router, route_app_id

log = logging.getLogger(__name__)

KEYS = COORDINATES


@dataclass(frozen=True)
class RedecodeResult:
    examined: int
    redecoded: int  # appended to bronze now
    already_in_bronze: int  # decodable, and bronze already held them (an earlier, interrupted run)
    still_failing: int
    errors_changed: int
    bronze_version: int | None
    quarantine_version: int | None
    tables: Mapping[str, int] = field(default_factory=dict)  # a routed pipeline's: rows re-decoded per route table


def read(spark: SparkSession, config: PipelineConfig) -> DataFrame | None:
    return reads.read_table(spark, config.quarantine_path)


def groups(source: Source, config: PipelineConfig) -> list[QuarantineGroup]:
    """Counts per error class and partition, with the offset range and newest Kafka timestamp."""
    return as_reader(source).quarantine_groups(config.quarantine_path)


def records(source: Source, config: PipelineConfig, *, limit: int,
            error_class: str | None = None) -> list[QuarantinedRecord]:
    """The first `limit` quarantined records by partition and offset (of one error class when given)."""
    return as_reader(source).quarantined(config.quarantine_path, limit=limit, error_class=error_class)


def render_groups(found: list[QuarantineGroup], path: str) -> str:
    lines = [f"{'error class':24} {'partition':>18} {'records':>8} {'offsets':>17}  newest"]
    for g in found:
        where = f"{g.topic}/{g.partition}"
        lines.append(f"{g.error_class:24} {where:>18} {g.records:>8} "
                     f"{str(g.first_offset) + '-' + str(g.last_offset):>17}  {g.newest}")
    lines.append(f"{sum(g.records for g in found)} records quarantined in {path}")
    return "\n".join(lines)


SHOWN_BYTES = 16  # of a value or key, in hex
SHOWN_TEXT = 120  # characters of a value or key that is UTF-8 text
_LINE_BREAKS = {ord("\t"): None, ord("\n"): None, ord("\r"): None}  # text, shown escaped by json.dumps


def shown_bytes(data: bytes | None) -> str:
    """A value or key as `quarantine show` prints it: its length and first bytes in hex, then what a reader
    recognizes: the text (quoted, up to SHOWN_TEXT characters) when it is UTF-8 text, else the first bytes as
    `hexdump -C` shows them (printable ASCII, a dot for the rest)."""
    if data is None:
        return "null"
    if not data:
        return "0 bytes"
    hexed = data[:SHOWN_BYTES].hex(" ") + (" ..." if len(data) > SHOWN_BYTES else "")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and text.translate(_LINE_BREAKS).isprintable():  # pretty-printed JSON is text too
        cut = text[:SHOWN_TEXT] + ("..." if len(text) > SHOWN_TEXT else "")
        return f"{len(data)} bytes {hexed}  text {json.dumps(cut, ensure_ascii=False)}"
    ascii_ = "".join(chr(b) if 32 <= b < 127 else "." for b in data[:SHOWN_BYTES])
    return f"{len(data)} bytes {hexed}  |{ascii_}|"


def render_records(found: list[QuarantinedRecord]) -> str:
    lines = []
    for r in found:
        schema = "no schema id" if r.schema_id is None else f"schema id {r.schema_id}"
        lines.append(f"{r.topic}/{r.partition}@{r.offset}  {r.timestamp}  {schema}  "
                     f"{r.error_class}: {r.error_message}")
        if r.key is not None:
            lines.append(f"    key   {shown_bytes(r.key)}")
        lines.append(f"    value {shown_bytes(r.value)}")
    return "\n".join(lines) if lines else "no quarantined records"


def render_redecode(r: RedecodeResult) -> str:
    bronze = "bronze unchanged" if not r.redecoded else f"bronze version {r.bronze_version}"
    if r.redecoded and r.tables:  # a routed pipeline's
        bronze = "route tables: " + ", ".join(f"{t} {n}" for t, n in r.tables.items() if n)
    quarantine = "no quarantine table" if r.quarantine_version is None else f"quarantine version {r.quarantine_version}"
    return (f"{r.examined} examined: {r.redecoded} re-decoded into bronze, {r.already_in_bronze} were already there, "
            f"{r.still_failing} still failing ({r.errors_changed} with a new error); {bronze}, {quarantine}")


def as_kafka_rows(quarantined: DataFrame) -> DataFrame:
    """Quarantine rows in the Kafka source's shape, so the stream's decoder reads them unchanged."""
    return quarantined.select(
        F.col("_kafka_key").alias("key"), F.col("_kafka_value").alias("value"),
        F.col("_kafka_topic").alias("topic"), F.col("_kafka_partition").alias("partition"),
        F.col("_kafka_offset").alias("offset"), F.col("_kafka_timestamp").alias("timestamp"),
        F.col("_kafka_timestamp_type").alias("timestampType"), F.col("_kafka_headers").alias("headers"),
        F.col("_batch_id").alias("_orig_batch_id"), F.col("_error_class").alias("_old_error_class"),
        F.col("_error_message").alias("_old_error_message"),
    )


def redecode(spark: SparkSession, target: PipelineConfig | PipelineContext) -> RedecodeResult:
    ctx = context.of(target)
    config = ctx.config
    quarantined = read(spark, config)
    if quarantined is None:
        return RedecodeResult(0, 0, 0, 0, 0, ledger.table_version(spark, config.table_path), None)
    if config.routing is not None:
        return _redecode_routed(spark, ctx, as_kafka_rows(quarantined))
    # The subjects of the topics the quarantined rows came from, matching now or not.
    topics = [r[0] for r in quarantined.select("_kafka_topic").distinct().collect()]
    run = commit.next_version(spark, [config.table_path, config.quarantine_path], "redecode")
    return _redecode(spark, config, setup.resolver(spark, ctx, also=topics), as_kafka_rows(quarantined), run)


def _redecode_routed(spark: SparkSession, ctx: PipelineContext, quarantined: DataFrame) -> RedecodeResult:
    """A routed pipeline's reprocess: each quarantined record's route read again from its Kafka row, as the stream
    reads it (a record without a route then may have one now: a schema id the registry knows now), and the records
    of each route re-decoded into its table (made if it is new) as one pipeline's into bronze; the records still
    without a route stay as they are."""
    config = ctx.config
    keyed = quarantined.withColumn(KEY, routes.key_column(config)).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        examined = keyed.count()
        router = Router(ctx, "redecode", None)
        by_table, _ = router.split([(r[KEY], r["topic"]) for r in keyed.select(KEY, "topic").distinct().collect()],
                                   spark)
        run = max((commit.next_version(spark, [router.tables[t].targets.config.table_path, config.quarantine_path],
                                       route_app_id("redecode", t)) for t in by_table), default=0)
        done = [_redecode(spark, router.tables[table].targets.config, router.tables[table].targets.resolver,
                          keyed.where(F.col(KEY).isin(sorted(keys))).drop(KEY), run, route_app_id("redecode", table))
                for table, keys in sorted(by_table.items())]
    finally:
        keyed.unpersist()
    moved, present = sum(r.redecoded for r in done), sum(r.already_in_bronze for r in done)
    result = RedecodeResult(examined, moved, present, examined - moved - present, sum(r.errors_changed for r in done),
                            None, ledger.table_version(spark, config.quarantine_path),
                            {table: r.redecoded for table, r in zip(sorted(by_table), done, strict=True)})
    log.info("%s quarantine: %d examined, %d re-decoded into route tables %s, %d still failing", config.name,
             examined, moved, ", ".join(sorted(by_table)) or "(none)", result.still_failing)
    return result


def _redecode(spark: SparkSession, config: PipelineConfig, schemas: SchemaResolver, quarantined: DataFrame,
              run: int, app_id: str = "redecode") -> RedecodeResult:
    """Re-decode quarantined records (`as_kafka_rows`) into `config`'s bronze (a route's table: `app_id`
    `redecode.<table>`), removing from quarantine what bronze holds then; both commits carry (`app_id`, `run`)."""
    # Bronze follows the reader schema as at a stream's start: widened columns first (Delta's type widening), before
    # any DataFrame reads bronze (a read analyzed before the widening fails Delta's schema check later); added
    # columns come with the append's schema merge. A version no run has seen yet (every record of it quarantined)
    # evolves the table here.
    setup.widen_table(spark, config, schemas)
    # The expectations as they are now (docs/expectations.md): a record one refuses stays in quarantine (its class
    # and rules updated), one that passes them now (a rule relaxed or removed) moves to bronze.
    decoded = decode_range(spark, config, schemas, quarantined, with_rules=True)
    try:
        renamed = decoded.withColumnsRenamed({"topic": KEYS[0], "partition": KEYS[1], "offset": KEYS[2]})
        bronze_table = reads.read_table(spark, config.table_path)
        in_bronze = bronze_table.select(*KEYS) if bronze_table is not None else None
        good = renamed.where(F.col("_error_class").isNull())
        new = good if in_bronze is None else good.join(in_bronze, list(KEYS), "left_anti")
        new = new.withColumnsRenamed({KEYS[0]: "topic", KEYS[1]: "partition", KEYS[2]: "offset"}).persist()
        counts = decoded.agg(
            F.count(F.lit(1)).alias("examined"),
            F.sum(F.col("_error_class").isNull().cast("long")).alias("decodable"),
            F.sum((F.col("_error_class").isNotNull() & (
                (F.col("_error_class") != F.col("_old_error_class")) |
                (F.col("_error_message") != F.col("_old_error_message")))).cast("long")).alias("changed"),
        ).first()
        assert counts is not None  # a global aggregate always has one row
        examined, decodable, changed = (int(counts[k] or 0) for k in ("examined", "decodable", "changed"))
        # Bronze first, then quarantine's MERGE (the reverse of a batch's order: a record moves out of quarantine
        # only once bronze holds it); a crash between them leaves it in both, and the rerun's MERGE removes it.
        faults.reached(faults.FaultPoint.BEFORE_COMMIT, REDECODE_BATCH_ID)
        appended = _append_to_bronze(config, new, commit.Txn(app_id, run))
        faults.reached(faults.FaultPoint.BRONZE_COMMITTED, REDECODE_BATCH_ID)
        quarantine_version = ledger.table_version(spark, config.quarantine_path)
        if decodable or changed:
            source = renamed.select(*KEYS, "_error_class", "_error_message", "_schema_id")
            with commit.committing(spark, commit.Txn(app_id, run), _redecode_marker(config).to_user_metadata()):
                (spark_tables.merge(spark, config.quarantine_path, source,
                                    " AND ".join(f"q.{k} = s.{k}" for k in KEYS), target="q")
                 .whenMatchedDelete(condition="s._error_class IS NULL")
                 .whenMatchedUpdate(condition="q._error_class <> s._error_class OR "
                                              "q._error_message <> s._error_message",
                                    set={"_error_class": "s._error_class", "_error_message": "s._error_message",
                                         "_schema_id": "s._schema_id"})
                 .execute())
            quarantine_version = ledger.table_version(spark, config.quarantine_path)
        faults.reached(faults.FaultPoint.AFTER_COMMIT, REDECODE_BATCH_ID)
        new.unpersist()
    finally:
        decoded.unpersist()
    result = RedecodeResult(examined, appended, decodable - appended, examined - decodable, changed,
                            ledger.table_version(spark, config.table_path), quarantine_version)
    log.info("%s quarantine: %d examined, %d re-decoded into bronze, %d already there, %d still failing "
             "(%d with a new error)", config.name, result.examined, result.redecoded, result.already_in_bronze,
             result.still_failing, result.errors_changed)
    return result


def _append_to_bronze(config: PipelineConfig, new: DataFrame, txn: commit.Txn) -> int:
    stats = bronze.batch_stats(new)
    record, _ = ledger.batch_records(stats, pipeline=config.name, batch_id=REDECODE_BATCH_ID, kind=BatchKind.REDECODE,
                                     app_id=txn.app_id, quarantine_app_id="redecode")
    if not record.rows:
        return 0
    rows_df = bronze.bronze_rows(new, batch_id=F.col("_orig_batch_id"), ingested_at=dt.datetime.now(dt.UTC))
    commit.append(rows_df, config.table_path, txn, record.to_user_metadata(), merge_schema=True)
    return record.rows


def _redecode_marker(config: PipelineConfig) -> BatchRecord:
    return BatchRecord(pipeline=config.name, app_id="redecode", batch_id=REDECODE_BATCH_ID, kind=BatchKind.REDECODE,
                       rows=0, schema_ids=(), ranges=())
