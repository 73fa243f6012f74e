"""The Delta side of table maintenance: OPTIMIZE (bin-packing, optionally Z-ordered), VACUUM, a log checkpoint,
and what the table's data files are now (`ingest maintain`,
docs/operations.md#maintenance-compaction-vacuum-retention).

Each maintenance commit carries a ledger record (kind `optimize` or `vacuum`) with the ledger's coverage as of the
version it read (`ledger.BatchRecord.baseline`): offsets stay known after Delta's log cleanup. The operations run
in a session of their own (`spark.newSession()`: same SparkContext, own SQL settings), so the settings they need
(the record as commit metadata, the target file size, vacuum logging) never reach a stream's batches beside them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark.sql import SparkSession

from ingestion.delta import ledger
from ingestion.delta.commit import committing
from ingestion.delta.ledger import BatchKind, BatchRecord
from ingestion.errors import one_line
from ingestion.runtime import delta_txn, hadoop

log = logging.getLogger(__name__)

POOL = "maintenance"  # Spark scheduler pool of maintenance jobs (runtime/data/fairscheduler.xml on local masters)


@dataclass(frozen=True)
class Files:
    count: int
    bytes: int

    @property
    def average(self) -> int:
        return self.bytes // self.count if self.count else 0


def files(spark: SparkSession, path: str) -> Files:
    """The data files of the table's latest version (DESCRIBE DETAIL: from the log, no scan)."""
    row = spark.sql(f"DESCRIBE DETAIL {_table(path)}").select("numFiles", "sizeInBytes").first()
    return Files(int(row["numFiles"] or 0), int(row["sizeInBytes"] or 0)) if row else Files(0, 0)


def file_sizes(spark: SparkSession, path: str) -> dict[str, list[int]]:
    """Sizes of the table's data files, per partition directory ('' when unpartitioned)."""
    snapshot_files = spark.read.format("delta").load(path).inputFiles()
    sizes: dict[str, list[int]] = {}
    for location, size in zip(snapshot_files, hadoop.file_sizes(spark, snapshot_files), strict=True):
        parent = location.rsplit("/", 1)[0].removeprefix(path.rstrip("/")).strip("/")
        sizes.setdefault(parent, []).append(size)
    return sizes


def estimate_optimize(sizes: dict[str, list[int]], target: int) -> Files:
    """Files and bytes after a bin-packing OPTIMIZE, estimated as Delta packs: per partition, the files under the
    target go into bins of about the target size (bytes stay about the same), a bin of one file is left alone."""
    count = total = 0
    for partition in sizes.values():
        small = [s for s in partition if s < target]
        count += len(partition) - len(small) + (math.ceil(sum(small) / target) if len(small) > 1 else len(small))
        total += sum(partition)
    return Files(count, total)


def marker(spark: SparkSession, path: str, pipeline: str, kind: BatchKind,
           storage_options: dict[str, str] | None = None) -> BatchRecord:
    """The ledger record of a maintenance commit: the coverage as of the table's current version. The ledger is
    read with delta-rs (a Spark read of thousands of commits takes many seconds), with Spark where it cannot."""
    from ingestion.delta.reader import JvmFreeReadError
    from ingestion.delta.rs_reads import DeltaRsReader

    as_of = delta_txn.table_version(spark, path) or 0
    try:
        records = DeltaRsReader(storage_options or None).history(path)
    except JvmFreeReadError:
        records = ledger.history(spark, path)
    baseline = ledger.coverage([r for r in records if (r.version or 0) <= as_of])
    return BatchRecord(pipeline=pipeline, app_id="maintenance", batch_id=ledger.MAINTENANCE_BATCH_ID, kind=kind,
                       rows=0, schema_ids=(), ranges=(), baseline=baseline, as_of=as_of)


