"""One maintenance run of a pipeline's tables (OPTIMIZE, VACUUM, a log checkpoint), with its MLflow metrics, and
its schedule inside `ingest run` (`maintenance.everyBatches` / `maintenance.every`).

`ingest maintain` (ops/maintain.py) and the schedule both run `maintain_tables`. Scheduled, it runs on a thread
of its own and its Spark jobs in the `maintenance` scheduler pool, behind the batches' jobs, so the stream keeps
its freshness; Delta lets the OPTIMIZE commit beside the stream's appends (it rewrites only files it read, and
an append adds new ones), and each maintenance commit's ledger record keeps the offsets known (delta/maintenance).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from pyspark.sql import SparkSession

from ingestion.config import PipelineConfig, duration_seconds
from ingestion.delta import maintenance, routed
from ingestion.delta.ledger import BatchKind
from ingestion.delta.maintenance import Files
from ingestion.errors import one_line
from ingestion.runtime.delta_txn import is_table, table_version
from ingestion.stream.metrics import RunMetrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableMaintenance:
    path: str
    before: Files
    after: Files
    files_removed: int  # by OPTIMIZE
    files_added: int
    vacuumed: bool
    version: int | None  # the table's version after it (the checkpoint's)
    seconds: float

    def metrics(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}_files_before": self.before.count, f"{prefix}_files_after": self.after.count,
                f"{prefix}_bytes_before": self.before.bytes, f"{prefix}_bytes_after": self.after.bytes,
                f"{prefix}_seconds": self.seconds}


def maintain_table(spark: SparkSession, config: PipelineConfig, path: str, *, optimize: bool = True,
                   vacuum: bool = True) -> TableMaintenance | None:
    """OPTIMIZE, then VACUUM, then a log checkpoint of the table at `path`; None when there is no table, or only
    its creation (a quarantine table that never held a record: nothing to compact or delete)."""
    if not is_table(spark, path) or not table_version(spark, path):
        return None
    started = time.monotonic()
    settings = config.maintenance
    before = maintenance.files(spark, path)
    removed = added = 0
    if optimize:
        record = maintenance.marker(spark, path, config.name, BatchKind.OPTIMIZE, config.storage_options())
        removed, added = maintenance.optimize(spark, path, record, target=settings.target_bytes,
                                              z_order_by=settings.z_order_by, storage_options=config.storage_options())
    if vacuum:
        record = maintenance.marker(spark, path, config.name, BatchKind.VACUUM, config.storage_options())
        maintenance.vacuum(spark, path, record, allow_short=settings.allow_short_retention)
    version = maintenance.checkpoint(spark, path)
    done = TableMaintenance(path, before, maintenance.files(spark, path), removed, added, vacuum, version,
                            time.monotonic() - started)
    log.info("%s: maintained %s in %.1fs: %d files (%d bytes) -> %d files (%d bytes); OPTIMIZE rewrote %d into "
             "%d%s; checkpoint at version %s", config.name, path, done.seconds, before.count, before.bytes,
             done.after.count, done.after.bytes, removed, added, ", VACUUM done" if vacuum else "", version)
    return done


def maintain_tables(spark: SparkSession, config: PipelineConfig, *, optimize: bool = True, vacuum: bool = True,
                    metrics: RunMetrics | None = None, step: int = 0) -> list[TableMaintenance]:
    """Maintain bronze (a routed pipeline's route tables, each), then quarantine; their files and bytes before and
    after go to `metrics` at `step` (`bronze_*` or `<route table>_*`, `quarantine_*`)."""
    done = []
    for prefix, path in routed.named_paths(config):
        found = maintain_table(spark, config, path, optimize=optimize, vacuum=vacuum)
        if found is not None:
            done.append(found)
            if metrics is not None:
                metrics.log(step, {f"maintenance_{k}": v for k, v in found.metrics(prefix).items()})
    return done


class ScheduledMaintenance:
    """Maintenance inside `ingest run`: after `every_batches` committed batches or `every_seconds` since the last
    run (whichever comes first), on one background thread; one run at a time."""

    def __init__(self, spark: SparkSession, config: PipelineConfig, metrics: RunMetrics | None) -> None:
        self.spark = spark
        self.config = config
        self.metrics = metrics
        self.every_batches = config.maintenance.every_batches
        self.every_seconds = duration_seconds(config.maintenance.every) if config.maintenance.every else None
        self._batches = 0
        self._last = time.monotonic()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"maintenance-{config.name}")
        self._running: Future[None] | None = None
        self._lock = threading.Lock()
        self.runs: list[list[TableMaintenance]] = []

    @classmethod
    def for_pipeline(cls, spark: SparkSession, config: PipelineConfig,
                     metrics: RunMetrics | None) -> ScheduledMaintenance | None:
        """A schedule when the config asks for one (maintenance.everyBatches or .every), else None."""
        if config.maintenance.every_batches is None and config.maintenance.every is None:
            return None
        return cls(spark, config, metrics)

    def committed(self, batch_id: int) -> Future[None] | None:
        """A batch committed: start a maintenance run when one is due and none is running."""
        with self._lock:
            self._batches += 1
            due = (self.every_batches is not None and self._batches >= self.every_batches) or (
                self.every_seconds is not None and time.monotonic() - self._last >= self.every_seconds)
            if not due or (self._running is not None and not self._running.done()):
                return None
            self._batches, self._last = 0, time.monotonic()
            self._running = self._pool.submit(self._run, batch_id)
            return self._running

    def _run(self, batch_id: int) -> None:
        context = self.spark.sparkContext
        context.setLocalProperty("spark.scheduler.pool", maintenance.POOL)
        context.setJobDescription(f"{self.config.name}: maintenance after batch {batch_id}")
        try:
            self.runs.append(maintain_tables(self.spark, self.config, metrics=self.metrics, step=batch_id))
        except Exception as exc:  # noqa: BLE001 - the stream goes on; the next run is tried when due
            log.warning("%s: scheduled maintenance after batch %d failed (the stream goes on): %s",
                        self.config.name, batch_id, one_line(exc))

    def close(self, timeout: float = 600.0) -> None:
        """Wait for a run in progress (it commits or not as a whole), then stop the thread."""
        running = self._running
        if running is not None:
            try:
                running.result(timeout)
            except TimeoutError:
                log.warning("%s: maintenance still running after %.0fs; not waiting", self.config.name, timeout)
        self._pool.shutdown(wait=False)
