"""Decoding in the JVM with Spark's own `from_avro`, for the records it can vouch for; Python settles the rest.

Sending every record to a Python worker and back costs more than decoding it (docs/performance.md#decoding-in-the-jvm).
So records are decoded where they are, by Spark's `from_avro`, and trusted only when they are *verified*:

- the header is valid and names the table's current schema (older versions need schema resolution: Python),
- the value is within `value.maxBytes`,
- `from_avro` decodes the body (in PERMISSIVE mode a malformed body gives a row of nulls instead of failing the
  batch, so a record with every field null is left to Python too),
- the project's Avro body check (`data/AvroBodyCheck.java`, a Java UDF, one pass over the bytes) passes it: the
  body is read to its last byte in Avro's minimal encoding (what `to_avro` would write back), its strings (map
  keys too) are valid UTF-8, its uuids canonical, its values within what both decoders represent alike (booleans
  0 or 1, decimals within their precision, dates and timestamps in years 1 to 9999),
- its key decodes as `key.format` says.

Every other row (bad input, unknown or older schema ids, unusual encodings) goes to the Python decoder
(`python_decoder.BatchDecoder`), which is the authority on what is wrong with a record: quarantine reasons and messages
are the same on both paths, and a row lands in bronze with the same values either way.
"""

from __future__ import annotations

import functools
import json
import operator
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.utils import AnalysisException

from ingestion.decode import debezium_jvm
from ingestion.decode.python_decoder import batch_decoder
from ingestion.decode.spec import DECODER_COLUMNS, PAYLOAD, UNVERIFIED, DecodeSpec, UnknownSchemaError, format_module
from ingestion.decode.wire import HEADER_SIZE, encode
from ingestion.errors import SchemaError, one_line
from ingestion.runtime import helper, session_cache
from ingestion.schema import avro_types

_MAX_INT = 2**31 - 1


def unusable(spark: SparkSession, spec: DecodeSpec) -> str | None:
    """Why the JVM path cannot decode this pipeline's records, or None when it can."""
    module = format_module(spec, "jvm")  # another format's JVM path, a module of its own
    if module is not None:
        return module.unusable(spark, spec)  # type: ignore[no-any-return]
    if spec.key_format == "avro":
        return "key.format avro is decoded in Python"
    reader = json.loads(spec.reader_schema)
    try:
        avro_types.check_bounded(reader)
        _uuid_fields(reader)
    except SchemaError as exc:
        return str(exc)
    try:
        debezium_jvm.convert(F.lit(None), reader)
    except SchemaError as exc:
        return str(exc)
    try:
        jvm_type = _from_avro_type(spark, spec.reader_schema)
    except AnalysisException as exc:
        return f"Spark's from_avro is not available (spark-avro jar): {one_line(exc)}"
    try:
        helper.body_check(spark, spec.reader_schema, HEADER_SIZE)
        helper.partition_summary(spark)
    except Exception as exc:  # noqa: BLE001 - py4j reports a missing class or a schema Avro refuses as it can
        return (f"the project's JVM helper ({helper.BODY_CHECK_CLASS}, {helper.SUMMARY_CLASS}) is not usable; is the "
                f"helper jar (`ingest jars`) in spark.jars? {str(exc).strip().splitlines()[-1][:300]}")
    if jvm_type.simpleString() != spec.payload_type.simpleString():
        return (f"Spark's from_avro maps the schema to {jvm_type.simpleString()}, "
                f"the table has {spec.payload_type.simpleString()}")
    return None


def _from_avro_type(spark: SparkSession, schema: str) -> T.DataType:
    """The type Spark's from_avro gives `schema`, asked once per session and schema (`run --all` asks for each of
    its pipelines, and many share a schema)."""
    from pyspark.sql.avro.functions import from_avro

    def ask() -> T.DataType:
        nothing = from_avro(F.lit(None).cast("binary"), schema)
        debezium = debezium_jvm.convert(nothing, json.loads(schema))  # Debezium's semantic types, converted
        return spark.range(0).select((debezium[0] if debezium else nothing).alias("p")).schema["p"].dataType

    return session_cache.once(spark, ("from_avro type", schema), ask)


def decode_in_jvm(kafka_rows: DataFrame, spec: DecodeSpec) -> DataFrame:
    """Kafka rows -> decoder rows (the columns of `BatchDecoder`'s output). Rows the JVM could not verify carry
    `_error_class` UNVERIFIED (or UnknownSchemaError for a valid header naming an id this pipeline does not know)
    and their value in `_raw_value`: pass the result to `settle_in_python` unless no row is unverified."""
    module = format_module(spec, "jvm")
    if module is not None:
        return module.decode_in_jvm(kafka_rows, spec)  # type: ignore[no-any-return]
    plan = _plan(kafka_rows.sparkSession, spec)
    return decoder_rows(kafka_rows, ("decode plan", id(spec)), plan.stage, plan.verified, plan.columns)


