"""What an executor needs to decode a batch (`DecodeSpec`), the decoder's output columns and its error classes.

Both decode paths (the Python decoder and Spark's from_avro, see `python_decoder` and `jvm_decoder`) produce rows
of `DECODER_COLUMNS`; a row that failed carries the name of one of the error classes below in `_error_class`.
"""

from __future__ import annotations

import functools
import json
import typing
from dataclasses import dataclass

from pyspark.sql import types as T

from ingestion.decode.wire import WireFormatError
from ingestion.errors import SchemaError
from ingestion.schema import avro_types, connect_types, json_types, protobuf_schemas, protobuf_types

PAYLOAD = "_payload"
# Every input column but `value` is passed through untouched (zero-copy); `value` itself comes back only for rows
# that failed (`_raw_value`), so the cached decoded batch does not hold every value twice.
DECODER_COLUMNS = ("_payload", "_key", "_schema_id", "_tombstone", "_error_class", "_error_message", "_raw_value",
                   "_value_bytes")


class UnknownSchemaError(LookupError):
    """The header names a schema id this pipeline does not know."""


class TrailingBytesError(ValueError):
    """The Avro body has bytes left after the record: it was not written with the schema its header names."""


class RecordTooLargeError(ValueError):
    """The value is larger than the pipeline's `value.maxBytes`."""


class KeyDecodeError(ValueError):
    """The key cannot be decoded as `key.format` says (not UTF-8 for `string`, not Avro for `avro`)."""


@dataclass(frozen=True)
class DecodeSpec:
    """What an executor needs to decode a batch; built on the driver, pickled with the task."""

    writer_schemas: dict[int, str]  # schema id -> schema JSON (Avro) or document (Protobuf, protobuf_schemas)
    reader_schema: str  # the table's current schema JSON
    max_bytes: int
    fail_fast: bool
    key_format: str = "bytes"  # none | bytes | string | avro | protobuf
    plain_schema_id: int | None = None  # set for value.format avro: bodies without a header, written with this id
    key_schemas: dict[int, str] | None = None  # key.format avro or protobuf: key schema id -> schema
    key_reader: str | None = None  # key.format avro or protobuf: the key subject's newest version
    value_format: str = "confluent"  # confluent | avro | protobuf | jsonschema | json | connect-json
    message_name: str = ""  # value.format protobuf: the full name of the message the table holds
    key_message_name: str = ""  # key.format protobuf: the key's message
    message_pinned: bool = False  # value.format protobuf: `message_name` is value.messageName's
    strict: bool = False  # value.format protobuf: unknown fields are UnknownFieldError (value.strict)

    @functools.cached_property
    def reader_ids(self) -> tuple[int, ...]:
        """The writer schema ids whose schema is the reader's, compared by parsed content (`same_schema`)."""
        return tuple(sorted(i for i, text in self.writer_schemas.items() if same_schema(text, self.reader_schema)))

    @property
    def key_type(self) -> T.DataType:
        if self.key_format == "string":
            return T.StringType()
        if self.key_format == "avro" and self.key_reader:
            return avro_types.spark_type(json.loads(self.key_reader))
        if self.key_format == "protobuf" and self.key_reader:
            return protobuf_struct(self.key_reader, self.key_message_name)
        return T.BinaryType()

    @property
    def payload_type(self) -> T.StructType:
        return payload_struct(self.value_format, self.reader_schema, self.message_name)

    def output_schema(self, source: T.StructType) -> T.StructType:
        """The Spark schema of the decoder's output rows, given the Kafka source's schema."""
        return T.StructType([
            T.StructField(PAYLOAD, self.payload_type, True),
            T.StructField("_key", self.key_type, True),
            T.StructField("_schema_id", T.IntegerType(), True),
            T.StructField("_tombstone", T.BooleanType(), False),
            T.StructField("_error_class", T.StringType(), True),
            T.StructField("_error_message", T.StringType(), True),
            T.StructField("_raw_value", T.BinaryType(), True),
            T.StructField("_value_bytes", T.IntegerType(), True),
            *(field for field in source.fields if field.name != "value"),
        ])


def same_schema(a: str, b: str) -> bool:
    """Whether two schema texts hold the same schema. Every schema text here is JSON (Avro's, and the documents of
    Protobuf, JSON Schema and Kafka Connect schemas), so they are compared parsed: a file's indentation, layout or
    key order never makes two equal schemas differ."""
    if a == b:
        return True
    try:
        return bool(_parsed(a) == _parsed(b))
    except ValueError:
        return False


@functools.lru_cache(maxsize=256)
def _parsed(text: str) -> typing.Any:
    return json.loads(text)


def payload_struct(value_format: str, text: str, message_name: str = "") -> T.StructType:
    """The table's payload columns for a schema text of a value format."""
    return FORMATS.get(value_format, FORMATS["confluent"]).payload(text, message_name)


@functools.lru_cache(maxsize=32)
def protobuf_struct(document: str, message_name: str) -> T.StructType:
    """The Spark struct of a message of a Protobuf schema document (cached: a spec asks for it per batch)."""
    message = protobuf_schemas.find_message(document, message_name)
    if message is None:
        raise SchemaError(f"message {message_name!r} is not in the schema (it has "
                          f"{', '.join(protobuf_schemas.message_names(document))})")
    return protobuf_types.spark_schema(message)


@dataclass(frozen=True)
class Format:
    """What differs between value formats: the payload columns of a schema text; the module of its Python decoder
    (`batch_decoder(spec)`) and of its JVM path (`unusable(spark, spec)`, `decode_in_jvm(rows, spec)`). None:
    `python_decoder` and `jvm_decoder` themselves (Avro)."""

    payload: typing.Callable[[str, str], T.StructType]
    python: str | None = None
    jvm: str | None = None
    jvm_name: str = "Spark's from_avro"  # what decodes on the JVM path, as logs name it


def _avro_struct(text: str, message_name: str) -> T.StructType:
    return avro_types.spark_schema(json.loads(text))


def _json_struct(text: str, message_name: str) -> T.StructType:
    if connect_types.is_document(text):
        return connect_types.spark_schema(text)
    return json_types.spark_schema(text)


_JSON = Format(_json_struct, "ingestion.decode.json_decoder", "ingestion.decode.json_jvm", "the helper's JsonDecode")
FORMATS: dict[str, Format] = {
    "confluent": Format(_avro_struct), "avro": Format(_avro_struct),
    "protobuf": Format(protobuf_struct, "ingestion.decode.protobuf_decoder", "ingestion.decode.protobuf_jvm",
                       "the helper's ProtobufDecode"),
    "jsonschema": _JSON, "json": _JSON, "connect-json": _JSON,
}


def spec_format(spec: DecodeSpec) -> Format:
    """The `Format` of a spec's value format."""
    return FORMATS.get(spec.value_format, FORMATS["confluent"])


def format_module(spec: DecodeSpec, side: typing.Literal["python", "jvm"]) -> typing.Any:
    """The module of a spec's value format for one decode path (see `Format`), or None for Avro."""
    import importlib

    name = getattr(spec_format(spec), side)
    return importlib.import_module(name) if name else None


# Internal error class of rows the JVM did not verify; the Python decoder replaces it before anything is written.
UNVERIFIED = "Unverified"

__all__ = ["DECODER_COLUMNS", "PAYLOAD", "UNVERIFIED", "DecodeSpec", "KeyDecodeError", "RecordTooLargeError",
           "TrailingBytesError", "UnknownSchemaError", "WireFormatError"]
