"""Pure DataFrame functions from Kafka rows to bronze rows: decode, name the metadata columns, summarize."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
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
        *_coordinates(),
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
        *_coordinates(),
        F.col("key").alias("_kafka_key"),
        F.col("_raw_value").alias("_kafka_value"),
        F.col("headers").alias("_kafka_headers"),
        F.col("_schema_id"),
        F.col("_error_class"),
        F.col("_error_message"),
        _as_column(batch_id).cast("long").alias("_batch_id"),
        F.lit(ingested_at).cast("timestamp").alias("_ingested_at"),
    )


def _coordinates() -> list[Column]:
    """A record's Kafka coordinates under their bronze and quarantine names."""
    return [F.col("topic").alias("_kafka_topic"), F.col("partition").alias("_kafka_partition"),
            F.col("offset").alias("_kafka_offset"), F.col("timestamp").alias("_kafka_timestamp"),
            F.col("timestampType").alias("_kafka_timestamp_type")]


def _as_column(value: int | Column) -> Column:
    return value if isinstance(value, Column) else F.lit(value)


# Partial per-partition statistics of decoded rows, one row per Arrow batch and Kafka partition.
STATS_SCHEMA = T.StructType([
    T.StructField("topic", T.StringType()), T.StructField("partition", T.IntegerType()),
    T.StructField("first", T.LongType()), T.StructField("last", T.LongType()), T.StructField("count", T.LongType()),
    T.StructField("failed_first", T.LongType()), T.StructField("failed_last", T.LongType()),
    T.StructField("failed", T.LongType()), T.StructField("max_timestamp", T.TimestampType()),
    T.StructField("bytes", T.LongType()), T.StructField("schema_ids", T.ArrayType(T.IntegerType())),
    T.StructField("unknown_ids", T.ArrayType(T.IntegerType())),
])
_STATS_INPUT = ("topic", "partition", "offset", "timestamp", "_error_class", "_schema_id", "_value_bytes")


def offset_ranges(decoded: DataFrame) -> DataFrame:
    """Partial statistics per Arrow batch and partition: offsets, counts of all and of failed records, newest
    Kafka timestamp, value bytes, schema ids. Computed where the rows are, without a shuffle: merge the rows
    with `merge_ranges` on the driver."""
    return decoded.select(*_STATS_INPUT).mapInArrow(_partial_stats, STATS_SCHEMA)


def _partial_stats(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import pyarrow.compute as pc

    for batch in batches:
        if not batch.num_rows:
            continue
        table = pa.Table.from_batches([batch])
        failed_mask = pc.is_valid(table.column("_error_class"))
        unknown_mask = pc.equal(table.column("_error_class").fill_null(""), "UnknownSchemaError")
        for key in table.group_by(["topic", "partition"]).aggregate([]).to_pylist():
            mask = pc.and_(pc.equal(table.column("topic"), key["topic"]),
                           pc.equal(table.column("partition"), key["partition"]))
            part = table.filter(mask)
            failed = table.filter(pc.and_(mask, failed_mask)).column("offset")
            ids = part.column("_schema_id").drop_null()
            unknown = table.filter(pc.and_(mask, unknown_mask)).column("_schema_id").drop_null()
            offsets = part.column("offset")
            row = {
                **key, "first": pc.min(offsets).as_py(), "last": pc.max(offsets).as_py(), "count": len(offsets),
                "failed_first": pc.min(failed).as_py() if len(failed) else None,
                "failed_last": pc.max(failed).as_py() if len(failed) else None, "failed": len(failed),
                "max_timestamp": pc.max(part.column("timestamp")).as_py(),
                "bytes": pc.sum(part.column("_value_bytes")).as_py() or 0,
                "schema_ids": sorted(pc.unique(ids).to_pylist()),
                "unknown_ids": sorted(pc.unique(unknown).to_pylist()),
            }
            yield pa.RecordBatch.from_pylist([row], schema=_STATS_ARROW)


_STATS_ARROW = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("first", pa.int64()), ("last", pa.int64()),
    ("count", pa.int64()), ("failed_first", pa.int64()), ("failed_last", pa.int64()), ("failed", pa.int64()),
    ("max_timestamp", pa.timestamp("us", tz="UTC")), ("bytes", pa.int64()), ("schema_ids", pa.list_(pa.int32())),
    ("unknown_ids", pa.list_(pa.int32())),
])


def merge_ranges(partials: list[Any]) -> list[dict[str, Any]]:
    """One summary per topic partition from the partial rows of `offset_ranges` (Rows or dicts)."""
    merged: dict[tuple[str, int], dict[str, Any]] = {}
    for row in partials:
        p = row.asDict() if hasattr(row, "asDict") else dict(row)
        key = (p["topic"], p["partition"])
        if key not in merged:
            merged[key] = {**p, "schema_ids": set(p["schema_ids"]), "unknown_ids": set(p["unknown_ids"])}
            continue
        m = merged[key]
        m["first"], m["last"] = min(m["first"], p["first"]), max(m["last"], p["last"])
        m["count"] += p["count"]
        for name, pick in (("failed_first", min), ("failed_last", max), ("max_timestamp", max)):
            values = [v for v in (m[name], p[name]) if v is not None]
            m[name] = pick(values) if values else None
        m["failed"] += p["failed"]
        m["bytes"] += p["bytes"]
        m["schema_ids"] |= set(p["schema_ids"])
        m["unknown_ids"] |= set(p["unknown_ids"])
    return [{**m, "schema_ids": sorted(m["schema_ids"]), "unknown_ids": sorted(m["unknown_ids"])}
            for _, m in sorted(merged.items())]


def batch_stats(decoded: DataFrame) -> list[dict[str, Any]]:
    """Per topic partition summary of a decoded batch (runs one narrow Spark job)."""
    return merge_ranges(offset_ranges(decoded).collect())
