"""Real Kafka, real Spark, real Delta: records land in bronze exactly as produced, with their offsets recorded."""

from __future__ import annotations

import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from ingestion.columns import KAFKA_SOURCE_SCHEMA
from ingestion.config import load_pipeline
from ingestion.decode.wire import encode
from ingestion.delta import ledger
from ingestion.dev.samples import avro_body, order, produce_orders
from ingestion.errors import IngestionError
from ingestion.runtime import helper
from ingestion.stream import checkpoint, context, pipeline
from tests.conftest import pipeline_yaml
from tests.helpers import assert_exactly_produced, py4j_commands, table_rows

pytestmark = pytest.mark.integration


def _bronze(spark: Any, config: Any) -> list[Any]:
    return table_rows(config.table_path)


def test_records_land_exactly_once_with_payload_and_offsets(spark, kafka_servers, make_topic, orders_schema,
                                                             tmp_path: Path) -> None:
    topic = make_topic(partitions=3)
    produced = produce_orders(kafka_servers, topic, 300, schema_id=1, schema=orders_schema)
    assert len({p.partition for p in produced}) == 3
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers,
                                         extra="source:\n  maxOffsetsPerTrigger: 120\n"))

    running = pipeline.run(spark, config, available_now=True)

    rows = _bronze(spark, config)
    assert_exactly_produced(rows, produced)
    assert len(running.batches) == 3  # 300 records in batches of at most 120 offsets
    assert {r["_kafka_topic"] for r in rows} == {topic}
    assert {r["_schema_id"] for r in rows} == {1}
    assert not any(r["_kafka_tombstone"] for r in rows)
    first = next(r for r in rows if (r["_kafka_partition"], r["_kafka_offset"]) == (produced[0].partition,
                                                                                    produced[0].offset))
    seq = int(produced[0].record["order_id"][2:])
    assert [(h["key"], h["value"]) for h in first["_kafka_headers"]] == [("source", b"samples"),
                                                                         ("seq", str(seq).encode())]
    # Timestamps are Parquet's standard INT64 microseconds (readers need no INT96 support)
    parquet_schema = pq.ParquetFile(next(Path(config.table_path).rglob("*.parquet"))).schema
    column = parquet_schema.column(parquet_schema.names.index("_kafka_timestamp"))
    assert column.physical_type == "INT64" and '"timeUnit": "microseconds"' in column.logical_type.to_json()


def test_offset_ranges_in_commit_history_match_table_contents(spark, kafka_servers, make_topic, orders_schema,
                                                              tmp_path: Path) -> None:
    topic = make_topic(partitions=3)
    produce_orders(kafka_servers, topic, 200, schema_id=1, schema=orders_schema)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers,
                                         extra="source:\n  maxOffsetsPerTrigger: 70\n"))
    pipeline.run(spark, config, available_now=True)

    records = ledger.history(spark, config.table_path)
    assert [r.batch_id for r in records] == [0, 1, 2]
    assert [r.version for r in records] == [1, 2, 3]  # version 0 created the empty table
    # What each commit says it holds ...
    recorded = {(r.batch_id, x.partition): (x.first, x.last, x.count) for r in records for x in r.ranges}
    # ... equals what the rows written by that commit are.
    actual: dict[tuple[int, int], list[int]] = defaultdict(list)
    for row in _bronze(spark, config):
        actual[(row["_batch_id"], row["_kafka_partition"])].append(row["_kafka_offset"])
    assert recorded == {k: (min(v), max(v), len(v)) for k, v in actual.items()}
    assert sum(r.rows for r in records) == 200
    for r in records:
        assert r.app_id == checkpoint.app_id(config.checkpoint_path, config.name)
        # the version as of each commit holds exactly the offsets recorded so far
        assert len(table_rows(config.table_path, r.version)) == sum(
            x.rows for x in records if (x.version or 0) <= (r.version or 0))


