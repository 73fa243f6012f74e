"""Where a routed pipeline's records go (docs/routing.md): each record's route key, read from its Kafka row before
any decoding, and the route a key names.

The key is what the route is read from: the schema id in the record's Confluent header (`by: recordName`; the
registry names its record type; for Protobuf the schema id and the message-index array after it, `<id>:<hex>`,
naming a message of the schema's file), the topic, a header's value, or a top-level field of a JSON value (or the
Kafka key as text). It is one Spark expression over the Kafka source's rows (`key_column`) and its Python twin over the
driver's Arrow rows (`keys_of`), so both write paths split a batch alike. A record without one (no header, no
field, no schema id, a schema id the registry does not know) has no route: it is quarantined as `RouteError`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F

from ingestion.config import PipelineConfig, RoutingOptions
from ingestion.decode.protobuf_wire import read_indexes
from ingestion.decode.wire import WireFormatError
from ingestion.schema import protobuf_schemas
from ingestion.schema.registry import SchemaSource

ROUTE_ERROR = "RouteError"
# A Protobuf route key's message-index array ends within this many bytes after the 5-byte header (a count up to 63
# and indexes of a few bytes each: deeper than any schema); one that does not has no route.
INDEX_WINDOW = 64


@dataclass(frozen=True)
class Route:
    """A route: its value (`{route}` before normalising), and for `recordName` the record type's full name."""

    value: str
    record: str = ""


def _routing(config: PipelineConfig) -> RoutingOptions:
    assert config.routing is not None
    return config.routing


def key_column(config: PipelineConfig) -> Column:
    """The route key of each Kafka source row (a string; null where the record has none)."""
    routing = _routing(config)
    if routing.by == "topic":
        key = F.col("topic")
    elif routing.by == "header":
        name = routing.header.replace("\\", "\\\\").replace("'", "\\'")
        key = F.expr(f"CAST(try_element_at(filter(headers, h -> h.key = '{name}'), 1).value AS STRING)")
    elif routing.by == "field" and routing.route_field == "_kafka_key":
        key = F.col("key").cast("string")
    elif routing.by == "field":
        text = F.col("value") if config.value.format == "json" else F.expr("substring(value, 6)")
        key = F.get_json_object(text.cast("string"), "$." + routing.route_field)
    else:  # recordName: the schema id of the Confluent header (and Protobuf's message indexes)
        key = F.when((F.length("value") >= 5) & (F.substring("value", 1, 1) == F.lit(b"\x00")),
                     F.conv(F.hex(F.substring("value", 2, 4)), 16, 10))
        if config.value.format == "protobuf":
            key = F.concat(key, F.lit(":"), F.hex(F.substring("value", 6, _index_length())))
    return F.when(key != "", key)


def _index_length() -> Column:
    """The length of a Protobuf value's message-index array (what `keys_of` reads in Python): 1 for the single 0
    byte of [0]; else a one-byte zig-zag count n (at most 63) and n varints, up to the (n+1)-th byte below 0x80 in
    the `INDEX_WINDOW` bytes after the header; null otherwise (no route)."""
    return F.expr(f"""CASE WHEN length(value) < 6 THEN NULL ELSE
      aggregate(
        transform(sequence(6, least(length(value), {5 + INDEX_WINDOW})),
                  p -> cast(conv(hex(substring(value, p, 1)), 16, 10) AS INT)),
        named_struct('at', 0, 'need', -1, 'length', CAST(NULL AS INT)),
        (acc, b) -> CASE
          WHEN acc.length IS NOT NULL OR acc.need = -2 THEN acc
          WHEN acc.at = 0 AND b = 0 THEN named_struct('at', 1, 'need', 0, 'length', 1)
          WHEN acc.at = 0 AND (b >= 128 OR b % 2 = 1)
            THEN named_struct('at', 1, 'need', -2, 'length', CAST(NULL AS INT))
          WHEN acc.at = 0 THEN named_struct('at', 1, 'need', CAST(b / 2 AS INT), 'length', CAST(NULL AS INT))
          WHEN b < 128 AND acc.need = 1 THEN named_struct('at', acc.at + 1, 'need', 0, 'length', acc.at + 1)
          WHEN b < 128 THEN named_struct('at', acc.at + 1, 'need', acc.need - 1, 'length', CAST(NULL AS INT))
          ELSE named_struct('at', acc.at + 1, 'need', acc.need, 'length', CAST(NULL AS INT)) END,
        acc -> acc.length) END""")


