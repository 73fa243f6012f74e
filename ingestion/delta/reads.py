"""Reading a pipeline's tables with Spark: every Delta read of the project goes through `read_table`."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ingestion.columns import METADATA_COLUMNS
from ingestion.config import PipelineConfig
from ingestion.runtime.delta_txn import is_table


def read_table(spark: SparkSession, path: str) -> DataFrame | None:
    """The Delta table at `path` (its latest version), or None when there is no table there."""
    if not is_table(spark, path):
        return None
    return spark.read.format("delta").load(path)


def payload_columns(spark: SparkSession, config: PipelineConfig) -> T.StructType | None:
    """The payload columns bronze has now (everything but the metadata columns), or None without a table."""
    table = read_table(spark, config.table_path)
    if table is None:
        return None
    schema = table.schema
    return T.StructType([f for f in schema.fields if f.name not in METADATA_COLUMNS])


def held_coordinates(spark: SparkSession, config: PipelineConfig) -> DataFrame | None:
    """(topic, partition, offset) of every row bronze and quarantine hold, duplicates kept; None without tables."""
    tables = [read_table(spark, path) for path in (config.table_path, config.quarantine_path)]
    frames = [table.select(F.col("_kafka_topic").alias("topic"), F.col("_kafka_partition").alias("partition"),
                           F.col("_kafka_offset").alias("offset"))
              for table in tables if table is not None]
    if not frames:
        return None
    held = frames[0]
    for frame in frames[1:]:
        held = held.unionByName(frame)
    return held
