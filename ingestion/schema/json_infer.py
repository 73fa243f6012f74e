"""A JSON Schema for a topic of plain JSON, inferred from sample documents (`ingest init`,
docs/json.md#a-schema-from-the-topic).

Built for the column mapping of `json_types` and for losing nothing it did not see: every property is optional
and nullable; a property seen with two kinds of value (a string here, a number there) is `{}` (its compact JSON
text in a string column), as is one only ever null; integers and numbers together are `number`; a string is a
`date-time` or `date` only when every sampled value is one. A document that a sample did not show (a new property,
another type) is dropped or quarantined by the decoder as for any schema file, never read into a wrong column.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ingestion.schema import json_values

ANY: dict[str, Any] = {}  # any JSON value: a string column of its compact JSON text


@dataclass
class _Seen:
    """What the samples held at one place of the document."""

    kinds: set[str] = field(default_factory=set)  # JSON types, "null" included
    strings: set[str | None] = field(default_factory=set)  # the formats every string had so far (None: plain)
    properties: dict[str, _Seen] = field(default_factory=dict)  # objects': in the order first seen
    items: _Seen | None = None  # arrays' elements

    def add(self, value: Any) -> None:
        kind = _kind(value)
        self.kinds.add(kind)
        if kind == "string":
            self.strings.add(_string_format(value))
        elif kind == "object":
            for name, inner in value.items():
                self.properties.setdefault(name, _Seen()).add(inner)
        elif kind == "array":
            self.items = self.items or _Seen()
            for inner in value:
                self.items.add(inner)


def _kind(value: Any) -> str:
    """The JSON type of a parsed value (a bool is not an integer, an integer is not a number)."""
    if value is None:
        return "null"
    for kind, types in (("boolean", bool), ("integer", int), ("number", float), ("string", str), ("array", list)):
        if isinstance(value, types):
            return kind
    return "object"


def _string_format(text: str) -> str | None:
    for name, read in (("date-time", json_values.read_date_time), ("date", json_values.read_date)):
        try:
            read(text)
        except ValueError:
            continue
        return name
    return None


def _seen(documents: Iterable[dict[str, Any]]) -> _Seen:
    """What the documents held, place by place."""
    top = _Seen()
    for document in documents:
        top.add(document)
    return top


def infer(documents: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The JSON Schema of the top-level objects `documents` (at least one): an object of every property any of them
    has, in the order first seen."""
    top = _seen(documents)
    if top.kinds != {"object"}:
        raise ValueError("the documents are not all JSON objects")
    if not top.properties:
        raise ValueError("the documents have no properties to make columns of")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
            "properties": {name: _schema(seen) for name, seen in top.properties.items()}}


def mixed_kinds(documents: Iterable[dict[str, Any]]) -> dict[str, list[str]]:
    """The top-level properties the samples held two kinds of value in (kept as their JSON text, `ANY`), with the
    kinds seen: what a reader of the inferred file should check first."""
    top = _seen(documents)
    found = {}
    for name, seen in top.properties.items():
        kinds = seen.kinds - {"null"}
        if len(kinds - {"integer"} if "number" in kinds else kinds) > 1:
            found[name] = sorted(kinds)
    return found


def _schema(seen: _Seen) -> dict[str, Any]:
    kinds = seen.kinds - {"null"}
    if kinds == {"integer", "number"}:
        kinds = {"number"}
    if len(kinds) != 1:  # only ever null, or two kinds of value: kept as its JSON text
        return dict(ANY)
    (kind,) = kinds
    schema: dict[str, Any] = {"type": [kind, "null"]}
    if kind == "string" and len(seen.strings) == 1 and None not in seen.strings:
        schema["format"] = next(iter(seen.strings))
    elif kind == "object":
        if not seen.properties:  # only ever {}: its JSON text
            return dict(ANY)
        schema["properties"] = {name: _schema(inner) for name, inner in seen.properties.items()}
    elif kind == "array":
        items = seen.items
        schema["items"] = _schema(items) if items is not None and items.kinds else dict(ANY)
    return schema
