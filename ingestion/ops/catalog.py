"""Pipeline tables by name in a Spark session, so analysts write `SELECT ... FROM orders VERSION AS OF 3`."""

from __future__ import annotations

import re

from pyspark.sql import SparkSession

from ingestion.config import PipelineConfig
from ingestion.delta import ledger


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
