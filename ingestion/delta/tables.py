"""Creating a pipeline's bronze and quarantine tables, with their schema, partitioning and properties.

Both `ingest onboard` and `ingest run` go through `ensure_tables` (with the schemas the decoder's rows have, see
`stream.setup`), so a table looks the same whichever made it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from ingestion import retention
from ingestion.columns import METADATA_COLUMNS
from ingestion.config import PipelineConfig, check_retention
from ingestion.delta import catalog, log_checkpoints, rs_tables
from ingestion.delta.reader import JvmFreeReadError
from ingestion.errors import ConfigError
from ingestion.runtime.delta_txn import is_table, table_property
from ingestion.schema import protobuf_schemas

AUTO_COMPACT = "delta.autoOptimize.autoCompact"
CHANGE_FEED = "delta.enableChangeDataFeed"

# Delta collects min/max/null-count statistics per data file, by default on a table's first 32 columns: on bronze,
# nearly every payload field. Readers skip files by them, and in a stream's files only some columns differ from
# file to file: the Kafka coordinates, the batch and ingestion time, and payload times and whole numbers that grow
# with them (event times, sequence ids). Strings and fractions (names, uuids, amounts) span about the same range in
# every file and skip none, yet cost the most to collect (docs/performance.md#delta-statistics-columns). Bronze
# tables are therefore created with statistics on those columns only, unless `sink.tableProperties` sets either
# property below.
STATS_PROPERTY = "delta.dataSkippingStatsColumns"
STATS_PROPERTIES = (STATS_PROPERTY, "delta.dataSkippingNumIndexedCols")
STATS_METADATA = ("_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_batch_id",
                  "_ingested_at")
STATS_PAYLOAD_TYPES = (T.TimestampType, T.TimestampNTZType, T.DateType, T.IntegerType, T.LongType)


def stats_columns(schema: T.StructType, partition_by: tuple[str, ...] = ()) -> list[str]:
    """Bronze's columns with Delta statistics: the Kafka coordinates, `_batch_id`, `_ingested_at` and the top-level
    payload fields that are times, dates or whole numbers; not the partition columns (Delta refuses those)."""
    payload = [f.name for f in schema.fields
               if f.name not in METADATA_COLUMNS and isinstance(f.dataType, STATS_PAYLOAD_TYPES)]
    return [name for name in (*STATS_METADATA, *payload) if name not in partition_by]


@dataclass(frozen=True)
class TablePlan:
    path: str
    schema: T.StructType
    partition_by: tuple[str, ...]
    properties: dict[str, str]
    exists: bool  # before `ensure_tables`
    comment: str = ""
    made: bool = False  # by `ensure_tables`


def plans(spark: SparkSession | None, config: PipelineConfig, bronze_schema: T.StructType,
          quarantine_schema: T.StructType, bronze_properties: Mapping[str, str] | None = None,
          states: Mapping[str, rs_tables.TableState] | None = None) -> list[TablePlan]:
    """What bronze and quarantine look like (or would look like) for rows of these schemas; `bronze_properties`:
    what bronze records of its rows besides (the Protobuf message it holds). The tables' state is `states`' (by
    path, as the caller read them: `table_states`), else read with delta-rs; `spark` (if any) reads what delta-rs
    cannot."""
    unknown = [c for c in config.sink.partition_by if c not in bronze_schema.fieldNames()]
    if unknown:
        raise ConfigError(f"{config.file}: key 'sink.partitionBy' names {unknown}, which are not bronze columns "
                          f"({', '.join(bronze_schema.fieldNames())})")
    props = maintenance_properties(config) | dict(config.sink.table_properties)
    # Bronze's Delta checkpoints are written beside the batches (log_checkpoints), unless the config sets the
    # interval, which keeps Delta's checkpoints inside its commits.
    bronze_props = {log_checkpoints.PROPERTY: log_checkpoints.INLINE_INTERVAL} | props
    if config.silver is not None:  # silver reads what each bronze version added from Delta's change feed
        bronze_props.setdefault(CHANGE_FEED, "true")
    if not any(key in props for key in STATS_PROPERTIES):
        bronze_props[STATS_PROPERTY] = ",".join(stats_columns(bronze_schema, config.sink.partition_by))
    bronze_props |= dict(bronze_properties or {})
    found = []
    for path, schema, partition_by, properties, quarantine in (
            (config.table_path, bronze_schema, config.sink.partition_by, bronze_props, False),
            (config.quarantine_path, quarantine_schema, (), props, True)):
        now = states[path] if states is not None and path in states else table_state(spark, config, path)
        if now.exists:
            check_retention(config, _retention_properties(now.properties), f"{config.file}: table {path}",
                            table=True)
        found.append(TablePlan(path, schema, partition_by, properties, now.exists,
                               catalog.comment(config, quarantine=quarantine)))
    return found


def table_states(spark: SparkSession | None, config: PipelineConfig) -> dict[str, rs_tables.TableState]:
    """Bronze's and quarantine's state by path (`table_state` of each), read once for what follows."""
    return {path: table_state(spark, config, path) for path in (config.table_path, config.quarantine_path)}


def table_state(spark: SparkSession | None, config: PipelineConfig, path: str) -> rs_tables.TableState:
    """The table at `path` through delta-rs, or through Spark's Delta (when given) where delta-rs cannot read it
    (its properties then only the retention ones, which `plans` checks, and the Protobuf message it holds)."""
    try:
        return rs_tables.state(path, config.storage_options())
    except JvmFreeReadError:
        if spark is None:
            raise
    if not is_table(spark, path):
        return rs_tables.TableState(exists=False)
    properties = {key: value for key in (*_RETENTION_KEYS, protobuf_schemas.TABLE_PROPERTY)
                  if (value := table_property(spark, path, key)) is not None}
    return rs_tables.TableState(True, spark.read.format("delta").load(path).schema, properties)


def maintenance_properties(config: PipelineConfig) -> dict[str, str]:
    """The properties the maintenance section gives both tables: a deleted-file retention equal to the vacuum
    retention (the promised window, see `retention`), and Delta's auto compaction when asked for."""
    props = {retention.DELETED_FILE_RETENTION: retention.as_interval(config.maintenance.window_seconds)}
    if config.maintenance.auto_compact:
        props[AUTO_COMPACT] = "true"
    return props


