"""Pipeline tables by name for `ingest sql` and `ingest sql-server`: the catalog names of `sink.catalogTable`
(registered at onboard or first run, ensured here), and for pipelines without one their short names (`orders`,
`orders_quarantine` in the `default` database), so `SELECT ... FROM orders VERSION AS OF 3` keeps working."""

from __future__ import annotations

import logging
import re

from pyspark.sql import SparkSession

from ingestion.config import PipelineConfig
from ingestion.delta import catalog, ledger

log = logging.getLogger(__name__)

def table_name(config: PipelineConfig, suffix: str = "") -> str:
    """The SQL name of a pipeline's table: its name with anything but letters, digits and _ turned into _."""
    return re.sub(r"\W", "_", config.name) + suffix


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