def keys_of(config: PipelineConfig, source: pa.RecordBatch) -> list[str | None]:
    """`key_column` of each of the driver's Kafka rows (`kafka.fetch.SOURCE_ARROW_SCHEMA`)."""
    routing = _routing(config)
    topics = source.column("topic").to_pylist()
    if routing.by == "topic":
        found: list[str | None] = list(topics)
    elif routing.by == "header":
        found = [_header(h, routing.header) for h in source.column("headers").to_pylist()]
    elif routing.by == "field" and routing.route_field == "_kafka_key":
        found = [None if k is None else k.decode("utf-8", "replace") for k in source.column("key").to_pylist()]
    elif routing.by == "field":
        skip = 0 if config.value.format == "json" else 5
        found = [_field(v, skip, routing.route_field) for v in source.column("value").to_pylist()]
    else:
        protobuf = config.value.format == "protobuf"
        found = [_record_key(v, protobuf) for v in source.column("value").to_pylist()]
    return [k if k else None for k in found]


def _record_key(value: bytes | None, protobuf: bool) -> str | None:
    if value is None or len(value) < 5 or value[0] != 0:
        return None
    schema_id = str(int.from_bytes(value[1:5], "big"))
    if not protobuf:
        return schema_id
    length = _index_length_of(value[5:5 + INDEX_WINDOW])
    return None if length is None else f"{schema_id}:{value[5:5 + length].hex().upper()}"


def _index_length_of(window: bytes) -> int | None:
    """`_index_length` in Python, over the bytes after the header."""
    if not window:
        return None
    if window[0] == 0:
        return 1
    if window[0] >= 128 or window[0] % 2:
        return None
    need = window[0] // 2
    for at, byte in enumerate(window[1:], start=1):
        if byte < 128:
            need -= 1
            if need == 0:
                return at + 1
    return None


def _header(headers: Sequence[dict[str, object]] | None, name: str) -> str | None:
    for h in headers or ():
        if h["key"] == name:
            value = h["value"]
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else None
    return None


def _field(value: bytes | None, skip: int, name: str) -> str | None:
    """A top-level field of a JSON value as Spark's get_json_object gives it: a string as is, another value as
    JSON text, null when absent, null or not JSON."""
    if value is None:
        return None
    try:
        found = json.loads(value[skip:]).get(name)
    except (ValueError, AttributeError):
        return None
    if found is None:
        return None
    return found if isinstance(found, str) else json.dumps(found, separators=(",", ":"))


