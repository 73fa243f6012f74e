"""Silver from plain changelog rows (`envelope: none`), over a bronze table written here version by version:
tombstones delete the key their Kafka key names, `deleteWhen` deletes, Kafka order is per partition, a key in two
partitions is counted, history intervals follow the Kafka timestamps, and bronze gaining a column adds it."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from ingestion.config import PipelineConfig, load_pipeline
from ingestion.errors import ConfigError
from ingestion.ops import status
from ingestion.silver import audit, changes, ledger, rs_audit
from ingestion.silver.follower import SilverFollower
from ingestion.silver.spec import SilverSpec
from tests.helpers import table_rows

pytestmark = pytest.mark.integration

T0 = dt.datetime(2026, 1, 1)
BASE = [T.StructField("order_id", T.StringType()), T.StructField("status", T.StringType()),
        T.StructField("amount", T.LongType())]
META = [T.StructField("_kafka_topic", T.StringType()), T.StructField("_kafka_partition", T.IntegerType()),
        T.StructField("_kafka_offset", T.LongType()), T.StructField("_kafka_timestamp", T.TimestampType()),
        T.StructField("_kafka_timestamp_type", T.IntegerType()), T.StructField("_kafka_key", T.StringType()),
        T.StructField("_kafka_headers", T.ArrayType(T.StructType([T.StructField("key", T.StringType()),
                                                                  T.StructField("value", T.BinaryType())]))),
        T.StructField("_kafka_tombstone", T.BooleanType()), T.StructField("_schema_id", T.IntegerType()),
        T.StructField("_batch_id", T.LongType()), T.StructField("_ingested_at", T.TimestampType())]


def _append(spark: Any, path: Path, rows: list[tuple[Any, ...]], payload: list[T.StructField] = BASE) -> None:
    """Bronze rows: (partition, offset, key, payload values or None for a tombstone)."""
    out = []
    for partition, offset, key, values in rows:
        tombstone = values is None
        out.append((*(values or (None,) * len(payload)), "orders", partition, offset,
                    T0 + dt.timedelta(seconds=100 * partition + offset), 0, key, [], tombstone,
                    None if tombstone else 1, 0, T0))
    # Written by delta-rs, as the driver-side path writes bronze: a Spark job and commit per append cost the
    # session's JVM more than the silver work the tests are about.
    schema = to_arrow_schema(T.StructType([*payload, *META]), timezone="UTC")
    table = pa.Table.from_pylist([dict(zip(schema.names, row, strict=True)) for row in out], schema=schema)
    deltalake.write_deltalake(str(path), table, mode="append", schema_mode="merge",
                              configuration={"delta.enableChangeDataFeed": "true"})


def _config(tmp_path: Path, silver: str, name: str = "orders") -> PipelineConfig:
    file = tmp_path / f"{name}.yaml"
    file.write_text(f"name: {name}\ntopic: orders\nkey:\n  format: string\nsink:\n  table: {tmp_path / 'bronze'}\n"
                    f"silver:\n{silver}")
    return load_pipeline(file)


def _state(spark: Any, path: str | None) -> dict[str, tuple[Any, ...]]:
    assert path is not None
    return {r["order_id"]: (r["status"], r["amount"]) for r in table_rows(path)}


def _plain(value: Any) -> Any:
    """A value as both engines' rows can be compared: UTC times without tzinfo, bytes, dicts for maps."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def _same_fold(spark: Any, config: PipelineConfig) -> int:
    """The fold `verify` computes without a JVM (DuckDB over delta-rs's reads) equals Spark's (`changes.fold`) on
    the same bronze version, row for row and column for column, and both audits agree on silver; the rows."""
    spec = SilverSpec.of(config)
    version = deltalake.DeltaTable(spec.bronze_path).version()
    by_spark, _ = changes.fold(spark.read.format("delta").option("versionAsOf", version).load(spec.bronze_path),
                               spec)
    by_duckdb = rs_audit.fold(config, version)
    assert by_duckdb.column_names == by_spark.columns
    expected = sorted((_plain(r.asDict(recursive=True)) for r in by_spark.collect()), key=repr)
    assert sorted((_plain(r) for r in by_duckdb.to_pylist(maps_as_pydicts="strict")), key=repr) == expected
    assert rs_audit.audit(config) == audit.audit(spark, config)
    return len(expected)


