"""The columns of the tables this project writes, declared once: bronze's metadata columns, quarantine's columns,
and the rows Spark's Kafka source produces. Documented in docs/columns.md."""

from __future__ import annotations

from pyspark.sql import types as T

# The bronze columns that follow the payload's own fields, in order.
METADATA_COLUMNS = (
    "_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_kafka_timestamp_type",
    "_kafka_key", "_kafka_headers", "_kafka_tombstone", "_schema_id", "_batch_id", "_ingested_at",
)

# The quarantine table's columns: the raw record, its coordinates, and why it failed.
QUARANTINE_COLUMNS = (
    "_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_kafka_timestamp_type",
    "_kafka_key", "_kafka_value", "_kafka_headers", "_schema_id", "_error_class", "_error_message",
    "_batch_id", "_ingested_at",
)

# A record's coordinates in both tables: the key of exactly-once checks (verify, replay, re-decode).
COORDINATES = ("_kafka_topic", "_kafka_partition", "_kafka_offset")

# The rows Spark's Kafka source produces (with includeHeaders), as its integration guide documents them.
KAFKA_SOURCE_SCHEMA = T.StructType([
    T.StructField("key", T.BinaryType()), T.StructField("value", T.BinaryType()),
    T.StructField("topic", T.StringType()), T.StructField("partition", T.IntegerType()),
    T.StructField("offset", T.LongType()), T.StructField("timestamp", T.TimestampType()),
    T.StructField("timestampType", T.IntegerType()),
    T.StructField("headers", T.ArrayType(T.StructType([T.StructField("key", T.StringType()),
                                                       T.StructField("value", T.BinaryType())]))),
])
