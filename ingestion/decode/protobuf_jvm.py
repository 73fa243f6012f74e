"""Decoding Protobuf values in the JVM (the helper's `ProtobufDecode`, protobuf-java's DynamicMessage), for the
records it can vouch for; the Python decoder (`protobuf_decoder`) settles the rest, as for Avro (`jvm_decoder`).

A record is decoded in the JVM when its header is, byte for byte, the table's schema id followed by the table's
message indexes as Confluent's serializers write them, and it is within `value.maxBytes`. The Java function walks
the body with the same strict check as Python (`protobuf_check`), parses it and builds the row with the same
rules as `protobuf_types.converter`; it returns null for anything it cannot vouch for (with `value.strict`, every
body with an unknown field), and such records, like every other header (older versions, other messages, unusual
index encodings, bad framing), go to Python, the authority on what is wrong with a record.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession

from ingestion.decode import jvm_decoder
from ingestion.decode.protobuf_wire import index_bytes
from ingestion.decode.spec import DecodeSpec
from ingestion.decode.wire import encode
from ingestion.runtime import helper
from ingestion.schema import protobuf_schemas

# Well-known types the Java function leaves to Python: their JSON text would have to match Python's json.dumps
# (number formatting) character for character.
_JSON_TYPES = ("google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue")


def unusable(spark: SparkSession, spec: DecodeSpec) -> str | None:
    """Why the JVM cannot decode this pipeline's Protobuf records, or None when it can."""
    if spec.key_format == "protobuf":
        return "key.format protobuf is decoded in Python"
    message = protobuf_schemas.find_message(spec.reader_schema, spec.message_name)
    json_field = _json_field(message, frozenset())
    if json_field:
        return f"field {json_field} is a Struct, Value or ListValue (JSON text): decoded in Python"
    try:
        _udf(spark, spec)
        helper.partition_summary(spark)
    except Exception as exc:  # noqa: BLE001 - py4j reports a missing class or a descriptor set Java refuses as it can
        return (f"the project's JVM helper ({helper.PROTOBUF_DECODE_CLASS}) is not usable; is the helper jar "
                f"(`ingest jars`, with protobuf-java) in spark.jars? {str(exc).strip().splitlines()[-1][:300]}")
    return None


def _json_field(message: Any, seen: frozenset[str]) -> str | None:
    if message.full_name in seen:
        return None
    for field in message.fields:
        if field.message_type is None:
            continue
        if field.message_type.full_name in _JSON_TYPES:
            return field.name
        inner = _json_field(field.message_type, seen | {message.full_name})
        if inner:
            return f"{field.name}.{inner}"
    return None


def _header(spec: DecodeSpec, schema_id: int) -> bytes:
    message = protobuf_schemas.find_message(spec.reader_schema, spec.message_name)
    return encode(schema_id, index_bytes(protobuf_schemas.indexes_of(message)))


def _udf(spark: SparkSession, spec: DecodeSpec) -> str:
    fds, _ = protobuf_schemas.parse_document(spec.reader_schema)
    return helper.protobuf_decoder(spark, fds, spec.message_name, len(_header(spec, 0)), spec.payload_type,
                                   spec.strict)


def decode_in_jvm(kafka_rows: DataFrame, spec: DecodeSpec) -> DataFrame:
    """Kafka rows -> decoder rows, as `jvm_decoder.decode_in_jvm` gives them (UNVERIFIED rows to settle)."""
    return jvm_decoder.decode_with_function(kafka_rows, spec, lambda i: _header(spec, i),
                                            lambda spark: _udf(spark, spec))
