"""The project's own JVM functions (the helper jar, compiled from `data/*.java` by `jars.helper_jar`), registered
as Spark SQL functions, and what an `Observation` saw, read without a py4j loop."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable
from functools import partial
from typing import Any

from pyspark.sql import Column, Observation, SparkSession
from pyspark.sql import functions as F

from ingestion.runtime import session_cache
from ingestion.runtime.gateway import java

BODY_CHECK_CLASS = "ingest.AvroBodyCheck"
PROTOBUF_DECODE_CLASS = "ingest.ProtobufDecode"
JSON_DECODE_CLASS = "ingest.JsonDecode"
SUMMARY_CLASS = "ingest.PartitionSummary"
BATCH_VALUE_CLASS = "ingest.BatchValue"
SUMMARY_FUNCTION = "ingest_partition_summary"
PENDING_CLASS = "ingest.PendingRecords"


def body_check(spark: SparkSession, schema: str, header: int) -> str:
    """Register the Avro body check (`data/AvroBodyCheck.java`) for a schema and a header length as a session
    function; its name (one per schema and header)."""
    name = f"ingest_avro_ok_{hashlib.sha1(schema.encode()).hexdigest()[:12]}_{header}"
    jvm: Any = spark._jvm
    session_cache.register(spark, name, lambda udf: udf.register(
        name, getattr(jvm, BODY_CHECK_CLASS)(schema, header), java(jvm, "org.apache.spark.sql.types.DataTypes")
        .BooleanType))
    return name


def protobuf_decoder(spark: SparkSession, descriptor_set: bytes, message: str, header: int,
                     row_type: Any, strict: bool = False) -> str:
    """Register the Protobuf decoder (`data/ProtobufDecode.java`) of one message of a descriptor set, for values
    whose first `header` bytes are the framing, as a session function returning `row_type` (a StructType) or null
    for what it cannot vouch for (with `strict`, any body with an unknown field too); its name."""
    digest = hashlib.sha1(descriptor_set + message.encode() + row_type.json().encode()).hexdigest()[:12]
    name = f"ingest_protobuf_{digest}_{header}{'_strict' if strict else ''}"
    jvm: Any = spark._jvm
    session_cache.register(spark, name, lambda udf: udf.register(
        name, getattr(jvm, PROTOBUF_DECODE_CLASS)(bytearray(descriptor_set), message, header, strict),
        java(jvm, "org.apache.spark.sql.types.DataType").fromJson(row_type.json())))
    return name


def json_decoder(spark: SparkSession, tree: str, header: int, row_type: Any) -> str:
    """Register the JSON decoder (`data/JsonDecode.java`) of a schema tree (`json_types.Node.tree` as JSON), for
    values whose first `header` bytes are the framing, as a session function returning `row_type` or null for what
    it cannot vouch for; its name."""
    digest = hashlib.sha1((tree + row_type.json()).encode()).hexdigest()[:12]
    name = f"ingest_json_{digest}_{header}"
    jvm: Any = spark._jvm
    session_cache.register(spark, name, lambda udf: udf.register(
        name, getattr(jvm, JSON_DECODE_CLASS)(tree, header),
        java(jvm, "org.apache.spark.sql.types.DataType").fromJson(row_type.json())))
    return name


def partition_summary(spark: SparkSession) -> Column:
    """The per topic partition summary of rows (`data/PartitionSummary.java`) as one aggregate for
    `DataFrame.observe`: a JSON list of {topic, partition, first, last, count, max_timestamp, schema_ids}. The
    function is registered once per session."""
    def register() -> Column:
        jvm: Any = spark._jvm
        session_cache.register(spark, SUMMARY_FUNCTION, lambda udf: udf.register(
            SUMMARY_FUNCTION, getattr(jvm, SUMMARY_CLASS).function()))
        return F.call_function(SUMMARY_FUNCTION, F.col("topic"), F.col("partition"), F.col("offset"),
                               F.unix_micros("timestamp"), F.col("_schema_id"))

    return session_cache.once(spark, SUMMARY_FUNCTION, register)


def pending_records(spark: SparkSession, record: Column, limit: int) -> Column:
    """The records a job did not write, brought to the driver (`data/PendingRecords.java`) as one aggregate for
    `DataFrame.observe`: `record` is a record's text, null for the rows to skip; the result a JSON array of the
    texts, or null when they came to more than `limit` characters. Registered once per session and limit."""
    name = f"ingest_pending_records_{limit}"
    jvm: Any = spark._jvm
    session_cache.register(spark, name, lambda udf: udf.register(name, getattr(jvm, PENDING_CLASS).function(limit)))
    return F.call_function(name, record)


# The local properties `set_batch_values` sets, and the functions `batch_value_columns` reads them with.
BATCH_ID_PROPERTY = "ingest.batch.id"
INGESTED_AT_PROPERTY = "ingest.batch.ingestedAtMicros"
_BATCH_FUNCTIONS = {BATCH_ID_PROPERTY: "ingest_batch_id", INGESTED_AT_PROPERTY: "ingest_batch_ingested_at"}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def set_batch_values(spark: SparkSession, batch_id: int, ingested_at: dt.datetime) -> None:
    """Make `batch_id` and `ingested_at` (a naive time is local time, as PySpark reads one) the values
    `batch_value_columns` give in the jobs this thread starts from now on (local properties, which Spark hands to
    the tasks): a batch's rows are to be written by the thread that built them, before it sets the next
    batch's."""
    micros = (ingested_at.astimezone(dt.UTC) - _EPOCH) // dt.timedelta(microseconds=1)
    context = spark.sparkContext
    context.setLocalProperty(BATCH_ID_PROPERTY, str(batch_id))
    context.setLocalProperty(INGESTED_AT_PROPERTY, str(micros))


def batch_value_columns(spark: SparkSession) -> list[Column]:
    """`_batch_id` (bigint) and `_ingested_at` (timestamp), both not null, as `set_batch_values` set them
    (`data/BatchValue.java`: the same generated code every batch and no Spark job for them). The functions are
    registered once per session."""
    def build() -> list[Column]:
        jvm: Any = spark._jvm
        for prop, name in _BATCH_FUNCTIONS.items():
            function = getattr(jvm, BATCH_VALUE_CLASS).function(prop)
            session_cache.register(spark, name, partial(_register, name, function))
        return [F.call_function(_BATCH_FUNCTIONS[BATCH_ID_PROPERTY]).alias("_batch_id"),
                F.timestamp_micros(F.call_function(_BATCH_FUNCTIONS[INGESTED_AT_PROPERTY])).alias("_ingested_at")]

    return session_cache.once(spark, "batch value columns", build)


def _register(name: str, function: Any, udf: Any) -> None:
    udf.register(name, function)


def observed_values(observation: Observation, names: Iterable[str]) -> dict[str, Any]:
    """The observed values of `names`, once the observed query has run: what `observation.get` returns, without
    iterating a Java map through py4j (its end costs a JVM exception that PySpark converts, ~60 round trips)."""
    values = observation._jo.getAsJava() if observation._jo is not None else None  # waits for the query's job
    if values is None:
        return observation.get  # raises PySpark's own error: nothing was observed
    return {name: values.get(name) for name in names}
