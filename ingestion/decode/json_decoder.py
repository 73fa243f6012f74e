"""The decoder of JSON values: `jsonschema` (Confluent's framing), `json` (plain text, one schema file) and
`connect-json` (Kafka Connect's `{"schema", "payload"}` records), on the executors, one Arrow batch at a time,
with the same output rows and error columns as the Avro decoder (`python_decoder`).

Every body is parsed strictly (`json_types.parse`) and converted by its writer schema's compiled Node, which
raises an `InvalidJsonError` naming the JSON path for anything the schema rejects: nothing is coerced, nothing
turns into null. The row fills the table's columns by name (a property the writer's version lacks reads null).

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
from ingestion.schema import connect_types, json_schemas, json_types
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
        self._connect: dict[str, Any] = {}  # embedded schema text -> converter into the table's row
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
            return schema_id, self._connect_row(json_types.parse(body, parse_float=decimal.Decimal))
        convert = self._converters.get(schema_id)
        if convert is None:
            text = spec.writer_schemas.get(schema_id)
            if text is None:
                raise UnknownSchemaError(f"schema id {schema_id} is not a version of this pipeline's subject")
            convert = self._converters[schema_id] = json_types.converter(text)
        return schema_id, convert(json_types.parse(body))

    def _connect_row(self, record: Any) -> Any:
        if not isinstance(record, dict) or set(record) != {"schema", "payload"}:
            keys = sorted(record) if isinstance(record, dict) else json_types.show(record)
            raise MalformedJsonError(f"$: not a Kafka Connect record with an embedded schema "
                                     f"(expected the keys payload and schema, got {keys})")
        text = json.dumps(record["schema"], sort_keys=True)
        convert = self._connect.get(text)
        if convert is None:
            convert = self._connect[text] = self._connect_converter(text)
        return convert(record["payload"])

    def _connect_converter(self, text: str) -> Any:
        table = self.spec.payload_type
        try:
            node = connect_types.compile_schema(text)
        except json_types.UnsupportedSchemaError as exc:
            raise ConnectSchemaError(f"$.schema: {exc}") from None
        own = {f.name: f.dataType for f in node.spark.fields}  # type: ignore[attr-defined]
        for column in table.fields:
            if column.name in own and own[column.name] != column.dataType:
                raise ConnectSchemaError(f"$.payload.{column.name}: the record's schema makes it "
                                         f"{own[column.name].simpleString()}, the table's column is "
                                         f"{column.dataType.simpleString()}")
        return lambda payload: node.convert(payload, "$.payload")


def batch_decoder(spec: DecodeSpec) -> BatchDecoder:
    return JsonBatchDecoder(spec)