def decoder_rows(kafka_rows: DataFrame, key: Hashable, stage: list[Column], verified: Column,
                 columns: list[Column]) -> DataFrame:
    """The Kafka rows with the `stage` columns, then `_verified` over them, then the decoder `columns` and the
    Kafka columns but the value. The column lists go to the JVM as Seqs made once per session under `key` (the
    key of the session's cached plan they come from)."""
    spark = kafka_rows.sparkSession
    passthrough = tuple(name for name in kafka_rows.columns if name != "value")
    staged = session_cache.column_seq(spark, (key, "stage"), lambda: [F.col("*"), *stage])
    chosen = session_cache.column_seq(spark, (key, "columns", passthrough),
                                      lambda: [*columns, *(F.col(name) for name in passthrough)])
    # `_verified` is a column of its own, so the checks run once per row, not once per output column.
    return session_cache.select(session_cache.select(kafka_rows, staged).withColumn("_verified", verified), chosen)


class _Plan(NamedTuple):
    stage: list[Column]  # added to the Kafka columns: _schema_id, _unknown, _decoded
    verified: Column  # over the stage
    columns: list[Column]  # DECODER_COLUMNS, over the stage and _verified


def _plan(spark: SparkSession, spec: DecodeSpec) -> _Plan:
    """The expressions for a spec, built once per session: they are the same for every batch, and building them
    costs thousands of py4j calls (docs/performance.md#py4j-round-trips). The cached value holds the
    spec, so its id, in the key, cannot be reused by another spec."""
    return session_cache.once(spark, ("decode plan", id(spec)), lambda: (spec, _build(spark, spec)))[1]


def _build(spark: SparkSession, spec: DecodeSpec) -> _Plan:
    from pyspark.sql.avro.functions import from_avro

    value = F.col("value")
    reader_ids = spec.reader_ids
    attempt, schema_id, unknown = header_stage(spec, [(i, encode(i, b"")) for i in reader_ids])
    if spec.plain_schema_id is not None:
        body, header = value, 0
    else:
        body, header = F.expr(f"substring(value, {HEADER_SIZE + 1})"), HEADER_SIZE
    stage = [
        schema_id.alias("_schema_id"),
        unknown.alias("_unknown"),
        from_avro(F.when(attempt, body), spec.reader_schema, {"mode": "PERMISSIVE"}).alias("_decoded"),
    ]
    decoded = F.col("_decoded")
    # PERMISSIVE gives a malformed body as a row of nulls; a record whose fields are all null is left to Python.
    present = _any([decoded.getField(f.name).isNotNull() for f in spec.payload_type.fields])
    check = helper.body_check(spark, spec.reader_schema, header)
    body_ok = present & F.coalesce(F.call_function(check, value), F.lit(False))
    debezium = debezium_jvm.convert(decoded, json.loads(spec.reader_schema))
    if debezium is not None:  # Debezium's semantic types as the Python path gives them, where the JVM can
        decoded, body_ok = debezium[0], body_ok & F.coalesce(debezium[1], F.lit(False))
    verified_if, columns = decoder_columns(spec, decoded, body_ok)  # from_avro's type: the table's, up to nulls
    return _Plan(stage, verified_if, columns)


def header_stage(spec: DecodeSpec, headers: list[tuple[int, bytes]]) -> tuple[Column, Column, Column]:
    """(whether the JVM tries a record, its schema id, whether that id is unknown), shared by the JVM decoders:
    a record is tried when it is within value.maxBytes and its value starts, byte for byte, with one of `headers`
    (the table's schema ids as the serializers frame them; the common case costs one comparison with a literal),
    or, for a format without a header (`spec.plain_schema_id`), whenever it is not a tombstone."""
    value = F.col("value")
    fits = F.length(value) <= spec.max_bytes
    if spec.plain_schema_id is not None:
        return value.isNotNull() & fits, F.lit(spec.plain_schema_id), F.lit(False)
    prefix = F.substring(value, 1, len(headers[0][1]))
    ours = [(i, prefix == F.lit(bytearray(h))) for i, h in headers]
    attempt = fits & _any([match for _, match in ours])
    header_ok = (F.length(value) >= HEADER_SIZE) & (F.substring(value, 1, 1) == F.lit(bytearray(b"\x00")))
    as_long = F.conv(F.hex(F.substring(value, 2, 4)), 16, 10).cast("long")
    other_id = F.when(header_ok & (as_long <= _MAX_INT), as_long.cast("int"))
    known = other_id.isin(sorted(spec.writer_schemas))
    unknown = F.when(attempt, F.lit(False)).otherwise(header_ok & fits & ~known)
    return attempt, _first_match(ours, otherwise=other_id), unknown