@contextmanager
def _session(spark: SparkSession, record: BatchRecord, settings: dict[str, str]) -> Iterator[SparkSession]:
    own = spark.newSession()
    for key, value in settings.items():
        own.conf.set(key, value)
    context = spark.sparkContext
    previous = context.getLocalProperty("spark.scheduler.pool")
    context.setLocalProperty("spark.scheduler.pool", POOL)
    try:
        with committing(own, None, record.to_user_metadata()):
            yield own
    finally:
        context.setLocalProperty("spark.scheduler.pool", previous)  # type: ignore[arg-type]


def optimize(spark: SparkSession, path: str, record: BatchRecord, *, target: int,
             z_order_by: tuple[str, ...] = (), attempts: int = 3,
             storage_options: dict[str, str] | None = None) -> tuple[int, int]:
    """OPTIMIZE the table: bin-pack files under `target` bytes into files of about `target` (Z-ordered by
    `z_order_by` when given); (files removed, files added). Appends beside it do not conflict; another OPTIMIZE
    (or a DELETE) that commits first removes files this one read, and Delta refuses its commit: it is run again
    on the new state, up to `attempts` times."""
    from delta.exceptions import ConcurrentDeleteDeleteException, ConcurrentDeleteReadException
    from delta.tables import DeltaTable

    settings = {"spark.databricks.delta.optimize.maxFileSize": str(target),
                "spark.databricks.delta.optimize.minFileSize": str(target)}
    for attempt in range(1, attempts + 1):
        try:
            with _session(spark, record, settings) as own:
                builder = DeltaTable.forPath(own, path).optimize()
                result = builder.executeZOrderBy(*z_order_by) if z_order_by else builder.executeCompaction()
                row = result.select("metrics.numFilesRemoved", "metrics.numFilesAdded").first()
            return (int(row[0]), int(row[1])) if row else (0, 0)
        except (ConcurrentDeleteReadException, ConcurrentDeleteDeleteException) as exc:
            if attempt == attempts:
                raise
            log.info("OPTIMIZE of %s: a concurrent commit removed files it read (%s); running it again", path,
                     one_line(exc)[:120])
            record = marker(spark, path, record.pipeline, record.kind, storage_options)
    return 0, 0  # pragma: no cover - the loop returns or raises


def _vacuum_settings(spark: SparkSession, allow_short: bool) -> dict[str, str]:
    # VACUUM lists the table's folders in a job of `parallelPartitionDiscovery.parallelism` tasks, 10,000 by
    # default: a minute of empty tasks on 2 loaded cores (6 s with a few).
    settings = {"spark.databricks.delta.vacuum.logging.enabled": "true",
                "spark.sql.sources.parallelPartitionDiscovery.parallelism":
                    str(max(2, 2 * spark.sparkContext.defaultParallelism))}
    if allow_short:
        settings["spark.databricks.delta.retentionDurationCheck.enabled"] = "false"
    return settings


def vacuum(spark: SparkSession, path: str, record: BatchRecord, *, allow_short: bool) -> None:
    """VACUUM the table; its start and end are commits carrying `record`. Delta 4.4 takes the retention from the
    table's `delta.deletedFileRetentionDuration` (ingest sets it to maintenance.vacuumRetention, see
    tables.maintenance_properties, and refuses a table where they differ) and ignores any other but 0."""
    from delta.tables import DeltaTable

    with _session(spark, record, _vacuum_settings(spark, allow_short)) as own:
        DeltaTable.forPath(own, path).vacuum()


def vacuum_dry_run(spark: SparkSession, path: str, *, allow_short: bool) -> list[str]:
    """The files a VACUUM would delete (Delta's DRY RUN: nothing is deleted or committed)."""
    own = spark.newSession()
    for key, value in _vacuum_settings(spark, allow_short).items():
        own.conf.set(key, value)
    rows = own.sql(f"VACUUM {_table(path)} DRY RUN").collect()
    return [str(r[0]) for r in rows]


def checkpoint(spark: SparkSession, path: str) -> int:
    """A Delta log checkpoint of the latest version (readers start from it; log cleanup keeps what it holds)."""
    return delta_txn.write_latest_checkpoint(spark, path)


def _table(path: str) -> str:
    return "delta.`{}`".format(path.replace("`", "``"))
