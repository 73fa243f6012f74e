"""`ingest rewind`: restore a pipeline's tables to an earlier version, so the next run re-reads what it undid.

Rewind restores bronze (and quarantine, to the state it had when that bronze version was committed) with
Delta's RESTORE, marks the RESTORE commit as a `rewind` whose ranges are the coverage as of that version, and
moves the checkpoint aside. The next `ingest run` then starts a new checkpoint with a new txnAppId from the
table's offsets, so it re-reads exactly what the rewind undid.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from ingestion.config import PipelineConfig
from ingestion.delta import ledger, routed, spark_tables, whole_batches
from ingestion.delta.ledger import BatchKind, BatchRecord
from ingestion.delta.reads import spark_layout
from ingestion.errors import ConfigError, IngestionError
from ingestion.runtime import hadoop
from ingestion.storage import local_folder
from ingestion.stream import checkpoint

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
    if config.routing is not None:
        return _rewind_routed(spark, config, to_version, to_timestamp)
    records = ledger.history(spark, config.table_path)
    history = spark_tables.history(spark, config.table_path).select("version", "timestamp").collect()
    times = {int(r["version"]): r["timestamp"] for r in history}
    version = to_version if to_version is not None else _version_at(times, to_timestamp)
    if version not in times:
        raise IngestionError(f"{config.table_path} has no version {version} (versions {min(times)}-{max(times)})")
    if version == max(times):  # a restore would commit nothing new, and the checkpoint must stay with its txnAppId
        log.info("%s: already at version %d: nothing to do", config.name, version)
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
        else:  # the quarantine table did not exist yet then: empty it
            spark_tables.delete_all(spark, config.quarantine_path)
    moved = _move_checkpoint_aside(spark, config.checkpoint_path)
    resume = ledger.next_offsets(ledger.history(spark, config.table_path))
    log.info("%s: rewound bronze to version %d and quarantine to %s; %s; the next run resumes from %s", config.name,
             version, q_version, _checkpoint_said(moved), resume)
    if undone:
        log.warning("%s: the rewind undid quarantine reprocess(es) at bronze version(s) %s: %d rows are back in "
                    "quarantine; `ingest quarantine reprocess %s` moves them to bronze again", config.name,
                    ", ".join(str(r.version) for r in undone), sum(r.rows for r in undone), config.name)
    return RewindResult(version, q_version, resume, moved,
                        tuple(r.version for r in undone if r.version is not None), sum(r.rows for r in undone))


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
        log.info("%s: no table has a commit after %s: nothing rewound, the checkpoint stays", config.name,
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
    moved = _move_checkpoint_aside(spark, config.checkpoint_path)
    resume = routed.recorded_offsets(config) or {}
    log.info("%s: rewound to %s: %s; %s; the next run resumes from %s", config.name, when.isoformat(),
             ", ".join(f"{t} to version {v}" for t, v in sorted(targets.items())), _checkpoint_said(moved), resume)
    return RewindResult(None, targets.pop("quarantine", None), resume, moved,
                        tuple(r.version for r in reprocesses if r.version is not None),
                        sum(r.rows for r in reprocesses), targets)


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
                     f"{', '.join(map(str, r.undone_reprocesses))}: {r.requarantined} rows are back in quarantine, "
                     f"and the next run does not redo it; run `ingest quarantine reprocess {pipeline}` to move them "
                     "to bronze again")
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
        lines.append(f"the rewind undid quarantine reprocess(es): {r.requarantined} rows are back in quarantine; run "
                     f"`ingest quarantine reprocess {pipeline}` to move them to their route tables again")
    return "\n".join(lines)


def undone_reprocesses(records: list[BatchRecord], version: int) -> list[BatchRecord]:
    """The reprocess commits still in effect (not undone by an earlier rewind) that a restore to `version` undoes."""
    live: list[BatchRecord] = []
    for r in sorted(records, key=lambda r: r.version if r.version is not None else -1):
        if r.kind == BatchKind.REWIND:  # its batch id is the version it restored
            live = [x for x in live if (x.version or 0) <= r.batch_id]
        elif r.kind == BatchKind.REDECODE and r.rows:
            live.append(r)
    return [r for r in live if (r.version or 0) > version]


def _quarantine_version(spark: SparkSession, config: PipelineConfig, version: int,
                        times: dict[int, dt.datetime]) -> int | None:
    """The quarantine version that goes with bronze `version`: the newest committed before bronze's next commit.
    Compared by each commit's own clock (`commitInfo.timestamp`, milliseconds, stamped by the driver that made it),
    not by the commit files' times: in object storage those have one-second steps, and a batch's quarantine commit
    and the bronze commit before it often share the second (two write paths commit in milliseconds). Where delta-rs
    cannot read the logs, by the commit files' times, as Spark's history gives them."""
    options = config.storage_options() or None
    try:
        until = whole_batches.commit_clock(config.table_path, options)[version]
        quarantine_ms = whole_batches.commit_clock(config.quarantine_path, options)
    except Exception as exc:  # noqa: BLE001 - a log delta-rs cannot read: Spark's history, as before
        log.debug("%s: commit clocks not read with delta-rs (%s); by Spark's history", config.name, exc)
        q_times = {int(r["version"]): r["timestamp"] for r in
                   spark_tables.history(spark, config.quarantine_path).select("version", "timestamp")
                   .collect()}
        return _version_at(q_times, times[version], allow_none=True)
    older = [v for v, ms in quarantine_ms.items() if ms <= until]
    return max(older) if older else None


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
