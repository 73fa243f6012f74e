"""`ingest replay` and `ingest quarantine reprocess` SIGKILLed between their two commits (replay: quarantine's made,
bronze's not; reprocess: bronze's append made, quarantine's MERGE not), then run again: every Kafka offset is once
across bronze and quarantine, each (txnAppId, txnVersion) once per table, no data commit without one."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from delta.tables import DeltaTable

from ingestion.config import load_pipeline
from ingestion.decode.wire import encode
from ingestion.delta.ledger import REDECODE_BATCH_ID, REPLAY_BATCH_ID
from ingestion.dev.samples import avro_body, order
from ingestion.ops import quarantine, replay
from ingestion.stream import pipeline
from tests.conftest import REPO, pipeline_yaml
from tests.helpers import commits_without_txn, delta_txns, killed_at, table_rows

pytestmark = pytest.mark.e2e

def _coordinates(spark: Any, path: str) -> list[tuple[int, int]]:
    return sorted((r["_kafka_partition"], r["_kafka_offset"]) for r in table_rows(path))


def _each_once(spark: Any, config: Any, offsets: set[tuple[int, int]]) -> None:
    rows, failed = _coordinates(spark, config.table_path), _coordinates(spark, config.quarantine_path)
    assert len(rows) == len(set(rows)) and len(failed) == len(set(failed)) and not set(rows) & set(failed)
    assert set(rows) | set(failed) == offsets
    for path in (config.table_path, config.quarantine_path):
        txns = [(a, v) for _, a, v in delta_txns(Path(path))]
        assert len(txns) == len(set(txns)), txns


def test_replay_and_reprocess_killed_between_their_commits_then_rerun(spark: Any, kafka_servers: str,
                                                                      make_topic: Any, orders_schema: Any,
                                                                      tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    schemas = tmp_path / "schemas"
    shutil.copytree(REPO / "schemas", schemas)
    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(schemas))  # the killed commands' too (they inherit it)
    topic = make_topic(partitions=2)
    producer = Producer({"bootstrap.servers": kafka_servers})
    offsets: set[tuple[int, int]] = set()

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        offsets.add((msg.partition(), msg.offset()))

    for seq in range(40):
        schema_id = 7 if seq % 5 == 0 else 1  # id 7 is not registered yet: quarantined until reprocess
        producer.produce(topic, key=b"k", value=encode(schema_id, avro_body(orders_schema, order(seq, random.Random(
            seq)))), partition=seq % 2, on_delivery=delivered)
    producer.produce(topic, key=b"k", value=b"\x05garbage", partition=1, on_delivery=delivered)  # bad for good
    producer.flush(30)
    del producer
    live = pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers)
    config = load_pipeline(live)
    pipeline.run(spark, config, available_now=True)
    _each_once(spark, config, offsets)

    # A gap in both tables of partition 1 (the garbage record among it), refilled by a replay killed between its
    # quarantine commit and its bronze commit; the rerun writes what the tables still lack, once.
    DeltaTable.forPath(spark, config.table_path).delete("_kafka_partition = 1")
    DeltaTable.forPath(spark, config.quarantine_path).delete("_kafka_partition = 1")
    killed_at(f"quarantine_committed:{REPLAY_BATCH_ID}", tmp_path / "replay.log", "replay", str(live),
               "--from", "earliest")
    assert all(p == 0 for p, _ in _coordinates(spark, config.table_path))  # bronze's commit was never made
    assert (1, max(o for p, o in offsets if p == 1)) in _coordinates(spark, config.quarantine_path)
    again = replay.replay(spark, config, start="earliest")
    # partition 1's 20 orders, 4 of them of schema id 7, and the garbage: the 5 failures are committed already
    assert (again.written, again.quarantined) == (sum(1 for p, _ in offsets if p == 1) - 1 - 4, 0)
    _each_once(spark, config, offsets)

    # The missing schema registered; reprocess killed once bronze holds the re-decoded records and quarantine has
    # not let them go (each is in both): the rerun's MERGE removes them from quarantine, bronze gets nothing twice.
    (schemas / "orders-value" / "7.avsc").write_text(json.dumps(orders_schema))
    killed_at(f"bronze_committed:{REDECODE_BATCH_ID}", tmp_path / "reprocess.log", "quarantine", "reprocess",
               str(live))
    assert len(set(_coordinates(spark, config.table_path)) & set(_coordinates(spark, config.quarantine_path))) == 8
    result = quarantine.redecode(spark, config)
    assert (result.redecoded, result.already_in_bronze, result.still_failing) == (0, 8, 1)
    _each_once(spark, config, offsets)
    assert len(_coordinates(spark, config.quarantine_path)) == 1
    for path in (config.table_path, config.quarantine_path):
        assert [op for _, op in commits_without_txn(Path(path))] == ["DELETE"]  # the test's own gap
