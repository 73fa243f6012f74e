"""Debezium change events as Kafka Connect's JsonConverter writes them with `schemas.enable=true`: the envelope's
schema (before/after structs of the row, source, op, ts_ms, transaction) travels with every record, and the row's
columns carry Debezium's semantic types (as its PostgreSQL connector names them, adaptive time precision)."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from typing import Any

UTC = dt.UTC


def _column(field: str, kind: str, name: str | None = None, optional: bool = True, **more: Any) -> dict[str, Any]:
    column: dict[str, Any] = {"type": kind, "optional": optional, "field": field, **more}
    if name:
        column.update(name=name, version=1)
    return column


def row_schema(*, points: str | None = None) -> dict[str, Any]:
    """The schema of the customers row; `points` the Connect type of a column added by ALTER TABLE ADD COLUMN."""
    fields = [
        _column("id", "int32", optional=False),
        _column("name", "string"),
        _column("updated_at", "string", "io.debezium.time.ZonedTimestamp"),
        _column("created", "int64", "io.debezium.time.MicroTimestamp"),
        _column("seen_ms", "int64", "io.debezium.time.Timestamp"),
        _column("birthday", "int32", "io.debezium.time.Date"),
        _column("opens", "int64", "io.debezium.time.MicroTime"),
        _column("balance", "struct", "io.debezium.data.VariableScaleDecimal", doc="Variable scaled decimal",
                fields=[_column("scale", "int32", optional=False), _column("value", "bytes", optional=False)]),
        _column("prefs", "string", "io.debezium.data.Json"),
        _column("ref", "string", "io.debezium.data.Uuid"),
        _column("tier", "string", "io.debezium.data.Enum", parameters={"allowed": "gold,silver"}),
    ]
    if points:
        fields.append(_column("points", points))
    return {"type": "struct", "optional": True, "name": "shop.public.customers.Value", "fields": fields}


def envelope_schema(*, points: str | None = None) -> dict[str, Any]:
    row = row_schema(points=points)
    source = [_column("version", "string", optional=False), _column("connector", "string", optional=False),
              _column("name", "string", optional=False), _column("ts_ms", "int64", optional=False),
              _column("snapshot", "string", "io.debezium.data.Enum", parameters={"allowed": "true,last,false"},
                      default="false"),
              _column("db", "string", optional=False), _column("table", "string", optional=False),
              _column("txId", "int64"), _column("lsn", "int64")]
    return {"type": "struct", "optional": False, "name": "shop.public.customers.Envelope", "version": 1, "fields": [
        {**row, "field": "before"}, {**row, "field": "after"},
        {"type": "struct", "optional": False, "name": "io.debezium.connector.postgresql.Source", "fields": source,
         "field": "source"},
        _column("op", "string", optional=False), _column("ts_ms", "int64"),
        {"type": "struct", "optional": True, "name": "event.block", "version": 1, "field": "transaction",
         "fields": [_column("id", "string", optional=False), _column("total_order", "int64", optional=False),
                    _column("data_collection_order", "int64", optional=False)]}]}


def variable_decimal(number: decimal.Decimal) -> dict[str, Any]:
    """A VariableScaleDecimal payload: the scale and the unscaled two's-complement bytes in base64."""
    exponent = number.as_tuple().exponent
    assert isinstance(exponent, int)
    unscaled = int(number.scaleb(-exponent))
    raw = unscaled.to_bytes((unscaled.bit_length() + 8) // 8 or 1, "big", signed=True)
    return {"scale": -exponent, "value": base64.b64encode(raw).decode()}


def customer(key: int, version: int) -> dict[str, Any]:
    """The payload of a customers row (the `after` of its change number `version`)."""
    row: dict[str, Any] = {
        "id": key, "name": f"c{key}-{version}",
        "updated_at": f"2026-03-0{1 + key % 9}T1{key % 10}:00:0{version % 10}.{version:06d}+02:00",
        "created": 1_767_225_600_000_000 + key * 1_000_001,  # 2026-01-01 plus key seconds and µs
        "seen_ms": 1_767_225_600_000 + version, "birthday": 20_454 - key, "opens": 3_600_000_000 * 8 + key,
        "balance": variable_decimal(decimal.Decimal(f"{key}.{version:02d}")), "prefs": '{"lang": "en"}',
        "ref": f"00000000-0000-4000-8000-{key:012d}", "tier": "gold" if key % 2 else "silver"}
    return row


def customer_row(key: int, version: int, *, points: int | None = None) -> dict[str, Any]:
    """What bronze holds for `customer(key, version)`: Debezium's types as Spark's."""
    return {"id": key, "name": f"c{key}-{version}",
            "updated_at": dt.datetime(2026, 3, 1 + key % 9, 10 + key % 10, 0, version % 10, version,
                                      tzinfo=dt.timezone(dt.timedelta(hours=2))).astimezone(UTC),
            "created": dt.datetime(2026, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=key, microseconds=key),
            "seen_ms": dt.datetime(2026, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=version),
            "birthday": dt.date(2026, 1, 1) - dt.timedelta(days=key), "opens": f"08:00:00.{key:06d}",
            "balance": decimal.Decimal(f"{key}.{version:02d}"), "prefs": '{"lang": "en"}',
            "ref": f"00000000-0000-4000-8000-{key:012d}", "tier": "gold" if key % 2 else "silver",
            "points": points}


def change(key: int, version: int, op: str, *, lsn: int, points: str | None = None,
           before_points: int | None = None, after_points: int | None = None) -> dict[str, Any]:
    """One change event: `op` c (before null), u (the previous version before), d (after null)."""
    before = None if op == "c" else customer(key, version - 1)
    after = None if op == "d" else customer(key, version)
    if points:  # the column exists at the source: every row image carries it, null or not
        for row, value in ((before, before_points), (after, after_points)):
            if row is not None:
                row["points"] = value
    return {"schema": envelope_schema(points=points), "payload": {
        "before": before, "after": after,
        "source": {"version": "3.6.1.Final", "connector": "postgresql", "name": "shop", "ts_ms": 1_767_225_600_000,
                   "snapshot": "false", "db": "shop", "table": "customers", "txId": lsn // 10, "lsn": lsn},
        "op": op, "ts_ms": 1_767_225_600_000 + lsn, "transaction": None}}
