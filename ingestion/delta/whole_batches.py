"""A routed pipeline's tables cut at whole stream batches (docs/routing.md#operating-a-routed-pipeline).

A routed batch is one commit per route table (and quarantine), made one after another: a kill between two of them,
or a time between two of them, leaves the batch in some tables only. A cut keeps each stream batch in all the
tables that hold it or in none: every table goes back (Delta's RESTORE, marked with a `rewind` ledger record whose
ranges are its coverage then) to before its first commit of an undone batch or after the time. Then the tables'
ledgers say together where a new checkpoint resumes, and it writes each record from there once. `ingest rewind`
cuts at a time; a run that finds a new checkpoint beside route tables (a lost one) cuts off the newest batch, which
it cannot know to be whole.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import SparkSession

from ingestion.config import PipelineConfig
from ingestion.delta import ledger, routed
from ingestion.delta.commit import committing
from ingestion.delta.ledger import BatchKind, BatchRecord
from ingestion.delta.rs_reads import DeltaRsReader

log = logging.getLogger(__name__)

Batch = tuple[str, int]  # a stream batch: (its checkpoint's txnAppId, its batch id)

_CHECKPOINT_ID = re.compile(r"^(.*?-[0-9a-f]{16})(?:\..*)?$")  # `<pipeline>-<16 hex>`, then `.<table>...`


@dataclass(frozen=True)
class Commit:
    """One commit of one of a routed pipeline's tables."""

    table: str  # the route table's name, or `quarantine`
    version: int
    millis: int  # the commit's own clock (commitInfo.timestamp)
    record: BatchRecord | None

    @property
    def batch(self) -> Batch | None:
        """The stream batch the commit belongs to; None for other commits (replay, reprocess, maintenance, ...)."""
        return None if self.record is None else stream_batch(self.record)


def stream_batch(record: BatchRecord) -> Batch | None:
    """The stream batch a commit's record belongs to, whichever of the pipeline's tables it is in (its checkpoint's
    txnAppId and batch id); None for other commits (replay, reprocess, maintenance, ...)."""
    if record.kind != BatchKind.STREAM or record.batch_id < 0:
        return None
    found = _CHECKPOINT_ID.match(record.app_id)
    return (found.group(1), record.batch_id) if found else None


@dataclass(frozen=True)
class Tables:
    """A routed pipeline's tables (name -> path) and all their commits."""

    paths: dict[str, str]
    commits: tuple[Commit, ...]

    def records(self, table: str) -> list[BatchRecord]:
        return [c.record for c in self.commits if c.table == table and c.record is not None]


def read(spark: SparkSession, config: PipelineConfig) -> Tables:
    """Every commit of the pipeline's route tables and quarantine, read with delta-rs."""
    options = config.storage_options() or None
    commits: list[Commit] = []
    paths = dict(routed.named_paths(config))
    for table, path in paths.items():
        if not ledger.is_table(spark, path):
            continue
        by_version = {r.version: r for r in DeltaRsReader(options).history(path)}
        commits.extend(Commit(table, v, ms, by_version.get(v)) for v, ms in commit_clock(path, options).items())
    return Tables(paths, tuple(commits))


def commit_clock(path: str, options: dict[str, str] | None) -> dict[int, int]:
    """Each version's `commitInfo.timestamp` (milliseconds), read with delta-rs."""
    from deltalake import DeltaTable

    return {int(entry["version"]): int(entry["timestamp"])
            for entry in DeltaTable(path, storage_options=options).history()}


def undone(tables: Tables, until: int | None, finished: Callable[[Batch], bool]) -> set[Batch]:
    """The stream batches a cut undoes in every table: those with a commit after `until` (milliseconds; None: no
    time), and the newest batch unless `finished` says it is (a kill may have left it in some tables only)."""
    batches: dict[Batch, list[Commit]] = {}
    for c in tables.commits:
        if (b := c.batch) is not None:
            batches.setdefault(b, []).append(c)
    out = {b for b, found in batches.items() if until is not None and any(c.millis > until for c in found)}
    if batches:
        newest = max(batches, key=lambda b: max(c.millis for c in batches[b]))
        if newest not in out and not finished(newest):
            out.add(newest)
    return out


def cut(tables: Tables, until: int | None, batches: set[Batch]) -> dict[str, int]:
    """Per table the cut changes, the version it goes back to: before its first commit after `until` or of one of
    `batches` (-1: before its creation, it is emptied)."""
    targets: dict[str, int] = {}
    for table in sorted({c.table for c in tables.commits}):
        bad = [c.version for c in tables.commits if c.table == table and (
            (until is not None and c.millis > until) or c.batch in batches)]
        if bad:
            targets[table] = min(bad) - 1
    return targets


def apply(spark: SparkSession, config: PipelineConfig, tables: Tables, targets: dict[str, int]) -> None:
    """Each table back to its target version (emptied at -1), with a `rewind` ledger record of its coverage then
    (`rewind.<table>`: the table stays known as the pipeline's, `delta.routed`)."""
    from delta.tables import DeltaTable

    for table, version in sorted(targets.items()):
        kept = [r for r in tables.records(table) if r.version is not None and r.version <= version]
        marker = BatchRecord(pipeline=config.name, app_id="rewind" if table == "quarantine" else f"rewind.{table}",
                             batch_id=version, kind=BatchKind.REWIND, rows=0, schema_ids=(),
                             ranges=ledger.coverage(kept))
        if version >= 0:
            restore(spark, tables.paths[table], version, marker)
        else:  # made after the cut: emptied, its ledger saying so
            with committing(spark, None, marker.to_user_metadata()):
                DeltaTable.forPath(spark, tables.paths[table]).delete()


def restore(spark: SparkSession, path: str, version: int, marker: BatchRecord) -> None:
    """The table at `path` back to `version` (Delta's RESTORE), the commit carrying `marker`."""
    from delta.tables import DeltaTable

    if ledger.table_version(spark, path) == version:
        return
    with committing(spark, None, marker.to_user_metadata()):
        DeltaTable.forPath(spark, path).restoreToVersion(version)


def resume_after_lost_checkpoint(spark: SparkSession, config: PipelineConfig) -> dict[str, int]:
    """A new checkpoint beside route tables that hold records: the newest batch undone in every table that holds
    it (it may be whole or not: the checkpoint that knew is gone), so the tables' ledgers say where the new
    checkpoint resumes and each record from there is written once. The tables changed and their versions."""
    tables = read(spark, config)
    targets = cut(tables, None, undone(tables, None, lambda _: False))
    apply(spark, config, tables, targets)
    log.warning("%s: a new checkpoint beside route tables: the newest batch undone in %s, so it is read again once",
                config.name, ", ".join(f"{t} (to version {v})" for t, v in sorted(targets.items())) or "no table")
    return targets
