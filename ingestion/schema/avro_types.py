"""Avro types as Spark types, and fastavro's decoded values as values Arrow can hold for those types.

The mapping follows Spark's own `from_avro` where Spark has an answer (unions of several types become a struct of
`member0..memberN`, enums become strings, time-millis an int) so tables look the same as a hand-written job's.
Every payload column is nullable: tombstones and later schema versions leave fields empty.

Debezium's semantic types (the `connect.name` its AvroConverter writes beside a plain type) map as they do for
Kafka Connect's JSON (`debezium_types`, docs/cdc.md#debeziums-types): MicroTimestamp to timestamp, and so on.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

from pyspark.sql import types as T

from ingestion.errors import SchemaError
from ingestion.schema import debezium_types

AvroSchema = Any  # parsed JSON of an .avsc: a dict, a list (union) or a str (primitive or named reference)

Converter = Callable[[Any], Any]

_PRIMITIVES: dict[str, T.DataType] = {
    "boolean": T.BooleanType(), "int": T.IntegerType(), "long": T.LongType(), "float": T.FloatType(),
    "double": T.DoubleType(), "bytes": T.BinaryType(), "string": T.StringType(),
}
_MAX_DECIMAL_PRECISION = 38
# Avro's types as Kafka Connect's, for Debezium's semantic types (`connect.name`)
_CONNECT_KINDS = {"int": "int32", "long": "int64", "string": "string", "record": "struct"}


def semantic(schema: dict[str, Any]) -> tuple[T.DataType, debezium_types.Convert] | None:
    """The Spark type and converter of a Debezium semantic type (`connect.name`) on its Avro type, else None."""
    kind = schema.get("type")
    return debezium_types.semantic(schema.get("connect.name"), _CONNECT_KINDS.get(kind) if isinstance(kind, str)
                                   else None)


class _Names:
    """Named types seen so far (records, enums, fixed), to resolve references and catch recursion."""

    def __init__(self) -> None:
        self.defined: dict[str, dict[str, Any]] = {}
        self.open: list[str] = []

    def full_name(self, schema: dict[str, Any], namespace: str | None) -> str:
        name = str(schema["name"])
        if "." in name:
            return name
        ns = schema.get("namespace", namespace)
        return f"{ns}.{name}" if ns else name

    def lookup(self, ref: str, namespace: str | None) -> dict[str, Any]:
        for candidate in (f"{namespace}.{ref}" if namespace else ref, ref):
            if candidate in self.defined:
                if candidate in self.open:
                    raise SchemaError(f"recursive type {candidate!r} cannot be a Spark column "
                                      f"(Spark types have no cycles); break the recursion in the schema")
                return self.defined[candidate]
        raise SchemaError(f"unknown Avro type {ref!r}")


def spark_schema(schema: AvroSchema) -> T.StructType:
    """The Spark struct a top-level Avro record decodes into."""
    result = spark_type(schema)
    if not isinstance(result, T.StructType):
        raise SchemaError(f"the value schema must be an Avro record, got {schema!r}")
    return result


class _FieldError(SchemaError):
    """A SchemaError inside a record, with the path of fields it is under (outermost first)."""

    def __init__(self, path: list[str], reason: str) -> None:
        super().__init__(reason)
        self.path = path
        self.reason = reason


def spark_type(schema: AvroSchema) -> T.DataType:
    """The Spark type of an Avro schema; a SchemaError naming the field (dotted path) when one is wrong."""
    try:
        return _to_spark(schema, _Names(), None)
    except _FieldError as exc:
        raise SchemaError(f"field {'.'.join(exc.path)!r}: {exc.reason}") from None


def _field_type(field: dict[str, Any], names: _Names, namespace: str | None) -> T.DataType:
    name = str(field.get("name", "?"))
    try:
        return _to_spark(field["type"], names, namespace)
    except _FieldError as exc:
        raise _FieldError([name, *exc.path], exc.reason) from None
    except SchemaError as exc:
        raise _FieldError([name], str(exc)) from None


def _to_spark(schema: AvroSchema, names: _Names, namespace: str | None) -> T.DataType:
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        if schema == "null":
            return T.NullType()
        return _to_spark(names.lookup(schema, namespace), names, namespace)
    if isinstance(schema, list):
        return _union(schema, names, namespace)
    kind = schema.get("type")
    if kind in ("enum", "fixed"):
        names.defined[names.full_name(schema, namespace)] = schema
    debezium = semantic(schema)
    if debezium is not None:
        if kind == "record":
            names.defined[names.full_name(schema, namespace)] = schema
        return debezium[0]
    logical = _logical(schema)
    if logical is not None:
        return logical
    if kind == "record" or kind == "error":
        full = names.full_name(schema, namespace)
        names.defined[full] = schema
        names.open.append(full)
        ns = full.rsplit(".", 1)[0] if "." in full else None
        given = schema.get("fields")
        if not isinstance(given, list):
            raise SchemaError(f"record {full!r} needs 'fields', a list of its fields, got {given!r}")
        twice = next((n for i, n in enumerate(f["name"] for f in given) if n in [g["name"] for g in given[:i]]), None)
        if twice is not None:
            raise SchemaError(f"record {full!r} has the field {twice!r} twice")
        fields = [T.StructField(f["name"], _field_type(f, names, ns), True) for f in given]
        names.open.pop()
        return T.StructType(fields)
    if kind in ("enum", "fixed"):
        return T.StringType() if kind == "enum" else T.BinaryType()
    if kind == "array":
        return T.ArrayType(_to_spark(schema["items"], names, namespace), True)
    if kind == "map":
        return T.MapType(T.StringType(), _to_spark(schema["values"], names, namespace), True)
    if isinstance(kind, (str, list, dict)):
        return _to_spark(kind, names, namespace)
    raise SchemaError(f"not an Avro schema: {schema!r}")


def _logical(schema: dict[str, Any]) -> T.DataType | None:
    logical, base = schema.get("logicalType"), schema.get("type")
    if logical == "decimal" and base in ("bytes", "fixed"):
        precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
        if precision > _MAX_DECIMAL_PRECISION:
            raise SchemaError(f"decimal({precision},{scale}) exceeds Spark's maximum precision of 38")
        return T.DecimalType(precision, scale)
    table: dict[tuple[str, Any], T.DataType] = {
        ("date", "int"): T.DateType(),
        ("time-millis", "int"): T.IntegerType(),
        ("time-micros", "long"): T.LongType(),
        ("timestamp-millis", "long"): T.TimestampType(),
        ("timestamp-micros", "long"): T.TimestampType(),
        ("local-timestamp-millis", "long"): T.TimestampNTZType(),
        ("local-timestamp-micros", "long"): T.TimestampNTZType(),
        ("uuid", "string"): T.StringType(),
    }
    return table.get((str(logical), base)) if logical else None


# Unions Spark's from_avro widens to one type instead of a struct of members.
_WIDENED: dict[frozenset[str], str] = {frozenset({"int", "long"}): "long", frozenset({"float", "double"}): "double"}


def _union(branches: list[AvroSchema], names: _Names, namespace: str | None) -> T.DataType:
    non_null = [b for b in branches if b != "null"]
    if len(non_null) == 1:
        return _to_spark(non_null[0], names, namespace)
    widened = _WIDENED.get(frozenset(b for b in non_null if isinstance(b, str)))
    if widened and all(isinstance(b, str) for b in non_null):
        return _PRIMITIVES[widened]
    members = [T.StructField(f"member{i}", _to_spark(b, names, namespace), True) for i, b in enumerate(non_null)]
    return T.StructType(members)


# --- values -------------------------------------------------------------------------------------------------

def converter(schema: AvroSchema) -> Converter | None:
    """A function that turns fastavro's value for `schema` into what Arrow holds for its Spark type,
    or None when fastavro's value is already right (the common case, kept free of per-record calls)."""
    return _convert(schema, _Names(), None)


