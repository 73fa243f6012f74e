"""`ingest replay`: read a Kafka range again and write only what neither bronze nor quarantine holds.

Replay reads a Kafka range in batch and appends only records whose (topic, partition, offset) neither bronze
nor quarantine holds; replaying what is already there writes nothing, replaying over a gap fills it. Do not
replay a range the running stream is about to read.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ingestion import kafka, positions
from ingestion.config import PipelineConfig
from ingestion.decode import bronze, routes
from ingestion.delta import commit, ledger, reads
from ingestion.delta.ledger import REPLAY_BATCH_ID, BatchKind
from ingestion.errors import IngestionError
from ingestion.kafka import access
from ingestion.positions import Position
from ingestion.stream import context, setup, stages
from ingestion.stream.batch import decode_range
from ingestion.stream.context import PipelineContext
from ingestion.stream.routing import KEY, Router, route_app_id
from ingestion.stream.source import kafka_options, with_timestamp_strategy

log = logging.getLogger(__name__)

KEYS = ("topic", "partition", "offset")


@dataclass(frozen=True)
class ReplayResult:
    read: int
    already_present: int
    written: int
    quarantined: int
    bronze_version: int | None
    tables: Mapping[str, int] = field(default_factory=dict)  # a routed pipeline's: rows written per route table


def source_option(position: Position, marks: Mapping[str, Mapping[int, tuple[int, int]]]) -> tuple[str, str]:
    """A position (`positions.starting`/`ending`: read and checked already) as a Kafka batch-source option:
    ('startingOffsets'|'endingOffsets', json) or ('startingTimestamp'|'endingTimestamp', millis). Offsets are
    clamped to what Kafka holds (`marks`: topic -> partition -> (log start, end)), so a range reaching past either
    end reads what there is instead of failing; partitions not named are read whole (earliest when starting,
    latest when ending), as Spark wants every partition it reads named."""
    which = "ending" if position.ending else "starting"
    if position.edge is not None:
        return f"{which}Offsets", position.edge
    if position.millis is not None:
        return f"{which}Timestamp", str(position.millis)
    given = dict(position.offsets or {})
    if None in given:
        if len(marks) != 1:
            raise IngestionError(f"partition:offset positions name one topic's partitions, and {len(marks)} topics "
                                 f"are read ({', '.join(sorted(marks))}): name it with --topic, or use Spark's JSON "
                                 '{"topic": {"0": 100}}')
        given = {next(iter(marks)): given[None]}
    default = positions.LATEST if position.ending else positions.EARLIEST
    out: dict[str, dict[str, int]] = {}
    for topic, parts in sorted(marks.items()):
        named = given.get(topic, {})
        unknown = set(named) - set(parts)
        if unknown:
            raise IngestionError(f"partitions {sorted(unknown)} are not partitions of {topic!r} ({sorted(parts)})")
        out[topic] = {str(p): (min(max(named[p], parts[p][0]), parts[p][1]) if named.get(p, -3) >= 0
                               else named.get(p, default)) for p in sorted(parts)}
    return f"{which}Offsets", json.dumps(out)


def replay_topics(ctx: PipelineContext, topic: str | None, span: tuple[Position, ...]) -> list[str]:
    """What a replay reads: `topic` (--topic), else the topics its JSON positions name, else every topic the
    pipeline reads now. A topic the pipeline does not read is refused, naming what it reads."""
    config = ctx.config
    named = sorted({t for position in span for t in position.topics} | ({topic} if topic else set()))
    for name in named:
        if not config.reads_topic(name):
            raise IngestionError(f"pipeline {config.name!r} does not read topic {name!r}: it reads {config.reads}")
    if topic is not None and named != [topic]:
        raise IngestionError(f"--topic {topic} and the positions name different topics: {named}")
    topics = named or ctx.topics
    if not topics:
        raise IngestionError(f"pipeline {config.name!r}: no topic to replay, none matches {config.reads}")
    return topics


def check_positions(ctx: PipelineContext, topic: str | None, start: str | Position,
                    end: str | Position = "latest") -> list[str]:
    """The topics a replay reads (`replay_topics`), with its positions checked as far as Kafka is not needed
    (`positions.replay_range`; partition:offset pairs name one topic's partitions). No JVM."""
    span = positions.replay_range(start, end)
    topics = replay_topics(ctx, topic, span)
    for position in span:
        if None in (position.offsets or {}) and len(topics) != 1:
            source_option(position, {t: {} for t in topics})  # raises, naming what to write instead
    return topics


def replay(spark: SparkSession, target: PipelineConfig | PipelineContext, *, start: str | Position,
           end: str | Position = "latest", topic: str | None = None) -> ReplayResult:
    """Read the range again (of `topic` only, when given; else of every topic the pipeline reads now) and write
    what neither table holds. Kafka is asked first (login, the topics, a read), so a refusal is one
    KafkaAccessError before Spark reads; one that comes from Spark's client is named alike."""
    ctx = context.of(target)
    settings = ctx.kafka.client
    span = positions.replay_range(start, end)
    topics = check_positions(ctx, topic, *span)
    found = {name: ctx.partitions[name] if name in ctx.partitions else
             kafka.partitions(settings, name, ctx.kafka.timeout) for name in topics}
    for name, parts in found.items():
        kafka.check_access(settings, name, parts, ctx.kafka.timeout)
    try:
        return _replay(spark, ctx, found, *span)
    except Exception as exc:
        refused = None if isinstance(exc, IngestionError) else access.from_java(str(exc), settings, topics[0])
        if refused is not None:
            raise refused from None
        raise


def _replay(spark: SparkSession, ctx: PipelineContext, found: dict[str, list[int]], start: Position,
            end: Position) -> ReplayResult:
    config, topics = ctx.config, list(found)
    # The range is the replay's own: the pipeline's starting position (offsets, time) and pacing do not apply.
    dropped = ("startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp", "maxOffsetsPerTrigger",
               "minPartitions", "subscribePattern")
    options = {k: v for k, v in kafka_options(ctx).items() if k not in dropped}
    options["subscribe"] = ",".join(topics)
    marks = kafka.watermarks_of(ctx.kafka.client, found)
    options.update([source_option(start, marks), source_option(end, marks)])
    with_timestamp_strategy(options)  # a partition with nothing after the time contributes nothing
    reader = spark.read.format("kafka")
    for key, value in options.items():
        reader = reader.option(key, value)
    if config.routing is not None:
        return _replay_routed(spark, ctx, reader.load(), f"{start}..{end} of {', '.join(topics)}")
    schemas = setup.resolver(spark, ctx, also=topics)
    decoded = decode_range(spark, config, schemas, reader.load(), with_rules=False)
    try:
        present = reads.held_coordinates(spark, config)
        new = decoded if present is None else decoded.join(present, list(KEYS), "left_anti")
        new = new.persist(StorageLevel.MEMORY_AND_DISK)
        read_count, new_count = decoded.count(), new.count()
        stats = bronze.batch_stats(new)
        failed = sum(s["failed"] for s in stats)
        if new_count:
            run = replay_run(spark, [(config.table_path, "replay"), (config.quarantine_path, "replay")])
            _write_replay(spark, config, new, stats, run)
        new.unpersist()
    finally:
        decoded.unpersist()
    result = ReplayResult(read_count, read_count - new_count, new_count - failed, failed,
                          ledger.table_version(spark, config.table_path))
    log.info("%s replay %s..%s of %s: %d records read, %d already present, %d written to bronze, %d quarantined",
             config.name, start, end, ", ".join(topics), result.read, result.already_present, result.written,
             result.quarantined)
    return result


def _replay_routed(spark: SparkSession, ctx: PipelineContext, kafka_rows: DataFrame, what: str, *,
                   with_rules: bool = False) -> ReplayResult:
    """A routed pipeline's replay: the records none of its tables (route tables and quarantine) holds, split by
    route as the stream splits a batch (`stream.routing.Router`; a route without a table yet gets one), each
    route's written to its table as a replay, the records without a route quarantined as RouteError.
    `with_rules`: each route's records checked against the expectations as the stream checks them (a shadow's
    start, `ops/shadow.py`)."""
    config = ctx.config
    present = reads.held_coordinates(spark, config)
    new = kafka_rows if present is None else kafka_rows.join(present, list(KEYS), "left_anti")
    router = Router(ctx, "replay", None)
    keyed = new.withColumn(KEY, routes.key_column(config)).persist(StorageLevel.MEMORY_AND_DISK)
    read_count = kafka_rows.count()
    written: dict[str, int] = {}
    quarantined = 0
    try:
        found = keyed.groupBy(KEY, "topic").count().collect()
        by_table, unrouted = router.split([(r[KEY], r["topic"]) for r in found], spark)
        run = replay_run(spark, [(config.quarantine_path, "replay"), *(
            (path, route_app_id("replay", t)) for t in by_table
            for path in (router.tables[t].targets.config.table_path, config.quarantine_path))])
        for table, keys in sorted(by_table.items()):
            targets = router.tables[table].targets
            rows = keyed.where(F.col(KEY).isin(sorted(keys))).drop(KEY)
            decoded = decode_range(spark, targets.config, targets.resolver, rows, with_rules=with_rules)
            try:
                stats = bronze.batch_stats(decoded)
                failed = sum(s["failed"] for s in stats)
                _write_replay(spark, targets.config, decoded, stats, run, app_id=route_app_id("replay", table))
            finally:
                decoded.unpersist()
            written[table] = sum(s["count"] for s in stats) - failed
            quarantined += failed
        if unrouted:
            known = sorted(k for k in unrouted if k is not None)
            rows = keyed.where((F.col(KEY).isNull() if None in unrouted else F.lit(False)) | F.col(KEY).isin(known))
            failed_rows = router.route_errors(rows).persist(StorageLevel.MEMORY_AND_DISK)
            try:
                stats = bronze.batch_stats(failed_rows)
                _write_replay(spark, config, failed_rows, stats, run, bronze_too=False)
            finally:
                failed_rows.unpersist()
            quarantined += sum(s["count"] for s in stats)
    finally:
        keyed.unpersist()
    new_count = sum(written.values()) + quarantined
    result = ReplayResult(read_count, read_count - new_count, sum(written.values()), quarantined, None, written)
    log.info("%s replay %s: %d records read, %d already present, %d written to route tables (%s), %d quarantined",
             config.name, what, result.read, result.already_present, result.written,
             ", ".join(f"{t} {n}" for t, n in written.items()) or "none", result.quarantined)
    return result


def _write_replay(spark: SparkSession, config: PipelineConfig, new: DataFrame, stats: list[dict[str, Any]],
                  run: int, bronze_too: bool = True, app_id: str = "replay") -> None:
    """Quarantine's rows, then bronze's (`bronze_too`), each commit with the replay's ledger record and transaction
    id (`app_id`, this replay's number `run`: `replay_run`); a route table's app id is `replay.<table>`, so the table
    is known as the pipeline's by its ledger (`delta.routed`)."""
    now = dt.datetime.now(dt.UTC)
    record, failed = ledger.batch_records(stats, pipeline=config.name,
                                          batch_id=REPLAY_BATCH_ID, kind=BatchKind.REPLAY, app_id=app_id,
                                          quarantine_app_id="replay")
    quarantine = None if failed is None else (lambda: commit.append(  # a route's failures: its own id
        bronze.quarantine_rows(new, batch_id=REPLAY_BATCH_ID, ingested_at=now), config.quarantine_path,
        commit.Txn(app_id, run), failed.to_user_metadata()))

    def to_bronze() -> None:
        if bronze_too:  # columns of new schema versions added
            commit.append(bronze.bronze_rows(new, batch_id=REPLAY_BATCH_ID, ingested_at=now), config.table_path,
                          commit.Txn(app_id, run), record.to_user_metadata(), merge_schema=True)

    stages.commit(REPLAY_BATCH_ID, quarantine, to_bronze)  # quarantine first, as the stream's; its fault points


def replay_run(spark: SparkSession, writes: list[tuple[str, str]]) -> int:
    """This replay's number, the txnVersion of each of its commits: one more than any replay committed to the
    tables it writes before (`writes`: (table path, app id) pairs; `commit.next_version`)."""
    return max(commit.next_version(spark, [path], app_id) for path, app_id in writes)
