"""Pure DataFrame functions from decoded rows to bronze and quarantine rows, and per-partition summaries (their
Arrow twins, for records the driver decodes, are in `arrow_rows`)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ingestion.columns import KAFKA_SOURCE_SCHEMA, METADATA_COLUMNS, QUARANTINE_COLUMNS
from ingestion.decode.spec import PAYLOAD, DecodeSpec, UnknownSchemaError
from ingestion.runtime import helper, session_cache


def table_schemas(spec: DecodeSpec) -> tuple[T.StructType, T.StructType]:
    """(bronze, quarantine) schemas of the rows `bronze_rows` and `quarantine_rows` make of this spec's decoded
    rows, computed without a JVM: the tables are made before (or while) the Spark session starts.
    `tests/integration/test_tables.py` holds them equal to the schemas of the DataFrames themselves."""
    decoded = {f.name: f for f in spec.output_schema(KAFKA_SOURCE_SCHEMA).fields}
    # `_payload.*` of a nullable struct: every field nullable, as Spark's GetStructField makes it
    payload = [T.StructField(f.name, f.dataType, True, f.metadata) for f in spec.payload_type.fields]
    return (T.StructType([*payload, *_fields(decoded, METADATA_COLUMNS, "_key")]),
            T.StructType(_fields(decoded, QUARANTINE_COLUMNS, "key")))


def _fields(decoded: dict[str, T.StructField], names: tuple[str, ...], key_source: str) -> list[T.StructField]:
    """The fields `_columns` and `_with_batch_values` select, in their order."""
    sources = {**SOURCES, "_kafka_key": key_source}
    taken = [T.StructField(name, decoded[sources[name]].dataType, decoded[sources[name]].nullable)
             for name in names if name not in _BATCH_COLUMNS]
    return [*taken, *_BATCH_FIELDS]


# Where each metadata column comes from in the decoder's rows (`_batch_id` and `_ingested_at`: the batch values).
SOURCES = {"_kafka_topic": "topic", "_kafka_partition": "partition", "_kafka_offset": "offset",
            "_kafka_timestamp": "timestamp", "_kafka_timestamp_type": "timestampType", "_kafka_headers": "headers",
            "_kafka_tombstone": "_tombstone", "_kafka_value": "_raw_value", "_schema_id": "_schema_id",
            "_error_class": "_error_class", "_error_message": "_error_message"}
_BATCH_COLUMNS = ("_batch_id", "_ingested_at")


def decoder_sources() -> dict[str, str]:
    """Where each of bronze's metadata columns comes from in the decoder's rows (the batch values aside)."""
    return {**SOURCES, "_kafka_key": "_key"}


# Their fields, not null: `helper.batch_value_columns` (or a one-row table of non-null parameters) gives them.
_BATCH_FIELDS = (T.StructField("_batch_id", T.LongType(), False),
                 T.StructField("_ingested_at", T.TimestampType(), False))


def _columns(names: tuple[str, ...], key_source: str) -> list[Column]:
    """The decoder columns under the table's names, in the declared order, without the batch values."""
    sources = {**SOURCES, "_kafka_key": key_source}
    return [F.col(sources[name]).alias(name) for name in names if name not in _BATCH_COLUMNS]


def bronze_rows(decoded: DataFrame, *, batch_id: int | Column, ingested_at: dt.datetime) -> DataFrame:
    """Decoded rows that carry a payload or are tombstones, as bronze columns."""
    spark = decoded.sparkSession
    verified, columns = session_cache.once(spark, "bronze columns", lambda: (
        F.col("_error_class").isNull(), [F.col(f"{PAYLOAD}.*"), *_columns(METADATA_COLUMNS, "_key")]))
    # built once per session: a batch would otherwise spend py4j round trips on the same expressions
    rows, batch = _with_batch_values(decoded.where(verified), batch_id, ingested_at)
    if isinstance(batch_id, Column):
        return rows.select(*columns, *batch)
    return session_cache.select(rows, session_cache.column_seq(spark, "bronze select", lambda: [*columns, *batch]))


