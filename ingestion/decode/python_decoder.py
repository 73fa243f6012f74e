"""The Python decoder: fastavro on the executors, one Arrow batch at a time.

`BatchDecoder` is the function given to `mapInArrow`: it gets Arrow batches of Kafka rows and returns Arrow batches
of decoded rows (`spec.DECODER_COLUMNS`). It carries its schemas with it (a small id -> schema map built on the
driver), so executors never call a registry. Rows that cannot be decoded come back with an error class and message,
or stop the batch with a DecodeError naming topic, partition and offset when the policy is `fail`.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from fastavro import parse_schema, schemaless_reader
from pyspark.sql import DataFrame

from ingestion.columns import METADATA_COLUMNS
from ingestion.decode import wire
from ingestion.decode.spec import (
    DECODER_COLUMNS,
    DecodeSpec,
    KeyDecodeError,
    RecordTooLargeError,
    TrailingBytesError,
    UnknownSchemaError,
    format_module,
)
from ingestion.decode.validate import body_reader, body_validator
from ingestion.decode.wire import split
from ingestion.errors import DecodeError, SchemaError
from ingestion.runtime.arrow_types import to_arrow_type
from ingestion.schema import avro_types


def decode_in_python(kafka_rows: DataFrame, spec: DecodeSpec) -> DataFrame:
    """Kafka source rows -> decoder rows (payload struct, schema id, error columns, Kafka columns), every record
    decoded by `BatchDecoder` in the Python workers."""
    clash = set(spec.payload_type.fieldNames()) & set(METADATA_COLUMNS)
    if clash:
        raise SchemaError(f"payload fields {sorted(clash)} clash with bronze metadata columns")
    decoder: Any = batch_decoder(spec)  # an Iterator -> Iterator callable, as mapInArrow wants
    return kafka_rows.mapInArrow(decoder, spec.output_schema(kafka_rows.schema))


def batch_decoder(spec: DecodeSpec) -> BatchDecoder:
    """The `mapInArrow` function of a spec's value format: this module's for Avro, the format module's otherwise
    (`spec.FORMATS`: a format is a module of its own; this is where they meet)."""
    module = format_module(spec, "python")  # it builds on BatchDecoder
    return module.batch_decoder(spec) if module else BatchDecoder(spec)


class BatchDecoder:
    """`mapInArrow` function: Kafka rows in, decoded rows out, one Arrow batch at a time."""

    decoded_keys: tuple[str, ...] = ("string", "avro")  # the key formats `decode_key` turns into values
    # Avro's one-pass readers by schema id, read inline by `decode_batch` (set by `_prepare`); none for the formats
    # whose `decode_value` is their own.
    _reads: Mapping[int, Callable[[bytes, int], tuple[Any, ...]]] = MappingProxyType({})

    def __init__(self, spec: DecodeSpec) -> None:
        self.spec = spec
        self._ready = False

    def _prepare(self) -> None:
        # Parsed on the executor, once per task: parsed fastavro schemas are not worth pickling.
        reader_json = json.loads(self.spec.reader_schema)
        self._reader = parse_schema(reader_json)
        self._writers = {sid: parse_schema(json.loads(text)) for sid, text in self.spec.writer_schemas.items()}
        # fastavro decodes some bodies the Avro specification rejects (negative enum or union indexes, booleans
        # of 2, ...): every body is checked against its writer schema first (see validate.py).
        self._checks = {sid: body_validator(json.loads(text)) for sid, text in self.spec.writer_schemas.items()}
        self._same = set(self.spec.reader_ids)
        # A body written with the reader schema itself is checked and read in one generated pass, its record a
        # tuple of the payload's fields (validate_fast.reader); a fault there, or another writer schema, takes the
        # check and fastavro below.
        fast = body_reader(reader_json)
        self._reads = {sid: fast for sid in self._same} if fast is not None else {}
        self._convert = avro_types.converter(reader_json)
        self._payload_type = to_arrow_type(self.spec.payload_type)
        avro_types.check_bounded(reader_json)
        self._key_type = to_arrow_type(self.spec.key_type)
        if self.spec.key_format == "avro" and self.spec.key_reader:
            key_reader = json.loads(self.spec.key_reader)
            self._key_reader = parse_schema(key_reader)
            self._key_writers = {i: parse_schema(json.loads(t)) for i, t in (self.spec.key_schemas or {}).items()}
            self._key_checks = {i: body_validator(json.loads(t)) for i, t in (self.spec.key_schemas or {}).items()}
            self._key_convert = avro_types.converter(key_reader)
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
        # String keys checked as UTF-8 in one cast; per record (naming the key that is not) only when one is not.
        utf8_keys = _utf8_keys(batch.column("key")) if self.spec.key_format == "string" else None
        decoded_keys = self.spec.key_format in self.decoded_keys and utf8_keys is None
        keys: list[Any] = batch.column("key").to_pylist() if decoded_keys else []
        # The common record, read inline: Confluent-framed, within value.maxBytes, of a schema id with a one-pass
        # reader that reads it (`decode_value` is that, and every other case, per call).
        reads = self._reads if self.spec.plain_schema_id is None else {}
        most, header = max(self.spec.max_bytes, wire.HEADER_SIZE), wire.HEADER_SIZE
        read_inline = 0
        for i, value in enumerate(values):
            try:
                if decoded_keys and keys[i] is not None:
                    keys[i] = self.decode_key(keys[i])
                if value is None:
                    tombstones[i] = True
                    continue
                if reads and header <= len(value) <= most and value[0] == wire.MAGIC:
                    read = reads.get(schema_id := int.from_bytes(value[1:header], "big"))
                    if read is not None:
                        try:
                            payloads[i], schema_ids[i] = read(value, header), schema_id
                            read_inline += 1
                            continue
                        except Exception:  # noqa: BLE001 - not sure: decode_value checks it and names the fault
                            pass
                schema_ids[i], payloads[i] = self.decode_value(value, schema_ids, i)
            except Exception as exc:  # every failure becomes a quarantine reason or a DecodeError
                if self.spec.fail_fast:
                    raise DecodeError(f"cannot decode {_where(batch, i)}: {type(exc).__name__}: {exc}") from exc
                error_classes[i], messages[i] = type(exc).__name__, (str(exc) or repr(exc))[:1000]
                tombstones[i] = False
        payload = self._payload_array(batch, payloads, error_classes, messages, all_tuples=read_inline == n)
        failed = pa.array([e is not None for e in error_classes], type=pa.bool_())
        if utf8_keys is not None:
            key_column = pc.if_else(failed, pa.scalar(None, self._key_type), utf8_keys.cast(self._key_type))
        elif decoded_keys:
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
                       messages: list[str | None], *, all_tuples: bool = False) -> pa.Array:
        try:
            if all_tuples or any(isinstance(p, tuple) for p in payloads):
                return _struct_of_tuples(payloads, self._payload_type, all_tuples=all_tuples)
            return pa.array(payloads, type=self._payload_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            pass
        names = [f.name for f in self._payload_type]
        payloads[:] = [dict(zip(names, p, strict=True)) if isinstance(p, tuple) else p for p in payloads]
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
            schema_id, start = self.spec.plain_schema_id, 0
        else:
            schema_id, start = wire.schema_id(value), wire.HEADER_SIZE
        schema_ids[i] = schema_id  # kept for the quarantine row even when the body fails below
        read = self._reads.get(schema_id)
        if read is not None:
            try:
                return schema_id, read(value, start)
            except Exception:  # noqa: BLE001 - not sure: the check below names the fault, or fastavro reads it
                pass
        record = self.read_record(schema_id, memoryview(value)[start:])
        return schema_id, self._convert(record) if self._convert else record

    def read_record(self, schema_id: int, body: memoryview) -> Any:
        """The record of a body written with `schema_id`, as fastavro gives it (resolved to the reader schema),
        after the strict check of the body against its writer schema."""
        check = self._checks.get(schema_id)
        if check is None:
            raise UnknownSchemaError(f"schema id {schema_id} is not a version of this pipeline's subject")
        data = bytes(body)
        end = check(data)
        if end != len(data):
            raise TrailingBytesError(f"{len(data) - end} bytes left after the record (schema id {schema_id})")
        return schemaless_reader(io.BytesIO(data), self._writers[schema_id],
                                 None if schema_id in self._same else self._reader)

    def decode_key(self, key: bytes) -> Any:
        if self.spec.key_format == "string":
            return _utf8_key(key)
        try:
            schema_id, body = split(key)
            writer = self._key_writers.get(schema_id)
            if writer is None:
                raise UnknownSchemaError(f"key schema id {schema_id} is not a version of the key subject")
            data = bytes(body)
            end = self._key_checks[schema_id](data)
            if end != len(data):
                raise TrailingBytesError(f"{len(data) - end} bytes left after the key")
            record = schemaless_reader(io.BytesIO(data), writer, self._key_reader)
        except Exception as exc:  # every key failure is one error class, with the cause in the message
            raise KeyDecodeError(f"key: {type(exc).__name__}: {exc}") from exc
        return self._key_convert(record) if self._key_convert else record


def _struct_of_tuples(payloads: list[Any], kind: pa.StructType, *, all_tuples: bool = False) -> pa.Array:
    """The payload column of records read as tuples of their fields' values (`validate_fast.reader`), as dicts
    (fastavro's, another writer schema) or None: one Arrow array per field, not a dict per row (`all_tuples`:
    every record was read as a tuple)."""
    names = [f.name for f in kind]
    empty = (None,) * len(names)
    rows = payloads if all_tuples else [
        p if isinstance(p, tuple) else empty if p is None else tuple(p.get(n) for n in names) for p in payloads]
    columns = zip(*rows, strict=True) if rows else [() for _ in names]
    children = [pa.array(values, type=field.type) for values, field in zip(columns, kind, strict=True)]
    mask = None if all_tuples else pa.array([p is None for p in payloads], type=pa.bool_())
    return pa.StructArray.from_arrays(children, fields=list(kind), mask=mask)


def _utf8_keys(keys: pa.Array) -> pa.Array | None:
    """The keys as strings when every one is valid UTF-8 (Arrow's cast checks them), else None."""
    try:
        return keys.cast(pa.string())
    except pa.ArrowInvalid:
        return None


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
