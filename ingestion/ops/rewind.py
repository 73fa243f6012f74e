"""`ingest rewind`: restore a pipeline's tables to an earlier version, so the next run re-reads what it undid.

Rewind restores bronze (and quarantine, to the state it had when that bronze version was committed) with
Delta's RESTORE, marks the RESTORE commit as a `rewind` whose ranges are the coverage as of that version, and
moves the checkpoint aside. The next `ingest run` then starts a new checkpoint with a new txnAppId from the
table's offsets, so it re-reads exactly what the rewind undid. It holds the pipeline's writer lock throughout: a
running pipeline refuses it (naming the process), as it refuses a second run, rather than failing when its
checkpoint moves away.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from ingestion.config import PipelineConfig
from ingestion.delta import ledger, routed, spark_tables, whole_batches
from ingestion.delta.commit import committing
from ingestion.delta.ledger import BatchKind, BatchRecord
from ingestion.delta.reads import spark_layout
from ingestion.delta.rs_reads import DeltaRsReader
from ingestion.errors import ConfigError, IngestionError
from ingestion.runtime import hadoop
from ingestion.storage import local_folder
from ingestion.stream import checkpoint
from ingestion.stream.lock import WriterLock

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RewindResult:
    bronze_version: int | None  # the version restored to (None: a routed pipeline's, see `tables`)
    quarantine_version: int | None
    resume_from: dict[str, dict[str, int]]  # where the next run starts
    checkpoint_moved_to: str | None
    # Quarantine reprocesses the restore undid (their bronze versions) and the rows they had moved, which are back in
    # quarantine: the next run does not redo a reprocess (`ingest quarantine reprocess` does).
    undone_reprocesses: tuple[int, ...] = ()
    requarantined: int = 0
    # A routed pipeline's: each route table's version restored to (-1: emptied, it was made after the time), of
    # the tables the rewind changed.
    tables: Mapping[str, int] = field(default_factory=dict)
    # The target was the newest version already (a version, or a time after the newest commit): nothing changed.
    unchanged: bool = False


def rewind(spark: SparkSession, config: PipelineConfig, *, to_version: int | None = None,
           to_timestamp: dt.datetime | None = None) -> RewindResult:
    with _no_other_writer(spark, config):
        if config.routing is not None:
            return _rewind_routed(spark, config, to_version, to_timestamp)
        return _rewind(spark, config, to_version, to_timestamp)


@contextlib.contextmanager
def _no_other_writer(spark: SparkSession, config: PipelineConfig) -> Iterator[None]:
    """The pipeline's writer lock, held while the tables are restored and the checkpoint moves aside;
    `PipelineRunning` (one line naming the process) while a run holds it. Without a checkpoint no run has started,
    and none is made for the lock (it would be moved aside as an old checkpoint)."""
    folder = local_folder(config.checkpoint_path)
    if not (folder.is_dir() if folder is not None else hadoop.exists(spark, config.checkpoint_path)):
        yield
        return
    lock = WriterLock(config.name, config.checkpoint_path, spark, config.spark)
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _rewind(spark: SparkSession, config: PipelineConfig, to_version: int | None,
            to_timestamp: dt.datetime | None) -> RewindResult:
    records = ledger.history(spark, config.table_path)
    history = spark_tables.history(spark, config.table_path).select("version", "timestamp").collect()
    times = {int(r["version"]): r["timestamp"] for r in history}
    version = to_version if to_version is not None else _version_at(times, to_timestamp)
    if version not in times:
        raise IngestionError(f"{config.table_path} has no version {version} (versions {min(times)}-{max(times)})")
    if version == max(times):  # a restore would commit nothing new, and the checkpoint must stay with its txnAppId
        log.debug("%s: already at version %d: nothing to do", config.name, version)
        return RewindResult(version, None, ledger.next_offsets(records), None, unchanged=True)
    layout = spark_layout(spark, config.table_path)
    oldest = layout.oldest_restorable if layout is not None else None
    if oldest is not None and version < oldest:
        raise IngestionError(f"cannot rewind {config.name} to version {version}: its data files were vacuumed or "
                             f"are older than the table's retention ({config.maintenance.vacuum_retention}); the "
                             f"oldest version still restorable is {oldest}")
    kept = [r for r in records if r.version is not None and r.version <= version]
    marker = BatchRecord(pipeline=config.name, app_id="rewind", batch_id=version, kind=BatchKind.REWIND,
                         rows=0, schema_ids=(), ranges=ledger.coverage(kept))
    undone = undone_reprocesses(records, version)
    whole_batches.restore(spark, config.table_path, version, marker)
    q_version = None
    if ledger.is_table(spark, config.quarantine_path):
        q_version = _quarantine_version(spark, config, version, times)
        if q_version is not None:
            whole_batches.restore(spark, config.quarantine_path, q_version, marker)
        else:  # the quarantine table did not exist yet then: empty it (a rewind's commit, as the restores)
            with committing(spark, None, marker.to_user_metadata()):
                spark_tables.delete_all(spark, config.quarantine_path)
    resume = ledger.next_offsets(ledger.history(spark, config.table_path))
    back = _back_in_quarantine(spark, config, undone)
    moved = _move_checkpoint_aside(spark, config.checkpoint_path)  # last, under the lock it holds
    log.debug("%s: rewound bronze to version %d and quarantine to %s; %s; the next run resumes from %s",
              config.name, version, q_version, _checkpoint_said(moved), resume)
    return RewindResult(version, q_version, resume, moved, tuple(r.version for r in undone if r.version is not None),
                        back)


def _back_in_quarantine(spark: SparkSession, config: PipelineConfig, undone: list[BatchRecord]) -> int:
    """Of the records the undone reprocesses had moved to bronze, those in quarantine after the restore (a rewind
    to before they were quarantined leaves them to the next run, which reads them from Kafka again)."""
    ranges = [r for record in undone for r in record.ranges]
    if not ranges or not ledger.is_table(spark, config.quarantine_path):
        return 0
    from functools import reduce

    from pyspark.sql import functions as F

    wanted = reduce(lambda a, b: a | b, [(F.col("_kafka_topic") == r.topic) & (F.col("_kafka_partition") == r.partition)
                                         & F.col("_kafka_offset").between(r.first, r.last) for r in ranges])
    return spark.read.format("delta").load(config.quarantine_path).where(wanted).count()


def check_version(config: PipelineConfig, to_version: int | None) -> None:
    """A version after the table's newest (or a table not there yet), refused with delta-rs before a JVM starts."""
    if to_version is None or config.routing is not None:
        return
    try:
        newest = DeltaRsReader(config.storage_options() or None).version(config.table_path)
    except Exception as exc:  # noqa: BLE001 - a log delta-rs cannot read: Spark's history decides, as before
        log.debug("%s: the table's version not read with delta-rs (%s)", config.name, exc)
        return
    if newest is None:
        raise IngestionError(f"{config.name}: no table at {config.table_path} yet: nothing to rewind")
    if to_version > newest:
        raise IngestionError(f"{config.table_path} has no version {to_version} (its newest is {newest})")