def quarantine_rows(decoded: DataFrame, *, batch_id: int | Column, ingested_at: dt.datetime) -> DataFrame:
    """Decoded rows that failed, with their raw key and value bytes and the reason."""
    rows, batch = _with_batch_values(decoded.where(F.col("_error_class").isNotNull()), batch_id, ingested_at)
    return rows.select(*_columns(QUARANTINE_COLUMNS, "key"), *batch)


_INGESTED_AT = "__ingest_ingested_at"  # the one-row table's column, for a batch id column


def _with_batch_values(rows: DataFrame, batch_id: int | Column,
                       ingested_at: dt.datetime) -> tuple[DataFrame, list[Column]]:
    """The rows, and the `_batch_id`, `_ingested_at` columns to select.

    A batch's values are neither literals nor a joined table: Spark writes a long or timestamp literal into the
    Java code it generates for a stage, so literals that change every batch make it compile the stage again
    every batch (and the JVM then runs the new classes interpreted until it has JIT-compiled them again); a
    broadcast one-row table kept the code the same but cost a one-task Spark job every batch. They are the
    writing thread's local properties, read in the tasks by a function of the helper jar
    (`helper.batch_value_columns`; docs/performance.md#batch-values-as-a-broadcast-row): the rows must be
    written by the thread that built them, before it builds the next batch's. A `batch_id` column (the
    quarantine's reprocess keeps each record's own) takes the time from a broadcast one-row table, as before."""
    spark = rows.sparkSession
    if isinstance(batch_id, int):
        helper.set_batch_values(spark, batch_id, ingested_at)
        return rows, helper.batch_value_columns(spark)
    # A literal, not a named SQL parameter inside VALUES: Spark 4.2 leaves that one unbound
    one_row = spark.range(1).select(F.lit(ingested_at).cast("timestamp").alias(_INGESTED_AT))
    batch = [batch_id.cast("long").alias("_batch_id"), F.col(_INGESTED_AT).alias("_ingested_at")]
    return rows.crossJoin(F.broadcast(one_row)), batch


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
        F.array_sort(F.collect_set(F.when(F.col("_error_class") == UnknownSchemaError.__name__, F.col("_schema_id"))))
        .alias("unknown_ids"),
    ).collect()
    return by_partition([row.asDict() for row in rows])


def unknown_records(decoded: DataFrame, spec: DecodeSpec) -> dict[int, bytes]:
    """connect-json: a record value of each schema id of a decoded batch not known yet (UnknownSchemaError), whose
    embedded schema the resolver learns (`SchemaResolver.refresh`), in the order they first appear (Kafka timestamp,
    then partition and offset: the table takes the earlier of two schemas it cannot take both of); {} for the other
    formats (a registry knows)."""
    if spec.value_format != "connect-json":
        return {}
    first = F.struct("timestamp", "partition", "offset")
    rows = (decoded.where(F.col("_error_class") == UnknownSchemaError.__name__).groupBy("_schema_id")
            .agg(F.min_by("_raw_value", first).alias("value"), F.min(first).alias("first"))
            .orderBy("first", "_schema_id").collect())
    return {int(r["_schema_id"]): bytes(r["value"]) for r in rows if r["value"] is not None}


def by_partition(stats: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Summaries sorted by (topic, partition), their newest timestamp (microseconds) as an aware UTC datetime:
    collect() would give a naive one in this process's time zone."""
    for s in stats:
        micros = s["max_timestamp"]
        s["max_timestamp"] = None if micros is None else _EPOCH + dt.timedelta(microseconds=micros)
    return sorted(stats, key=lambda r: (r["topic"], r["partition"]))


def observed_stats(summary: str) -> list[dict[str, Any]]:
    """`batch_stats` of rows that all land in bronze, from `runtime.helper.partition_summary`'s value. Value bytes
    are counted by the caller: `bytes` is 0."""
    stats = json.loads(summary)
    for s in stats:
        s.update(failed_first=None, failed_last=None, failed=0, bytes=0, unknown_ids=[])
    return by_partition(stats)
