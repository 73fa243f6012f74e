"""Small batches written without a Spark job (`stream.direct`): the same rows, commits and ledger as Spark's write,
on a real broker, read back by Spark and by delta-rs."""

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
from ingestion.dev.samples import avro_body, order, produce_orders
from ingestion.stream import pipeline
from tests.conftest import pipeline_yaml
from tests.helpers import assert_exactly_produced, delta_txns

pytestmark = pytest.mark.integration

_BATCH_VALUES = ("_batch_id", "_ingested_at")


def _config(tmp_path: Path, topic: str, servers: str, name: str, max_offsets: int, direct: int) -> Any:
    return load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=servers, name=name,
                                       extra=f"source:\n  maxOffsetsPerTrigger: {max_offsets}\n",
                                       sink=f"  directWriteMaxOffsets: {direct}\n"))


def _rows(spark: Any, path: str) -> list[dict[str, Any]]:
    rows = spark.read.format("delta").load(path).drop(*_BATCH_VALUES).collect()
    return sorted((r.asDict(recursive=True) for r in rows), key=lambda r: (r["_kafka_partition"], r["_kafka_offset"]))


def _odd_records(servers: str, topic: str, schema: dict[str, Any]) -> None:
    """A tombstone, a record without a key and one with a header of no value, on partition 0."""
    producer = Producer({"bootstrap.servers": servers})
    producer.produce(topic, value=None, key=b"gone", partition=0)
    producer.produce(topic, value=encode(1, avro_body(schema, order(9001, random.Random(1)))),
                     partition=0, headers=[("empty", None), ("h", b"v")])
    producer.flush(10)


def test_small_batches_are_written_directly_with_the_same_rows_as_spark(spark, kafka_servers, make_topic,
                                                                        orders_schema, tmp_path: Path) -> None:
    topic = make_topic(partitions=3)
    produced = produce_orders(kafka_servers, topic, 250, schema_id=1, schema=orders_schema)
    _odd_records(kafka_servers, topic, orders_schema)
    direct = _config(tmp_path, topic, kafka_servers, "direct", 100, 1000)
    spark_written = _config(tmp_path, topic, kafka_servers, "spark", 100, 0)

    ran = pipeline.run(spark, direct, available_now=True)
    reference = pipeline.run(spark, spark_written, available_now=True)

    assert len(ran.batches) == 3 and all(r.direct and r.committed for r in ran.batches)
    assert not any(r.direct for r in reference.batches)
    rows = _rows(spark, direct.table_path)
    assert rows == _rows(spark, spark_written.table_path)  # every column, tombstone and headers included
    assert_exactly_produced([r for r in spark.read.format("delta").load(direct.table_path).collect()
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
    records = ledger.history(spark, direct.table_path)
    assert sum(r.rows for r in records) == len(rows) == 252
    assert ledger.next_offsets(records) == ledger.next_offsets(ledger.history(spark, spark_written.table_path))


def test_direct_files_carry_statistics_readers_skip_by_correctly(spark, kafka_servers, make_topic, orders_schema,
                                                                 tmp_path: Path) -> None:
    from deltalake import DeltaTable

    topic = make_topic(partitions=1)
    produce_orders(kafka_servers, topic, 90, schema_id=1, schema=orders_schema)
    config = _config(tmp_path, topic, kafka_servers, "stats", 30, 1000)

    ran = pipeline.run(spark, config, available_now=True)

    assert [r.direct for r in ran.batches] == [True] * 3
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


def test_a_batch_with_a_record_to_quarantine_is_written_by_spark(spark, kafka_servers, make_topic, orders_schema,
                                                                 tmp_path: Path) -> None:
    topic = make_topic(partitions=1)
    produce_orders(kafka_servers, topic, 20, schema_id=1, schema=orders_schema)
    producer = Producer({"bootstrap.servers": kafka_servers})
    producer.produce(topic, value=b"\x00\x00\x00\x00\x01not avro", partition=0)
    producer.flush(10)
    produce_orders(kafka_servers, topic, 20, schema_id=1, schema=orders_schema, first_seq=20)
    config = _config(tmp_path, topic, kafka_servers, "bad", 1000, 1000)

    ran = pipeline.run(spark, config, available_now=True)

    assert [(r.direct, r.rows, r.quarantined) for r in ran.batches] == [(False, 40, 1)]
    assert spark.read.format("delta").load(config.quarantine_path).count() == 1


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

    assert [(r.direct, r.rows) for r in ran.batches] == [(True, 10)]
    rows = spark.read.format("delta").load(config.table_path).collect()
    assert sorted(r["order_id"] for r in rows) == sorted(kept)
    assert sorted(r["_kafka_offset"] for r in rows) == [0, 1, 2, 3, 4, 12, 13, 14, 15, 16]