def check_target(config: PipelineConfig, to_version: int | None) -> None:
    """A routed pipeline is rewound to a time (all its tables together), not to a version: each table has its own."""
    if config.routing is not None and to_version is not None:
        raise ConfigError(f"{config.file}: key 'routing': a routed pipeline's tables each have versions of their "
                          "own; rewind it with --to-timestamp (all its tables together)")


def _rewind_routed(spark: SparkSession, config: PipelineConfig, to_version: int | None,
                   when: dt.datetime | None) -> RewindResult:
    """Every table of a routed pipeline (its route tables and quarantine) back to where it stood at `when`, with
    each stream batch whole (`delta.whole_batches`): a batch one table committed after `when` (or one a kill left
    in some tables only) is undone in all of them. The checkpoint goes aside, and the next run resumes from the
    tables' offsets with a new txnAppId, writing each record from there once, into its route's table."""
    check_target(config, to_version)
    if when is None:
        raise IngestionError("rewind needs --to-timestamp")
    until = int((when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp() * 1000)
    tables = whole_batches.read(spark, config)
    targets = whole_batches.cut(tables, until, whole_batches.undone(
        tables, until, lambda batch: _finished(config.checkpoint_path, *batch)))
    if not targets:
        log.debug("%s: no table has a commit after %s: nothing rewound, the checkpoint stays", config.name,
                  when.isoformat())
        return RewindResult(None, None, routed.recorded_offsets(config) or {}, None)
    for table, version in targets.items():  # refused before anything changes
        layout = spark_layout(spark, tables.paths[table])
        oldest = layout.oldest_restorable if layout is not None else None
        if oldest is not None and 0 <= version < oldest:
            raise IngestionError(f"cannot rewind {config.name}'s table {table} to version {version}: its data files "
                                 f"were vacuumed or are older than the table's retention "
                                 f"({config.maintenance.vacuum_retention}); the oldest version still restorable is "
                                 f"{oldest}")
    reprocesses = [r for table, version in targets.items() for r in undone_reprocesses(tables.records(table), version)]
    whole_batches.apply(spark, config, tables, targets)
    resume = routed.recorded_offsets(config) or {}
    back = _back_in_quarantine(spark, config, reprocesses)
    moved = _move_checkpoint_aside(spark, config.checkpoint_path)  # last, under the lock it holds
    log.debug("%s: rewound to %s: %s; %s; the next run resumes from %s", config.name, when.isoformat(),
              ", ".join(f"{t} to version {v}" for t, v in sorted(targets.items())), _checkpoint_said(moved), resume)
    return RewindResult(None, targets.pop("quarantine", None), resume, moved,
                        tuple(r.version for r in reprocesses if r.version is not None),
                        back, targets)


def _finished(location: str, app_id: str, batch_id: int) -> bool:
    """Whether the checkpoint at `location` (of txnAppId `app_id`) records batch `batch_id` as finished (Spark's
    `commits/<batch>`); False where that cannot be read (not a local folder, another checkpoint's batch)."""
    folder = local_folder(location)
    if folder is None or not (folder / checkpoint.APP_ID_FILE).is_file():
        return False
    return (folder / checkpoint.APP_ID_FILE).read_text().strip() == app_id and \
        (folder / "commits" / str(batch_id)).is_file()


def render(r: RewindResult, pipeline: str) -> str:
    """What a rewind did, in lines, and the reprocesses it undid with the command that redoes them."""
    if r.bronze_version is None:
        return _render_routed(r, pipeline)
    if r.unchanged:
        return f"already at version {r.bronze_version}: nothing to do"
    quarantine = ("quarantine had no version then (emptied, if the table exists)" if r.quarantine_version is None
                  else f"quarantine to version {r.quarantine_version}")
    kept = (f"old checkpoint kept at {r.checkpoint_moved_to}" if r.checkpoint_moved_to is not None
            else "no checkpoint to move aside")
    lines = [f"bronze restored to version {r.bronze_version}, {quarantine}; {kept}; the next run resumes from "
             f"{json.dumps(r.resume_from)}"]
    if r.undone_reprocesses:
        lines.append(f"the rewind undid the quarantine reprocess at bronze version(s) "
                     f"{', '.join(map(str, r.undone_reprocesses))}: {_requarantined(r, pipeline, 'bronze')}")
    return "\n".join(lines)


def _render_routed(r: RewindResult, pipeline: str) -> str:
    if not r.tables and r.quarantine_version is None:
        return "no table has a commit after that time: nothing rewound, the checkpoint stays"
    restored = [f"{t} {'emptied' if v < 0 else f'to version {v}'}" for t, v in sorted(r.tables.items())]
    if r.quarantine_version is not None:
        restored.append(f"quarantine {'emptied' if r.quarantine_version < 0 else f'to version {r.quarantine_version}'}")
    kept = (f"old checkpoint kept at {r.checkpoint_moved_to}" if r.checkpoint_moved_to is not None
            else "no checkpoint to move aside")
    lines = [f"restored {', '.join(restored)}; {kept}; the next run resumes from {json.dumps(r.resume_from)}"]
    if r.undone_reprocesses:
        lines.append(f"the rewind undid quarantine reprocess(es): "
                     f"{_requarantined(r, pipeline, 'their route tables')}")
    return "\n".join(lines)


def _requarantined(r: RewindResult, pipeline: str, to: str) -> str:
    """What became of the records the undone reprocesses had moved, and the command that moves them again."""
    if not r.requarantined:
        return "the records they moved are after the version rewound to, and the next run reads them from Kafka again"
    return (f"{r.requarantined} rows are back in quarantine, and the next run does not redo it; run `ingest "
            f"quarantine reprocess {pipeline}` to move them to {to} again")


def undone_reprocesses(records: list[BatchRecord], version: int) -> list[BatchRecord]:
    """The reprocess commits still in effect (not undone by an earlier rewind) that a restore to `version` undoes."""
    return [r for r in ledger.in_effect(records)
            if r.kind == BatchKind.REDECODE and r.rows and (r.version or 0) > version]


def _quarantine_version(spark: SparkSession, config: PipelineConfig, version: int,
                        times: dict[int, dt.datetime]) -> int | None:
    """The quarantine version that goes with bronze `version` (`quarantine_version_for`). Compared by each commit's
    own clock (`commitInfo.timestamp`, milliseconds, stamped by the driver that made it), not by the commit files'
    times: in object storage those have one-second steps, and a batch's quarantine commit and the bronze commit
    before it often share the second (two write paths commit in milliseconds). Where delta-rs cannot read the logs,
    by the commit files' times, as Spark's history gives them."""
    options = config.storage_options() or None
    try:
        bronze_ms = whole_batches.commit_clock(config.table_path, options)
        quarantine_ms = whole_batches.commit_clock(config.quarantine_path, options)
        records = DeltaRsReader(options).history(config.quarantine_path)
    except Exception as exc:  # noqa: BLE001 - a log delta-rs cannot read: Spark's history, as before
        log.debug("%s: commit clocks not read with delta-rs (%s); by Spark's history", config.name, exc)
        bronze_ms = {v: _millis(t) for v, t in times.items()}
        quarantine_ms = {int(r["version"]): _millis(r["timestamp"]) for r in
                         spark_tables.history(spark, config.quarantine_path).select("version", "timestamp").collect()}
        records = ledger.history(spark, config.quarantine_path)
    kinds = {r.version: r.kind for r in records if r.version is not None}
    return quarantine_version_for(version, bronze_ms, quarantine_ms, kinds)


def quarantine_version_for(version: int, bronze_ms: Mapping[int, int], quarantine_ms: Mapping[int, int],
                           kinds: Mapping[int, BatchKind]) -> int | None:
    """The newest quarantine version whose commits all belong at or before bronze `version` (None: none does). A
    batch commits quarantine first, then bronze, so its quarantine commit belongs with the bronze version committed
    after it: it goes with `version` when made no later than that version. A quarantine reprocess and a rewind
    commit bronze first (a record leaves quarantine once bronze holds it; a rewind restores bronze, then
    quarantine), so their quarantine commit belongs with the bronze version made before it: it goes with `version`
    when that one is `version` or older."""
    until = bronze_ms[version]
    chosen = None
    for q, millis in sorted(quarantine_ms.items()):
        if kinds.get(q) in (BatchKind.REDECODE, BatchKind.REWIND):
            belongs = max((v for v, ms in bronze_ms.items() if ms <= millis), default=-1) <= version
        else:
            belongs = millis <= until
        if not belongs:
            break
        chosen = q
    return chosen


def _millis(when: dt.datetime) -> int:
    return int((when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp() * 1000)


def _version_at(times: dict[int, dt.datetime], when: dt.datetime | None) -> int:
    """The newest version committed at or before `when`."""
    if when is None:
        raise IngestionError("rewind needs --to-version or --to-timestamp")
    naive = when.replace(tzinfo=None) if when.tzinfo is None else when.astimezone(dt.UTC).replace(tzinfo=None)
    older = [v for v, t in times.items() if t.replace(tzinfo=None) <= naive]
    if not older:
        raise IngestionError(f"no table version at or before {when.isoformat()} (oldest is "
                             f"{min(times.values()).isoformat()})")
    return max(older)


def _checkpoint_said(moved: str | None) -> str:
    return f"checkpoint moved to {moved}" if moved is not None else "no checkpoint to move aside"


def _move_checkpoint_aside(spark: SparkSession, location: str) -> str | None:
    """Keep the old checkpoint for inspection, out of the way: `<checkpoint>.rewound-<time>` beside it (a local
    folder is moved; on object storage Hadoop's file system copies it, then deletes it)."""
    stamp = f"rewound-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}"
    folder = local_folder(location)
    if folder is None:
        if not hadoop.exists(spark, location):
            return None
        target = f"{location.rstrip('/')}.{stamp}"
        if not hadoop.rename(spark, location, target):
            raise IngestionError(f"could not move the checkpoint {location} aside to {target}; move or delete it, "
                                 "then run the pipeline")
        return target
    if not folder.exists():
        return None
    target_folder = folder.with_name(f"{folder.name}.{stamp}")
    shutil.move(str(folder), str(target_folder))
    return str(target_folder)