def _semantic_converter(schema: dict[str, Any], path: str) -> Converter | None:
    debezium = semantic(schema)
    if debezium is None:
        return None
    convert = debezium[1]
    return lambda v: None if v is None else convert(v, path)


def _convert(schema: AvroSchema, names: _Names, namespace: str | None, path: str = "$") -> Converter | None:
    if isinstance(schema, str):
        if schema in _PRIMITIVES or schema == "null":
            return None
        return _convert(names.lookup(schema, namespace), names, namespace, path)
    if isinstance(schema, list):
        return _convert_union(schema, names, namespace, path)
    debezium = _semantic_converter(schema, path)
    if debezium is not None:
        if schema.get("type") == "record":
            names.defined[names.full_name(schema, namespace)] = schema
        return debezium
    kind, logical = schema.get("type"), schema.get("logicalType")
    if logical == "uuid":
        return lambda v: None if v is None else str(v)
    if logical == "time-millis" and kind == "int":
        return lambda v: None if v is None else _time_micros(v) // 1000
    if logical == "time-micros" and kind == "long":
        return lambda v: None if v is None else _time_micros(v)
    if kind in ("record", "error"):
        full = names.full_name(schema, namespace)
        names.defined[full] = schema
        names.open.append(full)
        ns = full.rsplit(".", 1)[0] if "." in full else None
        fields = [(f["name"], _convert(f["type"], names, ns, f"{path}.{f['name']}")) for f in schema["fields"]]
        names.open.pop()
        active = [(name, conv) for name, conv in fields if conv is not None]
        if not active:
            return None

        def record(v: Any) -> Any:
            if v is None:
                return None
            out = dict(v)
            for name, conv in active:
                out[name] = conv(out.get(name))
            return out
        return record
    if kind in ("enum", "fixed"):
        names.defined[names.full_name(schema, namespace)] = schema
        return None
    if kind == "array":
        item = _convert(schema["items"], names, namespace, f"{path}[]")
        return None if item is None else (lambda v: None if v is None else [item(x) for x in v])
    if kind == "map":
        value = _convert(schema["values"], names, namespace, f"{path}<value>")
        if value is None:
            return lambda v: None if v is None else list(v.items())
        return lambda v: None if v is None else [(k, value(x)) for k, x in v.items()]
    if isinstance(kind, (list, dict)) or (isinstance(kind, str) and kind not in _PRIMITIVES):
        return _convert(kind, names, namespace, path)
    return None


