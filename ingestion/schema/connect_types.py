"""Kafka Connect schemas (as the JsonConverter embeds them) -> Spark types, payloads -> row values, strictly.

A JsonConverter record with `schemas.enable=true` is `{"schema": {...}, "payload": ...}`: the schema travels with
every record. Its types map as Connect means them (docs/json.md#kafka-connects-json): int8..int64 to
tinyint..bigint (range checked), float/double, boolean, string, bytes (base64) to binary, array, map, struct, and the
logical types Decimal (base64 of the unscaled two's-complement bytes, or a number with `decimal.format=NUMERIC`)
to decimal(p, s), Date (days) to date, Time (milliseconds of the day) to a `HH:MM:SS.mmm` string and Timestamp
(epoch milliseconds) to timestamp; Debezium's semantic types by their name (`debezium_types`).

`from_spark` writes a table's columns back as a Connect schema: the reader schema of a table that evolved from
the records' own schemas (`decode.resolver`) is such a document.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import functools
import hashlib
import json
from typing import Any

from pyspark.sql import types as T

from ingestion.schema import debezium_types
from ingestion.schema.json_types import Convert, Node, UnsupportedSchemaError
from ingestion.schema.json_values import (
    EPOCH,
    JsonConstraintError,
    JsonRangeError,
    JsonTypeError,
    MissingPropertyError,
    show,
    wrong_type,
)

DECIMAL = "org.apache.kafka.connect.data.Decimal"
DATE = "org.apache.kafka.connect.data.Date"
TIME = "org.apache.kafka.connect.data.Time"
TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
DOCUMENT_KEY = "connect"

_INTS = {"int8": (T.ByteType(), 8), "int16": (T.ShortType(), 16), "int32": (T.IntegerType(), 32),
         "int64": (T.LongType(), 64)}


def is_document(text: str) -> bool:
    return text.startswith('{"connect":')


def schema_id(text: str) -> int:
    """The schema id of a record's embedded schema (its JSON with sorted keys): 31 bits of its SHA-256, never 0
    (the schema file's id)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") & 0x7FFFFFFF or 1


def document(schema: Any) -> str:
    return json.dumps({DOCUMENT_KEY: schema}, separators=(",", ":"))


def _refuse(at: str, what: str) -> UnsupportedSchemaError:
    return UnsupportedSchemaError(f"Kafka Connect schema: {what} at {at or 'the top'} cannot be a column")


def node(schema: Any, at: str = "") -> Node:
    if not isinstance(schema, dict) or not isinstance(schema.get("type"), str):
        raise _refuse(at, f"schema {show(schema)} (no type)")
    kind, name = schema["type"], schema.get("name")
    optional = bool(schema.get("optional", False))
    semantic = debezium_types.semantic(name, kind)
    if name in (DECIMAL, DATE, TIME, TIMESTAMP):
        made = _logical(schema, name, at)
    elif semantic is not None:
        made = Node(*semantic)
    else:
        made = _plain(schema, kind, at)
    return Node(made.spark, _optional(made.convert, optional), optional)


def _optional(convert: Convert, optional: bool) -> Convert:
    def check(value: Any, path: str) -> Any:
        if value is None:
            if optional:
                return None
            raise JsonTypeError(f"{path}: null for a field that is not optional")
        return convert(value, path)
    return check


def _integer(bits: int) -> Convert:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

    def convert(value: Any, path: str) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            raise wrong_type(path, f"int{bits}", value)
        if not low <= value <= high:
            raise JsonRangeError(f"{path}: {value} is beyond int{bits}")
        return value
    return convert


def _floating(value: Any, path: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float | decimal.Decimal):
        raise wrong_type(path, "number", value)
    result = float(value)
    if result in (float("inf"), float("-inf")):
        raise JsonRangeError(f"{path}: {show(str(value))} is beyond a double")
    return result


def _typed(kind: type, expected: str) -> Convert:
    def convert(value: Any, path: str) -> Any:
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise wrong_type(path, expected, value)
        return value
    return convert


def _bytes(value: Any, path: str) -> Any:
    if not isinstance(value, str):
        raise wrong_type(path, "base64 text", value)
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise JsonConstraintError(f"{path}: {show(value)} is not base64") from None


def _plain(schema: dict[str, Any], kind: str, at: str) -> Node:
    if kind in _INTS:
        spark, bits = _INTS[kind]
        return Node(spark, _integer(bits))
    if kind in ("float", "double"):
        return Node(T.FloatType() if kind == "float" else T.DoubleType(), _floating)
    if kind == "boolean":
        return Node(T.BooleanType(), _typed(bool, "boolean"))
    if kind == "string":
        return Node(T.StringType(), _typed(str, "string"))
    if kind == "bytes":
        return Node(T.BinaryType(), _bytes)
    if kind == "array":
        items = node(schema.get("items"), f"{at}[]")

        def array(value: Any, path: str) -> Any:
            if not isinstance(value, list):
                raise wrong_type(path, "array", value)
            return [items.convert(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return Node(T.ArrayType(items.spark, True), array)
    if kind == "map":
        keys, values = node(schema.get("keys"), f"{at}<key>"), node(schema.get("values"), f"{at}<value>")

        def as_map(value: Any, path: str) -> Any:
            # JsonConverter writes a map with string keys as an object, any other as an array of [key, value]
            if isinstance(value, dict):
                pairs = list(value.items())
            elif isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 for p in value):
                pairs = [(p[0], p[1]) for p in value]
            else:
                raise wrong_type(path, "map (an object, or an array of [key, value])", value)
            return [(keys.convert(k, f"{path}<key>"), values.convert(v, f"{path}[{json.dumps(str(k))}]"))
                    for k, v in pairs]
        return Node(T.MapType(keys.spark, values.spark, True), as_map)
    if kind == "struct":
        return _struct(schema, at)
    raise _refuse(at, f"type {kind!r}")


def _struct(schema: dict[str, Any], at: str) -> Node:
    fields = schema.get("fields")
    if not isinstance(fields, list) or not fields:
        raise _refuse(at, "a struct without fields")
    members = []
    for f in fields:
        if not isinstance(f, dict) or not isinstance(f.get("field"), str):
            raise _refuse(at, f"field {show(f)} without a name")
        members.append((f["field"], node(f, f"{at}.{f['field']}" if at else f["field"])))

    def convert(value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise wrong_type(path, "struct (an object)", value)
        row = {}
        for name, member in members:
            where = f"{path}.{name}"
            if name not in value and not member.nullable:
                raise MissingPropertyError(f"{where}: required field is missing")
            row[name] = member.convert(value.get(name), where)
        extra = set(value) - set(row)
        if extra:
            raise JsonConstraintError(f"{path}.{sorted(extra)[0]}: field not in the record's schema")
        return row
    return Node(T.StructType([T.StructField(n, m.spark, True) for n, m in members]), convert)


def _logical(schema: dict[str, Any], name: str, at: str) -> Node:
    kind = schema["type"]
    if name == DECIMAL:
        parameters = schema.get("parameters") or {}
        try:
            scale = int(parameters.get("scale", 0))
            precision = int(parameters.get("connect.decimal.precision", 38))
        except (TypeError, ValueError):
            raise _refuse(at, f"Decimal parameters {show(parameters)}") from None
        if kind != "bytes" or not 0 <= scale <= precision <= 38:
            raise _refuse(at, f"Decimal of precision {precision} and scale {scale} (Spark holds up to 38 digits)")
        return Node(T.DecimalType(precision, scale), _decimal(precision, scale))
    if name == DATE and kind == "int32":
        return Node(T.DateType(), _date)
    if name == TIME and kind == "int32":
        return Node(T.StringType(), _time)
    if name == TIMESTAMP and kind == "int64":
        return Node(T.TimestampType(), _timestamp)
    raise _refuse(at, f"logical type {name} of type {kind}")


def _decimal(precision: int, scale: int) -> Convert:
    def convert(value: Any, path: str) -> Any:
        if isinstance(value, str):
            unscaled = int.from_bytes(_bytes(value, path), "big", signed=True)
            number = decimal.Decimal(unscaled).scaleb(-scale)
        elif isinstance(value, int | decimal.Decimal) and not isinstance(value, bool):
            number = decimal.Decimal(value)
            if number.as_tuple().exponent < -scale:  # type: ignore[operator]
                raise JsonRangeError(f"{path}: {value} has more than {scale} digits after the point")
        else:
            raise wrong_type(path, "Decimal (base64 or a number)", value)
        digits = len(number.quantize(decimal.Decimal(1).scaleb(-scale)).as_tuple().digits)
        if number != 0 and digits > precision:
            raise JsonRangeError(f"{path}: {number} is beyond decimal({precision},{scale})")
        return number
    return convert


def _date(value: Any, path: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, int):
        raise wrong_type(path, "Date (days since 1970-01-01)", value)
    try:
        return dt.date(1970, 1, 1) + dt.timedelta(days=value)
    except OverflowError:
        raise JsonRangeError(f"{path}: {value} days is outside years 1 to 9999") from None


def _time(value: Any, path: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, int):
        raise wrong_type(path, "Time (milliseconds of the day)", value)
    if not 0 <= value < 86_400_000:
        raise JsonRangeError(f"{path}: {value} ms is not a time of day")
    seconds, millis = divmod(value, 1000)
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{millis:03d}"


def _timestamp(value: Any, path: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, int):
        raise wrong_type(path, "Timestamp (epoch milliseconds)", value)
    try:
        return EPOCH + dt.timedelta(milliseconds=value)
    except OverflowError:
        raise JsonRangeError(f"{path}: {value} ms is outside years 1 to 9999") from None


@functools.lru_cache(maxsize=256)
def compile_schema(text: str) -> Node:
    """The Node of a Connect schema (its JSON text); the top level must be a struct (the table's columns)."""
    made = node(json.loads(text))
    if not isinstance(made.spark, T.StructType):
        raise _refuse("", f"a top-level {made.spark.simpleString()} (the table's columns come from a struct)")
    return made


def spark_schema(document_text: str) -> T.StructType:
    spark = compile_schema(json.dumps(json.loads(document_text)[DOCUMENT_KEY])).spark
    assert isinstance(spark, T.StructType)
    return spark


_PLAIN: dict[type[T.DataType], str] = {
    T.ByteType: "int8", T.ShortType: "int16", T.IntegerType: "int32", T.LongType: "int64", T.FloatType: "float",
    T.DoubleType: "double", T.BooleanType: "boolean", T.StringType: "string", T.BinaryType: "bytes"}


def from_spark(spark: T.DataType) -> dict[str, Any]:
    """The Connect schema (every field optional) whose columns are `spark`: a table's columns as a reader schema."""
    if isinstance(spark, T.StructType):
        return {"type": "struct", "optional": True,
                "fields": [{"field": f.name, **from_spark(f.dataType)} for f in spark.fields]}
    if isinstance(spark, T.ArrayType):
        return {"type": "array", "optional": True, "items": from_spark(spark.elementType)}
    if isinstance(spark, T.MapType):
        return {"type": "map", "optional": True, "keys": from_spark(spark.keyType),
                "values": from_spark(spark.valueType)}
    if isinstance(spark, T.DecimalType):
        return {"type": "bytes", "optional": True, "name": DECIMAL,
                "parameters": {"scale": str(spark.scale), "connect.decimal.precision": str(spark.precision)}}
    if isinstance(spark, T.DateType):
        return {"type": "int32", "optional": True, "name": DATE}
    if isinstance(spark, T.TimestampType):
        return {"type": "int64", "optional": True, "name": TIMESTAMP}
    kind = _PLAIN.get(type(spark))
    if kind is None:
        raise _refuse("", f"a {spark.simpleString()} column")
    return {"type": kind, "optional": True}
