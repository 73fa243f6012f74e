"""The start batch (`stream.start_batch`): a new checkpoint's first records written by the driver-side path before
the JVM, on a real broker; the query then goes on from the table's offsets, and Spark's Delta, delta-rs and the
audit read the result."""

from __future__ import annotations

import json
from dataclasses import replace
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
from ingestion.stream import checkpoint, launch, pipeline, start_batch
from ingestion.stream.facts import locked
from ingestion.stream.metrics import tracking_uri
from tests.conftest import pipeline_yaml
from tests.helpers import assert_exactly_produced, delta_txns, table_rows

pytestmark = pytest.mark.integration


def _config(tmp_path: Path, topic: str, servers: str, name: str, direct: int, extra: str = "") -> Any:
    return load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=servers, name=name,
                                       extra=f"source:\n  maxOffsetsPerTrigger: 100\n{extra}",
                                       sink=f"  directWriteMaxOffsets: {direct}\n"))


def _assert_checksum_valid(spark: Any, path: str, version: int) -> None:
    snapshot = delta_txn.latest_snapshot(spark, path)
    assert snapshot.version() == version
    assert snapshot.validateChecksum(getattr(snapshot, "validateChecksum$default$1")())


def _fits(config: Any, handed: Any) -> bool:
    facts = handed.facts
    return start_batch.fits(config, facts.recorded, facts.bounds, facts.checkpoint_started)


def test_the_start_batch_lands_before_the_jvm_and_the_query_goes_on_after_it(spark, kafka_servers, make_topic,
                                                                             orders_schema, tmp_path: Path) -> None:
    topic = make_topic(partitions=3)
    produced = produce_orders(kafka_servers, topic, 250, schema_id=1, schema=orders_schema)
    config = _config(tmp_path, topic, kafka_servers, "early", 120)
    ctx = launch.check_can_start(config)
    handed = locked(ctx)

    assert _fits(config, handed)  # 250 records to read: for start batches alone (sink.startBatchMaxOffsets)
    prepared = launch.prepare(ctx, handed)  # no session coming: one start batch
    (start,) = prepared.start_batches
    assert start.result.version == 1 and start.result.rows == 100
    # offsets shared among the partitions in proportion to what each holds, from each one's start
    assert sorted((r.partition, r.first) for r in start.result.ranges) == [(0, 0), (1, 0), (2, 0)]
    # Spark's Delta agrees with the checksum written beside the start batch's (delta-rs) commit
    assert (Path(config.table_path) / "_delta_log" / f"{1:020d}.crc").exists()
    _assert_checksum_valid(spark, config.table_path, 1)
    produced += produce_orders(kafka_servers, topic, 30, schema_id=1, schema=orders_schema, first_seq=250)

    ran = pipeline.run(spark, ctx, available_now=True, launch=replace(handed, prepared=prepared))

    rows = table_rows(config.table_path)
    assert_exactly_produced(rows, produced)
    assert ran.batches[0] is start.result and sum(b.rows for b in ran.batches) == 280
    assert sorted({r["_batch_id"] for r in rows})[0] == ledger.START_BATCH_ID
    records = DeltaRsReader().history(config.table_path)  # Spark's Delta reads the commit and its ledger record
    assert records[0].batch_id == ledger.START_BATCH_ID and records[0].app_id == f"{ran.app_id}.start"
    assert sum(r.rows for r in records) == 280
    # the start batch commits its own SetTransaction (the version it follows), the query's batches theirs from 0
    assert delta_txns(Path(config.table_path)) == [(1, f"{ran.app_id}.start", 0)] + [
        (2 + b, ran.app_id, b) for b in range(len(ran.batches) - 1)]
    _assert_checksum_valid(spark, config.table_path, len(ran.batches))  # the query's, derived from it
    assert verify.audit(DeltaRsReader(), ctx).ok
    # the checkpoint has batches now: the next run writes no start batch
    again = launch.check_can_start(config)
    handed = locked(again)
    try:
        assert handed.facts.checkpoint_started and launch.prepare(again, handed).start_batches == ()
    finally:
        handed.lock.release()


