"""What a run reads once, under its writer lock, before its query starts, and what it hands to the query's start.

The launch sequence (`launch`) takes the writer lock (`locked`), reads the facts (`read_facts`: the offsets the
table's ledger records, Kafka's bounds, bronze's state, whether the checkpoint has batches) and hands them down,
with what it prepared without a JVM and the lock, as one immutable `Launch`; the query's start (`pipeline.start`)
and every check before it (`caught_up`, `start_batch.fits`) take them instead of reading them again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ingestion import kafka
from ingestion.decode.resolver import SchemaResolver
from ingestion.delta import rs_tables
from ingestion.delta.reader import JvmFreeReadError
from ingestion.silver import ledger as silver_ledger
from ingestion.stream import checkpoint, handover, shape
from ingestion.stream.context import PipelineContext
from ingestion.stream.handover import GroupStart
from ingestion.stream.lock import WriterLock
from ingestion.stream.metrics import end_abandoned
from ingestion.stream.prometheus import Exporter, LagRefresher, watch
from ingestion.stream.start_batch import StartBatch

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Offsets = dict[str, dict[str, int]]  # topic -> partition (as text, as Spark's JSON names it) -> offset


@dataclass(frozen=True)
class Facts:
    """What a run reads once, under its writer lock, before its query starts."""

    recorded: Offsets | None  # the next offset the table's ledger records per partition ({}: none; None: unknown
    # without a JVM, a table delta-rs cannot read)
    bounds: dict[str, dict[int, tuple[int, int]]]  # Kafka's (low, high) offsets per topic and partition
    table: rs_tables.TableState | None  # bronze as delta-rs reads it (None: it cannot)
    checkpoint_started: bool | None  # Spark's checkpoint has batches (None: a store only the JVM reaches)
    group_start: GroupStart | None = None  # source.startFromGroup of a table that records no offsets yet: where
    # each partition starts (an active group refused here, in seconds, before the JVM)

    def after(self, batches: tuple[StartBatch, ...]) -> Facts:
        """The facts once the start batches are committed: the table records their offsets too."""
        if not batches:
            return self
        recorded = {t: dict(parts) for t, parts in (self.recorded or {}).items()}
        for batch in batches:
            for topic, parts in batch.ends.items():
                recorded.setdefault(topic, {}).update(parts)
        return replace(self, recorded=recorded)

    def records_to_do(self) -> int:
        """Offsets between where the table stands (or the start of each topic) and the end of each topic."""
        total = 0
        for topic, marks in self.bounds.items():
            done = (self.recorded or {}).get(topic, {})
            total += sum(max(0, high - max(low, done.get(str(p), low))) for p, (low, high) in marks.items())
        return total


def read_facts(ctx: PipelineContext) -> Facts:
    """The facts of a pipeline (see `Facts`): with delta-rs and one Kafka consumer, no JVM."""
    config = ctx.config
    try:
        table: rs_tables.TableState | None = rs_tables.state(config.table_path, config.storage_options())
    except JvmFreeReadError:
        table = None
    recorded = shape.of(config).recorded(config, table)
    started = checkpoint.has_progress(config.checkpoint_path, config.spark) \
        if checkpoint.reachable_without_jvm(config.checkpoint_path, config.spark) else None
    group = handover.plan(ctx) if config.source.start_from_group and recorded == {} else None
    return Facts(recorded, kafka.watermarks_of(ctx.kafka.client, ctx.partitions), table, started, group)


@dataclass(frozen=True)
class Prepared:
    """What was done without a JVM before the query starts."""

    schemas: SchemaResolver | None  # resolved and the tables made; None: only Spark can (the query's start does it)
    start_batches: tuple[StartBatch, ...] = ()
    seconds: float = 0.0  # how long it took


@dataclass(frozen=True)
class Launch:
    """Everything the launch sequence hands to the query's start."""

    facts: Facts | None
    prepared: Prepared | None
    lock: WriterLock | None  # None: the query's start takes it and reads the facts again under it
    prometheus: LagRefresher | None = None  # the pipeline's series, its lag refreshed since the launch's facts


def locked(ctx: PipelineContext, spark: SparkSession | None = None) -> Launch:
    """The writer lock taken and the facts read under it; a predecessor that died holding the lock has its MLflow
    run ended as KILLED. Without `spark`, only where the checkpoint allows it without a JVM (a local folder, S3,
    ADLS): one only the JVM reaches (`hdfs://`, ...) is locked by the query's start, which calls this again with its
    session and reads the facts again under the lock (the first facts only decide whether an available-now run is
    caught up)."""
    config = ctx.config
    if spark is None and not checkpoint.reachable_without_jvm(config.checkpoint_path, config.spark):
        return Launch(read_facts(ctx), None, None)
    lock = WriterLock(ctx.name, config.checkpoint_path, spark, config.spark)
    lock.acquire()
    try:
        if lock.taken_from is not None:
            end_abandoned(lock.taken_from)
        return Launch(read_facts(ctx), None, lock)
    except BaseException:
        lock.release()
        raise


def caught_up(ctx: PipelineContext, facts: Facts | None) -> dict[str, dict[int, int]] | None:
    """Per topic and partition, the offset the table has reached, when it holds every committed record Kafka had
    at launch and its silver table (if any) every bronze version: an available-now run has nothing to do. None
    otherwise, or when that cannot be told without a JVM (no ledger yet, a table delta-rs cannot read)."""
    if facts is None or not facts.recorded:
        return None
    config = ctx.config
    if not shape.of(config).ledger_says_caught_up:
        return None
    if config.silver_path is not None and not silver_ledger.rs_caught_up(
            config.silver_path, config.table_path, config.storage_options() or None):
        return None  # silver has bronze versions to merge
    reached: dict[str, dict[int, int]] = {}
    for topic, marks in facts.bounds.items():
        done = facts.recorded.get(topic, {})  # a topic the table never read: caught up only while it is empty
        position = {p: max(low, done.get(str(p), low)) for p, (low, _) in marks.items()}
        behind = {p: o for p, o in position.items() if o < marks[p][1]}
        unread = kafka.first_unread(ctx.kafka.client, topic, behind) if behind else {}
        if len(unread) < len(behind) or any(first is not None for first in unread.values()):
            return None  # committed records to ingest (or a partition that did not answer)
        reached[topic] = position
    return reached or None


def watched(launch: Launch, ctx: PipelineContext, exporter: Exporter | None, *, available_now: bool) -> Launch:
    """The launch with its pipeline's Prometheus series, the lag refreshed from Kafka from now on (the first second
    of the run, before any JVM), the table's side from the facts."""
    if exporter is None:
        return launch
    recorded = launch.facts.recorded if launch.facts is not None else None
    refresher = watch(exporter, ctx, available_now=available_now, recorded=recorded)
    refresher.start()
    return replace(launch, prometheus=refresher)

