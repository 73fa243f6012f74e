"""Protobuf messages as Spark types, and parsed messages as values Arrow can hold for those types.

Columns are the message's fields by name, in declaration order. Every column is nullable. A field with presence
(a message, a oneof member, proto3 `optional`, any proto2 singular field) is null when unset; a proto3 scalar
without presence reads its default (0, "", false), as Protobuf itself reads it. docs/protobuf.md has the table.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from pyspark.sql import types as T

from ingestion.errors import SchemaError

Converter = Callable[[Any], Any]

# FieldDescriptor.TYPE_* numbers (descriptor.proto), kept here so the mapping reads as a table.
DOUBLE, FLOAT, INT64, UINT64, INT32, FIXED64, FIXED32, BOOL, STRING, GROUP, MESSAGE, BYTES, UINT32, ENUM, \
    SFIXED32, SFIXED64, SINT32, SINT64 = range(1, 19)

_TYPE_NAMES = ("double", "float", "int64", "uint64", "int32", "fixed64", "fixed32", "bool", "string", "group",
               "message", "bytes", "uint32", "enum", "sfixed32", "sfixed64", "sint32", "sint64")


def type_name(field: Any) -> str:
    """A field's type as a .proto file names it (a message or an enum by its full name)."""
    if field.type in (MESSAGE, GROUP):
        return str(field.message_type.full_name)
    if field.type == ENUM:
        return str(field.enum_type.full_name)
    return _TYPE_NAMES[field.type - 1]


UINT64_TYPE = T.DecimalType(20, 0)  # exact: 2**64 - 1 has 20 digits; a long would turn the top half negative
_SCALARS: dict[int, T.DataType] = {
    DOUBLE: T.DoubleType(), FLOAT: T.FloatType(), INT64: T.LongType(), SINT64: T.LongType(), SFIXED64: T.LongType(),
    UINT64: UINT64_TYPE, FIXED64: UINT64_TYPE, INT32: T.IntegerType(), SINT32: T.IntegerType(),
    SFIXED32: T.IntegerType(), UINT32: T.LongType(), FIXED32: T.LongType(), BOOL: T.BooleanType(),
    STRING: T.StringType(), BYTES: T.BinaryType(), ENUM: T.StringType(),
}
_WRAPPERS = {f"google.protobuf.{name}Value": kind for name, kind in (
    ("Double", DOUBLE), ("Float", FLOAT), ("Int64", INT64), ("UInt64", UINT64), ("Int32", INT32),
    ("UInt32", UINT32), ("Bool", BOOL), ("String", STRING), ("Bytes", BYTES))}
TIMESTAMP = "google.protobuf.Timestamp"
DURATION = "google.protobuf.Duration"
_JSON_TYPES = ("google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue")
ANY = "google.protobuf.Any"
DURATION_TYPE = T.StructType([T.StructField("seconds", T.LongType()), T.StructField("nanos", T.IntegerType())])
ANY_TYPE = T.StructType([T.StructField("type_url", T.StringType()), T.StructField("value", T.BinaryType())])


class InvalidValueError(ValueError):
    """A value Protobuf's parser takes but its type's definition rules out (a Timestamp outside years 1 to 9999,
    nanoseconds outside their range): `path` is the field path, from the top-level message."""

    def __init__(self, fault: str) -> None:
        super().__init__(fault)
        self.fault = fault
        self.path: list[str] = []

    def __str__(self) -> str:
        return f"{'.'.join(self.path) or 'body'}: {self.fault}"


def spark_schema(message: Any) -> T.StructType:
    """The Spark struct of a message descriptor. SchemaError for a recursive message, naming it and the field."""
    return _struct(message, (), "")


def _struct(message: Any, open_: tuple[str, ...], path: str) -> T.StructType:
    if message.full_name in open_:
        raise SchemaError(f"message {message.full_name} is recursive at field {path.rstrip('.')!r} "
                          f"({' -> '.join((*open_, message.full_name))}): Spark types have no cycles; break the "
                          "recursion in the schema")
    inner = (*open_, message.full_name)
    fields = [T.StructField(field.name, _field_type(field, inner, f"{path}{field.name}"), True)
              for field in message.fields]
    if not fields:
        raise SchemaError(f"message {message.full_name} has no fields: an empty struct cannot be a column")
    return T.StructType(fields)


def _is_map(field: Any) -> bool:
    return bool(field.message_type is not None and field.message_type.GetOptions().map_entry)


def _is_repeated(field: Any) -> bool:
    repeated = getattr(field, "is_repeated", None)  # protobuf 6+; `label` before (gone in 7)
    return bool(repeated if repeated is not None else field.label == field.LABEL_REPEATED)


def _field_type(field: Any, open_: tuple[str, ...], path: str) -> T.DataType:
    if _is_map(field):
        entry = field.message_type
        return T.MapType(_single_type(entry.fields_by_name["key"], open_, path),
                         _single_type(entry.fields_by_name["value"], open_, path), True)
    single = _single_type(field, open_, path)
    return T.ArrayType(single, True) if _is_repeated(field) else single


