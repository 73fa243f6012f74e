"""Pure DataFrame functions from Kafka rows to bronze rows: decode, name the metadata columns, summarize."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ingestion import jvm, sessions
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
    spark = decoded.sparkSession
    verified, columns = sessions.once(spark, "bronze columns", lambda: (F.col("_error_class").isNull(), [
        F.col(f"{PAYLOAD}.*"),
        *_coordinates(),
        F.col("_key").alias("_kafka_key"),
        F.col("headers").alias("_kafka_headers"),
        F.col("_tombstone").alias("_kafka_tombstone"),
        F.col("_schema_id"),
    ]))  # built once per session: a batch would otherwise spend ~40 py4j round trips on the same expressions
    rows, batch = _with_batch_values(decoded.where(verified), batch_id, ingested_at)
    return rows.select(*columns, *batch)


def quarantine_rows(decoded: DataFrame, *, batch_id: int | Column, ingested_at: dt.datetime) -> DataFrame:
    """Decoded rows that failed, with their raw key and value bytes and the reason."""
    rows, batch = _with_batch_values(decoded.where(F.col("_error_class").isNotNull()), batch_id, ingested_at)
    return rows.select(
        *_coordinates(),
        F.col("key").alias("_kafka_key"),
        F.col("_raw_value").alias("_kafka_value"),
        F.col("headers").alias("_kafka_headers"),
        F.col("_schema_id"),
        F.col("_error_class"),
        F.col("_error_message"),
        *batch,
    )


_BATCH_VALUES = ("__ingest_batch_id", "__ingest_ingested_at")


def _with_batch_values(rows: DataFrame, batch_id: int | Column,
                       ingested_at: dt.datetime) -> tuple[DataFrame, list[Column]]:
    """The rows joined with their batch's values, and the `_batch_id`, `_ingested_at` columns to select.

    The values come from a one-row table broadcast to the tasks, not from literals: Spark writes a long or
    timestamp literal into the Java code it generates for a stage, so literals that change every batch make it
    compile the stage again every batch (2 classes, 70 to 250 ms each on the benchmark), and the JVM then runs
    the new classes interpreted until it has JIT-compiled them again. As data, the stage's code is the same in
    every batch and comes from Spark's code cache. (Broadcasting the one-row table costs a one-task Spark job
    of ~30 ms per batch, which the event log shows; a compilation cost more.)"""
    batch_name, at_name = _BATCH_VALUES
    one_row = rows.sparkSession.sql(
        f"SELECT * FROM VALUES (CAST(:batch_id AS BIGINT), CAST(:ingested_at AS TIMESTAMP)) AS v({batch_name}, "
        f"{at_name})", args={"batch_id": batch_id if isinstance(batch_id, int) else 0, "ingested_at": ingested_at})
    if isinstance(batch_id, Column):
        batch = [batch_id.cast("long").alias("_batch_id"), F.col(at_name).alias("_ingested_at")]
    else:
        batch = sessions.once(rows.sparkSession, "batch values", lambda: [
            F.col(batch_name).alias("_batch_id"), F.col(at_name).alias("_ingested_at")])
    return rows.crossJoin(F.broadcast(one_row)), batch


def _coordinates() -> list[Column]:
    """A record's Kafka coordinates under their bronze and quarantine names."""
    return [F.col("topic").alias("_kafka_topic"), F.col("partition").alias("_kafka_partition"),
            F.col("offset").alias("_kafka_offset"), F.col("timestamp").alias("_kafka_timestamp"),
            F.col("timestampType").alias("_kafka_timestamp_type")]


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def batch_stats(decoded: DataFrame) -> list[dict[str, Any]]:
    """Per topic partition summary of a decoded batch, sorted by (topic, partition): first and last offset, count,
    the failed records' first, last offset and count, newest Kafka timestamp, value bytes, schema ids, and the
    ids no version of the subject has (UnknownSchemaError). One JVM aggregation, no Python worker."""
    failed = F.col("_error_class").isNotNull()
    offset = F.col("offset")
    rows = decoded.groupBy("topic", "partition").agg(
        F.min(offset).alias("first"), F.max(offset).alias("last"), F.count(F.lit(1)).alias("count"),
        F.min(F.when(failed, offset)).alias("failed_first"), F.max(F.when(failed, offset)).alias("failed_last"),
        F.count(F.when(failed, 1)).alias("failed"), F.unix_micros(F.max("timestamp")).alias("max_timestamp"),
        F.coalesce(F.sum("_value_bytes"), F.lit(0)).alias("bytes"),
        F.array_sort(F.collect_set("_schema_id")).alias("schema_ids"),
        F.array_sort(F.collect_set(F.when(F.col("_error_class") == "UnknownSchemaError", F.col("_schema_id"))))
        .alias("unknown_ids"),
    ).collect()
    return _by_partition([row.asDict() for row in rows])


def _by_partition(stats: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Summaries sorted by (topic, partition), their newest timestamp (microseconds) as an aware UTC datetime:
    collect() would give a naive one in this process's time zone."""
    for s in stats:
        micros = s["max_timestamp"]
        s["max_timestamp"] = None if micros is None else _EPOCH + dt.timedelta(microseconds=micros)
    return sorted(stats, key=lambda r: (r["topic"], r["partition"]))


SUMMARY_FUNCTION = "ingest_partition_summary"


def observed_summary(spark: SparkSession) -> Column:
    """The per topic partition summary of the rows, as one aggregate for `DataFrame.observe` (the project's
    `data/PartitionSummary.java`): computed while the rows are written, with no pass of its own. Read it back with
    `observed_stats`. The function is registered once per session."""
    def register() -> Column:
        java: Any = spark._jvm
        sessions.register(spark, SUMMARY_FUNCTION, lambda udf: udf.register(
            SUMMARY_FUNCTION, getattr(java, jvm.SUMMARY_CLASS).function()))
        return F.call_function(SUMMARY_FUNCTION, F.col("topic"), F.col("partition"), F.col("offset"),
                               F.unix_micros("timestamp"), F.col("_schema_id"))

    return sessions.once(spark, SUMMARY_FUNCTION, register)


def observed_stats(summary: str) -> list[dict[str, Any]]:
    """`batch_stats` of rows that all land in bronze, from `observed_summary`'s value. Value bytes are counted by
    the caller: `bytes` is 0."""
    stats = json.loads(summary)
    for s in stats:
        s.update(failed_first=None, failed_last=None, failed=0, bytes=0, unknown_ids=[])
    return _by_partition(stats)
