"""The SQL names of pipelines' tables, in a module of their own: `ingest sql` answered without a JVM imports it
without importing Spark, and Spark's catalog (`catalog.register`) registers the same names.

A pipeline's bronze and quarantine are known by `sink.catalogTable` (`bronze.orders`, `bronze.orders_quarantine`),
else by their short names (`orders`, `orders_quarantine`); its silver table by `silver.catalogTable`
(`silver.customers`), else by its short name (`customers_silver`).
"""

from __future__ import annotations

import re

from ingestion.config import PipelineConfig


def table_name(config: PipelineConfig, suffix: str = "") -> str:
    """The SQL name of a pipeline's table: its name with anything but letters, digits and _ turned into _."""
    return re.sub(r"\W", "_", config.name) + suffix


def silver_name(config: PipelineConfig) -> tuple[str, str] | None:
    """(name, path) of the pipeline's silver table: `silver.catalogTable`, else `<name>_silver`; None without
    silver."""
    if config.silver is None or config.silver_path is None:
        return None
    return config.silver.catalog_table or table_name(config, "_silver"), config.silver_path


def pipeline_tables(configs: list[PipelineConfig]) -> dict[str, str]:
    """Every pipeline table by its SQL name, lower case: {name: path}."""
    out: dict[str, str] = {}
    for config in configs:
        if config.catalog_names is not None:
            for name, path in zip(config.catalog_names, (config.table_path, config.quarantine_path), strict=True):
                out[name.lower()] = path
        else:
            out[table_name(config).lower()] = config.table_path
            out[table_name(config, "_quarantine").lower()] = config.quarantine_path
        silver = silver_name(config)
        if silver is not None:
            out[silver[0].lower()] = silver[1]
    return out


def unknown_table(name: str, tables: dict[str, str], *, hint: str = "") -> str:
    """One line for a query naming a table no pipeline has: the names it may use."""
    known = ", ".join(sorted(tables)) or "none (no pipeline files in conf/pipelines/)"
    return f"no table {name!r}: the pipelines' tables are {known}{hint}"