class RouteNames:
    """The route each key names, asked of the schema source once per schema id (`by: recordName`)."""

    def __init__(self, config: PipelineConfig, source: SchemaSource) -> None:
        self.config = config
        self.routing = _routing(config)
        self.source = source
        self._known: dict[str, Route | None] = {}
        self._refused: dict[str, str] = {}  # keys whose route has no table, and why

    def route(self, key: str | None) -> Route | None:
        """The route of a key; None when the record has none (see `reason`)."""
        if key is None:
            return None
        if key not in self._known:
            route = Route(key) if self.routing.by != "recordName" else None
            if route is None:
                schema_id, _, indexes = key.partition(":")
                text = self.source.by_id(int(schema_id))
                route = None if text is None else _record_route(text, indexes)
            self._known[key] = None if route is not None and self._quarantine(route) else route
        return self._known[key]

    def tables_of_row(self, key: str | None) -> list[str]:
        """The tables a route table's row of this key (read from its columns: `delta.routed.route_keys_in_table`)
        may be in: its route's; for a Protobuf row, which keeps its schema id but not its message indexes, the
        table of any message of its schema's file."""
        if key is not None and self.routing.by == "recordName" and self.config.value.format == "protobuf":
            text = self.source.by_id(int(key))
            tables = [self.config.route_table(r.value) for r in routes_of_schema(text)] if text else []
            return sorted(set(tables))
        route = self.route(key)
        return [] if route is None else [self.config.route_table(route.value)]

    def refuse(self, key: str, reason: str) -> None:
        """A key whose route has no table (its subjects cannot be read): its records go to quarantine, with
        `reason`, until the run restarts."""
        self._known[key] = None
        self._refused[key] = reason

    def _quarantine(self, route: Route) -> bool:
        """Whether a route's table would be the pipeline's quarantine table (a route named `quarantine`)."""
        config = self.config
        return config.route_path(config.route_table(route.value)).rstrip("/") == config.quarantine_path.rstrip("/")

    def reason(self, key: str | None) -> str:
        """Why a record of this key has no route (the quarantine's message)."""
        routing = self.routing
        if key is not None and key in self._refused:
            return self._refused[key]
        if key is not None and self._known.get(key, 0) is None and routing.by != "recordName":
            return f"route {key!r} names the pipeline's quarantine table"
        if routing.by == "recordName" and self.config.value.format == "protobuf":
            if key is None:
                return ("the value has no Confluent Protobuf header (magic byte 0, a schema id and a message-index "
                        "array) to read its message from")
            schema_id, _, indexes = key.partition(":")
            if self.source.by_id(int(schema_id)) is None:
                return f"schema id {schema_id} is not in the schema registry: its messages are unknown"
            return f"message indexes {_indexes(indexes)} name no message of schema id {schema_id}"
        if routing.by == "recordName":
            return ("the value has no Confluent header (magic byte 0 and a schema id) to read its record type from"
                    if key is None else f"schema id {key} is not in the schema registry: its record type is unknown")
        if routing.by == "header":
            return f"the record has no header {routing.header!r} (routing.header) or it is empty"
        if routing.by == "field":
            return f"the record has no field {routing.route_field!r} (routing.field) or it is null or empty"
        return "the record has no topic"


def routes_of_schema(text: str) -> list[Route]:
    """Every route a record of this schema may have: an Avro schema's one, each message of a Protobuf file (a
    table's row keeps its schema id, not its message indexes: `verify` checks a Protobuf row against these)."""
    if protobuf_schemas.is_document(text):
        return [Route(str(m.name), str(m.full_name)) for m in protobuf_schemas.all_messages(text)
                if not m.GetOptions().map_entry]  # a map field's entry type is no record's message
    route = _record_route(text, "")
    return [] if route is None else [route]


def _indexes(text: str) -> list[int] | str:
    try:
        return list(read_indexes(memoryview(bytes.fromhex(text)))[0])
    except (ValueError, WireFormatError):
        return repr(text)


def _record_route(text: str, indexes: str) -> Route | None:
    """The route of a schema: an Avro record's simple name and its full name (the subjects' `recordName`); for a
    Protobuf file, those of the message its message-index array (`indexes`, hex) names."""
    if protobuf_schemas.is_document(text):
        found = _indexes(indexes)
        message = protobuf_schemas.by_indexes(text, tuple(found)) if isinstance(found, list) else None
        return None if message is None else Route(str(message.name), str(message.full_name))
    try:
        schema = json.loads(text)
    except ValueError:
        return None
    if not isinstance(schema, dict) or not isinstance(schema.get("name"), str):
        return None
    name, namespace = schema["name"], schema.get("namespace") or ""
    full = name if "." in name or not namespace else f"{namespace}.{name}"
    return Route(full.rpartition(".")[2], full)
