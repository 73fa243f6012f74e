"""Debezium's semantic types on the JVM path: Spark expressions that turn `from_avro`'s plain values (a long of
microseconds, an int of days) into what the Python path gives (`schema.debezium_types`), and the condition under
which the JVM vouches for them.

A value the expressions cannot reproduce exactly is left to Python (the row is unverified): an epoch value outside
years 1 to 9999, a time outside the day, a ZonedTimestamp not in Debezium's spelling (`2026-03-01T10:00:00.5Z`,
`+02:00`) or outside the years once in UTC, and every VariableScaleDecimal (its unscaled bytes have no Spark
function). Semantic types inside a union of several types are decoded in Python altogether (`unsupported`).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from ingestion.errors import SchemaError
from ingestion.schema import avro_types, debezium_types

# Python's datetime range (years 1 to 9999) in microseconds since the epoch, and in days.
_MIN_MICROS, _MAX_MICROS = -62_135_596_800_000_000, 253_402_300_799_999_999
_MIN_DAYS, _MAX_DAYS = -719_162, 2_932_896
_DAY_MICROS = 86_400_000_000
# Debezium's ZonedTimestamp as its formatter writes it (ISO_OFFSET_DATE_TIME): a subset of what Python reads.
_ZONED = (r"^[0-9]{4}-(0[1-9]|1[0-2])-[0-3][0-9]T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,9})?"
          r"(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$")


def _between(value: Column, low: int, high: int) -> Column:
    return (value >= F.lit(low)) & (value <= F.lit(high))


def _micros(value: Column, name: str) -> tuple[Column, Column]:
    """(the value as epoch microseconds, whether it is within Python's range) for an epoch type; nanoseconds
    round toward the past, in decimal arithmetic (a double loses digits beyond 2**53)."""
    if name == debezium_types.TIMESTAMP:  # in long arithmetic only where it cannot overflow (ANSI mode fails it)
        ok = _between(value, _MIN_MICROS // 1000, _MAX_MICROS // 1000)
        return F.when(ok, value) * 1000, ok
    if name == debezium_types.NANO_TIMESTAMP:
        whole = value.cast("decimal(20,0)") - F.pmod(value, F.lit(1000))
        return (whole / F.lit(1000)).cast("long"), F.lit(True)  # 64 bits of nanoseconds: years 1677 to 2262
    return value, _between(value, _MIN_MICROS, _MAX_MICROS)


def _time_text(micros: Column, digits: int) -> Column:
    fraction = F.pmod(micros, F.lit(1_000_000))
    fraction = (fraction / F.lit(10 ** (6 - digits))).cast("long") if digits != 6 else fraction
    return F.format_string(f"%02d:%02d:%02d.%0{digits}d", (micros / F.lit(3_600_000_000)).cast("long"),
                           F.pmod((micros / F.lit(60_000_000)).cast("long"), F.lit(60)),
                           F.pmod((micros / F.lit(1_000_000)).cast("long"), F.lit(60)), fraction)


def _leaf(value: Column, name: str) -> tuple[Column, Column]:
    """(the converted value, whether the JVM vouches for it) of a non-null value of a semantic type."""
    if name in (debezium_types.TIMESTAMP, debezium_types.MICRO_TIMESTAMP, debezium_types.NANO_TIMESTAMP):
        micros, ok = _micros(value, name)
        return F.when(ok, F.timestamp_micros(micros)), ok
    if name == debezium_types.DATE:
        ok = _between(value, _MIN_DAYS, _MAX_DAYS)
        return F.when(ok, F.date_from_unix_date(value)), ok
    if name in (debezium_types.TIME, debezium_types.MICRO_TIME, debezium_types.NANO_TIME):
        micros = (value.cast("long") * 1000 if name == debezium_types.TIME else
                  (value / F.lit(1000)).cast("long") if name == debezium_types.NANO_TIME else value)
        ok = _between(micros, 0, _DAY_MICROS) & (value >= F.lit(0))
        return F.when(ok, _time_text(micros, 3 if name == debezium_types.TIME else 6)), ok
    if name == debezium_types.ZONED_TIMESTAMP:
        parsed = F.try_to_timestamp(value, F.lit("yyyy-MM-dd'T'HH:mm:ss[.SSSSSSSSS]XXX"))
        ok = value.rlike(_ZONED) & parsed.isNotNull() & _between(F.unix_micros(parsed), _MIN_MICROS, _MAX_MICROS)
        return F.when(ok, parsed), F.coalesce(ok, F.lit(False))
    # VariableScaleDecimal: left to Python
    return F.lit(None).cast(debezium_types.VARIABLE_DECIMAL_TYPE), F.lit(False)


def _mentions(schema: Any) -> bool:
    """Whether a semantic type's name appears anywhere in the schema (a walk of the JSON, no py4j call)."""
    if isinstance(schema, dict):
        return schema.get("connect.name") in debezium_types.SEMANTIC or any(_mentions(v) for v in schema.values())
    return isinstance(schema, list) and any(_mentions(v) for v in schema)


def convert(value: Column, schema: Any, names: dict[str, Any] | None = None) -> tuple[Column, Column] | None:
    """(`value` with every semantic type inside converted, whether the JVM vouches for all of them), or None when
    the schema has none. SchemaError where one sits in a union of several types."""
    if names is None:
        if not _mentions(schema):
            return None  # the common case costs no py4j call
        names = {}
    if isinstance(schema, str):
        return convert(value, names[schema], names) if schema in names else None
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            return convert(value, branches[0], names)
        if any(convert(F.lit(None), b, dict(names)) is not None for b in branches):
            raise SchemaError("a Debezium semantic type in a union of several types is decoded in Python")
        return None
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if kind in ("record", "enum", "fixed") and "name" in schema:
        names[str(schema["name"])] = schema
        names[f"{schema.get('namespace')}.{schema['name']}"] = schema
    if avro_types.semantic(schema) is not None:
        converted, ok = _leaf(value, str(schema["connect.name"]))
        return F.when(value.isNotNull(), converted), value.isNull() | ok
    if kind == "record":
        parts = [(f["name"], convert(value.getField(f["name"]), f["type"], names)) for f in schema["fields"]]
        if all(p is None for _, p in parts):
            return None
        fields = [(p[0] if p else value.getField(n)).alias(n) for n, p in parts]
        oks = [p[1] for _, p in parts if p is not None]
        ok = oks[0]
        for more in oks[1:]:
            ok = ok & more
        return F.when(value.isNotNull(), F.struct(*fields)), value.isNull() | ok
    if kind == "array":
        inner = convert(F.lit(None), schema["items"], dict(names))
        if inner is None:
            return None
        items = schema["items"]
        return (F.transform(value, lambda x: _checked(convert(x, items, dict(names)))[0]),
                F.coalesce(F.forall(value, lambda x: _checked(convert(x, items, dict(names)))[1]), F.lit(True)))
    if kind == "map":
        inner = convert(F.lit(None), schema["values"], dict(names))
        if inner is None:
            return None
        values = schema["values"]
        return (F.transform_values(value, lambda _, x: _checked(convert(x, values, dict(names)))[0]),
                F.coalesce(F.forall(F.map_values(value), lambda x: _checked(convert(x, values, dict(names)))[1]),
                           F.lit(True)))
    if isinstance(kind, (list, dict)):
        return convert(value, kind, names)
    return None


def _checked(found: tuple[Column, Column] | None) -> tuple[Column, Column]:
    assert found is not None
    return found
