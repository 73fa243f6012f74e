"""JSON Schema -> Spark types, and JSON documents -> row values, strictly (docs/json.md).

A schema is compiled once into a tree of `Node`s: each holds the Spark type of its column and a function that
turns a parsed JSON value into the value Arrow takes for that type, or raises an `InvalidJsonError` naming the
value's JSON path (`$.items[1].sku`) and the fault. Nothing is coerced and nothing becomes null that was not null
in the document: a value of the wrong type, a missing required property, an enum outside its values, a number
beyond its column, a string that is not its declared format, duplicate keys, invalid JSON: each is an error.

Constructs the mapping cannot hold (unions of different types, `patternProperties`, recursion, ...) are refused
when the schema is compiled, in one line naming the construct and where it is (`UnsupportedSchemaError`).
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import types as T

from ingestion.errors import SchemaError
from ingestion.schema.json_values import (
    EPOCH,
    FORMAT_READERS,
    DuplicateKeyError,
    InvalidJsonError,
    JsonConstraintError,
    JsonEnumError,
    JsonFormatError,
    JsonRangeError,
    JsonTypeError,
    MalformedJsonError,
    MissingPropertyError,
    member,
    parse,
    show,
    wrong_type,
)

Convert = Callable[[Any, str], Any]  # (parsed JSON value, its JSON path) -> the column's value

INT64 = (-(2**63), 2**63 - 1)


class UnsupportedSchemaError(SchemaError):
    """The schema uses a construct the mapping to columns cannot hold."""


@dataclass(frozen=True)
class Node:
    spark: T.DataType
    convert: Convert
    nullable: bool = False
    # What the JVM's check needs of this schema (json_jvm, data/JsonDecode.java): {"k": kind, ...}, "null": true
    # where null is allowed.
    tree: dict[str, Any] = field(default_factory=dict, compare=False)


# Keywords that only annotate: allowed anywhere, not checked.
ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "$anchor", "title", "description", "default", "examples",
                         "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "contentEncoding",
                         "contentMediaType"})
KNOWN = ANNOTATIONS | {"type", "properties", "required", "additionalProperties", "items", "enum", "const", "format",
                       "$ref", "oneOf", "anyOf", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                       "minLength", "maxLength", "pattern", "minItems", "maxItems"}
# Checked formats; any other `format` is an annotation, as JSON Schema 2020-12 says by default.
FORMATS = {"date-time": T.TimestampType(), "date": T.DateType(), "time": T.StringType(), "uuid": T.StringType()}


# --- compiling a JSON Schema ---------------------------------------------------------------------------------


class _Compiler:
    """Turns one schema document (a root schema and the documents its `$ref`s may name) into Nodes."""

    def __init__(self, root: Any, refs: dict[str, Any], where: str) -> None:
        self.root, self.refs, self.where = root, refs, where

    def refuse(self, at: str, what: str) -> UnsupportedSchemaError:
        where = f"{self.where}: " if self.where else ""
        return UnsupportedSchemaError(f"{where}{what} at {at or '#'} cannot be a column (docs/json.md)")

    def resolve(self, ref: str, at: str) -> tuple[Any, Any]:
        """(the schema a $ref names, the document it is in)."""
        name, _, pointer = ref.partition("#")
        if name:
            if name not in self.refs:
                raise self.refuse(at, f"$ref {ref!r} to a document the schema's references do not hold")
            document = self.refs[name]
        else:
            document = self.root
        target = document
        for part in [p for p in pointer.split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            else:
                raise self.refuse(at, f"$ref {ref!r} that names nothing")
        return target, document

    def node(self, schema: Any, at: str, document: Any, stack: tuple[str, ...] = ()) -> Node:
        if schema is True or schema == {}:
            return Node(T.StringType(), _json_text, nullable=True, tree={"k": "text", "null": True})
        if not isinstance(schema, dict):
            raise self.refuse(at, f"schema {show(schema)}")
        unknown = sorted(set(schema) - KNOWN)
        if unknown:
            raise self.refuse(at, f"keyword {unknown[0]!r}")
        if "$ref" in schema:
            ref = schema["$ref"]
            key = f"{id(document)}{ref}"
            if key in stack:
                raise self.refuse(at, f"a recursive schema ($ref {ref!r} contains itself)")
            others = set(schema) - ANNOTATIONS - {"$ref"}
            if others:
                raise self.refuse(at, f"$ref beside {sorted(others)[0]!r}")
            target, in_document = self.resolve(ref, at)
            saved = self.root
            self.root = in_document
            try:
                return self.node(target, at, in_document, (*stack, key))
            finally:
                self.root = saved
        for union in ("oneOf", "anyOf"):
            if union in schema:
                return self.union(schema, union, at, document, stack)
        if "enum" in schema or "const" in schema:
            return self.enum(schema, at)
        kind = schema.get("type")
        nullable = False
        if isinstance(kind, list):
            kinds = [k for k in kind if k != "null"]
            nullable = len(kinds) < len(kind)
            if len(kinds) != 1:
                raise self.refuse(at, f"type {kind!r} (a union of several non-null types)")
            kind = kinds[0]
        made = self.typed(schema, kind, at, document, stack)
        return Node(made.spark, _nullable(made.convert) if nullable else made.convert, nullable,
                    {**made.tree, "null": nullable or made.nullable})

    def union(self, schema: dict[str, Any], union: str, at: str, document: Any, stack: tuple[str, ...]) -> Node:
        branches = schema[union]
        others = set(schema) - ANNOTATIONS - {union}
        if others:
            raise self.refuse(at, f"{union} beside {sorted(others)[0]!r}")
        if not isinstance(branches, list):
            raise self.refuse(at, f"{union} that is not a list")
        nulls = [b for b in branches if b == {"type": "null"}]
        rest = [b for b in branches if b != {"type": "null"}]
        if len(rest) != 1 or len(nulls) > 1:
            raise self.refuse(at, f"{union} of {len(rest)} non-null schemas (only [x, null] is a column)")
        inner = self.node(rest[0], at, document, stack)
        if inner.nullable and nulls and union == "oneOf":
            raise self.refuse(at, "oneOf whose branches both allow null")
        nullable = inner.nullable or bool(nulls)
        return Node(inner.spark, _nullable(inner.convert) if nulls else inner.convert, nullable,
                    {**inner.tree, "null": nullable})

    def enum(self, schema: dict[str, Any], at: str) -> Node:
        values = schema["enum"] if "enum" in schema else [schema["const"]]
        others = set(schema) - ANNOTATIONS - {"enum", "const", "type"}
        if others:
            raise self.refuse(at, f"enum beside {sorted(others)[0]!r}")
        if not isinstance(values, list) or not values:
            raise self.refuse(at, "an enum that is not a non-empty list")
        nullable = None in values
        texts = [v for v in values if v is not None]
        if not all(isinstance(v, str) for v in texts) or not texts:
            raise self.refuse(at, f"enum of non-string values {show(values)} (an enum column is a string)")
        kind = schema.get("type", "string")
        kinds = set(kind) if isinstance(kind, list) else {kind}
        if kinds - {"string", "null"} or (nullable and "type" in schema and "null" not in kinds):
            raise self.refuse(at, f"enum with type {kind!r}")
        allowed = frozenset(texts)

        def convert(value: Any, path: str) -> Any:
            if value is None and nullable:
                return None
            if not isinstance(value, str):
                raise wrong_type(path, "one of " + show(sorted(allowed)), value)
            if value not in allowed:
                raise JsonEnumError(f"{path}: {show(value)} is not one of {show(sorted(allowed))}")
            return value
        return Node(T.StringType(), convert, nullable, {"k": "enum", "values": sorted(allowed), "null": nullable})

    def typed(self, schema: dict[str, Any], kind: Any, at: str, document: Any, stack: tuple[str, ...]) -> Node:
        if kind == "object":
            return self.object(schema, at, document, stack)
        if kind == "array":
            return self.array(schema, at, document, stack)
        if kind in ("integer", "number"):
            return _number(schema, kind == "integer")
        if kind == "string":
            fmt = schema.get("format")
            return _string(schema, fmt if fmt in FORMATS else None)
        if kind == "boolean":
            return Node(T.BooleanType(), _boolean, tree={"k": "boolean"})
        if kind is None:
            raise self.refuse(at, "a schema without a type")
        raise self.refuse(at, f"type {kind!r}")

    def object(self, schema: dict[str, Any], at: str, document: Any, stack: tuple[str, ...]) -> Node:
        properties = schema.get("properties")
        extra = schema.get("additionalProperties", True)
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise self.refuse(at, "required that is not a list of names")
        if not properties:
            if required:
                raise self.refuse(at, "required properties of an object without properties")
            if isinstance(extra, dict) and extra:
                values = self.node(extra, f"{at}/additionalProperties", document, stack)
                return Node(T.MapType(T.StringType(), values.spark, True), _map(values.convert),
                            tree={"k": "map", "v": values.tree})
            if extra is False:
                raise self.refuse(at, "an object that allows no property")
            return Node(T.StringType(), _object_text, tree={"k": "text"})
        missing = [r for r in required if r not in properties]
        if missing:
            raise self.refuse(at, f"required property {missing[0]!r} not in properties")
        fields = []
        for name, sub in properties.items():
            inner = self.node(sub, f"{at}/properties/{name}", document, stack)
            fields.append((name, inner, name in required))
        check_extra: Convert | None = None
        extra_tree = None
        if isinstance(extra, dict) and extra:
            extra_node = self.node(extra, f"{at}/additionalProperties", document, stack)
            check_extra, extra_tree = extra_node.convert, extra_node.tree
        elif extra is not True and extra != {} and extra is not False:
            raise self.refuse(at, f"additionalProperties {show(extra)}")
        spark = T.StructType([T.StructField(n, node.spark, True) for n, node, _ in fields])
        tree = {"k": "object", "closed": extra is False, "extra": extra_tree,
                "props": [{"n": n, "t": node.tree, "r": r} for n, node, r in fields]}
        return Node(spark, _struct(fields, closed=extra is False, check_extra=check_extra), tree=tree)

    def array(self, schema: dict[str, Any], at: str, document: Any, stack: tuple[str, ...]) -> Node:
        items = schema.get("items")
        if not isinstance(items, dict | bool) or items is False:
            raise self.refuse(at, "an array without an items schema" if items is None else f"items {show(items)}")
        inner = self.node(items, f"{at}/items", document, stack)
        low, high = schema.get("minItems"), schema.get("maxItems")

        def convert(value: Any, path: str) -> Any:
            if not isinstance(value, list):
                raise wrong_type(path, "array", value)
            _count(path, len(value), low, high, "items", "Items")
            return [inner.convert(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return Node(T.ArrayType(inner.spark, True), convert,
                    tree={"k": "array", "i": inner.tree, "min": low, "max": high})


def _count(path: str, n: int, low: int | None, high: int | None, unit: str, keyword: str) -> None:
    """minItems/maxItems, minLength/maxLength."""
    if low is not None and n < low:
        raise JsonConstraintError(f"{path}: {n} {unit}, fewer than min{keyword} {low}")
    if high is not None and n > high:
        raise JsonConstraintError(f"{path}: {n} {unit}, more than max{keyword} {high}")


def _nullable(convert: Convert) -> Convert:
    def nullable(value: Any, path: str) -> Any:
        return None if value is None else convert(value, path)
    return nullable


def _json_text(value: Any, path: str) -> Any:
    return None if value is None else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _object_text(value: Any, path: str) -> Any:
    if not isinstance(value, dict):
        raise wrong_type(path, "object", value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _boolean(value: Any, path: str) -> Any:
    if not isinstance(value, bool):
        raise wrong_type(path, "boolean", value)
    return value


def _struct(fields: list[tuple[str, Node, bool]], *, closed: bool, check_extra: Convert | None) -> Convert:
    names = frozenset(name for name, _, _ in fields)

    def convert(value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise wrong_type(path, "object", value)
        row = {}
        for name, node, required in fields:
            if name in value:
                row[name] = node.convert(value[name], member(path, name))
            elif required:
                raise MissingPropertyError(f"{member(path, name)}: required property is missing")
            else:
                row[name] = None
        if len(value) > len(row) or not names.issuperset(value):
            for name in value:
                if name in names:
                    continue
                if closed:
                    raise JsonConstraintError(f"{member(path, name)}: property not allowed "
                                              "(additionalProperties is false)")
                if check_extra is not None:
                    check_extra(value[name], member(path, name))
        return row
    return convert


def _map(values: Convert) -> Convert:
    def convert(value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise wrong_type(path, "object", value)
        return [(k, values(v, member(path, k))) for k, v in value.items()]
    return convert


def _bounds(schema: dict[str, Any]) -> list[tuple[str, Any, Callable[[Any, Any], bool]]]:
    tests = {"minimum": lambda v, b: v >= b, "maximum": lambda v, b: v <= b,
             "exclusiveMinimum": lambda v, b: v > b, "exclusiveMaximum": lambda v, b: v < b}
    found = []
    for keyword, test in tests.items():
        if keyword in schema:
            bound = schema[keyword]
            if isinstance(bound, bool) or not isinstance(bound, int | float):
                raise UnsupportedSchemaError(f"{keyword} {show(bound)} is not a number")
            found.append((keyword, bound, test))
    return found


def _number(schema: dict[str, Any], integer: bool) -> Node:
    bounds = _bounds(schema)

    def convert(value: Any, path: str) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise wrong_type(path, "integer" if integer else "number", value)
        if isinstance(value, float) and math.isinf(value):
            raise JsonRangeError(f"{path}: {show(value)} is beyond a double")
        for keyword, bound, test in bounds:
            if not test(value, bound):
                raise JsonRangeError(f"{path}: {show(value)} is outside {keyword} {show(bound)}")
        if integer:
            if isinstance(value, float):
                if not value.is_integer():
                    raise wrong_type(path, "integer", value)
                value = int(value)
            if not INT64[0] <= value <= INT64[1]:
                raise JsonRangeError(f"{path}: {show(value)} is beyond a 64-bit integer column")
            return value
        try:
            return float(value)
        except OverflowError:
            raise JsonRangeError(f"{path}: {show(value)} is beyond a double") from None
    tree = {"k": "integer" if integer else "number",
            "bounds": [[keyword, repr(bound), isinstance(bound, int)] for keyword, bound, _ in bounds]}
    return Node(T.LongType() if integer else T.DoubleType(), convert, tree=tree)


def _string(schema: dict[str, Any], fmt: str | None) -> Node:
    low, high, pattern = schema.get("minLength"), schema.get("maxLength"), schema.get("pattern")
    regex = re.compile(pattern) if isinstance(pattern, str) else None
    read = FORMAT_READERS.get(fmt or "")

    def convert(value: Any, path: str) -> Any:
        if not isinstance(value, str):
            raise wrong_type(path, "string", value)
        _count(path, len(value), low, high, "characters", "Length")
        if regex is not None and not regex.search(value):
            raise JsonConstraintError(f"{path}: {show(value)} does not match pattern {show(pattern)}")
        if read is None:
            return value
        try:
            return read(value)
        except ValueError as exc:
            raise JsonFormatError(f"{path}: {show(value)} is not a {fmt} ({exc})") from None
    tree = {"k": "string", "min": low, "max": high, "pattern": pattern if regex else None, "format": fmt}
    return Node(FORMATS.get(fmt or "", T.StringType()), convert, tree=tree)


# --- entry points --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def compile_document(text: str, where: str = "") -> Node:
    """The Node of a JSON Schema document (`json_schemas.document`): its root must be an object with properties,
    which become the table's columns."""
    parsed = json.loads(text)
    body = parsed.get("jsonschema")
    if not isinstance(body, dict):
        raise SchemaError(f"{where or 'schema'}: not a JSON Schema document")
    compiler = _Compiler(body["root"], body.get("refs", {}), where)
    node = compiler.node(body["root"], "#", body["root"])
    if not isinstance(node.spark, T.StructType) or node.nullable:
        raise compiler.refuse("#", f"a top-level {node.spark.simpleString()}{' or null' if node.nullable else ''} "
                                   "(the table's columns come from an object with properties)")
    return node


def spark_schema(text: str, where: str = "") -> T.StructType:
    spark = compile_document(text, where).spark
    assert isinstance(spark, T.StructType)
    return spark


def converter(text: str) -> Callable[[Any], dict[str, Any]]:
    """parsed document -> the row of the table's columns; InvalidJsonError naming the path otherwise."""
    node = compile_document(text)
    return lambda value: node.convert(value, "$")  # type: ignore[no-any-return]


__all__ = ["EPOCH", "DuplicateKeyError", "InvalidJsonError", "JsonConstraintError", "JsonEnumError", "JsonFormatError",
           "JsonRangeError", "JsonTypeError", "MalformedJsonError", "MissingPropertyError", "Node",
           "UnsupportedSchemaError", "compile_document", "converter", "parse", "spark_schema"]