def test_plain_rows_tombstones_delete_conditions_and_kafka_order(spark, tmp_path: Path, caplog) -> None:
    bronze = tmp_path / "bronze"  # partition 0's offset 1 is missing (a gap a replay fills later)
    _append(spark, bronze, [(0, 0, "a", ("a", "new", 10)), (1, 0, "c", ("c", "new", 30)),
                            (0, 2, "a", ("a", "paid", 11))])
    config = _config(tmp_path, "  key: order_id\n  deleteWhen: status = 'cancelled'\n")
    follower = SilverFollower(spark, config)
    with caplog.at_level("INFO", logger="ingestion.silver.follower"):
        follower.drain()  # the first step rebuilds from bronze as it is
    assert _state(spark, config.silver_path) == {"a": ("paid", 11), "c": ("new", 30)}
    assert "orders silver step 1: rebuilt from bronze version 0: 3 bronze rows folded into 2 rows" in caplog.text
    # Any Delta reader reads it, and `ingest status` reads its ledger without a JVM.
    assert sorted(deltalake.DeltaTable(config.silver_path).to_pyarrow_table().column("order_id").to_pylist()) == [
        "a", "c"]
    shown = status.silver_status(config, deltalake.DeltaTable(str(bronze)).version())
    assert shown is not None and (shown.bronze_version, shown.lag_versions) == (0, 0)

    # A tombstone (its key from the Kafka key), a delete condition, an update; then the gap before b's tombstone
    # replayed into bronze, an older change of b: b stays deleted (its delete marker).
    _append(spark, bronze, [(0, 3, "b", None), (1, 1, "c", ("c", "cancelled", 30)), (0, 4, "a", ("a", "sent", 12))])
    follower.drain()
    assert _state(spark, config.silver_path) == {"a": ("sent", 12)}
    _append(spark, bronze, [(0, 1, "b", ("b", "new", 20)), (2, 0, "d", ("d", "new", 40))])
    follower.drain()
    assert _state(spark, config.silver_path) == {"a": ("sent", 12), "d": ("new", 40)}

    # a's change from another partition: applied (it arrived later) and counted.
    _append(spark, bronze, [(2, 1, "a", ("a", "moved", 13))])
    record = follower.step()
    assert record is not None and record.cross_partition_keys == 1 and record.keys == 1
    assert _state(spark, config.silver_path)["a"] == ("moved", 13)
    assert audit.audit(spark, config).ok
    assert _same_fold(spark, config) == 2  # a and d: b's older change replayed after its tombstone stays deleted

    # Bronze gains a column: silver gains it.
    _append(spark, bronze, [(0, 5, "e", ("e", "new", 50, "web"))],
            payload=[*BASE, T.StructField("channel", T.StringType())])
    follower.drain()
    rows = {r["order_id"]: r for r in table_rows(config.silver_path)}
    assert rows["e"]["channel"] == "web" and rows["a"]["channel"] is None
    # The steps were the driver's (`rs_step`) but for the one whose column silver lacked: Spark's adds it.
    assert _merges(config.silver_path) == ["delta-rs", "delta-rs", "delta-rs", "spark"]

    # History mode of the same bronze: every change, tombstones and deletes as rows valid for no time.
    history = _config(tmp_path, f"  key: [order_id]\n  mode: history\n  deleteWhen: status = 'cancelled'\n"
                      f"  table: {tmp_path / 'history'}\n", name="orders-history")
    SilverFollower(spark, history).drain()
    rows = sorted(table_rows(tmp_path / "history"), key=lambda r: (r["_kafka_partition"], r["_kafka_offset"]))
    of_b = [(r["_kafka_offset"], r["_deleted"], r["_valid_to"], r["_is_current"]) for r in rows
            if r["order_id"] == "b"]
    at = lambda seconds: T0 + dt.timedelta(seconds=seconds)  # noqa: E731
    assert of_b == [(1, False, at(3), False), (3, True, at(3), False)]  # b: created at offset 1, deleted at 3
    current = sorted(r["order_id"] for r in rows if r["_is_current"])
    assert current == ["a", "d", "e"]
    assert audit.audit(spark, history).ok
    assert _same_fold(spark, history) == len(rows)
    assert _same_fold(spark, config) == 3  # a, d, e


@pytest.mark.parametrize("engine", ["driver", "spark"])
def test_history_steps_alike_on_both_engines(spark, tmp_path: Path, engine: str) -> None:
    """History mode step by step: a late change put in its place (the intervals around it recomputed), a tombstone
    and a delete condition valid for no time, a key's change from another partition; silver equals bronze's fold
    whether the driver makes the steps (`rs_step`) or Spark does (`silver.directMergeMaxChanges: 0`)."""
    bronze = tmp_path / "bronze"
    _append(spark, bronze, [(0, 0, "a", ("a", "new", 10)), (1, 0, "c", ("c", "new", 30))])
    config = _config(tmp_path, "  key: [order_id]\n  mode: history\n  deleteWhen: status = 'cancelled'\n"
                     + ("  directMergeMaxChanges: 0\n" if engine == "spark" else ""))
    follower = SilverFollower(spark, config)
    follower.drain()
    for rows in ([(0, 2, "a", ("a", "paid", 11)), (0, 3, "b", ("b", "new", 20))],
                 [(0, 1, "a", ("a", "late", 9)), (1, 1, "c", ("c", "cancelled", 30)), (0, 4, "b", None)],
                 [(2, 0, "a", ("a", "moved", 12)), (1, 2, "c", ("c", "again", 31))]):
        _append(spark, bronze, rows)
        follower.drain()
    rows = table_rows(config.silver_path)
    of_a = sorted((r["_kafka_partition"], r["_kafka_offset"], r["_is_current"]) for r in rows if r["order_id"] == "a")
    assert of_a == [(0, 0, False), (0, 1, False), (0, 2, False), (2, 0, True)]  # the late change in its place
    assert sorted(r["order_id"] for r in rows if r["_is_current"]) == ["a", "c"]  # b's tombstone ended it
    assert audit.audit(spark, config).ok
    assert _same_fold(spark, config) == len(rows) == 9
    merges = _merges(config.silver_path)
    assert merges == ["delta-rs" if engine == "driver" else "spark"] * 3, merges