def test_start_batches_go_on_while_the_jvm_boots_and_a_small_backlog_needs_no_jvm(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path) -> None:
    """While the session is not up (`more`), the driver writes start batch after start batch, each with its own
    SetTransaction, from where the last ended; an available-now run with a backlog the driver takes alone needs no
    JVM, and a query after them reads only what came since."""
    topic = make_topic(partitions=3)
    produced = produce_orders(kafka_servers, topic, 250, schema_id=1, schema=orders_schema)
    config = _config(tmp_path, topic, kafka_servers, "pump", 1000)  # batches of 100 (maxOffsetsPerTrigger)
    ctx = launch.check_can_start(config)
    handed = locked(ctx)
    prepared = launch.prepare(ctx, handed, more=lambda: True)  # the session never comes: up to Kafka's end
    assert [b.result.rows for b in prepared.start_batches] == [100, 100, 50]
    app_id = checkpoint.app_id(config.checkpoint_path, config.name)
    assert delta_txns(Path(config.table_path)) == [(v, f"{app_id}.start", v - 1) for v in (1, 2, 3)]
    handed.lock.release()
    produced += produce_orders(kafka_servers, topic, 20, schema_id=1, schema=orders_schema, first_seq=250)

    done = launch.run(None, config, available_now=True)  # 20 left: start batches alone
    assert isinstance(done, launch.Finished) and [b.rows for b in done.batches] == [20]
    ran = pipeline.run(spark, config, available_now=True)  # a query from the table's offsets: nothing to read
    assert sum(b.rows for b in ran.batches) == 0
    assert_exactly_produced(table_rows(config.table_path), produced)
    assert verify.audit(DeltaRsReader(), launch.check_can_start(config)).ok


def test_an_available_now_run_the_start_batch_catches_up_needs_no_jvm(spark, kafka_servers, make_topic,
                                                                       orders_schema, tmp_path: Path) -> None:
    topic = make_topic(partitions=2)
    produced = produce_orders(kafka_servers, topic, 40, schema_id=1, schema=orders_schema)
    config = _config(tmp_path, topic, kafka_servers, "nojvm", 1000)

    results = []
    for first_seq in (40, 70):
        done = launch.run(None, config, available_now=True)  # the launch sequence `ingest run` takes
        assert isinstance(done, launch.Finished) and len(done.batches) == 1
        results.append(done.batches[0])
        produced += produce_orders(kafka_servers, topic, 30, schema_id=1, schema=orders_schema,
                                   first_seq=first_seq)
    third = launch.run(None, config, available_now=True)
    assert isinstance(third, launch.Finished) and [b.rows for b in third.batches] == [30]  # the 30 just produced

    assert [r.rows for r in results] == [40, 30] and [r.version for r in results] == [1, 2]
    # the consumer group shows where the table is, as after a query's batch
    assert committed_offsets({"bootstrap.servers": kafka_servers}, config.consumer_group, topic) == {
        r.partition: r.last + 1 for r in ledger.coverage(DeltaRsReader().history(config.table_path))}
    runs = MlflowClient(tracking_uri()).search_runs(
        [MlflowClient(tracking_uri()).get_experiment_by_name(config.experiment).experiment_id])
    assert sorted(r.data.metrics["rows"] for r in runs) == [30, 30, 40]
    assert all(r.info.status == "FINISHED" for r in runs)
    caught_up = launch.run(None, config, available_now=True)
    assert isinstance(caught_up, launch.Finished) and caught_up.caught_up
    produced += produce_orders(kafka_servers, topic, 5, schema_id=1, schema=orders_schema, first_seq=100)
    # then a query, on a checkpoint that never had a batch, goes on from the table's offsets
    ran = pipeline.run(spark, config, available_now=True)
    assert ran.batches and all(b.batch_id >= 0 for b in ran.batches)
    assert_exactly_produced(table_rows(config.table_path), produced)
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
        ctx = launch.check_can_start(config)
        handed = locked(ctx)
        try:
            assert not _fits(config, handed)
            assert launch.prepare(ctx, handed).start_batches == ()
        finally:
            handed.lock.release()
        assert not list((Path(config.table_path) / "_delta_log").glob(f"{1:020d}.json"))


def test_the_first_batch_plan_is_built_ahead_and_nothing_written(spark, kafka_servers, make_topic, orders_schema,
                                                                  tmp_path: Path) -> None:
    """What `pipeline._start` has done beside the query's start (`BronzeWriter.plan_ahead`): the decode plan of
    the query's own Kafka rows built (and the table's log read), no file, commit or checkpoint written."""
    from ingestion.runtime import session_cache
    from ingestion.stream import setup, source
    from ingestion.stream.writer import BronzeWriter

    topic = make_topic(partitions=2)
    produce_orders(kafka_servers, topic, 10, schema_id=1, schema=orders_schema)
    config = _config(tmp_path, topic, kafka_servers, "ahead", 0)
    ctx = launch.check_can_start(config)
    schemas = setup.resolver(spark, ctx)
    setup.ensure_tables(spark, config, schemas.spec)
    table = Path(config.table_path)
    before = sorted(p.relative_to(table) for p in table.rglob("*"))
    writer = BronzeWriter(config=config, app_id="ahead-app", resolver=schemas, context=ctx)
    key = ("decode plan", id(writer.targets.spec))
    assert not any(k[1] == key for k in session_cache._BUILT)
    writer.plan_ahead(source.read_stream(spark, ctx))  # raises what went wrong (the run's thread only logs it)
    assert any(k[1] == key for k in session_cache._BUILT)
    assert sorted(p.relative_to(table) for p in table.rglob("*")) == before
    assert not Path(config.checkpoint_path).exists()
