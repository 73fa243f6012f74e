"""A data file of a Delta table written from Arrow by this process, and the `add` action that commits it.

Delta's writer computes a file's statistics with a Spark job; a file written here carries the ones that can be
computed exactly and as Delta writes them, for the table's statistics columns (`delta.dataSkippingStatsColumns`,
else the first `delta.dataSkippingNumIndexedCols` leaf columns): the record count, null counts of top-level columns
of simple types, minimum and maximum of integers, dates, timestamps (to the millisecond, as Delta writes them) and
strings (a string longer than Delta's 32-character prefix gives that prefix as its minimum, and no maximum). A
column without bounds is one a reader cannot skip files by: never a wrong answer. Compaction (`ingest maintain`)
writes full ones again.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

STATS_COLUMNS = "delta.dataSkippingStatsColumns"
INDEXED_COLUMNS = "delta.dataSkippingNumIndexedCols"
_STRING_PREFIX = 32  # Delta's spark.databricks.delta.stats.skipping.string.prefixLength
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def write_file(table_dir: Path, rows: pa.Table, properties: Mapping[str, str]) -> dict[str, Any]:
    """Write `rows` as one Snappy Parquet file in the (unpartitioned, local) table's folder: its `add` action."""
    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    path = table_dir / name
    pq.write_table(rows, path, compression="snappy")
    info = os.stat(path)
    stats = statistics(rows, stats_columns(rows.schema, properties))
    return {"path": name, "partitionValues": {}, "size": info.st_size, "modificationTime": info.st_mtime_ns // 10**6,
            "dataChange": True, "stats": json.dumps(stats, separators=(",", ":"))}


def stats_columns(schema: pa.Schema, properties: Mapping[str, str]) -> list[str]:
    """The top-level columns Delta collects statistics of in this table (nested ones are left out here)."""
    named = properties.get(STATS_COLUMNS)
    if named is not None:
        wanted = {part.strip().strip("`") for part in named.split(",")}
        return [f.name for f in schema if f.name in wanted and not pa.types.is_struct(f.type)]
    limit = int(properties.get(INDEXED_COLUMNS, "32"))
    out, leaves = [], 0
    for f in schema:
        if 0 <= limit <= leaves:
            break
        if not pa.types.is_struct(f.type):
            out.append(f.name)
        leaves += _leaves(f.type)
    return out


def _leaves(kind: pa.DataType) -> int:
    return sum(_leaves(kind.field(i).type) for i in range(kind.num_fields)) if pa.types.is_struct(kind) else 1


def statistics(rows: pa.Table, columns: list[str]) -> dict[str, Any]:
    """Delta's `stats` of a file holding `rows`."""
    mins: dict[str, Any] = {}
    maxes: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name in columns:
        column = rows.column(name)
        kind = column.type
        if pa.types.is_nested(kind):
            continue
        nulls[name] = column.null_count
        low, high = _bounds(column, kind) or (None, None)
        if low is not None:
            mins[name] = low
        if high is not None:
            maxes[name] = high
    out: dict[str, Any] = {"numRecords": rows.num_rows}
    if mins:
        out["minValues"] = mins
    if maxes:
        out["maxValues"] = maxes
    out["nullCount"] = nulls
    return out


def _bounds(column: pa.ChunkedArray, kind: pa.DataType) -> tuple[Any, Any] | None:
    if column.null_count == len(column):
        return None
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        low, high = pc.min_max(column).values()
        if pc.max(pc.utf8_length(column)).as_py() > _STRING_PREFIX:
            return low.as_py()[:_STRING_PREFIX], None  # a prefix is still a lower bound; no upper one
        return low.as_py(), high.as_py()
    if not (pa.types.is_integer(kind) or pa.types.is_date32(kind) or (pa.types.is_timestamp(kind) and kind.tz)):
        return None
    low, high = pc.min_max(column).values()
    if pa.types.is_timestamp(kind):
        micros = pc.min_max(column.cast(pa.timestamp("us", tz=kind.tz)).cast(pa.int64()))
        return _millis(micros["min"].as_py()), _millis(micros["max"].as_py())
    if pa.types.is_date32(kind):
        return low.as_py().isoformat(), high.as_py().isoformat()
    return low.as_py(), high.as_py()


def _millis(micros: int) -> str:
    """A timestamp as Delta's statistics hold it: UTC, truncated to the millisecond."""
    at = _EPOCH + dt.timedelta(milliseconds=micros // 1000)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
