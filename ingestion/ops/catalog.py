"""Pipeline tables by name in a Spark session, so analysts write `SELECT ... FROM orders VERSION AS OF 3`."""

from __future__ import annotations

import re

from pyspark.sql import SparkSession

from ingestion.config import PipelineConfig
from ingestion.delta import ledger
from ingestion.errors import IngestionError


def table_name(config: PipelineConfig, suffix: str = "") -> str:
    """The SQL name of a pipeline's table: its name with anything but letters, digits and _ turned into _."""
    return re.sub(r"\W", "_", config.name) + suffix


def register(spark: SparkSession, configs: list[PipelineConfig]) -> dict[str, str]:
    """Register bronze as `<name>` and quarantine as `<name>_quarantine` (session catalog, location-backed)."""
    registered: dict[str, str] = {}
    for config in configs:
        for name, path in ((table_name(config), config.table_path),
                           (table_name(config, "_quarantine"), config.quarantine_path)):
            if not ledger.is_table(spark, path):
                continue
            spark.sql(f"CREATE TABLE IF NOT EXISTS `{name}` USING delta LOCATION '{path.replace(chr(39), '')}'")
            registered[name] = path
    return registered


# Delta's errors for a version it cannot read any more: beyond the deleted-file retention, files vacuumed,
# commits cleaned up.
_GONE = re.compile(r"DELTA_UNSUPPORTED_TIME_TRAVEL_BEYOND_DELETED_FILE_RETENTION_DURATION|DELTA_FILE_NOT_FOUND|"
                   r"FileNotFoundException|DELTA_VERSION_NOT_CONTIGUOUS|VersionNotFound|"
                   r"DELTA_TIME_TRAVEL_INVALID_BEGIN_VALUE|DELTA_NO_COMMITS_FOUND|DELTA_NO_RECREATABLE_HISTORY_FOUND")


def time_travel_failure(spark: SparkSession, tables: dict[str, str], query: str,
                        exc: BaseException) -> IngestionError | None:
    """For a query that failed reading a table version that is gone: one line naming, per table the query names,
    the oldest version still restorable; None for any other failure."""
    from ingestion.delta.reads import spark_layout

    if not _GONE.search(str(exc)):
        return None
    named = [name for name in tables if re.search(rf"\b{re.escape(name)}\b", query)]
    oldest = []
    for name in named or list(tables):
        layout = spark_layout(spark, tables[name])
        if layout is not None:
            oldest.append(f"{name}: version {layout.oldest_restorable}")
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return IngestionError(f"that table version is no longer restorable (its files were vacuumed or are older than "
                          f"the table's retention); oldest version still restorable: {', '.join(oldest)} "
                          f"[{reason[:200]}]")