_RETENTION_KEYS = (retention.DELETED_FILE_RETENTION, retention.LOG_RETENTION, retention.SET_TRANSACTION_RETENTION)


def _retention_properties(properties: Mapping[str, str]) -> dict[str, str]:
    return {key: properties[key] for key in _RETENTION_KEYS if key in properties}


def check_table_retention(spark: SparkSession, config: PipelineConfig, path: str) -> None:
    """Refuse (ConfigError naming the table) an existing table whose retention properties, with the pipeline's
    vacuum retention, could break a promise (`retention.problems`)."""
    found = {key: value for key in _RETENTION_KEYS if (value := table_property(spark, path, key)) is not None}
    check_retention(config, found, f"{config.file}: table {path}", table=True)


def ensure_tables(spark: SparkSession | None, config: PipelineConfig, bronze_schema: T.StructType,
                  quarantine_schema: T.StructType, bronze_properties: Mapping[str, str] | None = None,
                  states: Mapping[str, rs_tables.TableState] | None = None) -> list[TablePlan]:
    """Create the tables that do not exist yet, with delta-rs (no JVM: a commit of the protocol and metadata)
    or, where delta-rs refuses and `spark` is given, with Spark's Delta; the plans, with `exists` as it was
    before and `made` for those made now. Without `spark`, a table delta-rs refused stays to make."""
    found = []
    for plan in plans(spark, config, bronze_schema, quarantine_schema, bronze_properties, states):
        if not plan.exists:
            made = rs_tables.create(plan.path, plan.schema, partition_by=plan.partition_by,
                                    properties=plan.properties, comment=plan.comment,
                                    storage_options=config.storage_options())
            if not made and spark is not None:
                _create_with_spark(spark, plan)
                made = True
            plan = dataclasses.replace(plan, made=made)
        found.append(plan)
    return found


def _create_with_spark(spark: SparkSession, plan: TablePlan) -> None:
    from delta.tables import DeltaTable

    builder = DeltaTable.createIfNotExists(spark).location(plan.path).addColumns(plan.schema)
    if plan.comment:
        builder = builder.comment(plan.comment)
    if plan.partition_by:
        builder = builder.partitionedBy(*plan.partition_by)
    for key, value in plan.properties.items():
        builder = builder.property(key, value)
    builder.execute()


TYPE_WIDENING = "delta.enableTypeWidening"


def set_property(spark: SparkSession, path: str, key: str, value: str) -> None:
    """Set a table property of the table at `path` (a metadata commit)."""
    spark.sql("ALTER TABLE delta.`{}` SET TBLPROPERTIES ('{}' = '{}')".format(
        path.replace("`", "``"), key.replace("'", "\\'"), value.replace("'", "\\'")))


def widen_columns(spark: SparkSession, path: str, columns: list[tuple[str, T.DataType]]) -> None:
    """Widen columns of the table at `path` (dotted paths for nested fields) with Delta's type widening: the table
    gets the `typeWidening` feature (a protocol upgrade: readers must support it) and keeps its data files; rows
    written before read back with their values in the wider type."""
    if not columns:
        return
    table = "delta.`{}`".format(path.replace("`", "``"))
    set_property(spark, path, TYPE_WIDENING, "true")
    for name, wider in columns:
        column = ".".join("`{}`".format(part.replace("`", "``")) for part in name.split("."))
        spark.sql(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE {wider.simpleString()}")


def add_columns(spark: SparkSession, path: str, schema: T.StructType, metadata: str, *, widen: bool = False) -> None:
    """Give the table at `path` the columns and nested fields of `schema` it lacks, in a commit of no rows carrying
    `metadata`; `widen`: first turn on Delta's type widening, so that the commit also widens the columns `schema`
    holds in a wider type."""
    if widen:
        set_property(spark, path, TYPE_WIDENING, "true")
    (spark.createDataFrame([], schema).write.format("delta").mode("append").option("mergeSchema", "true")
     .option("userMetadata", metadata).save(path))
