"""`ingest maintain`: compact, vacuum and checkpoint a pipeline's tables, or say what that would do.

OPTIMIZE bin-packs the small files each micro-batch leaves into files of `maintenance.targetFileSize` (Z-ordered by
`maintenance.zOrderBy` when set), VACUUM deletes the files no version inside the promised window needs
(`maintenance.vacuumRetention`), and a Delta log checkpoint follows. Safe beside a running `ingest run`: Delta
commits the OPTIMIZE beside the stream's appends, and the maintenance commits consume no offsets
(docs/operations.md#maintenance-compaction-vacuum-retention). Each run is an MLflow run of the pipeline's
experiment with the files and bytes of each table before and after.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from ingestion.config import PipelineConfig
from ingestion.delta import maintenance, routed, tables
from ingestion.runtime import hadoop
from ingestion.runtime.delta_txn import is_table, table_version
from ingestion.stream.maintenance import TableMaintenance, maintain_tables
from ingestion.stream.metrics import RunMetrics

log = logging.getLogger(__name__)


@dataclass
class MaintainReport:
    lines: list[str] = field(default_factory=list)
    tables: list[TableMaintenance] = field(default_factory=list)
    run_id: str | None = None


def maintain(spark: SparkSession, config: PipelineConfig, *, optimize: bool = True, vacuum: bool = True,
             dry_run: bool = False, with_metrics: bool = True) -> MaintainReport:
    """Maintain bronze (a routed pipeline's route tables, each) and quarantine (or, with `dry_run`, report what
    would be done and write nothing)."""
    paths = [p for p in routed.data_paths(config) if is_table(spark, p)]
    for path in paths:
        tables.check_table_retention(spark, config, path)
    report = MaintainReport()
    if not paths:
        report.lines.append(f"{config.name}: no tables at {_where(config)} yet, nothing to maintain")
        return report
    if dry_run:
        for path in paths:
            report.lines.extend(_dry_run(spark, config, path, optimize=optimize, vacuum=vacuum))
        report.lines.append("dry run: nothing written")
        return report
    metrics = _start_metrics(config, optimize=optimize, vacuum=vacuum) if with_metrics else None
    status = "FAILED"
    try:
        report.tables = maintain_tables(spark, config, optimize=optimize, vacuum=vacuum, metrics=metrics,
                                        step=table_version(spark, config.table_path) or 0)
        status = "FINISHED"
    finally:
        if metrics is not None:
            metrics.finish(status)
            report.run_id = metrics.run_id
    for done in report.tables:
        report.lines.append(f"{done.path}: {_files(done.before)} -> {_files(done.after)}; OPTIMIZE rewrote "
                            f"{done.files_removed} files into {done.files_added}"
                            f"{', VACUUM done' if done.vacuumed else ''}; checkpoint at version {done.version} "
                            f"({done.seconds:.1f}s)")
    return report


def _dry_run(spark: SparkSession, config: PipelineConfig, path: str, *, optimize: bool, vacuum: bool) -> list[str]:
    settings = config.maintenance
    before = maintenance.files(spark, path)
    lines = [f"{path}: now {_files(before)}"]
    if optimize:
        after = maintenance.estimate_optimize(maintenance.file_sizes(spark, path), settings.target_bytes)
        lines.append(f"  OPTIMIZE (target {settings.target_file_size}"
                     f"{', z-order by ' + ', '.join(settings.z_order_by) if settings.z_order_by else ''}) would "
                     f"leave about {_files(after)}")
    if vacuum:
        doomed = maintenance.vacuum_dry_run(spark, path, allow_short=settings.allow_short_retention)
        size = sum(hadoop.file_sizes(spark, doomed))
        lines.append(f"  VACUUM (retention {settings.vacuum_retention}) would delete {len(doomed)} files "
                     f"({_size(size)})" + (":" if doomed else ""))
        lines.extend(f"    {name}" for name in doomed[:20])
        if len(doomed) > 20:
            lines.append(f"    ... and {len(doomed) - 20} more")
    return lines


def _start_metrics(config: PipelineConfig, *, optimize: bool, vacuum: bool) -> RunMetrics:
    m = config.maintenance
    params = {"pipeline": config.name, "table": _where(config), "command": "maintain",
              "optimize": str(optimize), "vacuum": str(vacuum), "target_file_size": m.target_file_size,
              "z_order_by": ",".join(m.z_order_by), "vacuum_retention": m.vacuum_retention}
    return RunMetrics.start(config.experiment, f"{config.name}-maintain", params)


def _where(config: PipelineConfig) -> str:
    """Where the pipeline's tables are: bronze's path, or the folder of a routed pipeline's route tables."""
    return config.route_path("x").rsplit("/", 1)[0] if config.routing is not None else config.table_path


def _files(found: maintenance.Files) -> str:
    return f"{found.count} files, {_size(found.bytes)} (average {_size(found.average)})"


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} B"  # pragma: no cover