def test_restart_reuses_app_id_and_new_checkpoint_resumes_from_table(spark, kafka_servers, make_topic,
                                                                     orders_schema, tmp_path: Path) -> None:
    topic = make_topic(partitions=3)
    first = produce_orders(kafka_servers, topic, 90, schema_id=1, schema=orders_schema)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers))
    pipeline.run(spark, config, available_now=True)
    app_id = checkpoint.app_id(config.checkpoint_path, config.name)

    second = produce_orders(kafka_servers, topic, 60, schema_id=1, schema=orders_schema, first_seq=90)
    pipeline.run(spark, config, available_now=True)
    assert checkpoint.app_id(config.checkpoint_path, config.name) == app_id

    # Losing the checkpoint must neither replay from startingOffsets (duplicates) nor skip (gap).
    shutil.rmtree(config.checkpoint_path)
    third = produce_orders(kafka_servers, topic, 45, schema_id=1, schema=orders_schema, first_seq=150)
    running = pipeline.run(spark, config, available_now=True)
    assert running.app_id != app_id
    assert_exactly_produced(_bronze(spark, config), first + second + third)


def test_a_run_reads_the_ledger_once_with_delta_rs_and_with_delta_only_where_delta_rs_cannot(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path, monkeypatch) -> None:
    from dataclasses import replace

    from ingestion.delta import rs_reads
    from ingestion.kafka.clients import watermarks
    from ingestion.stream.facts import read_facts

    topic = make_topic(partitions=3)
    produce_orders(kafka_servers, topic, 90, schema_id=1, schema=orders_schema)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers))
    reads: list[str] = []  # by Delta in the JVM
    rs: list[str] = []  # by delta-rs
    history, recorded = ledger.history, rs_reads.recorded_offsets
    monkeypatch.setattr(ledger, "history", lambda s, path: reads.append(path) or history(s, path))
    monkeypatch.setattr(rs_reads, "recorded_offsets", lambda c: rs.append(c.table_path) or recorded(c))

    pipeline.run(spark, config, available_now=True)  # a new table: its creation, no ledger yet
    assert (reads, rs) == ([], [])
    pipeline.run(spark, config, available_now=True)  # a run of a table with a ledger: read once, by delta-rs
    assert (reads, rs) == ([], [config.table_path])
    rs.clear()

    ctx = context.resolve(config)
    facts = read_facts(ctx)
    ends = {str(p): high for p, (_, high) in watermarks({"bootstrap.servers": kafka_servers}, topic).items()}
    assert facts.recorded == {topic: ends} and (reads, rs) == ([], [config.table_path])
    # A table delta-rs cannot tell about (facts.recorded None) is read by Delta in the JVM, to the same offsets.
    assert pipeline._recorded_offsets(spark, config, replace(facts, recorded=None)) == {topic: ends}
    assert reads == [config.table_path]


def test_tombstone_is_a_marked_row(spark, kafka_servers, make_topic, orders_schema, tmp_path: Path) -> None:
    from confluent_kafka import Producer

    topic = make_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_servers})
    producer.produce(topic, key=b"customer-1", value=encode(1, avro_body(orders_schema, order(1, _rng()))))
    producer.produce(topic, key=b"customer-1", value=None)
    producer.flush(30)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers))
    pipeline.run(spark, config, available_now=True)

    rows = sorted(_bronze(spark, config), key=lambda r: r["_kafka_offset"])
    assert [(r["_kafka_offset"], r["_kafka_tombstone"], r["order_id"], r["_schema_id"]) for r in rows] == [
        (0, False, "o-00000001", 1), (1, True, None, None)]
    assert rows[1]["_kafka_key"] == "customer-1"


def test_undecodable_record_fails_batch_naming_it_and_commits_nothing(spark, kafka_servers, make_topic,
                                                                      orders_schema, tmp_path: Path) -> None:
    from confluent_kafka import Producer

    topic = make_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_servers})
    good = encode(1, avro_body(orders_schema, order(1, _rng())))
    for value in (good, good, b"\x01not-avro", good):
        producer.produce(topic, value=value)
    producer.flush(30)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers, sink="  onError: fail\n"))

    with pytest.raises(IngestionError, match=rf"{topic}/0@2: WireFormatError: magic byte is 1"):
        pipeline.run(spark, config, available_now=True)
    assert len(table_rows(config.table_path)) == 0
    assert len(table_rows(config.quarantine_path)) == 0
    assert ledger.history(spark, config.table_path) == []


def _rng() -> Any:
    import random

    return random.Random(1)