def decode_with_function(kafka_rows: DataFrame, spec: DecodeSpec, header: Callable[[int], bytes],
                         function: Callable[[SparkSession], str]) -> DataFrame:
    """Kafka rows -> decoder rows, for a format whose JVM path is a helper function that returns the row, or null
    for a record it does not vouch for (Protobuf's `ProtobufDecode`, JSON's `JsonDecode`): tried on the records
    whose value starts with `header(id)` of one of the table's schema ids (`header_stage`). The plan is built
    once per session and spec, as `_plan`'s."""
    def build() -> tuple[list[Column], Column, list[Column]]:
        reader_ids = spec.reader_ids
        attempt, schema_id, unknown = header_stage(spec, [(i, header(i)) for i in reader_ids])
        stage = [schema_id.alias("_schema_id"), unknown.alias("_unknown"),
                 F.when(attempt, F.call_function(function(kafka_rows.sparkSession), F.col("value"))).alias("_decoded")]
        decoded = F.col("_decoded")
        verified_if, columns = decoder_columns(spec, decoded, decoded.isNotNull())
        return stage, verified_if, columns

    key = ("function decode plan", id(spec))
    stage, verified, columns = session_cache.once(kafka_rows.sparkSession, key, lambda: (spec, build()))[1]
    return decoder_rows(kafka_rows, key, stage, verified, columns)


def decoder_columns(spec: DecodeSpec, decoded: Column, body_ok: Column) -> tuple[Column, list[Column]]:
    """What a JVM decoder's stage turns into (shared by the Avro and Protobuf JVM decoders): the condition a
    record is verified on (its body decoded, or a tombstone, and its key decoded), and the decoder's output
    columns (`DECODER_COLUMNS`) over `_verified`, `_schema_id` and `_unknown`."""
    value = F.col("value")
    key, key_ok = _key(spec)
    tombstone = value.isNull()
    verified = F.col("_verified")
    columns = {
        PAYLOAD: F.when(verified & ~tombstone, decoded),
        "_key": F.when(verified, key),
        "_schema_id": F.when(~tombstone, F.col("_schema_id")),
        "_tombstone": (verified & tombstone),
        "_error_class": F.when(verified, F.lit(None).cast("string"))
                         .when(F.col("_unknown"), F.lit(UnknownSchemaError.__name__)).otherwise(F.lit(UNVERIFIED)),
        "_error_message": F.lit(None).cast("string"),
        "_raw_value": F.when(~verified, value),
        "_value_bytes": F.length(value).cast("int"),
    }
    assert tuple(columns) == DECODER_COLUMNS
    return (tombstone | body_ok) & key_ok, [c.alias(name) for name, c in columns.items()]


def settle_in_python(fast: DataFrame, spec: DecodeSpec, source: T.StructType) -> tuple[DataFrame, DataFrame]:
    """(decoded rows, the Python part): verified rows as they are, the others decoded again by the Python decoder.
    The Python part is persisted (it is small, and read by every write); unpersist it when done."""
    kafka_columns = [F.col("_raw_value").alias("value") if f.name == "value" else F.col(f.name)
                     for f in source.fields]
    pending = fast.where(F.col("_error_class").isNotNull()).select(*kafka_columns)
    decoder: Any = batch_decoder(spec)
    python = pending.mapInArrow(decoder, spec.output_schema(source)).persist(StorageLevel.MEMORY_AND_DISK)
    return fast.where(F.col("_error_class").isNull()).unionByName(python), python


def _key(spec: DecodeSpec) -> tuple[Column, Column]:
    """(the key column as key.format says, whether it decoded)."""
    key = F.col("key")
    if spec.key_format == "none":
        return F.lit(None).cast("binary"), F.lit(True)
    if spec.key_format == "string":
        text = key.cast("string")
        return text, key.isNull() | F.is_valid_utf8(text)
    return key, F.lit(True)


def _first_match(cases: list[tuple[int, Column]], otherwise: Column) -> Column:
    result = otherwise
    for schema_id, match in reversed(cases):
        result = F.when(match, F.lit(schema_id)).otherwise(result)
    return result


def _any(parts: list[Column]) -> Column:
    return functools.reduce(operator.or_, parts, F.lit(False))


def _uuid_fields(schema: dict[str, Any]) -> list[str]:
    """Top-level fields of logical type uuid. SchemaError when a uuid sits deeper: the body check verifies every
    uuid, but fastavro's value for one in a multi-branch union is matched back to a branch by its Python type,
    and nested uuids have no test comparing the two paths yet, so such schemas are decoded in Python."""
    def is_uuid(t: Any) -> bool:
        return isinstance(t, dict) and t.get("logicalType") == "uuid" and t.get("type") == "string"

    top = [f["name"] for f in schema.get("fields", [])
           if is_uuid(f["type"]) or (isinstance(f["type"], list) and any(is_uuid(b) for b in f["type"])
                                     and len([b for b in f["type"] if b != "null"]) == 1)]
    if _count_uuids(schema) != len(top):
        raise SchemaError("a uuid inside a nested type or a multi-branch union is decoded in Python")
    return top


def _count_uuids(node: Any) -> int:
    if isinstance(node, dict):
        own = 1 if node.get("logicalType") == "uuid" and node.get("type") == "string" else 0
        return own + sum(_count_uuids(v) for v in node.values())
    if isinstance(node, list):
        return sum(_count_uuids(v) for v in node)
    return 0