def test_a_silver_section_bronze_cannot_serve_is_refused_in_one_line(spark, tmp_path: Path) -> None:
    _append(spark, tmp_path / "bronze", [(0, 0, "a", ("a", "new", 10))])
    config = _config(tmp_path, "  key: [customer]\n")
    with pytest.raises(ConfigError, match=r"key 'silver.key' names 'customer', which is not a field of the row"):
        SilverFollower(spark, config).drain()


def _merges(path: str | None) -> list[str]:
    """The engine of each MERGE of the table, oldest first: `delta-rs` (the driver's step) or `spark`."""
    assert path is not None
    found = [c for c in reversed(deltalake.DeltaTable(path).history()) if c["operation"] == "MERGE"]
    return ["delta-rs" if str(c.get("engineInfo", "")).startswith("delta-rs") else "spark" for c in found]


@pytest.mark.parametrize("engine", ["driver", "spark"])
def test_markers_appended_several_per_key_and_rewritten(spark, tmp_path: Path, monkeypatch, engine: str) -> None:
    """Upsert's delete markers are appended by each step: a key deleted twice holds two, a late change must pass
    both; every MARKERS_REWRITE_EVERY-th version of the markers table rewrites them into one file, keeping them all.
    Alike whether the driver makes the steps (`rs_step`) or Spark does (`silver.directMergeMaxChanges: 0`)."""
    from ingestion.silver import table as silver_table

    monkeypatch.setattr(silver_table, "MARKERS_REWRITE_EVERY", 3)
    bronze = tmp_path / "bronze"  # offsets 1, 3 and 5 of a are gaps a replay fills later
    _append(spark, bronze, [(0, 0, "a", ("a", "new", 10)), (1, 0, "b", ("b", "new", 20))])
    config = _config(tmp_path, "  key: order_id\n" + ("  directMergeMaxChanges: 0\n" if engine == "spark" else ""))
    follower = SilverFollower(spark, config)
    follower.drain()
    markers = config.silver_path + "_deletes"
    for rows in ([(0, 2, "a", None)], [(0, 4, "a", ("a", "again", 11))], [(0, 6, "a", None), (1, 1, "b", None)]):
        _append(spark, bronze, rows)
        follower.drain()
    assert _state(spark, config.silver_path) == {}
    held = sorted((r["_key0"], r["_kafka_offset"]) for r in table_rows(markers))
    assert held == [("a", 2), ("a", 6), ("b", 1)]  # appended: a's first marker stays beside its second
    # Late changes of a: offset 5 passes the marker at 2, not the one at 6: a stays deleted; offset 3 neither.
    _append(spark, bronze, [(0, 5, "a", ("a", "late", 12)), (0, 3, "a", ("a", "later", 13))])
    follower.drain()
    assert _state(spark, config.silver_path) == {}
    _append(spark, bronze, [(0, 7, "a", ("a", "back", 14)), (1, 2, "b", ("b", "back", 21)), (2, 0, "c", None)])
    follower.drain()
    assert _state(spark, config.silver_path) == {"a": ("back", 14), "b": ("back", 21)}
    assert audit.audit(spark, config).ok
    assert _same_fold(spark, config) == 2
    table = deltalake.DeltaTable(markers)
    # versions: 0 the rebuild's (empty), 1 a@2, 2 a@6 and b@1, 3 c@0 rewritten whole with the ones before
    assert table.version() == 3 and len(table.file_uris()) == 1
    held = sorted((r["_key0"], r["_kafka_offset"]) for r in table_rows(markers))
    assert held == [("a", 2), ("a", 6), ("b", 1), ("c", 0)]
    # Five steps: each MERGE of the engine's (delta-rs commits no MERGE that changes no row, as the late changes'
    # step's: a commit of no rows records it), and silver's ledger holds bronze's every version.
    merges = _merges(config.silver_path)
    assert set(merges) == {"delta-rs" if engine == "driver" else "spark"} and len(merges) >= 4, merges
    position = ledger.position(spark, config.silver_path)
    assert position is not None and position.bronze_version == deltalake.DeltaTable(str(bronze)).version() == 5