def test_a_batchs_values_do_not_make_spark_compile_its_stage_again(spark) -> None:
    import datetime as dt

    from pyspark.sql import functions as F

    from ingestion.decode import bronze
    from ingestion.decode.spec import PAYLOAD

    decoded = spark.range(50).select(
        F.struct(F.col("id").alias("n")).alias(PAYLOAD), F.lit("orders").alias("topic"),
        (F.col("id") % 3).cast("int").alias("partition"), F.col("id").alias("offset"),
        F.timestamp_seconds(F.col("id")).alias("timestamp"), F.lit(0).alias("timestampType"),
        F.col("id").cast("string").alias("_key"), F.lit(None).cast("array<struct<key:string,value:binary>>")
        .alias("headers"), F.lit(False).alias("_tombstone"), F.lit(1).alias("_schema_id"),
        F.lit(None).cast("string").alias("_error_class"))
    compilations = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    start = dt.datetime(2026, 11, 22, tzinfo=dt.UTC)

    def batch(batch_id: int) -> set[tuple[Any, ...]]:
        rows = bronze.bronze_rows(decoded, batch_id=batch_id, ingested_at=start + dt.timedelta(seconds=batch_id))
        return {tuple(r) for r in rows.select("_batch_id", F.unix_seconds("_ingested_at")).collect()}

    first = int(start.timestamp())
    assert batch(1) == {(1, first + 1)}
    compiled = compilations.getCount()
    assert batch(2) == {(2, first + 2)}
    assert batch(3) == {(3, first + 3)}
    # Spark found batch 1's generated code in its cache: the batch's values are data, not literals in the code.
    assert compilations.getCount() == compiled


def test_building_a_batchs_plan_takes_few_round_trips_to_the_jvm(spark, orders_schema) -> None:
    import datetime as dt
    import json

    from pyspark.sql import Observation
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from ingestion.decode import bronze
    from ingestion.decode import jvm_decoder as fastpath
    from ingestion.decode.spec import DecodeSpec

    text = json.dumps(orders_schema)
    spec = DecodeSpec({1: text}, text, 100_000, False, key_format="string")
    kafka_rows = spark.createDataFrame([], KAFKA_SOURCE_SCHEMA)

    def plan(batch_id: int) -> T.StructType:
        observation = Observation()
        decoded = fastpath.decode_in_jvm(kafka_rows, spec).observe(
            observation, F.count(F.lit(1)).alias("records"), helper.partition_summary(spark).alias("partitions"))
        return bronze.bronze_rows(decoded, batch_id=batch_id, ingested_at=dt.datetime.now(dt.UTC)).schema

    plan(1)  # the decode expressions and the summary function are built once per session
    with py4j_commands() as commands:
        schema = plan(2)
    # 53 with the session's defaults; 114 when each select handed its columns over one by one, 410 when PySpark
    # also records the call site of every function (4 more each).
    assert "_batch_id" in schema.fieldNames()
    assert 20 < len(commands) <= 80, len(commands)


def test_a_spark_path_batch_takes_few_round_trips_to_the_jvm(spark, kafka_servers, make_topic, orders_schema,
                                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from ingestion.stream import writer as sink
    from ingestion.stream.batch import WritePath

    topic = make_topic(partitions=3)
    produced = produce_orders(kafka_servers, topic, 400, schema_id=1, schema=orders_schema)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers,
                                         extra="source:\n  maxOffsetsPerTrigger: 100\n",
                                         sink="  directWriteMaxOffsets: 0\n"))  # the Spark path
    in_batch = threading.local()
    per_batch: list[tuple[int, int]] = []  # (batch id, py4j commands sent by the batch's own thread)
    write = sink.BronzeWriter.__call__

    def counted_write(self: Any, kafka_rows: Any, batch_id: int) -> None:
        in_batch.on = True
        try:
            before = len(commands)
            write(self, kafka_rows, batch_id)
            per_batch.append((batch_id, len(commands) - before))
        finally:
            in_batch.on = False

    monkeypatch.setattr(sink.BronzeWriter, "__call__", counted_write)
    with py4j_commands(lambda: getattr(in_batch, "on", False)) as commands:
        running = pipeline.run(spark, config, available_now=True)

    assert_exactly_produced(_bronze(spark, config), produced)
    assert len(running.batches) >= 4 and all(r.path is WritePath.SPARK for r in running.batches)
    # 113 a batch; 174 when each select handed its columns over one by one; 340 when Java lists and maps are also
    # iterated with py4j's iterator (its end is a JVM exception that PySpark converts); ~500 when Delta's classes
    # are also looked up by their dotted names every time.
    assert [b for b, _ in per_batch] == [r.batch_id for r in running.batches]
    assert all(n <= 140 for _, n in per_batch[1:]), per_batch