def _time_micros(value: Any) -> int:
    if isinstance(value, dt.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
    return int(value)


def _convert_union(branches: list[AvroSchema], names: _Names, namespace: str | None,
                   path: str = "$") -> Converter | None:
    non_null = [b for b in branches if b != "null"]
    if len(non_null) == 1:
        return _convert(non_null[0], names, namespace, path)
    if all(isinstance(b, str) for b in non_null) and frozenset(non_null) in _WIDENED:
        return None
    # fastavro returns the bare value of the branch it read; the branch is found again from the value's type,
    # taking the first branch that can hold it (as Avro's own writer resolution does).
    convs = [_convert(b, names, namespace, f"{path}.member{i}") for i, b in enumerate(non_null)]
    tests = [_branch_test(b, names, namespace) for b in non_null]

    def union(v: Any) -> Any:
        if v is None:
            return None
        for i, test in enumerate(tests):
            if test(v):
                conv = convs[i]
                return {f"member{i}": conv(v) if conv else v}
        raise SchemaError(f"value {v!r} matches no branch of union {non_null!r}")
    return union


def _branch_test(schema: AvroSchema, names: _Names, namespace: str | None) -> Callable[[Any], bool]:
    if isinstance(schema, str) and schema not in _PRIMITIVES:
        schema = names.lookup(schema, namespace)
    kind = schema.get("type") if isinstance(schema, dict) else schema
    logical = schema.get("logicalType") if isinstance(schema, dict) else None
    if logical in ("timestamp-millis", "timestamp-micros", "local-timestamp-millis", "local-timestamp-micros"):
        return lambda v: isinstance(v, dt.datetime)
    if logical == "date":
        return lambda v: isinstance(v, dt.date) and not isinstance(v, dt.datetime)
    if logical == "uuid":
        return lambda v: isinstance(v, (uuid.UUID, str))
    simple: dict[str, Callable[[Any], bool]] = {
        "boolean": lambda v: isinstance(v, bool),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool) and -(2**31) <= v < 2**31,
        "long": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, float),
        "double": lambda v: isinstance(v, float),
        "bytes": lambda v: isinstance(v, (bytes, bytearray)) or logical == "decimal",
        "fixed": lambda v: isinstance(v, (bytes, bytearray)) or logical == "decimal",
        "string": lambda v: isinstance(v, str),
        "enum": lambda v: isinstance(v, str),
        "record": lambda v: isinstance(v, dict),
        "map": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
    }
    return simple.get(str(kind), lambda v: False)


# --- bounded decoding ----------------------------------------------------------------------------------------

def check_bounded(schema: AvroSchema) -> None:
    """Refuse arrays and maps whose items can take zero bytes (null, empty records, zero-size fixed): a
    malformed block count of 2**62 such items would decode forever without reading a byte. Every other
    malformed input fails within the bytes it has (fastavro checks lengths, indexes and varints)."""
    _walk_bounded(schema, _Names(), None, set())


def _walk_bounded(schema: AvroSchema, names: _Names, namespace: str | None, seen: set[str]) -> None:
    if isinstance(schema, list):
        for branch in schema:
            _walk_bounded(branch, names, namespace, seen)
        return
    if isinstance(schema, str):
        if schema in _PRIMITIVES or schema == "null" or schema in seen:
            return
        schema = names.lookup(schema, namespace)
    kind = schema.get("type")
    if kind in ("record", "error", "enum", "fixed"):
        full = names.full_name(schema, namespace)
        names.defined[full] = schema
        seen.add(full)
    if kind in ("record", "error"):
        ns = full.rsplit(".", 1)[0] if "." in full else None
        for f in schema["fields"]:
            _walk_bounded(f["type"], names, ns, seen)
    elif kind in ("array", "map"):
        items = schema["items" if kind == "array" else "values"]
        if kind == "array" and _zero_size(items, names, namespace):
            raise SchemaError(f"an array of zero-byte items ({items!r}) cannot be decoded with a bound on work; "
                              "give the items at least one non-null field")
        _walk_bounded(items, names, namespace, seen)
    elif isinstance(kind, (list, dict)):
        _walk_bounded(kind, names, namespace, seen)


def _zero_size(schema: AvroSchema, names: _Names, namespace: str | None) -> bool:
    if schema == "null":
        return True
    if isinstance(schema, str) and schema not in _PRIMITIVES:
        schema = names.defined.get(schema) or names.defined.get(f"{namespace}.{schema}") or schema
    if isinstance(schema, dict):
        kind = schema.get("type")
        if kind == "fixed":
            return int(schema.get("size", 1)) == 0
        if kind in ("record", "error"):
            return all(_zero_size(f["type"], names, namespace) for f in schema.get("fields", []))
        if kind in ("null",):
            return True
    return False
