"""Time travel: which offsets each version holds, replay, rewind, verify against Kafka, SQL by table name."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable

from ingestion.config import load_pipeline
from ingestion.decode.wire import encode
from ingestion.delta import ledger
from ingestion.dev.samples import avro_body, order, produce_orders
from ingestion.ops import catalog, replay, rewind, verify
from ingestion.stream import checkpoint, pipeline
from tests.conftest import pipeline_yaml
from tests.helpers import assert_exactly_produced, commits_without_txn, delta_txns

pytestmark = pytest.mark.integration

PAYLOAD = ("order_id", "customer_id", "status", "amount", "currency", "items", "placed_at", "note")


def _rows(spark: Any, config: Any) -> list[Any]:
    return spark.read.format("delta").load(config.table_path).collect()


def _by_offset(rows: list[Any]) -> dict[tuple[int, int], tuple[Any, ...]]:
    return {(r["_kafka_partition"], r["_kafka_offset"]): tuple(r[c] for c in PAYLOAD) for r in rows}


def test_replay_fills_a_gap_exactly_once_and_is_a_no_op_over_ingested_ranges(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path) -> None:
    topic = make_topic(partitions=2)
    produced = produce_orders(kafka_servers, topic, 80, schema_id=1, schema=orders_schema)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers))
    pipeline.run(spark, config, available_now=True)
    DeltaTable.forPath(spark, config.table_path).delete("_kafka_partition = 1 AND _kafka_offset BETWEEN 5 AND 9")
    assert len(_rows(spark, config)) == 75

    filled = replay.replay(spark, config, start="earliest")
    assert (filled.read, filled.already_present, filled.written, filled.quarantined) == (80, 75, 5, 0)
    assert_exactly_produced(_rows(spark, config), produced)
    assert ledger.history(spark, config.table_path)[-1].kind == "replay"
    version = ledger.table_version(spark, config.table_path)
    assert delta_txns(Path(config.table_path))[-1] == (version, "replay", 0)  # Delta would skip it if repeated
    assert [op for _, op in commits_without_txn(Path(config.table_path))] == ["DELETE"]  # the test's own gap

    again = replay.replay(spark, config, start="0:0,1:0", end="0:40,1:40")
    assert (again.written, again.quarantined) == (0, 0)
    assert ledger.table_version(spark, config.table_path) == version


def test_rewind_then_run_holds_exactly_what_a_clean_run_holds(spark, kafka_servers, make_topic, orders_schema,
                                                              tmp_path: Path) -> None:
    topic = make_topic(partitions=3)
    produce_orders(kafka_servers, topic, 240, schema_id=1, schema=orders_schema)
    batches = "source:\n  maxOffsetsPerTrigger: 80\n"
    clean = load_pipeline(pipeline_yaml(tmp_path / "clean", topic=topic, servers=kafka_servers, extra=batches))
    pipeline.run(spark, clean, available_now=True)
    config = load_pipeline(pipeline_yaml(tmp_path / "rewound", topic=topic, servers=kafka_servers, extra=batches))
    first = pipeline.run(spark, config, available_now=True)
    newest = ledger.table_version(spark, config.table_path)
    assert newest == len(first.batches) >= 3
    for target in ({"to_version": newest}, {"to_timestamp": dt.datetime.now(dt.UTC) + dt.timedelta(days=1)}):
        same = rewind.rewind(spark, config, **target)
        assert rewind.render(same, config.name) == f"already at version {newest}: nothing to do"
    assert ledger.table_version(spark, config.table_path) == newest  # no RESTORE commit
    assert checkpoint.app_id(config.checkpoint_path, config.name) == first.app_id  # the checkpoint stays

    at_zero = ledger.history(spark, config.table_path)[0]  # the first batch's commit (version 0 is the CREATE)
    result = rewind.rewind(spark, config, to_version=at_zero.version)
    assert result.bronze_version == at_zero.version == 1
    assert result.resume_from == {topic: {str(r.partition): r.last + 1 for r in at_zero.ranges}}
    assert len(_rows(spark, config)) == at_zero.rows
    second = pipeline.run(spark, config, available_now=True)

    assert second.app_id != first.app_id == at_zero.app_id
    assert checkpoint.app_id(config.checkpoint_path, config.name) == second.app_id
    rows, clean_rows = _rows(spark, config), _rows(spark, clean)
    assert len(rows) == len(clean_rows) == 240
    assert _by_offset(rows) == _by_offset(clean_rows)
    assert [r.kind for r in ledger.history(spark, config.table_path)] == ["stream"] * len(first.batches) + [
        "rewind"] + ["stream"] * len(second.batches)


def test_rewind_restores_quarantine_by_the_commits_own_clock_when_their_files_share_a_second(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path) -> None:
    """Object stores date a commit file to the second, and a batch's quarantine commit follows the bronze commit
    before it by milliseconds: the rewind must not take that quarantine commit for one of the kept batches."""
    import os
    import time

    from confluent_kafka import Producer

    topic = make_topic(partitions=1)
    produced = produce_orders(kafka_servers, topic, 30, schema_id=1, schema=orders_schema)
    producer = Producer({"bootstrap.servers": kafka_servers})
    producer.produce(topic, value=b"\x00\x00\x00\x00\x01not avro", partition=0)  # offset 30, in batch 3
    producer.flush(10)
    produced += produce_orders(kafka_servers, topic, 9, schema_id=1, schema=orders_schema, first_seq=30)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers,
                                         extra="source:\n  maxOffsetsPerTrigger: 10\n"))
    pipeline.run(spark, config, available_now=True)  # driver-side batches: commits milliseconds apart
    assert [r.quarantined for r in ledger.history(spark, config.table_path)] == [0, 0, 0, 1]
    same_second = int(time.time())
    for table in (config.table_path, config.quarantine_path):
        for commit in (Path(table) / "_delta_log").glob("*.json"):
            os.utime(commit, (same_second, same_second))

    result = rewind.rewind(spark, config, to_version=3)  # bronze's third batch, before the quarantined record

    assert (result.bronze_version, result.quarantine_version) == (3, 0)  # quarantine's creation: empty
    assert spark.read.format("delta").load(config.quarantine_path).count() == 0
    pipeline.run(spark, config, available_now=True)
    assert_exactly_produced(_rows(spark, config), produced)
    assert [r["_kafka_offset"] for r in spark.read.format("delta").load(config.quarantine_path).collect()] == [30]


def test_verify_passes_clean_and_names_duplicates_losses_and_explained_gaps(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path) -> None:
    import random

    from confluent_kafka import Producer

    topic = make_topic(partitions=2)
    produce_orders(kafka_servers, topic, 40, schema_id=1, schema=orders_schema)
    # Partition 1 also gets an aborted transaction between two committed ones: offsets Kafka never returns.
    txn = Producer({"bootstrap.servers": kafka_servers, "transactional.id": f"tx-{topic}"})
    txn.init_transactions(30)
    for commit in (True, False, True):
        txn.begin_transaction()
        for seq in range(2):
            txn.produce(topic, partition=1, value=encode(1, avro_body(orders_schema, order(seq, random.Random(1)))))
        txn.flush(30)  # the records reach the log before the abort, or librdkafka just drops them
        (txn.commit_transaction if commit else txn.abort_transaction)(30)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers,
                                         extra="kafka:\n  bootstrap.servers: \"" + kafka_servers + "\"\n"
                                               "  isolation.level: read_committed\n"))
    pipeline.run(spark, config, available_now=True)

    clean = verify.audit(spark, config)
    assert clean.ok, verify.render(clean)
    p1 = clean.partitions[1]
    explained = p1.explained["not in Kafka (transaction marker, aborted or compacted)"]
    assert sum(b - a + 1 for a, b in explained) == 4  # commit marker, 2 aborted records, abort marker
    assert not p1.lost and not p1.duplicates

    table = DeltaTable.forPath(spark, config.table_path)
    victim = spark.read.format("delta").load(config.table_path).where("_kafka_partition = 0").orderBy(
        "_kafka_offset").collect()
    duplicate, removed = victim[3], victim[7]
    spark.createDataFrame([duplicate], schema=spark.read.format("delta").load(config.table_path).schema) \
        .write.format("delta").mode("append").save(config.table_path)
    table.delete(f"_kafka_partition = 0 AND _kafka_offset = {removed['_kafka_offset']}")

    broken = verify.audit(spark, config)
    assert not broken.ok
    p0 = broken.partitions[0]
    assert p0.duplicates == [duplicate["_kafka_offset"]]
    assert p0.lost == [[removed["_kafka_offset"], removed["_kafka_offset"]]]
    assert broken.partitions[1].ok
    text = verify.render(broken)
    assert f"duplicated offsets: [{duplicate['_kafka_offset']}]" in text and "VIOLATIONS FOUND" in text


def test_sql_by_table_name_with_version_as_of(spark, kafka_servers, make_topic, orders_schema,
                                              tmp_path: Path) -> None:
    topic = make_topic(partitions=1)
    produce_orders(kafka_servers, topic, 30, schema_id=1, schema=orders_schema)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers, name="sql_orders",
                                         extra="source:\n  maxOffsetsPerTrigger: 10\n"))
    pipeline.run(spark, config, available_now=True)

    assert catalog.register(spark, [config]) == {"sql_orders": config.table_path,
                                                 "sql_orders_quarantine": config.quarantine_path}
    assert spark.sql("SELECT count(*) AS n FROM sql_orders_quarantine").first()["n"] == 0
    counts = [spark.sql(f"SELECT count(*) AS n FROM sql_orders VERSION AS OF {v}").first()["n"] for v in range(4)]
    assert counts == [0, 10, 20, 30]
    newest = spark.sql("SELECT max(_kafka_offset) AS o FROM sql_orders").first()["o"]
    assert newest == 29
