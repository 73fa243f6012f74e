"""The decoder of JSON values: `jsonschema` (Confluent's framing), `json` (plain text, one schema file) and
`connect-json` (Kafka Connect's `{"schema", "payload"}` records), on the executors, one Arrow batch at a time,
with the same output rows and error columns as the Avro decoder (`python_decoder`).

Every body is parsed strictly (`json_types.parse`) and converted by its writer schema's compiled Node, which
raises an `InvalidJsonError` naming the JSON path for anything the schema rejects: nothing is coerced, nothing
turns into null. The row fills the table's columns by name (a property the writer's version lacks reads null).

A `connect-json` record's embedded schema is its writer schema, with its own id (`connect_types.schema_id`, the
row's `_schema_id`): a record whose schema fits the table's columns (`struct_evolution.fit`: a column it lacks,
nested ones too, reads null) is a row; one whose schema adds a field or needs a column widened is an
UnknownSchemaError until the driver has learnt its schema and evolved the table (`resolver`); one whose schema
changes a column's type is a ConnectSchemaError naming the field.

The JVM path (`json_jvm`, the helper's `JsonDecode`) decodes what it can vouch for with the same rules and leaves
the rest to this decoder.
"""

from __future__ import annotations

import decimal
import json
from typing import Any

from ingestion.decode.python_decoder import BatchDecoder
from ingestion.decode.spec import DecodeSpec, RecordTooLargeError, UnknownSchemaError
from ingestion.decode.wire import split
from ingestion.schema import connect_types, json_schemas, json_types, struct_evolution
from ingestion.schema.json_types import MalformedJsonError


class ConnectSchemaError(ValueError):
    """A Kafka Connect record whose embedded schema cannot be a row of the table (a construct refused, or a
    field whose type differs from the table's column)."""


class JsonBatchDecoder(BatchDecoder):
    """`mapInArrow` function for the JSON formats: Kafka rows in, decoded rows out."""

    decoded_keys: tuple[str, ...] = ("string",)

    def _prepare(self) -> None:
        from ingestion.runtime.arrow_types import to_arrow_type

        spec = self.spec
        self._payload_type = to_arrow_type(spec.payload_type)
        self._key_type = to_arrow_type(spec.key_type)
        self._converters: dict[int, Any] = {}
        self._connect: dict[str, Any] = {}  # embedded schema text -> (its id, converter into the table's row)
        self._connect_raw: dict[bytes, tuple[Any, Any]] = {}  # a record's schema bytes -> (the schema, the above)
        self._ready = True

    def decode_value(self, value: bytes, schema_ids: list[int | None], i: int) -> tuple[int, Any]:
        spec = self.spec
        if len(value) > spec.max_bytes:
            raise RecordTooLargeError(f"value of {len(value)} bytes exceeds value.maxBytes={spec.max_bytes}")
        if spec.value_format == "jsonschema":
            schema_id, body = split(value)
        else:
            schema_id, body = json_schemas.FILE_SCHEMA_ID, memoryview(value)
        schema_ids[i] = schema_id
        if spec.value_format == "connect-json":
            return self._connect_row(json_types.parse(body, parse_float=decimal.Decimal), schema_ids, i, value)
        convert = self._converters.get(schema_id)
        if convert is None:
            text = spec.writer_schemas.get(schema_id)
            if text is None:
                raise UnknownSchemaError(f"schema id {schema_id} is not a version of this pipeline's subject")
            convert = self._converters[schema_id] = json_types.converter(text)
        return schema_id, convert(json_types.parse(body))

    def _connect_row(self, record: Any, schema_ids: list[int | None], i: int, value: bytes) -> tuple[int, Any]:
        if not isinstance(record, dict) or set(record) != {"schema", "payload"}:
            keys = sorted(record) if isinstance(record, dict) else json_types.show(record)
            raise MalformedJsonError(f"$: not a Kafka Connect record with an embedded schema "
                                     f"(expected the keys payload and schema, got {keys})")
        # JsonConverter writes the schema first: its text is the key of the last schema seen with it, confirmed by
        # comparing the parsed schemas (C code), which costs far less than writing the schema's sorted JSON again.
        end = value.find(b',"payload":') if value.startswith(b'{"schema":') else -1
        raw = value[10:end] if end > 0 else None
        seen = self._connect_raw.get(raw) if raw is not None else None
        if seen is not None and seen[0] == record["schema"]:
            found = seen[1]
        else:
            text = json.dumps(record["schema"], sort_keys=True)
            found = self._connect.get(text)
            if found is None:
                found = self._connect[text] = self._connect_converter(text)
            if raw is not None and len(self._connect_raw) < 1024:
                self._connect_raw[raw] = (record["schema"], found)
        schema_id, convert = found
        schema_ids[i] = schema_id  # kept for the quarantine row: the driver learns a new schema by it
        return schema_id, convert(record["payload"])

    def _connect_converter(self, text: str) -> tuple[int, Any]:
        """The id of an embedded schema and the function from a payload to the table's row (or raising why not)."""
        schema_id = connect_types.schema_id(text)
        try:
            node = connect_types.compile_schema(text)
        except json_types.UnsupportedSchemaError as exc:
            return schema_id, _raising(ConnectSchemaError(f"$.schema: {exc}"))
        found = struct_evolution.fit(node.spark, self.spec.payload_type, "$.payload")
        if found.conflict:
            return schema_id, _raising(ConnectSchemaError(found.conflict))
        if found.new and schema_id in self.spec.writer_schemas:  # learnt, and the table did not take it
            return schema_id, _raising(ConnectSchemaError(f"{found.new}; the table did not take this schema "
                                                          "(sink.typeWidening is off)"))
        if found.new:
            return schema_id, _raising(UnknownSchemaError(f"schema id {schema_id}: a schema the table has not "
                                                          f"taken yet ({found.new})"))
        return schema_id, lambda payload: node.convert(payload, "$.payload")


def _raising(error: Exception) -> Any:
    def convert(payload: Any) -> Any:
        raise type(error)(*error.args)  # a new one each time: a raised exception keeps its traceback
    return convert


def batch_decoder(spec: DecodeSpec) -> BatchDecoder:
    return JsonBatchDecoder(spec)
