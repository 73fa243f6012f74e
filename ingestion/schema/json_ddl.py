"""A Spark DDL string as the schema of plain JSON (`value.schemaFile` ending in `.ddl`), turned into the JSON Schema
it means, so one mapping, one decoder and one set of strict rules serve both (docs/json.md#a-spark-ddl-schema).

    id BIGINT NOT NULL, name STRING, placed_at TIMESTAMP, items ARRAY<STRUCT<sku: STRING NOT NULL, qty: BIGINT>>

Types are the ones the JSON mapping gives (STRING, BIGINT, DOUBLE, BOOLEAN, DATE, TIMESTAMP, ARRAY, MAP<STRING, T>,
STRUCT); `NOT NULL` makes a field required and not nullable, any other field may be absent or null. A type the
mapping cannot give (INT, DECIMAL, BINARY, ...) is refused naming it, rather than read into another column type.
"""

from __future__ import annotations

import re
from typing import Any

from ingestion.errors import SchemaError

_SCALARS: dict[str, dict[str, Any]] = {
    "STRING": {"type": "string"}, "BIGINT": {"type": "integer"}, "LONG": {"type": "integer"},
    "DOUBLE": {"type": "number"}, "BOOLEAN": {"type": "boolean"},
    "DATE": {"type": "string", "format": "date"}, "TIMESTAMP": {"type": "string", "format": "date-time"},
}
_TOKEN = re.compile(r"\s*(`(?:[^`]|``)+`|[A-Za-z_][A-Za-z0-9_]*|[<>(),:]|\S)")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = [m.group(1) for m in _TOKEN.finditer(text) if m.group(1).strip()]
        self.i = 0

    def fail(self, what: str) -> SchemaError:
        near = " ".join(self.tokens[self.i:self.i + 3]) or "the end"
        return SchemaError(f"Spark DDL: {what} near {near!r}")

    def peek(self) -> str:
        return self.tokens[self.i] if self.i < len(self.tokens) else ""

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if not token or (expected is not None and token.upper() != expected):
            raise self.fail(f"expected {expected or 'more'}")
        self.i += 1
        return token

    def fields(self, end: str) -> dict[str, Any]:
        """name type [NOT NULL], ... up to `end` ("" for the end of the text): an object schema."""
        properties: dict[str, Any] = {}
        required: list[str] = []
        while True:
            name = self.take()
            name = name[1:-1].replace("``", "`") if name.startswith("`") else name
            if self.peek() == ":":
                self.take()
            schema = self.type()
            if self.peek().upper() == "NOT":
                self.take()
                self.take("NULL")
                required.append(name)
            else:
                schema = {"oneOf": [schema, {"type": "null"}]}
            if name in properties:
                raise self.fail(f"field {name!r} twice")
            properties[name] = schema
            if self.peek() != ",":
                break
            self.take()
        if self.peek() != end:
            raise self.fail(f"expected {end or 'the end'}")
        return {"type": "object", "properties": properties, **({"required": required} if required else {})}

    def type(self) -> dict[str, Any]:
        word = self.take().upper()
        if word in _SCALARS:
            return dict(_SCALARS[word])
        if word == "ARRAY":
            self.take("<")
            items = self.type()
            self.take(">")
            return {"type": "array", "items": items}
        if word == "MAP":
            self.take("<")
            if self.take().upper() != "STRING":
                raise self.fail("a MAP's keys must be STRING (JSON object keys)")
            self.take(",")
            values = self.type()
            self.take(">")
            return {"type": "object", "additionalProperties": values}
        if word == "STRUCT":
            self.take("<")
            made = self.fields(">")
            self.take(">")
            return made
        self.i -= 1
        raise self.fail(f"type {word} is not one the JSON mapping gives (STRING, BIGINT, DOUBLE, BOOLEAN, DATE, "
                        "TIMESTAMP, ARRAY, MAP<STRING, T>, STRUCT)")


def to_json_schema(text: str) -> dict[str, Any]:
    """The JSON Schema a DDL string means (an object of its fields); SchemaError naming the place otherwise."""
    parser = _Parser(text)
    if not parser.tokens:
        raise SchemaError("Spark DDL: no fields")
    return parser.fields("")
