"""Decoding Kafka values on the executors, one Arrow batch at a time.

The Confluent wire format is a magic byte 0, a 4-byte big-endian schema id, then the Avro body written with that
schema. `BatchDecoder` is the function given to `mapInArrow`: it gets Arrow batches of Kafka rows and returns
Arrow batches of decoded rows. It carries its schemas with it (a small id -> schema map built on the driver), so
executors never call a registry. Rows that cannot be decoded come back with an error class and message, or stop
the batch with a DecodeError naming topic, partition and offset when the policy is `fail`.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from fastavro import parse_schema, schemaless_reader
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_type

from ingestion import avro
from ingestion.errors import DecodeError

MAGIC = 0
HEADER_SIZE = 5
_HEADER = struct.Struct(">bI")

PAYLOAD = "_payload"
# Every input column but `value` is passed through untouched (zero-copy); `value` itself comes back only for rows
# that failed (`_raw_value`), so the cached decoded batch does not hold every value twice.
DECODER_COLUMNS = ("_payload", "_key", "_schema_id", "_tombstone", "_error_class", "_error_message", "_raw_value",
                   "_value_bytes")


def encode(schema_id: int, body: bytes) -> bytes:
    """Frame an Avro body in the Confluent wire format."""
    return _HEADER.pack(MAGIC, schema_id) + body


def split(value: bytes) -> tuple[int, memoryview]:
    """(schema id, Avro body) of a wire-format value; WireFormatError when it has no valid header."""
    if len(value) < HEADER_SIZE:
        raise WireFormatError(f"value of {len(value)} bytes is shorter than the 5-byte header")
    magic, schema_id = _HEADER.unpack_from(value)
    if magic != MAGIC:
        raise WireFormatError(f"magic byte is {magic}, expected {MAGIC}")
    return schema_id, memoryview(value)[HEADER_SIZE:]


class WireFormatError(ValueError):
    """The value does not start with a Confluent wire-format header."""


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

    writer_schemas: dict[int, str]  # schema id -> schema JSON
    reader_schema: str  # the table's current schema JSON
    max_bytes: int
    fail_fast: bool
    key_format: str = "bytes"  # none | bytes | string | avro
    plain_schema_id: int | None = None  # set for value.format avro: bodies without a header, written with this id
    key_schemas: dict[int, str] | None = None  # key.format avro: key schema id -> JSON
    key_reader: str | None = None  # key.format avro: the key subject's newest version

    @property
    def key_type(self) -> T.DataType:
        if self.key_format == "string":
            return T.StringType()
        if self.key_format == "avro" and self.key_reader:
            return avro.spark_type(json.loads(self.key_reader))
        return T.BinaryType()
    @property
    def payload_type(self) -> T.StructType:
        return avro.spark_schema(json.loads(self.reader_schema))

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


class BatchDecoder:
    """`mapInArrow` function: Kafka rows in, decoded rows out, one Arrow batch at a time."""

    def __init__(self, spec: DecodeSpec) -> None:
        self.spec = spec
        self._ready = False

    def _prepare(self) -> None:
        # Parsed on the executor, once per task: parsed fastavro schemas are not worth pickling.
        reader_json = json.loads(self.spec.reader_schema)
        self._reader = parse_schema(reader_json)
        self._writers = {sid: parse_schema(json.loads(text)) for sid, text in self.spec.writer_schemas.items()}
        self._same = {sid for sid, text in self.spec.writer_schemas.items() if text == self.spec.reader_schema}
        self._convert = avro.converter(reader_json)
        self._payload_type = to_arrow_type(self.spec.payload_type)
        avro.check_bounded(reader_json)
        self._key_type = to_arrow_type(self.spec.key_type)
        if self.spec.key_format == "avro" and self.spec.key_reader:
            key_reader = json.loads(self.spec.key_reader)
            self._key_reader = parse_schema(key_reader)
            self._key_writers = {i: parse_schema(json.loads(t)) for i, t in (self.spec.key_schemas or {}).items()}
            self._key_convert = avro.converter(key_reader)
        self._ready = True

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if not self._ready:
            self._prepare()
        for batch in batches:
            yield self.decode_batch(batch)

    def decode_batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        values = batch.column("value").to_pylist()
        n = len(values)
        payloads: list[Any] = [None] * n
        schema_ids: list[int | None] = [None] * n
        tombstones = [False] * n
        error_classes: list[str | None] = [None] * n
        messages: list[str | None] = [None] * n
        decoded_keys = self.spec.key_format in ("string", "avro")
        keys: list[Any] = batch.column("key").to_pylist() if decoded_keys else []
        for i, value in enumerate(values):
            try:
                if decoded_keys and keys[i] is not None:
                    keys[i] = self.decode_key(keys[i])
                if value is None:
                    tombstones[i] = True
                    continue
                schema_ids[i], payloads[i] = self.decode_value(value, schema_ids, i)
            except Exception as exc:  # every failure becomes a quarantine reason or a DecodeError
                if self.spec.fail_fast:
                    raise DecodeError(f"cannot decode {_where(batch, i)}: {type(exc).__name__}: {exc}") from exc
                error_classes[i], messages[i] = type(exc).__name__, str(exc)[:1000]
                tombstones[i] = False
        payload = self._payload_array(batch, payloads, error_classes, messages)
        failed = pa.array([e is not None for e in error_classes], type=pa.bool_())
        if decoded_keys:
            key_column = pa.array([None if error_classes[i] else k for i, k in enumerate(keys)], type=self._key_type)
        elif self.spec.key_format == "none":
            key_column = pa.nulls(n, type=pa.binary())
        else:
            key_column = batch.column("key")
        passthrough = [name for name in batch.schema.names if name != "value"]
        columns = [
            payload,
            key_column,
            pa.array(schema_ids, type=pa.int32()),
            pa.array(tombstones, type=pa.bool_()),
            pa.array(error_classes, type=pa.string()),
            pa.array(messages, type=pa.string()),
            pc.if_else(failed, batch.column("value"), pa.scalar(None, pa.binary())),
            pc.binary_length(batch.column("value")).cast(pa.int32()),
            *(batch.column(name) for name in passthrough),
        ]
        return pa.RecordBatch.from_arrays(columns, names=[*DECODER_COLUMNS, *passthrough])

    def _payload_array(self, batch: pa.RecordBatch, payloads: list[Any], error_classes: list[str | None],
                       messages: list[str | None]) -> pa.Array:
        try:
            return pa.array(payloads, type=self._payload_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            pass
        # Rare: a decoded value Arrow cannot hold for the column type. Find the rows, fail or flag only them.
        for i, payload in enumerate(payloads):
            if payload is None:
                continue
            try:
                pa.array([payload], type=self._payload_type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
                if self.spec.fail_fast:
                    raise DecodeError(f"cannot decode {_where(batch, i)}: ArrowConversionError: {exc}") from exc
                payloads[i], error_classes[i], messages[i] = None, "ArrowConversionError", str(exc)[:1000]
        return pa.array(payloads, type=self._payload_type)

    def decode_value(self, value: bytes, schema_ids: list[int | None], i: int) -> tuple[int, Any]:
        if len(value) > self.spec.max_bytes:
            raise RecordTooLargeError(f"value of {len(value)} bytes exceeds value.maxBytes={self.spec.max_bytes}")
        if self.spec.plain_schema_id is not None:
            schema_id, body = self.spec.plain_schema_id, memoryview(value)
        else:
            schema_id, body = split(value)
        schema_ids[i] = schema_id  # kept for the quarantine row even when the body fails below
        writer = self._writers.get(schema_id)
        if writer is None:
            raise UnknownSchemaError(f"schema id {schema_id} is not a version of this pipeline's subject")
        stream = io.BytesIO(body)
        record = schemaless_reader(stream, writer, None if schema_id in self._same else self._reader)
        if stream.tell() != len(body):
            raise TrailingBytesError(f"{len(body) - stream.tell()} bytes left after the record "
                                     f"(schema id {schema_id})")
        return schema_id, self._convert(record) if self._convert else record


    def decode_key(self, key: bytes) -> Any:
        if self.spec.key_format == "string":
            return _utf8_key(key)
        try:
            schema_id, body = split(key)
            writer = self._key_writers.get(schema_id)
            if writer is None:
                raise UnknownSchemaError(f"key schema id {schema_id} is not a version of the key subject")
            stream = io.BytesIO(body)
            record = schemaless_reader(stream, writer, self._key_reader)
            if stream.tell() != len(body):
                raise TrailingBytesError(f"{len(body) - stream.tell()} bytes left after the key")
        except Exception as exc:  # every key failure is one error class, with the cause in the message
            raise KeyDecodeError(f"key: {type(exc).__name__}: {exc}") from exc
        return self._key_convert(record) if self._key_convert else record


def _utf8_key(key: bytes) -> str:
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise KeyDecodeError(f"key is not valid UTF-8 (key.format: string): {exc}") from None


def _where(batch: pa.RecordBatch, i: int) -> str:
    topic = batch.column("topic")[i].as_py()
    partition = batch.column("partition")[i].as_py()
    offset = batch.column("offset")[i].as_py()
    return f"record {topic}/{partition}@{offset}"
