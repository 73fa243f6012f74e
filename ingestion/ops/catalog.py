"""Pipeline tables by name for `ingest sql` and `ingest sql-server`: the catalog names of `sink.catalogTable`
(registered at onboard or first run, ensured here), and for pipelines without one their short names (`orders`,
`orders_quarantine` in the `default` database), so `SELECT ... FROM orders VERSION AS OF 3` keeps working; a silver
table by `silver.catalogTable`, else as `orders_silver` (`names`)."""

from __future__ import annotations

import logging
import re

from pyspark.sql import SparkSession

from ingestion.config import PipelineConfig
from ingestion.delta import catalog, ledger
from ingestion.errors import IngestionError, one_line
from ingestion.ops.names import pipeline_tables, silver_name, table_name, unknown_table

__all__ = ["missing_table", "register", "table_name", "time_travel_failure"]

log = logging.getLogger(__name__)


def register(spark: SparkSession, configs: list[PipelineConfig]) -> dict[str, str]:
    """Every pipeline's existing tables by name: {name: path}."""
    registered: dict[str, str] = {}
    for config in configs:
        if not all(ledger.is_table(spark, path) for path in (config.table_path, config.quarantine_path)):
            continue
        if config.catalog_names is not None:
            for done in catalog.register_pipeline(spark, config):
                registered[done.name] = done.path
            continue
        for name, path in ((table_name(config), config.table_path),
                           (table_name(config, "_quarantine"), config.quarantine_path)):
            if _short_name(spark, name, path, config):
                registered[name] = path
    for config in configs:
        silver = silver_name(config)
        if silver is None or not ledger.is_table(spark, silver[1]):
            continue
        if config.silver is not None and config.silver.catalog_table:
            registered[silver[0]] = catalog.register(spark, silver[0], silver[1], config.file).path
        elif _short_name(spark, silver[0], silver[1], config):
            registered[silver[0]] = silver[1]
    return registered


def _short_name(spark: SparkSession, name: str, path: str, config: PipelineConfig) -> bool:
    """Register a short name. One left pointing at a location without a table any more (a pipeline whose table
    moved) is moved; one in use by another table is kept, with a warning."""
    found = catalog.location_of(spark, name)
    if found is not None and not catalog.same_location(found, path):
        if ledger.is_table(spark, found):
            log.warning("%s: the name %s is taken by the table at %s; query the pipeline's table by "
                        "sink.catalogTable or as delta.`%s`", config.name, name, found, path)
            return False
        spark.sql(f"DROP TABLE {catalog.quoted(name)}")  # an external table: only the name goes
    catalog.register(spark, name, path, config.file)
    return True


def missing_table(exc: BaseException, configs: list[PipelineConfig]) -> IngestionError | None:
    """Spark's failure for a table its catalog does not have as one line naming the pipelines' tables; None for
    any other failure."""
    if "TABLE_OR_VIEW_NOT_FOUND" not in str(exc):
        return None
    found = re.search(r"The table or view (\S+) cannot be found", str(exc))
    name = found.group(1).replace("`", "") if found else "?"
    return IngestionError(unknown_table(name, pipeline_tables(configs)))


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
    reason = one_line(exc)
    return IngestionError(f"that table version is no longer restorable (its files were vacuumed or are older than "
                          f"the table's retention); oldest version still restorable: {', '.join(oldest)} "
                          f"[{reason[:200]}]")
