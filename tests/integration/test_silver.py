"""Current-state tables from a Debezium topic: silver equals the fold of the changes Kafka carried, in upsert and
history mode, across incremental steps, a late change, a rewind of bronze and a rebuild."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from ingestion.config import load_pipeline
from ingestion.dev import cdc
from ingestion.silver.follower import SilverFollower
from ingestion.stream import pipeline

pytestmark = pytest.mark.integration

PAYLOAD = ("id", "name", "email", "tier", "balance_cents")


def _rows(spark: Any, path: str) -> dict[int, dict[str, Any]]:
    rows = spark.read.format("delta").load(path).collect()
    out = {r["id"]: r.asDict(recursive=True) for r in rows}
    assert len(out) == len(rows), "one row per key"
    return out


def _assert_state(spark: Any, path: str, model: cdc.History) -> None:
    expected = model.state()
    found = _rows(spark, path)
    assert sorted(found) == sorted(expected)
    newest = {k: changes[-1] for k, changes in model.by_key().items()}
    for key, row in expected.items():
        got = found[key]
        assert {c: got[c] for c in PAYLOAD} == row, key
        assert got["_op"] == newest[key].op and got["_source"]["lsn"] == newest[key].lsn
        assert got["_ts_ms"] == newest[key].ts_ms + 7 and got["_kafka_key"] == {"id": key}


def test_debezium_changes_fold_into_upsert_and_history_tables(spark, kafka_servers, make_topic,
                                                            tmp_path: Path) -> None:
    topic = make_topic(partitions=3)
    model = cdc.history(1200, 150, seed=5)
    cdc.produce(kafka_servers, topic, model.changes)
    name = f"cdc-{uuid.uuid4().hex[:6]}"
    config = load_pipeline(cdc.pipeline_yaml(tmp_path / "p.yaml", name=name, topic=topic, servers=kafka_servers,
                                             root=tmp_path, silver="  key: [id]\n  envelope: debezium\n"))
    pipeline.run(spark, config, available_now=True)
    assert config.silver_path is not None
    _assert_state(spark, config.silver_path, model)

    # History mode over the same bronze, run alone: one row per change, intervals from the database's times.
    history_config = load_pipeline(cdc.pipeline_yaml(
        tmp_path / "h.yaml", name=name, topic=topic, servers=kafka_servers, root=tmp_path,
        silver=f"  key: [id]\n  envelope: debezium\n  mode: history\n  table: {tmp_path / 'history'}\n"))
    SilverFollower(spark, history_config).drain()
    rows = spark.read.format("delta").load(str(tmp_path / "history")).collect()
    assert len(rows) == len(model.changes)
    by_key = model.by_key()
    for key, changes in by_key.items():
        mine = sorted((r for r in rows if r["id"] == key), key=lambda r: r["_source"]["lsn"])
        assert [r["_op"] for r in mine] == [c.op for c in changes]
        for i, (row, change) in enumerate(zip(mine, changes, strict=True)):
            assert int(row["_valid_from"].timestamp() * 1000) == change.ts_ms
            following = changes[i + 1].ts_ms if i + 1 < len(changes) else None
            valid_to = None if row["_valid_to"] is None else int(row["_valid_to"].timestamp() * 1000)
            assert valid_to == (change.ts_ms if change.op == "d" else following), (key, i)
            assert row["_is_current"] == (following is None and change.op != "d")
    current = {r["id"] for r in rows if r["_is_current"]}
    assert current == set(model.state())