def _single_type(field: Any, open_: tuple[str, ...], path: str) -> T.DataType:
    if field.type not in (MESSAGE, GROUP):
        return _SCALARS[field.type]
    name = field.message_type.full_name
    if name in _WRAPPERS:
        return _SCALARS[_WRAPPERS[name]]
    if name == TIMESTAMP:
        return T.TimestampType()
    if name == DURATION:
        return DURATION_TYPE
    if name in _JSON_TYPES:
        return T.StringType()
    if name == ANY:
        return ANY_TYPE
    if not field.message_type.fields:
        return T.BooleanType()  # google.protobuf.Empty and its kind: true when set, null when not
    return _struct(field.message_type, open_, f"{path}.")


def has_presence(field: Any) -> bool:
    """Whether an unset singular field reads null (it tracks presence) rather than its default."""
    if _is_repeated(field):
        return False
    presence = getattr(field, "has_presence", None)
    if presence is not None:
        return bool(presence)
    return field.type in (MESSAGE, GROUP) or field.containing_oneof is not None


def converter(message: Any) -> Converter:
    """A function from a parsed message of this descriptor to a dict Arrow can hold for `spark_schema(message)`.
    InvalidValueError (with the field path) for a value its type rules out."""
    parts = [(field.name, has_presence(field), _field_converter(field)) for field in message.fields]

    def convert(msg: Any) -> dict[str, Any]:
        row: dict[str, Any] = {}
        for name, presence, to_value in parts:
            if presence and not msg.HasField(name):
                row[name] = None
            elif to_value is None:
                row[name] = getattr(msg, name)
            else:
                try:
                    row[name] = to_value(getattr(msg, name))
                except InvalidValueError as exc:
                    exc.path.insert(0, name)
                    raise
        return row

    return convert


def _field_converter(field: Any) -> Converter | None:
    if _is_map(field):
        entry = field.message_type
        key = _single_converter(entry.fields_by_name["key"])
        value = _single_converter(entry.fields_by_name["value"])
        # entries sorted by key: Protobuf leaves a map's order to the implementation
        return lambda m: [(k if key is None else key(k), v if value is None else value(v))
                          for k, v in sorted(m.items())]
    single = _single_converter(field)
    if _is_repeated(field):
        return list if single is None else (lambda items: [single(x) for x in items])
    return single


def _single_converter(field: Any) -> Converter | None:
    if field.type == ENUM:
        names = {v.number: v.name for v in field.enum_type.values}
        return lambda n: names.get(n, str(n))  # an open enum's unknown number: the number as text
    if field.type in (UINT64, FIXED64):
        return Decimal
    if field.type not in (MESSAGE, GROUP):
        return None
    name = field.message_type.full_name
    if name in _WRAPPERS:
        return (lambda w: Decimal(w.value)) if _WRAPPERS[name] == UINT64 else (lambda w: w.value)
    if name == TIMESTAMP:
        return timestamp_micros
    if name == DURATION:
        return duration
    if name in _JSON_TYPES:
        return lambda m: json.dumps(_json_value(m), separators=(",", ":"), ensure_ascii=False)
    if name == ANY:
        return lambda a: {"type_url": a.type_url, "value": a.value}
    if not field.message_type.fields:
        return lambda _: True
    return converter(field.message_type)


# google/protobuf/timestamp.proto: "from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z"; duration.proto:
# "approximately +-10,000 years", nanos of the seconds' sign.
_MIN_SECONDS, _MAX_SECONDS = -62_135_596_800, 253_402_300_799
_MAX_DURATION_SECONDS = 315_576_000_000


def timestamp_micros(ts: Any) -> int:
    """Microseconds since the epoch of a Timestamp (nanoseconds below a microsecond are dropped, toward the past,
    as Spark's timestamps hold microseconds). InvalidValueError outside the range Timestamp defines."""
    seconds, nanos = ts.seconds, ts.nanos
    if not _MIN_SECONDS <= seconds <= _MAX_SECONDS:
        raise InvalidValueError(f"Timestamp seconds {seconds} outside years 1 to 9999")
    if not 0 <= nanos <= 999_999_999:
        raise InvalidValueError(f"Timestamp nanos {nanos} outside [0, 999999999]")
    return seconds * 1_000_000 + nanos // 1000


def duration(d: Any) -> dict[str, int]:
    seconds, nanos = d.seconds, d.nanos
    if not -_MAX_DURATION_SECONDS <= seconds <= _MAX_DURATION_SECONDS:
        raise InvalidValueError(f"Duration seconds {seconds} outside +-{_MAX_DURATION_SECONDS}")
    if not -999_999_999 <= nanos <= 999_999_999 or (seconds and nanos and (seconds < 0) != (nanos < 0)):
        raise InvalidValueError(f"Duration nanos {nanos} outside the range or of another sign than seconds")
    return {"seconds": seconds, "nanos": nanos}


def _json_value(message: Any) -> Any:
    """A Struct, Value or ListValue as the JSON value it stands for (Protobuf's JSON mapping)."""
    name = message.DESCRIPTOR.full_name
    if name == "google.protobuf.Struct":
        return {k: _json_value(v) for k, v in sorted(message.fields.items())}
    if name == "google.protobuf.ListValue":
        return [_json_value(v) for v in message.values]
    kind = message.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return None
    if kind in ("struct_value", "list_value"):
        return _json_value(getattr(message, kind))
    value = getattr(message, kind)
    if kind == "number_value" and value == int(value) and abs(value) < 2**53:
        return int(value)
    return value
