"""A pipeline's tables by name in Spark's catalog (`sink.catalogTable`): external tables at the configured
locations. Their comment and properties are the Delta table's own (set when `tables.ensure_tables` creates it;
`DESCRIBE TABLE EXTENDED` and `SHOW TBLPROPERTIES` read them from the log), so registering never commits to the
table.

Registering is idempotent: a name already pointing at the same location is left as it is; a name pointing at
another location is a CatalogError naming both. Which catalog that is depends on the session: the persistent one
(`runtime/metastore.py`, a cluster's metastore) or, in a session without it, the session's own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyspark.sql import SparkSession

from ingestion.config import PipelineConfig
from ingestion.errors import CatalogError


@dataclass(frozen=True)
class Registration:
    name: str
    path: str
    state: str  # "registered" (now), "exists" (same location), "missing" (not yet; a dry run)


def quoted(name: str) -> str:
    return ".".join(f"`{part}`" for part in name.split("."))


def same_location(a: str, b: str) -> bool:
    return _normal(a) == _normal(b)


def _normal(location: str) -> str:
    location = re.sub(r"^file:(//)?", "", location).rstrip("/")
    return re.sub(r"/+", "/", location) if "://" not in location else location


def details(spark: SparkSession, name: str) -> dict[str, str] | None:
    """The catalog's detailed table information of `name` (Location, Comment, Type, ...), or None when free."""
    if not spark.catalog.tableExists(name):
        return None
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {quoted(name)}").collect()
    return {str(row["col_name"]): str(row["data_type"]) for row in rows if row["col_name"]}


def location_of(spark: SparkSession, name: str) -> str | None:
    """Where the catalog's table `name` lives, or None when the name is free."""
    found = details(spark, name)
    return None if found is None else found.get("Location", "")


def comment(config: PipelineConfig, quarantine: bool) -> str:
    """The table comment (Delta's description) a pipeline's table is created with."""
    what = "records that did not decode (raw bytes, reason)" if quarantine else "one row per decoded record"
    return (f"ingest pipeline {config.name!r}: Kafka {config.reads}, {what}; columns in docs/columns.md, "
            "Kafka offsets per version in the commit history (ingest history)")


def check(spark: SparkSession, name: str, path: str, file: object = None) -> Registration:
    """What registering `name` for `path` would do; a CatalogError when the name is taken by another location."""
    found = location_of(spark, name)
    if found is None:
        return Registration(name, path, "missing")
    if not same_location(found, path):
        where = f"{file}: " if file else ""
        raise CatalogError(f"{where}catalog table {name!r} is taken by the table at {found}, not this pipeline's "
                           f"{path}; choose another sink.catalogTable or drop the old name (DROP TABLE {name} "
                           "keeps the data of an external table)")
    return Registration(name, path, "exists")


def register(spark: SparkSession, name: str, path: str, file: object = None) -> Registration:
    """Register the Delta table at `path` as `name` (its database created when missing); idempotent."""
    found = check(spark, name, path, file)
    if found.state == "exists":
        return found
    # Only a missing database is created: over Hive's metastore (the persistent catalog) Spark 4.2 asks it to create one
    # that exists even under IF NOT EXISTS, and the metastore logs an AlreadyExistsException with its stack trace.
    if "." in name and not spark.catalog.databaseExists(database := name.split(".")[0]):
        spark.sql(f"CREATE DATABASE IF NOT EXISTS `{database}`")
    literal = path.replace("\\", "\\\\").replace("'", "\\'")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {quoted(name)} USING delta LOCATION '{literal}'")
    return Registration(name, path, "registered")


def pipeline_names(config: PipelineConfig) -> list[tuple[str, str]]:
    """(catalog name, path) of bronze and quarantine; empty without sink.catalogTable."""
    names = config.catalog_names
    if names is None:
        return []
    return [(names[0], config.table_path), (names[1], config.quarantine_path)]


def register_pipeline(spark: SparkSession, config: PipelineConfig) -> list[Registration]:
    """Register bronze and quarantine under the pipeline's catalog names (both tables must exist)."""
    return [register(spark, name, path, config.file) for name, path in pipeline_names(config)]

