"""Going back: rewind a pipeline's tables to an earlier version, replay a Kafka range into them.

Rewind restores bronze (and quarantine, to the state it had when that bronze version was committed) with
Delta's RESTORE, marks the RESTORE commit as a `rewind` whose ranges are the coverage as of that version, and
moves the checkpoint aside. The next `ingest run` then starts a new checkpoint with a new txnAppId from the
table's offsets, so it re-reads exactly what the rewind undid.

Replay reads a Kafka range in batch and appends only records whose (topic, partition, offset) neither bronze
nor quarantine holds; replaying what is already there writes nothing, replaying over a gap fills it. Do not
replay a range the running stream is about to read.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from ingestion import bronze, kafka_admin, ledger, tables
from ingestion.config import PipelineConfig
from ingestion.errors import IngestionError
from ingestion.ledger import BatchRecord

log = logging.getLogger(__name__)

KEYS = ("topic", "partition", "offset")
REPLAY_BATCH_ID = -2  # the ledger's batch id of replay commits


@dataclass(frozen=True)
class RewindResult:
    bronze_version: int  # the version restored to
    quarantine_version: int | None
    resume_from: dict[str, dict[str, int]]  # where the next run starts
    checkpoint_moved_to: str | None


def rewind(spark: SparkSession, config: PipelineConfig, *, to_version: int | None = None,
           to_timestamp: dt.datetime | None = None) -> RewindResult:
    from delta.tables import DeltaTable

    records = ledger.history(spark, config.table_path)
    history = DeltaTable.forPath(spark, config.table_path).history().select("version", "timestamp").collect()
    times = {int(r["version"]): r["timestamp"] for r in history}
    version = to_version if to_version is not None else _version_at(times, to_timestamp)
    if version not in times:
        raise IngestionError(f"{config.table_path} has no version {version} (versions {min(times)}-{max(times)})")
    kept = [r for r in records if r.version is not None and r.version <= version]
    marker = BatchRecord(pipeline=config.name, app_id="rewind", batch_id=version, kind="rewind",
                         rows=0, schema_ids=(), ranges=ledger.coverage(kept))
    _restore(spark, config.table_path, version, marker)
    q_version = None
    if ledger.is_table(spark, config.quarantine_path):
        q_times = {int(r["version"]): r["timestamp"] for r in
                   DeltaTable.forPath(spark, config.quarantine_path).history().select("version", "timestamp")
                   .collect()}
        q_version = _version_at(q_times, times[version], allow_none=True)
        if q_version is not None:
            _restore(spark, config.quarantine_path, q_version, marker)
        else:  # the quarantine table did not exist yet then: empty it
            DeltaTable.forPath(spark, config.quarantine_path).delete()
    moved = _move_checkpoint_aside(config.checkpoint_path)
    resume = ledger.next_offsets(ledger.history(spark, config.table_path))
    log.info("%s: rewound bronze to version %d and quarantine to %s; checkpoint moved to %s; the next run "
             "resumes from %s", config.name, version, q_version, moved, resume)
    return RewindResult(version, q_version, resume, moved)


def _version_at(times: dict[int, dt.datetime], when: dt.datetime | None, allow_none: bool = False) -> int | None:
    """The newest version committed at or before `when`."""
    if when is None:
        raise IngestionError("rewind needs --to-version or --to-timestamp")
    naive = when.replace(tzinfo=None) if when.tzinfo is None else when.astimezone(dt.UTC).replace(tzinfo=None)
    older = [v for v, t in times.items() if t.replace(tzinfo=None) <= naive]
    if not older and not allow_none:
        raise IngestionError(f"no table version at or before {when.isoformat()} (oldest is "
                             f"{min(times.values()).isoformat()})")
    return max(older) if older else None


def _restore(spark: SparkSession, path: str, version: int, marker: BatchRecord) -> None:
    from delta.tables import DeltaTable

    if ledger.table_version(spark, path) == version:
        return
    spark.conf.set("spark.databricks.delta.commitInfo.userMetadata", marker.to_user_metadata())
    try:
        DeltaTable.forPath(spark, path).restoreToVersion(version)
    finally:
        spark.conf.unset("spark.databricks.delta.commitInfo.userMetadata")


def _move_checkpoint_aside(location: str) -> str | None:
    """Keep the old checkpoint for inspection, out of the way (local paths; elsewhere delete it yourself)."""
    path = Path(location.removeprefix("file:"))
    if not path.exists():
        return None
    target = path.with_name(f"{path.name}.rewound-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}")
    shutil.move(str(path), str(target))
    return str(target)


# --- replay ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReplayResult:
    read: int
    already_present: int
    written: int
    quarantined: int
    bronze_version: int | None


def parse_position(text: str, topic: str, marks: dict[int, tuple[int, int]], *, ending: bool) -> tuple[str, str]:
    """A position as a Kafka batch-source option: ('startingOffsets'|'endingOffsets', json) or
    ('startingTimestamp'|'endingTimestamp', millis). Accepted: earliest, latest, `0:10,1:20` per partition,
    an ISO 8601 time, or epoch milliseconds. Offsets are clamped to what Kafka holds (`marks`: partition ->
    (log start, end)), so a range reaching past either end reads what there is instead of failing."""
    partitions = sorted(marks)
    which = "ending" if ending else "starting"
    if text in ("earliest", "latest"):
        return f"{which}Offsets", text
    if ":" in text and all(part.count(":") == 1 and part.split(":")[0].isdigit() for part in text.split(",")):
        given = {int(p): int(o) for p, o in (part.split(":") for part in text.split(","))}
        unknown = set(given) - set(partitions)
        if unknown:
            raise IngestionError(f"partitions {sorted(unknown)} are not partitions of {topic!r} ({partitions})")
        # Partitions not named are read whole (-2 earliest) when starting and to the end (-1 latest) when ending.
        default = -1 if ending else -2
        clamped = {p: min(max(o, marks[p][0]), marks[p][1]) for p, o in given.items()}
        return f"{which}Offsets", json.dumps({topic: {str(p): clamped.get(p, default) for p in partitions}})
    if text.isdigit():
        return f"{which}Timestamp", text
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise IngestionError(f"cannot read {text!r} as a position: use earliest, latest, partition:offset pairs "
                             "like 0:100,1:250, an ISO time or epoch milliseconds") from None
    when = when if when.tzinfo else when.replace(tzinfo=dt.UTC)
    return f"{which}Timestamp", str(int(when.timestamp() * 1000))


def replay(spark: SparkSession, config: PipelineConfig, *, start: str, end: str = "latest") -> ReplayResult:
    from ingestion.pipeline import resolver
    from ingestion.source import kafka_options

    settings = config.kafka_client_settings()
    marks = kafka_admin.watermarks(settings, config.topic)
    options = {k: v for k, v in kafka_options(config).items()
               if k not in ("startingOffsets", "maxOffsetsPerTrigger", "minPartitions")}
    options.update([parse_position(start, config.topic, marks, ending=False),
                    parse_position(end, config.topic, marks, ending=True)])
    reader = spark.read.format("kafka")
    for key, value in options.items():
        reader = reader.option(key, value)
    decoded = bronze.decode(reader.load(), resolver(spark, config).spec).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        present = tables.held_coordinates(spark, config)
        new = decoded if present is None else decoded.join(present, list(KEYS), "left_anti")
        new = new.persist(StorageLevel.MEMORY_AND_DISK)
        read_count, new_count = decoded.count(), new.count()
        stats = bronze.batch_stats(new)
        failed = sum(s["failed"] for s in stats)
        if new_count:
            _write_replay(spark, config, new, stats)
        new.unpersist()
    finally:
        decoded.unpersist()
    result = ReplayResult(read_count, read_count - new_count, new_count - failed, failed,
                          ledger.table_version(spark, config.table_path))
    log.info("%s replay %s..%s: %d records read, %d already present, %d written to bronze, %d quarantined",
             config.name, start, end, result.read, result.already_present, result.written, result.quarantined)
    return result


def _write_replay(spark: SparkSession, config: PipelineConfig, new: DataFrame, stats: list[dict[str, Any]]) -> None:
    now = dt.datetime.now(dt.UTC)
    record, failed = ledger.batch_records(stats, pipeline=config.name,
                                          batch_id=REPLAY_BATCH_ID, kind="replay", app_id="replay",
                                          quarantine_app_id="replay")
    if failed is not None:  # quarantine first, as the stream does
        (bronze.quarantine_rows(new, batch_id=REPLAY_BATCH_ID, ingested_at=now).write.format("delta")
         .mode("append").option("userMetadata", failed.to_user_metadata()).save(config.quarantine_path))
    (bronze.bronze_rows(new, batch_id=REPLAY_BATCH_ID, ingested_at=now).write.format("delta").mode("append")
     .option("userMetadata", record.to_user_metadata()).save(config.table_path))
