"""The `silver:` options Auto CDC users know (docs/cdc.md), each over a bronze table written here version by version
(test_silver_rows' helpers): `columns` / `exceptColumns`, `ignoreNullUpdates`, `trackHistoryOn` and
`truncateWhen`. Each holds on the merge of every step, on a rebuild, and in the fold `verify` computes without a
JVM (DuckDB), which must equal Spark's; the steps merge what a rebuild would hold (verify: silver = the fold)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from ingestion.errors import ConfigError
from ingestion.silver import ledger, rs_audit
from ingestion.silver.follower import SilverFollower
from tests.helpers import table_rows
from tests.integration.test_silver_rows import T0, _append, _config, _same_fold, _state

pytestmark = pytest.mark.integration


def _at(seconds: int) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def _history(spark: Any, path: str) -> list[tuple[Any, ...]]:
    """(order_id, status, amount, deleted, valid_from, valid_to, current) by key, then time (a delete last)."""
    rows = table_rows(path)
    return sorted(((r["order_id"], r["status"], r["amount"], r["_deleted"], r["_valid_from"], r["_valid_to"],
                    r["_is_current"]) for r in rows), key=lambda r: (r[0], r[4], r[3]))


def _exact(spark: Any, follower: SilverFollower, expected_rows: int) -> None:
    """Silver equals the fold of bronze, by DuckDB's audit (and Spark's, which `_same_fold` holds equal), and
    DuckDB's fold is Spark's."""
    assert rs_audit.audit(follower.config).ok
    assert _same_fold(spark, follower.config) == expected_rows


def test_columns_and_except_columns_keep_only_the_fields_named(spark, tmp_path: Path) -> None:
    bronze = tmp_path / "bronze"
    _append(spark, bronze, [(0, 0, "a", ("a", "new", 10)), (0, 1, "b", ("b", "new", 20))])
    only = _config(tmp_path, "  key: [order_id]\n  columns: [order_id, status]\n", name="only")
    but = _config(tmp_path, f"  key: [order_id]\n  exceptColumns: [amount]\n  table: {tmp_path / 'but'}\n",
                  name="but")
    followers = [SilverFollower(spark, c) for c in (only, but)]
    for follower in followers:
        follower.drain()
    _append(spark, bronze, [(0, 2, "a", ("a", "paid", 11))])
    for follower in followers:
        follower.drain()
        path = follower.config.silver_path
        assert path is not None
        table = spark.read.format("delta").load(path)
        assert table.columns[:2] == ["order_id", "status"] and "amount" not in table.columns
        assert {r["order_id"]: r["status"] for r in table_rows(path)} == {"a": "paid", "b": "new"}
        _exact(spark, follower, 2)
    unknown = _config(tmp_path, f"  key: [order_id]\n  columns: [order_id, colour]\n  table: {tmp_path / 'x'}\n",
                      name="unknown")
    with pytest.raises(ConfigError, match=r"unknown\.yaml: key 'silver\.columns' names 'colour', which is not a "
                                          r"field of the row"):
        SilverFollower(spark, unknown).drain()


def test_ignore_null_updates_keep_the_stored_value_until_a_delete(spark, tmp_path: Path) -> None:
    """Partial updates: a null keeps the value the key's row holds; a tombstone ends the row, so a change after it
    starts from nothing. A change older than the row (a gap replayed into bronze) lands where its order says."""
    bronze = tmp_path / "bronze"
    _append(spark, bronze, [(0, 0, "a", ("a", "new", 10)), (0, 2, "a", ("a", None, None)),
                            (0, 3, "b", ("b", "new", 20))])
    config = _config(tmp_path, "  key: [order_id]\n  ignoreNullUpdates: true\n")
    follower = SilverFollower(spark, config)
    follower.drain()
    assert _state(spark, config.silver_path) == {"a": ("new", 10), "b": ("new", 20)}
    _append(spark, bronze, [(0, 4, "a", ("a", "paid", None)), (0, 5, "b", None), (0, 6, "b", ("b", None, 5))])
    follower.drain()
    assert _state(spark, config.silver_path) == {"a": ("paid", 10), "b": (None, 5)}
    # a's offset 1 replayed into bronze: it sits before offsets 2 and 4, whose nulls now keep its amount.
    _append(spark, bronze, [(0, 1, "a", ("a", "sent", 11))])
    record = follower.step()
    assert record is not None and record.kind is ledger.StepKind.MERGE
    assert _state(spark, config.silver_path) == {"a": ("paid", 11), "b": (None, 5)}
    _append(spark, bronze, [(0, 7, "a", ("a", None, None))])
    follower.drain()
    assert _state(spark, config.silver_path) == {"a": ("paid", 11), "b": (None, 5)}
    _exact(spark, follower, 2)

    # History mode: each change's row holds the values its key's row had after it.
    history = _config(tmp_path, f"  key: [order_id]\n  mode: history\n  ignoreNullUpdates: true\n"
                      f"  table: {tmp_path / 'history'}\n", name="history")
    SilverFollower(spark, history).drain()
    assert history.silver_path is not None
    of_a = [r[:3] for r in _history(spark, history.silver_path) if r[0] == "a"]
    assert of_a == [("a", "new", 10), ("a", "sent", 11), ("a", "sent", 11), ("a", "paid", 11), ("a", "paid", 11)]
    of_b = [r[:4] for r in _history(spark, history.silver_path) if r[0] == "b"]
    assert of_b == [("b", "new", 20, False), ("b", "new", 20, True), ("b", None, 5, False)]
    _exact(spark, SilverFollower(spark, history), 8)


def test_track_history_on_folds_other_changes_into_the_current_version(spark, tmp_path: Path) -> None:
    bronze = tmp_path / "bronze"
    _append(spark, bronze, [(0, 0, "a", ("a", "new", 10)), (0, 1, "a", ("a", "new", 11))])
    config = _config(tmp_path, "  key: [order_id]\n  mode: history\n  trackHistoryOn: [status]\n")
    assert config.silver_path is not None
    follower = SilverFollower(spark, config)
    follower.drain()
    assert _history(spark, config.silver_path) == [("a", "new", 11, False, _at(0), None, True)]
    # amount alone changes the current version in place; status makes a new one; a tombstone is a version of its
    # own, and the change after it starts the next.
    _append(spark, bronze, [(0, 2, "a", ("a", "new", 12)), (0, 3, "a", ("a", "paid", 12)),
                            (0, 4, "a", ("a", "paid", 13))])
    follower.drain()
    _append(spark, bronze, [(0, 5, "a", None), (0, 6, "a", ("a", "paid", 1))])
    follower.drain()
    assert _history(spark, config.silver_path) == [
        ("a", "new", 12, False, _at(0), _at(3), False),
        ("a", "paid", 13, False, _at(3), _at(5), False),
        ("a", None, None, True, _at(5), _at(5), False),
        ("a", "paid", 1, False, _at(6), None, True)]
    _exact(spark, follower, 4)


def test_truncate_when_empties_upsert_and_closes_history_by_the_order_silver_uses(spark, tmp_path: Path) -> None:
    """A truncate record in partition 1 (Kafka timestamp 100 s): the changes before it go (partition 0's, all
    earlier), those after it stay; a change older than the truncate that bronze receives later stays out."""
    bronze = tmp_path / "bronze"
    _append(spark, bronze, [(0, 0, "a", ("a", "new", 10)), (0, 1, "b", ("b", "new", 20))])
    truncate = "status = 'TRUNCATE'"
    config = _config(tmp_path, f"  key: [order_id]\n  truncateWhen: \"{truncate}\"\n")
    history = _config(tmp_path, f"  key: [order_id]\n  mode: history\n  truncateWhen: \"{truncate}\"\n"
                      f"  table: {tmp_path / 'history'}\n", name="history")
    upsert, scd2 = SilverFollower(spark, config), SilverFollower(spark, history)
    for follower in (upsert, scd2):
        follower.drain()
    assert _state(spark, config.silver_path) == {"a": ("new", 10), "b": ("new", 20)}
    _append(spark, bronze, [(1, 0, "t", ("-", "TRUNCATE", 0)), (2, 0, "c", ("c", "new", 30))])
    for follower in (upsert, scd2):
        follower.drain()
    assert _state(spark, config.silver_path) == {"c": ("new", 30)}
    position = ledger.position(spark, str(config.silver_path))
    assert position is not None and len(position.truncates) == 1 and position.truncates[0][:3] == ("orders", 1, 0)
    # Later: partition 0's offset 2 (5 s, before the truncate) is not inserted; partition 1's offset 1 is.
    _append(spark, bronze, [(0, 2, "d", ("d", "new", 40)), (1, 1, "a", ("a", "back", 11))])
    for follower in (upsert, scd2):
        record = follower.step()
        assert record is not None and record.kind is ledger.StepKind.MERGE
    assert _state(spark, config.silver_path) == {"a": ("back", 11), "c": ("new", 30)}
    assert history.silver_path is not None
    assert _history(spark, history.silver_path) == [
        ("a", "new", 10, False, _at(0), _at(100), False),
        ("a", "back", 11, False, _at(101), None, True),
        ("b", "new", 20, False, _at(1), _at(100), False),
        ("c", "new", 30, False, _at(200), None, True),
        ("d", "new", 40, False, _at(2), _at(100), False)]
    _exact(spark, upsert, 2)
    _exact(spark, scd2, 5)
