"""Spark types as Arrow types, alike on every supported pyspark: 4.0's converters take `timestamp_utc`, 4.1's and
later a `timezone` (which a timestamp type requires). Timestamps are UTC instants either way."""

from __future__ import annotations

import inspect
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas import types as pandas_types
from pyspark.sql.types import DataType, StructType

_TIMESTAMPS: dict[str, Any] = (
    {"timezone": "UTC"} if "timezone" in inspect.signature(pandas_types.to_arrow_type).parameters
    else {"timestamp_utc": True})


def to_arrow_type(data_type: DataType) -> pa.DataType:
    return pandas_types.to_arrow_type(data_type, **_TIMESTAMPS)


def to_arrow_schema(schema: StructType) -> pa.Schema:
    return pandas_types.to_arrow_schema(schema, **_TIMESTAMPS)
