"""The Python decoder of Protobuf values (and keys): the `protobuf` package (upb) on the executors, one Arrow
batch at a time, with the same output rows and error columns as the Avro decoder (`python_decoder`).

Each record's header names a schema id and, by its message indexes, a message of that version's file; the
message must be the table's (`spec.message_name`, by full name), then the body is parsed with a dynamic message
class of that version, and its fields fill the table's columns by name: a field the version lacks reads null, a
field the table lacks (in a version the table did not follow) is dropped, as are unknown fields, unless
`value.strict` makes a body with one an `UnknownFieldError`.
"""

from __future__ import annotations

from typing import Any

from ingestion.decode.protobuf_check import MalformedProtobufError, UnknownFieldError, fault, unknown_field
from ingestion.decode.protobuf_wire import read_indexes, split_indexes
from ingestion.decode.python_decoder import BatchDecoder
from ingestion.decode.spec import DecodeSpec, KeyDecodeError, RecordTooLargeError, UnknownSchemaError
from ingestion.decode.wire import split
from ingestion.schema import protobuf_schemas, protobuf_types


class UnknownMessageError(LookupError):
    """The message indexes name no message of the schema's file."""


class MessageTypeError(LookupError):
    """The message indexes name a message other than the table's (docs/protobuf.md#which-message)."""


class _Messages:
    """Parsers of one subject's versions: (schema id, indexes) -> (descriptor, message class, converter,
    whether every body is walked), built on first use on the executor."""

    def __init__(self, schemas: dict[int, str], message_name: str, what: str, pinned: bool = False,
                 strict: bool = False) -> None:
        self.schemas, self.message_name, self.what, self.strict = schemas, message_name, what, strict
        # why the table holds its message, as a MessageTypeError says it
        self.why = f" ({what.strip() or 'value'}.messageName)" if pinned else ""
        self._parsers: dict[tuple[int, tuple[int, ...]], tuple[Any, Any, Any, bool]] = {}

    def parse(self, value: bytes) -> tuple[int, Any]:
        schema_id, indexes, body = split_indexes(value)
        return schema_id, self.parse_body(schema_id, indexes, body)

    def parse_body(self, schema_id: int, indexes: tuple[int, ...], body: memoryview) -> Any:
        parser = self._parsers.get((schema_id, indexes))
        if parser is None:
            parser = self._parser(schema_id, indexes)
        descriptor, cls, convert, walk = parser
        data = bytes(body)
        try:
            message = cls.FromString(data)
        except Exception as exc:  # noqa: BLE001 - upb's DecodeError; the walk names the field and the fault
            raise MalformedProtobufError(fault(data, descriptor) or f"body: {exc}") from None
        if walk:
            found = fault(data, descriptor)
            if found:
                raise MalformedProtobufError(found)
        if self.strict:
            unknown = unknown_field(data, descriptor)
            if unknown:
                raise UnknownFieldError(unknown)
        try:
            return convert(message)
        except protobuf_types.InvalidValueError as exc:
            raise MalformedProtobufError(str(exc)) from None

    def _parser(self, schema_id: int, indexes: tuple[int, ...]) -> tuple[Any, Any, Any, bool]:
        from google.protobuf import message_factory

        text = self.schemas.get(schema_id)
        if text is None:
            raise UnknownSchemaError(f"{self.what}schema id {schema_id} is not a version of this pipeline's subject")
        descriptor = protobuf_schemas.by_indexes(text, indexes)
        if descriptor is None:
            raise UnknownMessageError(f"{self.what}message indexes {list(indexes)} name no message of schema id "
                                      f"{schema_id} (top-level: {', '.join(protobuf_schemas.message_names(text))})")
        if descriptor.full_name != self.message_name:
            raise MessageTypeError(f"{self.what}message indexes {list(indexes)} name {descriptor.full_name}, the "
                                   f"table holds {self.message_name}{self.why}")
        parser = (descriptor, message_factory.GetMessageClass(descriptor), protobuf_types.converter(descriptor),
                  _has_proto2_strings(descriptor))
        self._parsers[(schema_id, indexes)] = parser
        return parser


def _has_proto2_strings(descriptor: Any, seen: frozenset[str] = frozenset()) -> bool:
    """Whether the message reaches a `string` field upb does not check for UTF-8 (proto2's)."""
    if descriptor.full_name in seen:
        return False
    seen = seen | {descriptor.full_name}
    for field in descriptor.fields:
        if field.type == protobuf_types.STRING and _syntax(descriptor.file) == "proto2":
            return True
        if field.message_type is not None and _has_proto2_strings(field.message_type, seen):
            return True
    return False


def _syntax(file: Any) -> str:
    """proto2, proto3 or editions (the descriptor's `syntax` attribute is gone in protobuf 7)."""
    from google.protobuf import descriptor_pb2

    return descriptor_pb2.FileDescriptorProto.FromString(file.serialized_pb).syntax or "proto2"


class ProtobufBatchDecoder(BatchDecoder):
    """`mapInArrow` function for `value.format: protobuf`: Kafka rows in, decoded rows out."""

    decoded_keys = ("string", "protobuf")

    def _prepare(self) -> None:
        from ingestion.runtime.arrow_types import to_arrow_type

        spec = self.spec
        self._values = _Messages(spec.writer_schemas, spec.message_name, "", spec.message_pinned, spec.strict)
        self._payload_type = to_arrow_type(spec.payload_type)
        self._key_type = to_arrow_type(spec.key_type)
        if spec.key_format == "protobuf":
            self._keys = _Messages(spec.key_schemas or {}, spec.key_message_name, "key ")
        elif spec.key_format == "avro":
            raise NotImplementedError("key.format avro with value.format protobuf")  # refused by the config
        self._ready = True

    def decode_value(self, value: bytes, schema_ids: list[int | None], i: int) -> tuple[int, Any]:
        if len(value) > self.spec.max_bytes:
            raise RecordTooLargeError(f"value of {len(value)} bytes exceeds value.maxBytes={self.spec.max_bytes}")
        schema_id, rest = split(value)
        schema_ids[i] = schema_id  # kept for the quarantine row even when the body fails below
        indexes, body = read_indexes(rest)
        return schema_id, self._values.parse_body(schema_id, indexes, body)

    def decode_key(self, key: bytes) -> Any:
        if self.spec.key_format != "protobuf":
            return super().decode_key(key)
        try:
            return self._keys.parse(key)[1]
        except Exception as exc:  # every key failure is one error class, with the cause in the message
            raise KeyDecodeError(f"key: {type(exc).__name__}: {exc}") from exc


def batch_decoder(spec: DecodeSpec) -> BatchDecoder:
    return ProtobufBatchDecoder(spec)
