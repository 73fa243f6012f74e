"""Debezium's semantic types -> Spark types and values (docs/cdc.md#debeziums-types).

Debezium names the meaning of a plain Connect type in the schema's `name` (JsonConverter) or `connect.name` (its
Avro output): `io.debezium.time.MicroTimestamp` is an int64 of microseconds since the epoch, `ZonedTimestamp` an
ISO-8601 string with its offset, `VariableScaleDecimal` a struct of a scale and the unscaled bytes. Bronze holds
what they mean: timestamps as `timestamp` (UTC; digits below the microsecond dropped, toward the past), days as
`date`, times of day as `HH:MM:SS.mmm` (ms) or `HH:MM:SS.ffffff` (micro and nano) strings as Connect's own Time is
(Spark has no time type), a variable-scale decimal as `decimal(38,18)`. The string types (`Json`, `Uuid`, `Enum`,
`EnumSet`, `ZonedTime`, `Xml`) stay strings, a geometry its struct. A name on another type than Debezium gives it
is left as its plain type.

Each converter takes (value, JSON path) and raises the JSON decoder's faults (`json_values`), so a value that is
not what its name says is quarantined with the field named, whichever format brought it.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
from collections.abc import Callable
from typing import Any

from pyspark.sql import types as T

from ingestion.schema.json_values import (
    EPOCH,
    JsonConstraintError,
    JsonFormatError,
    JsonRangeError,
    JsonTypeError,
    read_date_time,
    show,
    wrong_type,
)

Convert = Callable[[Any, str], Any]

ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
TIMESTAMP = "io.debezium.time.Timestamp"
MICRO_TIMESTAMP = "io.debezium.time.MicroTimestamp"
NANO_TIMESTAMP = "io.debezium.time.NanoTimestamp"
DATE = "io.debezium.time.Date"
TIME = "io.debezium.time.Time"
MICRO_TIME = "io.debezium.time.MicroTime"
NANO_TIME = "io.debezium.time.NanoTime"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"

# The column of a VariableScaleDecimal: its scale varies by value, a column's cannot; a value it cannot hold
# exactly is refused (JsonRangeError), never rounded. Debezium's `decimal.handling.mode=string` gives strings.
VARIABLE_DECIMAL_TYPE = T.DecimalType(38, 18)
_DAY_MICROS = 86_400_000_000


def _integer(path: str, value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise wrong_type(path, what, value)
    return value


def _micros_since_epoch(micros: int, path: str, value: Any, unit: str) -> dt.datetime:
    try:
        return EPOCH + dt.timedelta(microseconds=micros)
    except OverflowError:
        raise JsonRangeError(f"{path}: {value} {unit} is outside years 1 to 9999") from None


def zoned_timestamp(value: Any, path: str) -> dt.datetime:
    if not isinstance(value, str):
        raise wrong_type(path, "ZonedTimestamp (ISO-8601 text with an offset)", value)
    try:
        return read_date_time(value)
    except ValueError as exc:
        raise JsonFormatError(f"{path}: {show(value)} is not a ZonedTimestamp ({exc})") from None


def timestamp(value: Any, path: str) -> dt.datetime:
    return _micros_since_epoch(_integer(path, value, "Timestamp (epoch milliseconds)") * 1000, path, value, "ms")


def micro_timestamp(value: Any, path: str) -> dt.datetime:
    return _micros_since_epoch(_integer(path, value, "MicroTimestamp (epoch microseconds)"), path, value, "µs")


def nano_timestamp(value: Any, path: str) -> dt.datetime:
    nanos = _integer(path, value, "NanoTimestamp (epoch nanoseconds)")
    return _micros_since_epoch(nanos // 1000, path, value, "ns")


def date(value: Any, path: str) -> dt.date:
    days = _integer(path, value, "Date (days since 1970-01-01)")
    try:
        return dt.date(1970, 1, 1) + dt.timedelta(days=days)
    except OverflowError:
        raise JsonRangeError(f"{path}: {days} days is outside years 1 to 9999") from None


def time_text(micros: int, digits: int) -> str:
    """A time of day as `HH:MM:SS` and `digits` (3 or 6) of the fraction; 24:00:00 (PostgreSQL has it) included."""
    seconds, fraction = divmod(micros, 1_000_000)
    text = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return f"{text}.{fraction // 10 ** (6 - digits):0{digits}d}"


def _time_of_day(micros: int, path: str, value: Any, unit: str, digits: int) -> str:
    if not 0 <= micros <= _DAY_MICROS:
        raise JsonRangeError(f"{path}: {value} {unit} is not a time of day")
    return time_text(micros, digits)


def time(value: Any, path: str) -> str:
    millis = _integer(path, value, "Time (milliseconds of the day)")
    return _time_of_day(millis * 1000, path, value, "ms", 3)


def micro_time(value: Any, path: str) -> str:
    return _time_of_day(_integer(path, value, "MicroTime (microseconds of the day)"), path, value, "µs", 6)


def nano_time(value: Any, path: str) -> str:
    nanos = _integer(path, value, "NanoTime (nanoseconds of the day)")
    if nanos < 0:
        raise JsonRangeError(f"{path}: {value} ns is not a time of day")
    return _time_of_day(nanos // 1000, path, value, "ns", 6)


def variable_scale_decimal(value: Any, path: str) -> decimal.Decimal:
    """{scale, value}: the unscaled two's-complement big-endian bytes (base64 in JSON, bytes in Avro) times
    10^-scale, exactly, as decimal(38,18)."""
    if not isinstance(value, dict):
        raise wrong_type(path, "VariableScaleDecimal (a struct of scale and value)", value)
    extra = set(value) - {"scale", "value"}
    if extra:
        raise JsonConstraintError(f"{path}.{sorted(extra)[0]}: field not in the record's schema")
    scale, raw = value.get("scale"), value.get("value")
    if isinstance(scale, bool) or not isinstance(scale, int):
        raise wrong_type(f"{path}.scale", "int32", scale)
    if not -(2 ** 31) <= scale < 2 ** 31:
        raise JsonRangeError(f"{path}.scale: {scale} is beyond int32")
    if isinstance(raw, str):
        try:
            raw = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise JsonConstraintError(f"{path}.value: {show(raw)} is not base64") from None
    elif not isinstance(raw, bytes | bytearray):
        raise JsonTypeError(f"{path}.value: expected bytes (base64 text), got {show(raw)}")
    number = decimal.Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale, decimal.Context(prec=10_000))
    return fit_decimal(number, path)


def fit_decimal(number: decimal.Decimal, path: str) -> decimal.Decimal:
    """The number in VARIABLE_DECIMAL_TYPE, exactly; JsonRangeError when it has more digits than the column."""
    if number.is_zero():
        return decimal.Decimal(0)
    normal = number.normalize(decimal.Context(prec=10_000))
    exponent = normal.as_tuple().exponent
    assert isinstance(exponent, int)
    scale, precision = VARIABLE_DECIMAL_TYPE.scale, VARIABLE_DECIMAL_TYPE.precision
    if -exponent > scale or normal.adjusted() >= precision - scale:
        raise JsonRangeError(f"{path}: {show(str(normal))} is not exact in decimal({precision},{scale}) (the "
                             f"column of a VariableScaleDecimal; Debezium's decimal.handling.mode=string keeps text)")
    return normal


# name -> (the Connect type Debezium gives it, the Spark type, the converter)
SEMANTIC: dict[str, tuple[str, T.DataType, Convert]] = {
    ZONED_TIMESTAMP: ("string", T.TimestampType(), zoned_timestamp),
    TIMESTAMP: ("int64", T.TimestampType(), timestamp),
    MICRO_TIMESTAMP: ("int64", T.TimestampType(), micro_timestamp),
    NANO_TIMESTAMP: ("int64", T.TimestampType(), nano_timestamp),
    DATE: ("int32", T.DateType(), date),
    TIME: ("int32", T.StringType(), time),
    MICRO_TIME: ("int64", T.StringType(), micro_time),
    NANO_TIME: ("int64", T.StringType(), nano_time),
    VARIABLE_SCALE_DECIMAL: ("struct", VARIABLE_DECIMAL_TYPE, variable_scale_decimal),
}


def semantic(name: Any, kind: Any) -> tuple[T.DataType, Convert] | None:
    """The Spark type and converter of a Debezium semantic type on its Connect type, else None (the plain type)."""
    found = SEMANTIC.get(name) if isinstance(name, str) else None
    if found is None or found[0] != kind:
        return None
    return found[1], found[2]
