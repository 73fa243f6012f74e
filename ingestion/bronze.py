"""Pure DataFrame functions from Kafka rows to bronze rows: decode, name the metadata columns, summarize."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ingestion.decode import PAYLOAD, BatchDecoder, DecodeSpec
from ingestion.errors import SchemaError

# The bronze columns that follow the payload's own fields, in order (documented in the README).
METADATA_COLUMNS = (
    "_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_kafka_timestamp_type",
    "_kafka_key", "_kafka_headers", "_kafka_tombstone", "_schema_id", "_batch_id", "_ingested_at",
)


# The rows Spark's Kafka source produces (with includeHeaders), as its integration guide documents them.
KAFKA_SOURCE_SCHEMA = T.StructType([
    T.StructField("key", T.BinaryType()), T.StructField("value", T.BinaryType()),
    T.StructField("topic", T.StringType()), T.StructField("partition", T.IntegerType()),
    T.StructField("offset", T.LongType()), T.StructField("timestamp", T.TimestampType()),
    T.StructField("timestampType", T.IntegerType()),
    T.StructField("headers", T.ArrayType(T.StructType([T.StructField("key", T.StringType()),
                                                       T.StructField("value", T.BinaryType())]))),
])


def table_schemas(spark: SparkSession, spec: DecodeSpec) -> tuple[T.StructType, T.StructType]:
    """(bronze, quarantine) schemas, from the same functions that produce their rows, on no rows."""
    empty = decode(spark.createDataFrame([], KAFKA_SOURCE_SCHEMA), spec)
    now = dt.datetime.now(dt.UTC)
    return (bronze_rows(empty, batch_id=0, ingested_at=now).schema,
            quarantine_rows(empty, batch_id=0, ingested_at=now).schema)


def decode(kafka_rows: DataFrame, spec: DecodeSpec) -> DataFrame:
    """Kafka source rows -> decoded rows (payload struct, schema id, error columns, Kafka columns)."""
    clash = set(spec.payload_type.fieldNames()) & set(METADATA_COLUMNS)
    if clash:
        raise SchemaError(f"payload fields {sorted(clash)} clash with bronze metadata columns")
    decoder: Any = BatchDecoder(spec)  # an Iterator -> Iterator callable, as mapInArrow wants
    return kafka_rows.mapInArrow(decoder, spec.output_schema(kafka_rows.schema))


# The quarantine table's columns: the raw record, its coordinates, and why it failed.
QUARANTINE_COLUMNS = (
    "_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_kafka_timestamp_type",
    "_kafka_key", "_kafka_value", "_kafka_headers", "_schema_id", "_error_class", "_error_message",
    "_batch_id", "_ingested_at",
)


def bronze_rows(decoded: DataFrame, *, batch_id: int | Column, ingested_at: dt.datetime) -> DataFrame:
    """Decoded rows that carry a payload or are tombstones, as bronze columns."""
    return decoded.where(F.col("_error_class").isNull()).select(
        f"{PAYLOAD}.*",
        F.col("topic").alias("_kafka_topic"),
        F.col("partition").alias("_kafka_partition"),
        F.col("offset").alias("_kafka_offset"),
        F.col("timestamp").alias("_kafka_timestamp"),
        F.col("timestampType").alias("_kafka_timestamp_type"),
        F.col("_key").alias("_kafka_key"),
        F.col("headers").alias("_kafka_headers"),
        F.col("_tombstone").alias("_kafka_tombstone"),
        F.col("_schema_id"),
        _as_column(batch_id).cast("long").alias("_batch_id"),
        F.lit(ingested_at).cast("timestamp").alias("_ingested_at"),
    )


def quarantine_rows(decoded: DataFrame, *, batch_id: int | Column, ingested_at: dt.datetime) -> DataFrame:
    """Decoded rows that failed, with their raw key and value bytes and the reason."""
    return decoded.where(F.col("_error_class").isNotNull()).select(
        F.col("topic").alias("_kafka_topic"),
        F.col("partition").alias("_kafka_partition"),
        F.col("offset").alias("_kafka_offset"),
        F.col("timestamp").alias("_kafka_timestamp"),
        F.col("timestampType").alias("_kafka_timestamp_type"),
        F.col("key").alias("_kafka_key"),
        F.col("_raw_value").alias("_kafka_value"),
        F.col("headers").alias("_kafka_headers"),
        F.col("_schema_id"),
        F.col("_error_class"),
        F.col("_error_message"),
        _as_column(batch_id).cast("long").alias("_batch_id"),
        F.lit(ingested_at).cast("timestamp").alias("_ingested_at"),
    )


def _as_column(value: int | Column) -> Column:
    return value if isinstance(value, Column) else F.lit(value)


def offset_ranges(decoded: DataFrame) -> DataFrame:
    """One row per topic partition: first and last offset and count of all records and of the failed ones,
    newest Kafka timestamp, schema ids."""
    failed = F.col("_error_class").isNotNull()
    return decoded.groupBy("topic", "partition").agg(
        F.min("offset").alias("first"),
        F.max("offset").alias("last"),
        F.count(F.lit(1)).alias("count"),
        F.min(F.when(failed, F.col("offset"))).alias("failed_first"),
        F.max(F.when(failed, F.col("offset"))).alias("failed_last"),
        F.sum(failed.cast("long")).alias("failed"),
        F.max("timestamp").alias("max_timestamp"),
        F.sum(F.coalesce(F.col("_value_bytes").cast("long"), F.lit(0))).alias("bytes"),
        F.sort_array(F.collect_set("_schema_id")).alias("schema_ids"),
        F.collect_set(F.when(F.col("_error_class") == "UnknownSchemaError", F.col("_schema_id"))).alias("unknown_ids"),
    )
