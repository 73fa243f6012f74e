"""The driver-side write path (`stream.driver_write`, delta-rs commits): the same rows, commits and ledger as the
Spark path's, on a real broker, read back by Spark and by delta-rs; Spark's commits and delta-rs's follow each
other on one table (both ways), with the checksums Spark's Delta agrees with."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from ingestion.config import load_pipeline
from ingestion.decode.wire import encode
from ingestion.delta import ledger
from ingestion.delta.rs_reads import DeltaRsReader
from ingestion.dev.samples import avro_body, order, produce_orders
from ingestion.stream import pipeline
from ingestion.stream.batch import WritePath
from tests.conftest import pipeline_yaml
from tests.helpers import assert_exactly_produced, delta_txns, table_rows

pytestmark = pytest.mark.integration

_BATCH_VALUES = ("_batch_id", "_ingested_at")


def _config(tmp_path: Path, topic: str, servers: str, name: str, max_offsets: int, direct: int) -> Any:
    return load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=servers, name=name,
                                       extra=f"source:\n  maxOffsetsPerTrigger: {max_offsets}\n",
                                       sink=f"  directWriteMaxOffsets: {direct}\n"))


def _rows(spark: Any, path: str) -> list[dict[str, Any]]:
    rows = ({k: v for k, v in r.asDict(recursive=True).items() if k not in _BATCH_VALUES} for r in table_rows(path))
    return sorted(rows, key=lambda r: (r["_kafka_partition"], r["_kafka_offset"]))


def _odd_records(servers: str, topic: str, schema: dict[str, Any]) -> None:
    """A tombstone, a record without a key and one with a header of no value, on partition 0."""
    producer = Producer({"bootstrap.servers": servers})
    producer.produce(topic, value=None, key=b"gone", partition=0)
    producer.produce(topic, value=encode(1, avro_body(schema, order(9001, random.Random(1)))),
                     partition=0, headers=[("empty", None), ("h", b"v")])
    producer.flush(10)


def test_small_batches_are_written_by_the_driver_with_the_same_rows_as_spark(spark, kafka_servers, make_topic,
                                                                        orders_schema, tmp_path: Path) -> None:
    topic = make_topic(partitions=3)
    produced = produce_orders(kafka_servers, topic, 250, schema_id=1, schema=orders_schema)
    _odd_records(kafka_servers, topic, orders_schema)
    direct = _config(tmp_path, topic, kafka_servers, "direct", 100, 1000)
    spark_written = _config(tmp_path, topic, kafka_servers, "spark", 100, 0)

    ran = pipeline.run(spark, direct, available_now=True)
    reference = pipeline.run(spark, spark_written, available_now=True)

    assert len(ran.batches) == 3 and all(r.path is WritePath.DRIVER and r.committed for r in ran.batches)
    assert all(r.path is WritePath.SPARK for r in reference.batches)
    rows = _rows(spark, direct.table_path)
    assert rows == _rows(spark, spark_written.table_path)  # every column, tombstone and headers included
    assert_exactly_produced([r for r in table_rows(direct.table_path)
                             if (r["_kafka_partition"], r["_kafka_offset"]) in {(p.partition, p.offset)
                                                                                for p in produced}], produced)
    tombstone = next(r for r in rows if r["_kafka_tombstone"])
    assert tombstone["_kafka_key"] == "gone" and tombstone["order_id"] is None
    headed = next(r for r in rows if r["_kafka_headers"] and r["_kafka_headers"][0]["key"] == "empty")
    assert headed["_kafka_key"] is None
    assert [(h["key"], h["value"]) for h in headed["_kafka_headers"]] == [("empty", None), ("h", b"v")]
    # The same exactly-once bookkeeping: one SetTransaction per batch, the ledger's ranges cover every record.
    table = Path(direct.table_path)
    assert [(a, v) for _, a, v in delta_txns(table)] == [(ran.app_id, b) for b in range(3)]
    records = DeltaRsReader().history(direct.table_path)
    assert sum(r.rows for r in records) == len(rows) == 252
    assert ledger.next_offsets(records) == ledger.next_offsets(DeltaRsReader().history(spark_written.table_path))


def test_driver_files_carry_statistics_readers_skip_by_correctly(spark, kafka_servers, make_topic, orders_schema,
                                                                 tmp_path: Path) -> None:
    from deltalake import DeltaTable

    topic = make_topic(partitions=1)
    produce_orders(kafka_servers, topic, 90, schema_id=1, schema=orders_schema)
    config = _config(tmp_path, topic, kafka_servers, "stats", 30, 1000)

    ran = pipeline.run(spark, config, available_now=True)

    assert [r.path for r in ran.batches] == [WritePath.DRIVER] * 3
    adds = pa.table(DeltaTable(config.table_path).get_add_actions(flatten=True)).to_pylist()
    by_min = sorted(adds, key=lambda a: a["min._kafka_offset"])
    assert [(a["num_records"], a["min._kafka_offset"], a["max._kafka_offset"]) for a in by_min] == [
        (30, 0, 29), (30, 30, 59), (30, 60, 89)]
    assert all(a["null_count._kafka_offset"] == 0 for a in adds)
    # Filters on statistics columns answer the same as a full read (files are skipped, never wrongly).
    table = spark.read.format("delta").load(config.table_path)
    everything = table.collect()
    for column in ("_kafka_offset", "_kafka_timestamp", "placed_at", "customer_id"):
        values = sorted(r[column] for r in everything)
        middle = values[len(values) // 2]
        assert table.where(table[column] >= middle).count() == sum(1 for v in values if v >= middle), column
        assert table.where(table[column] == middle).count() == values.count(middle), column


def test_a_batch_with_a_record_to_quarantine_is_written_by_the_driver(spark, kafka_servers, make_topic,
                                                                      orders_schema, tmp_path: Path) -> None:
    topic = make_topic(partitions=1)
    produce_orders(kafka_servers, topic, 20, schema_id=1, schema=orders_schema)
    producer = Producer({"bootstrap.servers": kafka_servers})
    producer.produce(topic, value=b"\x00\x00\x00\x00\x01not avro", partition=0)
    producer.flush(10)
    produce_orders(kafka_servers, topic, 20, schema_id=1, schema=orders_schema, first_seq=20)
    config = _config(tmp_path, topic, kafka_servers, "bad", 1000, 1000)

    ran = pipeline.run(spark, config, available_now=True)

    assert [(r.path, r.rows, r.quarantined) for r in ran.batches] == [(WritePath.DRIVER, 40, 1)]
    bad = table_rows(config.quarantine_path)
    assert [(r["_kafka_offset"], r["_error_class"], bytes(r["_kafka_value"])) for r in bad] == [
        (20, "MalformedAvroError", b"\x00\x00\x00\x00\x01not avro")]
    # quarantine first, then bronze: each with its own SetTransaction of the batch and its ledger record
    assert [(a, v) for _, a, v in delta_txns(Path(config.quarantine_path))] == [(f"{ran.app_id}.quarantine", 0)]
    assert [(a, v) for _, a, v in delta_txns(Path(config.table_path))] == [(ran.app_id, 0)]
    (q_record,) = DeltaRsReader().history(config.quarantine_path)
    assert (q_record.rows, [(r.first, r.last, r.count) for r in q_record.ranges]) == (1, [(20, 20, 1)])
    (b_record,) = DeltaRsReader().history(config.table_path)
    assert (b_record.rows, b_record.quarantined, [(r.first, r.last) for r in b_record.ranges]) == (40, 1, [(0, 40)])


def test_transactions_are_read_committed_directly(spark, kafka_servers, make_topic, orders_schema,
                                                  tmp_path: Path) -> None:
    topic = make_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_servers, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    rng, kept = random.Random(3), []
    for n, commit in enumerate((True, False, True)):  # the aborted records and every marker take offsets
        producer.begin_transaction()
        for i in range(5):
            record = order(10 * n + i, rng)
            producer.produce(topic, value=encode(1, avro_body(orders_schema, record)), partition=0)
            if commit:
                kept.append(record["order_id"])
        producer.flush(30)  # in the log before the abort: librdkafka drops unsent records of an aborted transaction
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    config = _config(tmp_path, topic, kafka_servers, "tx", 1000, 1000)

    ran = pipeline.run(spark, config, available_now=True)

    assert [(r.path, r.rows) for r in ran.batches] == [(WritePath.DRIVER, 10)]
    rows = table_rows(config.table_path)
    assert sorted(r["order_id"] for r in rows) == sorted(kept)
    assert sorted(r["_kafka_offset"] for r in rows) == [0, 1, 2, 3, 4, 12, 13, 14, 15, 16]


def test_spark_and_delta_rs_commits_follow_each_other_with_checksums_spark_agrees_with(spark,
                                                                                        tmp_path: Path) -> None:
    """Each engine reads the other's commits and skips the other's (app id, version); after a delta-rs commit
    Spark's Delta finds the version's checksum (`delta.checksums`), so its next commit neither rebuilds the table's
    state nor misses a set transaction."""
    from ingestion.delta.rs_append import RsTable
    from ingestion.runtime import delta_txn

    path = str(tmp_path / "t")
    spark.range(3).selectExpr("id", "cast(id as string) s").write.format("delta").save(path)
    table = RsTable(path)

    def rs(version: int, ids: list[int]) -> Any:
        table.current()
        return table.append(pa.table({"id": pa.array(ids, pa.int64()), "s": [str(i) for i in ids]}), app_id="app",
                            txn_version=version, user_metadata=f'{{"v":{version}}}')

    def by_spark(version: int, first: int) -> int:
        txn = delta_txn.DeltaTxn(spark, path)
        if txn.committed_version("app") >= version:
            return -1
        files = txn.write(spark.range(first, first + 2).selectExpr("id", "cast(id as string) s").coalesce(1))
        return txn.commit(files, app_id="app", txn_version=version, user_metadata=f'{{"v":{version}}}')

    def checksum_valid(version: int) -> bool:
        snapshot = delta_txn.latest_snapshot(spark, path)
        assert snapshot.version() == version
        return bool(snapshot.validateChecksum(getattr(snapshot, "validateChecksum$default$1")()))

    assert rs(0, [10, 11]).version == 1 and checksum_valid(1)
    assert delta_txn.DeltaTxn(spark, path)._checksum_transactions() == {"app": 0}  # read from the checksum
    assert by_spark(0, 20) == -1  # delta-rs committed version 0 of the app: Spark skips it
    assert by_spark(1, 20) == 2 and checksum_valid(2)
    assert not rs(1, [30]).committed  # Spark committed version 1: delta-rs skips it
    assert rs(2, [30]).version == 3 and checksum_valid(3)
    assert by_spark(3, 40) == 4 and checksum_valid(4)
    assert sorted(r[0] for r in table_rows(path)) == [0, 1, 2, 10, 11, 20, 21, 30, 40, 41]
    history = {r["version"]: r["userMetadata"] for r in spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()}
    assert [history[v] for v in (1, 2, 3, 4)] == ['{"v":0}', '{"v":1}', '{"v":2}', '{"v":3}']
    assert [(v, a, t) for v, a, t in delta_txns(Path(path))] == [(1, "app", 0), (2, "app", 1), (3, "app", 2),
                                                                  (4, "app", 3)]
