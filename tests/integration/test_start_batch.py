"""The start batch (`stream.early`): a new checkpoint's first records written before the JVM, on a real broker;
the query then goes on from the table's offsets, and Spark's Delta, delta-rs and the audit read the result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from ingestion.config import load_pipeline
from ingestion.delta import ledger
from ingestion.delta.rs_reads import DeltaRsReader
from ingestion.dev.samples import produce_orders
from ingestion.kafka import committed_offsets
from ingestion.ops import verify
from ingestion.runtime import delta_txn
from ingestion.stream import early, pipeline
from ingestion.stream.metrics import tracking_uri
from tests.conftest import pipeline_yaml
from tests.helpers import assert_exactly_produced, delta_txns

pytestmark = pytest.mark.integration


def _config(tmp_path: Path, topic: str, servers: str, name: str, direct: int, extra: str = "") -> Any:
    return load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=servers, name=name,
                                       extra=f"source:\n  maxOffsetsPerTrigger: 100\n{extra}",
                                       sink=f"  directWriteMaxOffsets: {direct}\n"))


def _assert_checksum_valid(spark: Any, path: str, version: int) -> None:
    snapshot = delta_txn.latest_snapshot(spark, path)
    assert snapshot.version() == version
    assert snapshot.validateChecksum(getattr(snapshot, "validateChecksum$default$1")())


def test_the_start_batch_lands_before_the_jvm_and_the_query_goes_on_after_it(spark, kafka_servers, make_topic,
                                                                             orders_schema, tmp_path: Path) -> None:
    topic = make_topic(partitions=3)
    produced = produce_orders(kafka_servers, topic, 250, schema_id=1, schema=orders_schema)
    config = _config(tmp_path, topic, kafka_servers, "early", 120)
    ctx = pipeline.check_can_start(config)

    assert not early.fits(ctx)  # 250 records to read, 100 offsets a batch (maxOffsetsPerTrigger, below 120)
    early.prepare(ctx)
    start = ctx.start_batch
    assert start is not None and start.result.version == 1 and start.result.rows == 100
    # offsets shared among the partitions in proportion to what each holds, from each one's start
    assert sorted((r.partition, r.first) for r in start.result.ranges) == [(0, 0), (1, 0), (2, 0)]
    # Spark's Delta agrees with the checksum written beside the start batch's commit
    assert (Path(config.table_path) / "_delta_log" / f"{1:020d}.crc").exists()
    _assert_checksum_valid(spark, config.table_path, 1)
    produced += produce_orders(kafka_servers, topic, 30, schema_id=1, schema=orders_schema, first_seq=250)

    ran = pipeline.run(spark, ctx, available_now=True)  # a context holding the start batch and its lock

    rows = spark.read.format("delta").load(config.table_path).collect()
    assert_exactly_produced(rows, produced)
    assert ran.batches[0] is start.result and sum(b.rows for b in ran.batches) == 280
    assert sorted({r["_batch_id"] for r in rows})[0] == ledger.START_BATCH_ID
    records = ledger.history(spark, config.table_path)  # Spark's Delta reads the commit and its ledger record
    assert records[0].batch_id == ledger.START_BATCH_ID and records[0].app_id == ran.app_id
    assert sum(r.rows for r in records) == 280
    # the start batch commits no SetTransaction; the query's batches do, from batch 0
    assert [v for _, a, v in delta_txns(Path(config.table_path))] == list(range(len(ran.batches) - 1))
    _assert_checksum_valid(spark, config.table_path, len(ran.batches))  # the query's, derived from it
    assert verify.audit(DeltaRsReader(), ctx).ok
    # the checkpoint has batches now: the next run writes no start batch
    again = pipeline.check_can_start(config)
    early.prepare(again)
    assert again.start_batch is None and again.lock is None


def test_an_available_now_run_the_start_batch_catches_up_needs_no_jvm(spark, kafka_servers, make_topic,
                                                                       orders_schema, tmp_path: Path) -> None:
    topic = make_topic(partitions=2)
    produced = produce_orders(kafka_servers, topic, 40, schema_id=1, schema=orders_schema)
    config = _config(tmp_path, topic, kafka_servers, "nojvm", 1000)

    results = []
    for first_seq in (40, 70):
        ctx = pipeline.check_can_start(config)
        assert early.fits(ctx)
        early.prepare(ctx)
        done = pipeline.finish_without_jvm(ctx)
        assert done is not None and ctx.lock is None
        results.append(done)
        assert ctx.start_batch is None
        produced += produce_orders(kafka_servers, topic, 30, schema_id=1, schema=orders_schema,
                                   first_seq=first_seq)

    assert [r.rows for r in results] == [40, 30] and [r.version for r in results] == [1, 2]
    # the consumer group shows where the table is, as after a query's batch
    assert committed_offsets({"bootstrap.servers": kafka_servers}, config.consumer_group, topic) == {
        r.partition: r.last + 1 for r in ledger.coverage(DeltaRsReader().history(config.table_path))}
    runs = MlflowClient(tracking_uri()).search_runs(
        [MlflowClient(tracking_uri()).get_experiment_by_name(config.experiment).experiment_id])
    assert sorted(r.data.metrics["rows"] for r in runs) == [30, 40]
    assert all(r.info.status == "FINISHED" for r in runs)
    # then a query, on a checkpoint that never had a batch, goes on from the table's offsets
    ran = pipeline.run(spark, config, available_now=True)
    assert ran.batches and all(b.batch_id >= 0 for b in ran.batches)
    assert_exactly_produced(spark.read.format("delta").load(config.table_path).collect(), produced)
    log_folder = Path(config.table_path) / "_delta_log"
    assert json.loads((log_folder / f"{2:020d}.crc").read_text())["numFiles"] == 2


def test_no_start_batch_where_the_start_is_not_the_table_or_the_earliest_offsets(kafka_servers, make_topic,
                                                                                orders_schema,
                                                                                tmp_path: Path) -> None:
    topic = make_topic(partitions=1)
    produce_orders(kafka_servers, topic, 10, schema_id=1, schema=orders_schema)
    latest = _config(tmp_path, topic, kafka_servers, "latest", 1000, "  startingOffsets: latest\n")
    off = _config(tmp_path, topic, kafka_servers, "disabled", 0)
    for config in (latest, off):
        ctx = pipeline.check_can_start(config)
        assert not early.fits(ctx)
        early.prepare(ctx)
        assert ctx.start_batch is None
        assert not list((Path(config.table_path) / "_delta_log").glob(f"{1:020d}.json"))

