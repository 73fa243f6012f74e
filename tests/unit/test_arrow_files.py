"""Statistics of files the direct write makes: as Delta writes them, or none where they cannot be exact."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ingestion.delta import arrow_files

UTC = dt.UTC


def _table() -> pa.Table:
    return pa.table({
        "id": pa.array([3, None, -7], pa.int64()),
        "name": pa.array(["b", "a", None], pa.string()),
        "long": pa.array(["x" * 33, "y", "z"], pa.string()),
        "at": pa.array([dt.datetime(2026, 1, 1, 0, 0, 0, 999_999, tzinfo=UTC),
                        dt.datetime(1969, 12, 31, 23, 59, 59, 999_500, tzinfo=UTC), None], pa.timestamp("us", "UTC")),
        "day": pa.array([dt.date(2026, 2, 1), dt.date(2025, 1, 9), None], pa.date32()),
        "price": pa.array([1.5, 2.5, None], pa.float64()),
        "nested": pa.array([{"a": 1}, None, {"a": 2}], pa.struct([("a", pa.int32())])),
        "tags": pa.array([["t"], [], None], pa.list_(pa.string())),
    })


def test_bounds_are_exact_or_absent() -> None:
    stats = arrow_files.statistics(_table(), ["id", "name", "long", "at", "day", "price", "tags"])
    assert stats["numRecords"] == 3
    assert stats["minValues"] == {"id": -7, "name": "a", "long": "x" * 32, "at": "1969-12-31T23:59:59.999Z",
                                  "day": "2025-01-09"}
    assert stats["maxValues"] == {"id": 3, "name": "b", "at": "2026-01-01T00:00:00.999Z", "day": "2026-02-01"}
    # a string longer than Delta's 32-character prefix has that prefix as its minimum and no maximum; floats and
    # lists get no bounds, nested columns nothing
    assert stats["nullCount"] == {"id": 1, "name": 1, "long": 0, "at": 1, "day": 1, "price": 1}


def test_statistics_columns_follow_the_table_properties() -> None:
    schema = _table().schema
    assert arrow_files.stats_columns(schema, {"delta.dataSkippingStatsColumns": "`at`, id,nested"}) == ["id", "at"]
    # the first N leaf columns: `nested` counts one leaf and gets no statistics of its own here
    assert arrow_files.stats_columns(schema, {"delta.dataSkippingNumIndexedCols": "7"}) == [
        "id", "name", "long", "at", "day", "price"]
    assert arrow_files.stats_columns(schema, {"delta.dataSkippingNumIndexedCols": "0"}) == []
    assert arrow_files.stats_columns(schema, {"delta.dataSkippingNumIndexedCols": "-1"})[-1] == "tags"


def test_the_add_action_describes_the_written_file(tmp_path: Path) -> None:
    add = arrow_files.write_file(tmp_path, _table(), {})
    written = tmp_path / add["path"]
    assert add["size"] == written.stat().st_size and add["dataChange"] and add["partitionValues"] == {}
    assert add["path"].startswith("part-00000-") and add["path"].endswith(".snappy.parquet")
    assert pq.read_table(written).equals(_table())
    assert json.loads(add["stats"])["numRecords"] == 3
