"""Where a routed pipeline's records go (docs/routing.md): each record's route key, read from its Kafka row before
any decoding, and the route a key names.

The key is what the route is read from: the schema id in the record's Confluent header (`by: recordName`; the
registry names its record type), the topic, a header's value, or a top-level field of a JSON value (or the Kafka
key as text). It is one Spark expression over the Kafka source's rows (`key_column`) and its Python twin over the
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
from ingestion.schema.registry import SchemaSource

ROUTE_ERROR = "RouteError"


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
    else:  # recordName: the schema id of the Confluent header
        key = F.when((F.length("value") >= 5) & (F.substring("value", 1, 1) == F.lit(b"\x00")),
                     F.conv(F.hex(F.substring("value", 2, 4)), 16, 10))
    return F.when(key != "", key)


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
        found = [str(int.from_bytes(v[1:5], "big")) if v is not None and len(v) >= 5 and v[0] == 0 else None
                 for v in source.column("value").to_pylist()]
    return [k if k else None for k in found]


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
                text = self.source.by_id(int(key))
                route = None if text is None else _record_route(text)
            self._known[key] = None if route is not None and self._quarantine(route) else route
        return self._known[key]

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
        if routing.by == "recordName":
            return ("the value has no Confluent header (magic byte 0 and a schema id) to read its record type from"
                    if key is None else f"schema id {key} is not in the schema registry: its record type is unknown")
        if routing.by == "header":
            return f"the record has no header {routing.header!r} (routing.header) or it is empty"
        if routing.by == "field":
            return f"the record has no field {routing.route_field!r} (routing.field) or it is null or empty"
        return "the record has no topic"


def _record_route(text: str) -> Route | None:
    """The route of an Avro schema: its record's simple name, and its full name (the subjects' `recordName`)."""
    try:
        schema = json.loads(text)
    except ValueError:
        return None
    if not isinstance(schema, dict) or not isinstance(schema.get("name"), str):
        return None
    name, namespace = schema["name"], schema.get("namespace") or ""
    full = name if "." in name or not namespace else f"{namespace}.{name}"
    return Route(full.rpartition(".")[2], full)
