"""Where a pipeline stands, per partition: Kafka's end offset against the offsets the table records.

Everything comes from the table and from Kafka, not from the checkpoint or a running process, so `ingest
status` answers the same whether the pipeline runs or not. When no broker answers (an outage, when status is
wanted most), `offline_status` gives the table's side alone: what each partition's rows and quarantine hold, with
Kafka's end offsets and the lag unknown.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ingestion import kafka
from ingestion.config import PipelineConfig
from ingestion.delta import ledger, routed
from ingestion.delta.ledger import BatchKind
from ingestion.delta.reader import TableReader
from ingestion.ops.readers import Source, as_reader
from ingestion.stream import context, handover
from ingestion.stream.context import PipelineContext
from ingestion.stream.handover import GroupStart


@dataclass(frozen=True)
class PartitionStatus:
    topic: str
    partition: int
    latest_offset: int | None  # Kafka's end offset: the offset the next record will get (None: no broker answered)
    ingested_up_to: int  # the next offset the table expects (last recorded + 1), 0 when none
    lag_records: int | None  # None: no broker answered
    lag_seconds: float | None  # age of the oldest record not yet ingested; 0 when caught up
    quarantined: int


@dataclass(frozen=True)
class PipelineStatus:
    pipeline: str
    topic: str
    table: str
    table_version: int | None
    last_batch_id: int | None
    last_batch_at: str | None
    lag_records: int | None  # None: no broker answered (`kafka_error`)
    partitions: list[PartitionStatus]
    files: int | None = None  # bronze's data files now
    average_file_bytes: int | None = None
    last_maintenance: str | None = None  # "optimize at version 12, <time>"
    oldest_restorable: int | None = None  # the oldest version time travel and rewind still reach
    topics: list[str] = field(default_factory=list)  # the topics reported (`topic`: the config's topic or pattern)
    gone_topics: list[str] = field(default_factory=list)  # in the ledger, matched once, no longer on the brokers
    # source.startFromGroup while the table records no offsets: where each partition would start (handover)
    group_start: GroupStart | None = None
    silver: SilverStatus | None = None
    routes: list[RouteTableStatus] = field(default_factory=list)  # a routed pipeline's tables, one per route
    kafka_error: str | None = None  # why Kafka's side is missing (`offline_status`): no broker answered

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RouteTableStatus:
    """One route table of a routed pipeline (docs/routing.md#operating-a-routed-pipeline). Lag is the pipeline's
    (its tables share the partitions); a table's own position is the age of its last commit and the offsets its
    ledger holds."""

    table: str
    path: str
    table_version: int | None
    last_batch_id: int | None
    rows: int  # rows its stream commits wrote
    last_batch_at: str | None = None  # when its last stream commit was made
    last_commit_age_seconds: float | None = None  # how long ago
    # per topic and partition, the offset after the last one the table holds (a record of another route may come
    # after it: not lag, except with `by: topic`, where the table's topic is all its own)
    ingested_up_to: dict[str, dict[str, int]] = field(default_factory=dict)


def route_statuses(reader: TableReader, config: PipelineConfig, now: dt.datetime) -> list[RouteTableStatus]:
    """Each route table of a routed pipeline, from its ledger (delta-rs, no JVM), local or in object storage."""
    found = []
    for table, path in routed.route_tables(config).items():
        records = ledger.in_effect(reader.history(path))  # a rewind's undone batches are not its last
        stream = [r for r in records if r.kind == BatchKind.STREAM]
        last = stream[-1] if stream else None
        at = last.committed_at.replace(tzinfo=dt.UTC) if last and last.committed_at else None
        found.append(RouteTableStatus(
            table, path, reader.version(path), last.batch_id if last else None, sum(r.rows for r in stream),
            at.isoformat() if at else None, round(max(0.0, (now - at).total_seconds()), 3) if at else None,
            ledger.next_offsets(records)))
    return found


@dataclass
class SilverStatus:
    table: str
    mode: str
    bronze_version: int | None  # the bronze version silver's state stands at (None: no silver table yet)
    lag_versions: int  # bronze versions silver has not merged
    epoch: int | None = None
    last_step_at_version: int | None = None  # silver's table version of its newest step
    cross_partition_keys: int = 0  # over its last steps: keys whose changes came from two or more partitions


def silver_status(config: PipelineConfig, bronze_version: int | None) -> SilverStatus | None:
    """Where the pipeline's silver table stands against bronze, from silver's ledger (delta-rs, no JVM)."""
    from ingestion.silver import ledger as silver_ledger

    path = config.silver_path
    if config.silver is None or path is None:
        return None
    found = silver_ledger.rs_records(path, config.storage_options() or None)
    if not found:
        return SilverStatus(path, config.silver.mode, None, (bronze_version or 0) + 1 if bronze_version else 0)
    version, newest = found[0]
    return SilverStatus(path, config.silver.mode, newest.bronze_version,
                        max(0, (bronze_version or 0) - newest.bronze_version), newest.epoch, version,
                        sum(r.cross_partition_keys for _, r in found))


def pipeline_status(source: Source, target: PipelineConfig | PipelineContext,
                    now: dt.datetime | None = None) -> PipelineStatus:
    """Where the pipeline stands, from its tables (through `source`: a TableReader, or a SparkSession to read with
    Spark) and Kafka, per partition of each topic it reads."""
    ctx = context.of(target)
    config = ctx.config
    reader = as_reader(source)
    now = now or dt.datetime.now(dt.UTC)
    settings = ctx.kafka.client
    ledgers = [ledger.in_effect(reader.history(path)) for path in routed.ledger_paths(config)]
    records = [r for table in ledgers for r in table]
    recorded = routed.held_offsets(ledgers)
    topics, gone = ctx.audited(recorded)
    group_start = handover.plan(ctx, strict=False) if config.source.start_from_group and not recorded else None
    partitions: list[PartitionStatus] = []
    marks = kafka.watermarks_of(settings, {t: ctx.partitions[t] for t in topics})
    for topic in topics:
        partitions.extend(_topic_status(reader, config, settings, topic, marks[topic], recorded.get(topic, {}),
                                        now))
    return _with_tables(reader, config, records, partitions, topics, now, gone=gone, group_start=group_start)


def offline_status(source: Source, config: PipelineConfig, kafka_error: str,
                   now: dt.datetime | None = None) -> PipelineStatus:
    """Where the pipeline stands from its tables alone, when no broker answered (`kafka_error` says so): for each
    partition the tables have seen (in the ledger or in quarantine), the next offset the table expects and the
    records quarantined; Kafka's end offsets and the lag unknown (None)."""
    reader = as_reader(source)
    now = now or dt.datetime.now(dt.UTC)
    ledgers = [ledger.in_effect(reader.history(path)) for path in routed.ledger_paths(config)]
    recorded = routed.held_offsets(ledgers)
    topics = sorted({t for t in recorded if config.reads_topic(t)} | set(config.topics))  # as `ctx.audited` keeps
    partitions: list[PartitionStatus] = []
    for topic in topics:
        held = recorded.get(topic, {})
        quarantined = reader.quarantined_per_partition(config.quarantine_path, topic)
        partitions.extend(PartitionStatus(topic, p, None, held.get(str(p), 0), None, None, quarantined.get(p, 0))
                          for p in sorted({int(p) for p in held} | set(quarantined)))
    return _with_tables(reader, config, [r for table in ledgers for r in table], partitions, topics, now,
                        kafka_error=kafka_error)


def _with_tables(reader: TableReader, config: PipelineConfig, records: list[ledger.BatchRecord],
                 partitions: list[PartitionStatus], topics: list[str], now: dt.datetime, *,
                 gone: list[str] | None = None, group_start: GroupStart | None = None,
                 kafka_error: str | None = None) -> PipelineStatus:
    """The status of these partitions with what the tables say: the last batch, files, maintenance, silver and
    the route tables."""
    stream = [r for r in records if r.kind == BatchKind.STREAM]
    stream.sort(key=lambda r: r.committed_at or dt.datetime.min)  # several tables' ledgers: the newest of any
    last = stream[-1] if stream else None
    maintained = [r for r in records if r.kind in ledger.MAINTENANCE]
    layout = reader.layout(config.table_path)
    lags = [p.lag_records for p in partitions]
    return PipelineStatus(
        config.name, config.subscription, config.table_path,
        reader.version(config.table_path),
        last.batch_id if last else None,
        last.committed_at.replace(tzinfo=dt.UTC).isoformat() if last and last.committed_at else None,  # UTC, said
        None if kafka_error is not None else sum(lag or 0 for lag in lags), partitions,
        layout.files if layout else None, layout.average_file_bytes if layout else None,
        _maintenance_text(maintained[-1]) if maintained else None,
        layout.oldest_restorable if layout else None,
        topics, list(gone or []), group_start, silver_status(config, reader.version(config.table_path)),
        route_statuses(reader, config, now), kafka_error,
    )


def _topic_status(reader: TableReader, config: PipelineConfig, settings: Mapping[str, Any], topic: str,
                  marks: dict[int, tuple[int, int]], ingested: dict[str, int],
                  now: dt.datetime) -> list[PartitionStatus]:
    quarantined = reader.quarantined_per_partition(config.quarantine_path, topic)
    position = {p: ingested.get(str(p), low) for p, (low, _) in marks.items()}
    # Lag counts from the first committed record past the table's position: transaction markers and aborted
    # records there are not lag (the table can never hold them).
    unread = kafka.first_unread(settings, topic, {p: o for p, o in position.items() if o < marks[p][1]})
    partitions = []
    for p, (_, high) in sorted(marks.items()):
        first = unread.get(p, (position[p], None)) if position[p] < high else None
        lag = 0 if first is None else high - first[0]
        age = 0.0 if first is None else None if first[1] is None else max(0.0, now.timestamp() - first[1] / 1000)
        partitions.append(PartitionStatus(topic, p, high, ingested.get(str(p), 0), lag, age, quarantined.get(p, 0)))
    return partitions


def _maintenance_text(record: ledger.BatchRecord) -> str:
    when = record.committed_at.isoformat(timespec="seconds") if record.committed_at else "-"
    return f"{record.kind} at version {record.version}, {when}"


def _silver_line(s: SilverStatus) -> str:
    if s.bronze_version is None:
        return f"  silver ({s.mode}) {s.table}: no table yet"
    cross = (f"; {s.cross_partition_keys} keys seen in two or more Kafka partitions (unordered under Kafka order)"
             if s.cross_partition_keys else "")
    return (f"  silver ({s.mode}) {s.table}: at bronze version {s.bronze_version}, lag {s.lag_versions} bronze "
            f"versions{cross}")


def render(status: PipelineStatus) -> str:
    several = len(status.topics) > 1 or status.topics != [status.topic]
    what = f"topics {status.topic} ({len(status.topics)})" if several else f"topic {status.topic}"
    width = max([9, *(len(f"{p.topic}/{p.partition}") for p in status.partitions)]) if several else 9
    version = "no table yet" if status.table_version is None else f"table version {status.table_version}"
    last = ("no batch yet" if status.last_batch_id is None else
            ("last batch: the start batch" if status.last_batch_id == ledger.START_BATCH_ID else
             f"last batch {status.last_batch_id}") + (f" at {_to_seconds(status.last_batch_at)}"
                                                      if status.last_batch_at else ""))
    lag = "lag unknown (no answer from Kafka)" if status.lag_records is None else f"lag {status.lag_records} records"
    lines = [f"{status.pipeline}: {what}, {version}, {last}, {lag}",
             (f"  {status.files} files, average {(status.average_file_bytes or 0) / 1024:.1f} KiB"
              if status.files is not None else "  no data files yet") +
             f"; last maintenance: {status.last_maintenance or 'never'}; " +
             (f"oldest restorable version {status.oldest_restorable}" if status.oldest_restorable is not None
              else "no restorable version yet"),
             *([f"  deleted from Kafka since the table read them: {', '.join(status.gone_topics)}"]
               if status.gone_topics else []),
             *([f"  {line}" for line in status.group_start.lines()] if status.group_start else []),
             *([_silver_line(status.silver)] if status.silver else []),
             *([f"  {len(status.routes)} route table(s):"] if status.routes else []),
             *(f"    {r.table}: {r.path}, table version {r.table_version}, {r.rows} rows"
               + (f", last batch {r.last_batch_id}" if r.last_batch_id is not None else "")
               + (f" at {r.last_batch_at} ({r.last_commit_age_seconds:.0f} s ago)"
                  if r.last_batch_at and r.last_commit_age_seconds is not None else "") for r in status.routes),
             f"  {'partition':>{width}} {'latest':>10} {'ingested':>10} {'lag':>8} {'lag s':>8} {'quarantined':>11}"]
    for p in status.partitions:
        seconds = "-" if p.lag_seconds is None else f"{p.lag_seconds:.1f}"
        name = f"{p.topic}/{p.partition}" if several else str(p.partition)
        latest = "-" if p.latest_offset is None else str(p.latest_offset)
        lag_records = "-" if p.lag_records is None else str(p.lag_records)
        lines.append(f"  {name:>{width}} {latest:>10} {p.ingested_up_to:>10} {lag_records:>8} "
                     f"{seconds:>8} {p.quarantined:>11}")
    return "\n".join(lines)


def _to_seconds(stamp: str) -> str:
    """An ISO time as a line shows it: to the second, its zone kept (`--json` keeps the milliseconds)."""
    try:
        return dt.datetime.fromisoformat(stamp).isoformat(timespec="seconds")
    except ValueError:
        return stamp
