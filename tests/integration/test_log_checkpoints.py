"""Delta checkpoints of bronze written by a background thread (log_checkpoints), not inside the batch's commit.

Real Spark, Delta and Kafka: a pipeline of a dozen batches ends with a checkpoint that ingest wrote and that a
fresh reader starts from; Delta's own commits no longer write one; tables that Delta checkpoints often enough
itself are left to it. delta-rs writes the checkpoints of tables with a legacy protocol (no Spark job runs for
them) and removes expired log files as Spark's Delta would; Spark's Delta writes the others'.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from delta.tables import DeltaTable

from ingestion.config import load_pipeline
from ingestion.delta import log_checkpoints, rs_tables
from ingestion.delta.log_checkpoints import BackgroundCheckpoints
from ingestion.dev.samples import produce_orders
from ingestion.runtime import delta_txn as commit
from ingestion.stream import context, pipeline, setup
from tests.conftest import pipeline_yaml
from tests.helpers import table_rows

pytestmark = pytest.mark.integration


def _checkpointed(table: str | Path) -> list[int]:
    """Versions with a checkpoint file in the table's log."""
    return sorted(int(f.name.split(".")[0]) for f in (Path(table) / "_delta_log").glob("*.checkpoint*.parquet"))


def _fresh_snapshot(spark: Any, table: str | Path) -> Any:
    """The table's latest snapshot as a new reader sees it, with Delta's caches dropped."""
    jvm = spark._jvm
    jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(table))
    return delta_log.update(False, jvm.scala.Option.empty(), jvm.scala.Option.empty())


def _reader_starts_at(spark: Any, table: str | Path) -> int:
    """The checkpoint a new reader of the table starts from (-1: none)."""
    return int(_fresh_snapshot(spark, table).checkpointProvider().version())


def test_a_pipeline_checkpoints_bronze_beside_its_batches(spark, kafka_servers, make_topic, orders_schema,
                                                         tmp_path: Path) -> None:
    topic = make_topic(partitions=1)
    produce_orders(kafka_servers, topic, 60, schema_id=1, schema=orders_schema)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers,
                                         extra="source:\n  maxOffsetsPerTrigger: 5\n"))

    running = pipeline.run(spark, config, available_now=True)

    assert len(running.batches) == 12  # versions 1..12 after the creation at 0
    bronze = DeltaTable.forPath(spark, config.table_path).detail().first()["properties"]
    quarantine = DeltaTable.forPath(spark, config.quarantine_path).detail().first()["properties"]
    assert bronze[log_checkpoints.PROPERTY] == log_checkpoints.INLINE_INTERVAL
    assert log_checkpoints.PROPERTY not in quarantine  # rare commits: Delta's own checkpoints
    assert running.log_checkpoints is not None
    # Version 10's commit no longer wrote one (Delta's interval is 1000); the background thread did, once the
    # batch of version 10 was committed, and no second one two versions later.
    assert running.log_checkpoints.written == [10]
    assert _checkpointed(config.table_path) == [10]
    assert _reader_starts_at(spark, config.table_path) == 10
    assert len(table_rows(config.table_path)) == 60


def test_one_checkpoint_at_a_time_every_ten_versions(spark, tmp_path: Path) -> None:
    table = tmp_path / "t"
    spark.range(3).write.format("delta").option(log_checkpoints.PROPERTY, log_checkpoints.INLINE_INTERVAL) \
        .save(str(table))
    for batch in range(1, 13):  # versions 1..12 through the writer's own commit path
        txn = commit.DeltaTxn(spark, str(table))
        txn.commit(txn.write(spark.range(batch * 10, batch * 10 + 3)), app_id="a", txn_version=batch,
                   user_metadata="{}")
    assert _checkpointed(table) == []  # not inside the commit of version 10

    background = BackgroundCheckpoints.for_table(spark, str(table), name="t")
    assert background is not None and background.last == 0
    background.committed(9)  # fewer than 10 versions since the last (none): nothing to do
    background.close()
    assert background.written == [] and _checkpointed(table) == []

    background = BackgroundCheckpoints.for_table(spark, str(table), name="t")
    assert background is not None
    stages = max(stage for stage, _, _ in _completed_stages(spark))
    background.committed(12)
    background.committed(12)  # one being written (or just written): no second one
    background.close()
    assert background.written == [12] and _checkpointed(table) == [12]
    assert max(stage for stage, _, _ in _completed_stages(spark)) == stages  # delta-rs wrote it: no Spark job
    assert _reader_starts_at(spark, table) == 12
    assert len(table_rows(str(table))) == 3 + 12 * 3
    assert DeltaTable.forPath(spark, str(table)).toDF().count() == 3 + 12 * 3
    snapshot = _fresh_snapshot(spark, table)
    assert snapshot.checkpointProvider().version() == 12 and snapshot.transactions().apply("a") == 12

    again = BackgroundCheckpoints.for_table(spark, str(table), name="t")
    assert again is not None and again.last == 12  # a new run starts from the table's last checkpoint
    again.committed(21)
    again.close()
    assert again.written == []


def test_at_most_one_checkpoint_per_min_seconds(spark, tmp_path: Path) -> None:
    table = tmp_path / "t"
    spark.range(3).write.format("delta").option(log_checkpoints.PROPERTY, log_checkpoints.INLINE_INTERVAL) \
        .save(str(table))
    for batch in range(1, 31):  # commits with nothing but the SetTransaction: versions 1..30
        commit.DeltaTxn(spark, str(table)).commit([], app_id="a", txn_version=batch, user_metadata="{}")

    hourly = BackgroundCheckpoints(spark, str(table), name="t", min_seconds=3600)
    started = hourly.committed(30)
    assert started is not None
    started.result(120)
    assert hourly.committed(50) is None  # 20 versions later, but within the hour
    hourly.close()
    assert hourly.written == [30] and _checkpointed(table) == [30]

    for batch in range(31, 41):
        commit.DeltaTxn(spark, str(table)).commit([], app_id="a", txn_version=batch, user_metadata="{}")
    eager = BackgroundCheckpoints(spark, str(table), name="t", min_seconds=0)
    assert eager.last == 30
    for version in (40, 50):  # the second: at once, but no commit since the first, so nothing to write
        started = eager.committed(version)
        assert started is not None
        started.result(120)
    eager.close()
    assert eager.written == [40] and _checkpointed(table) == [30, 40]


def test_delta_rs_checkpoints_come_every_rs_min_seconds(spark, tmp_path: Path, monkeypatch) -> None:
    """Checkpoints delta-rs writes cost milliseconds: the minute between Spark's is `RS_MIN_SECONDS` for them.
    The module's clock is the test's, so the machine's speed decides nothing."""
    table = tmp_path / "t"
    spark.range(3).write.format("delta").option(log_checkpoints.PROPERTY, log_checkpoints.INLINE_INTERVAL) \
        .save(str(table))
    for batch in range(1, 21):
        commit.DeltaTxn(spark, str(table)).commit([], app_id="a", txn_version=batch, user_metadata="{}")
    now = [1000.0]
    monkeypatch.setattr(log_checkpoints, "time", SimpleNamespace(monotonic=lambda: now[0]))
    assert log_checkpoints.RS_MIN_SECONDS < log_checkpoints.MIN_SECONDS
    checkpoints = BackgroundCheckpoints(spark, str(table), name="t")  # MIN_SECONDS: a minute
    warm = checkpoints.warm_up()  # nothing to warm up for delta-rs: it does not hold the next back
    assert warm is not None
    warm.result(60)
    started = checkpoints.committed(10)
    assert started is not None
    started.result(60)
    now[0] += log_checkpoints.RS_MIN_SECONDS - 0.1
    assert checkpoints.committed(20) is None  # within RS_MIN_SECONDS of the last
    now[0] += 0.2  # past RS_MIN_SECONDS, well within MIN_SECONDS
    started = checkpoints.committed(20)
    assert started is not None
    started.result(60)
    checkpoints.close()
    assert checkpoints.written == [10, 20] and _checkpointed(table) == [10, 20]


@pytest.mark.parametrize("interval", [None, "10", "5"])
def test_tables_delta_checkpoints_often_enough_are_left_to_delta(spark, tmp_path: Path,
                                                                 interval: str | None) -> None:
    table = tmp_path / "t"
    writer = spark.range(3).write.format("delta")
    if interval is not None:
        writer = writer.option(log_checkpoints.PROPERTY, interval)
    writer.save(str(table))
    assert BackgroundCheckpoints.for_table(spark, str(table), name="t") is None
    # The same from the properties delta-rs read (what a run's start passes: no JVM read of the table)
    properties = rs_tables.state(str(table)).properties
    assert properties.get(log_checkpoints.PROPERTY) == interval
    assert BackgroundCheckpoints.for_table(spark, str(table), name="t", properties=properties) is None
    made = BackgroundCheckpoints.for_table(spark, str(table), name="t", properties={log_checkpoints.PROPERTY: "1000"})
    assert made is not None and (made.checkpointed, made.last) == (-1, 0)  # read on its thread, waited for here
    made.close()


def test_a_configured_interval_keeps_deltas_checkpoints(spark, kafka_servers, make_topic, tmp_path: Path) -> None:

    config = load_pipeline(pipeline_yaml(tmp_path, topic=make_topic(partitions=1), servers=kafka_servers,
                                         sink="  tableProperties:\n    delta.checkpointInterval: '10'\n"))
    bronze_plan, _ = setup.plans(spark, config, setup.resolver(spark, context.known(config)).spec)
    assert bronze_plan.properties[log_checkpoints.PROPERTY] == "10"


@pytest.mark.parametrize("features", [False, True], ids=["legacy protocol", "table features"])
def test_a_streaming_run_warms_up_spark_checkpoints_only(spark, kafka_servers, make_topic, orders_schema,
                                                         tmp_path: Path, features: bool) -> None:
    topic = make_topic(partitions=1)
    produce_orders(kafka_servers, topic, 5, schema_id=1, schema=orders_schema)
    extra = "  tableProperties:\n    delta.enableDeletionVectors: 'true'\n" if features else ""
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers, sink=extra))

    running = pipeline.start(spark, config)  # a streaming run (trigger), not available-now
    pipeline.stop(spark, running)  # waits for the checkpoint being written

    assert running.log_checkpoints is not None
    if features:  # Spark's Delta writes them: its first, the new table's version 0, before any batch's commit
        assert running.log_checkpoints.written[:1] == [0]
        assert _checkpointed(config.table_path)[0] == 0
    else:  # delta-rs writes them and needs no warming: nothing at start
        assert running.log_checkpoints.written == [] and _checkpointed(config.table_path) == []


def _with_features(spark: Any, table: Path) -> None:
    """A table with table features (deletion vectors), whose checkpoints Spark's Delta writes."""
    spark.range(3).write.format("delta").option(log_checkpoints.PROPERTY, log_checkpoints.INLINE_INTERVAL) \
        .option("delta.enableDeletionVectors", "true").save(str(table))
    assert not rs_tables.checkpointed_by_rs(str(table))


def test_warm_up_skips_a_version_that_has_a_checkpoint(spark, tmp_path: Path) -> None:
    table = tmp_path / "t"
    _with_features(spark, table)
    background = BackgroundCheckpoints.for_table(spark, str(table), name="t")
    assert background is not None and background.checkpointed == -1
    done = background.warm_up()
    assert done is not None
    done.result(120)
    assert background.written == [0] and _checkpointed(table) == [0]
    background.close()

    again = BackgroundCheckpoints.for_table(spark, str(table), name="t")
    assert again is not None and again.checkpointed == 0
    done = again.warm_up()
    assert done is not None
    done.result(120)
    again.close()
    assert again.written == [] and _checkpointed(table) == [0]
    assert again.committed(9) is None  # the next one still waits for 10 versions after it


def _completed_stages(spark: Any) -> list[tuple[int, str, str]]:
    """(stage id, scheduler pool, job description) of the stages the session ran (Spark's status store keeps the
    latest `spark.ui.retainedStages`)."""
    context, gateway = spark.sparkContext, spark.sparkContext._gateway
    stages = context._jsc.sc().statusStore().stageList(None, False, False, gateway.new_array(gateway.jvm.double, 0),
                                                       None)
    found = []
    for stage in gateway.jvm.scala.jdk.javaapi.CollectionConverters.asJava(stages):
        if stage.status().toString() == "COMPLETE":
            description = stage.description()
            found.append((stage.stageId(), stage.schedulingPool(),
                          description.get() if description.isDefined() else ""))
    return found


def test_checkpoints_run_in_a_pool_behind_the_batches(spark, tmp_path: Path) -> None:
    table = tmp_path / "t"
    _with_features(spark, table)
    before = max(stage for stage, _, _ in _completed_stages(spark))
    background = BackgroundCheckpoints.for_table(spark, str(table), name="pooled")
    assert background is not None
    done = background.warm_up()
    assert done is not None
    done.result(120)
    background.close()
    assert background.written == [0]

    ran = [(pool, description) for stage, pool, description in _completed_stages(spark) if stage > before]
    assert ran and all("pooled: Delta checkpoint at version 0" in description for _, description in ran)
    assert {pool for pool, _ in ran} == {log_checkpoints.POOL}
    assert spark.sparkContext.getLocalProperty("spark.scheduler.pool") is None  # the caller's thread is untouched
    # The session schedules FAIR, and the batches' pool is always below its share: it gets free cores first.
    scheduler = spark.sparkContext._jsc.sc()
    assert spark.conf.get("spark.scheduler.mode") == "FAIR"
    assert scheduler.getPoolForName("default").get().minShare() > spark.sparkContext.defaultParallelism
    assert scheduler.getPoolForName(log_checkpoints.POOL).get().minShare() == 0


@pytest.mark.parametrize("cleanup", [True, False], ids=["expired files removed", "enableExpiredLogCleanup false"])
def test_delta_rs_checkpoints_remove_expired_log_files_as_spark_would(spark, tmp_path: Path, cleanup: bool) -> None:
    table = tmp_path / "t"
    spark.range(3).write.format("delta").option(log_checkpoints.PROPERTY, log_checkpoints.INLINE_INTERVAL) \
        .option("delta.logRetentionDuration", "interval 1 seconds") \
        .option("delta.deletedFileRetentionDuration", "interval 1 seconds") \
        .option("delta.enableExpiredLogCleanup", str(cleanup).lower()).save(str(table))
    for batch in range(1, 13):
        txn = commit.DeltaTxn(spark, str(table))
        txn.commit(txn.write(spark.range(batch * 10, batch * 10 + 3)), app_id="a", txn_version=batch,
                   user_metadata="{}")
    log_folder = table / "_delta_log"
    before = {f.name for f in log_folder.iterdir()}
    time.sleep(1.5)  # every version up to 12 is past the retention

    assert rs_tables.checkpoint(str(table), 10) == 10 and rs_tables.last_checkpoint(str(table)) == 10

    left = {f.name for f in log_folder.iterdir()}
    versions = {int(name.lstrip(".")[:20]) for name in left if name.lstrip(".")[:20].isdigit()}
    if cleanup:  # nothing before the checkpoint: no commit, no checksum, no hidden Hadoop checksum of either
        assert min(versions) == 10 and f"{9:020d}.crc" in before
    else:
        assert left >= before and min(versions) == 0
    assert f"{10:020d}.checkpoint.parquet" in left
    snapshot = _fresh_snapshot(spark, table)
    assert len(table_rows(str(table))) == 3 + 12 * 3
    assert snapshot.version() == 12 and snapshot.transactions().apply("a") == 12
    txn = commit.DeltaTxn(spark, str(table))  # the writer goes on from it, its txn id still known
    assert txn.committed_version("a") == 12


def test_tables_in_s3_are_checkpointed_by_delta_rs(s3_server: Any, make_bucket: Any) -> None:
    """delta-rs's appends leave Spark's snapshot behind, so in object storage delta-rs writes the checkpoints too:
    without them every append lists and replays all the commits since the first."""
    import pyarrow as pa
    from deltalake import DeltaTable as RsTable
    from deltalake import write_deltalake

    uri, options = f"s3a://{make_bucket()}/tables/orders", s3_server.storage_options()
    assert rs_tables.last_checkpoint(uri, options) == -1  # no table, no checkpoint
    for i in range(13):
        write_deltalake(uri, pa.table({"id": [i]}), mode="append", storage_options=options)
    assert rs_tables.checkpointed_by_rs(uri, options)
    assert rs_tables.checkpoint(uri, 12, options) == 12 and rs_tables.last_checkpoint(uri, options) == 12
    names = [o["Key"] for o in s3_server.client().list_objects_v2(Bucket=uri.split("/")[2])["Contents"]]
    assert "tables/orders/_delta_log/00000000000000000012.checkpoint.parquet" in names
    assert sorted(RsTable(uri, storage_options=options).to_pyarrow_table().column("id").to_pylist()) == list(
        range(13))
    assert log_checkpoints.checkpoint_if_due(uri, 12, {}, options) is None  # version 12 has one already
    assert rs_tables.last_checkpoint("gs://bucket/table") is None  # a store reached only through the JVM


def test_tables_with_features_are_left_to_spark(spark, tmp_path: Path) -> None:
    table = tmp_path / "t"
    _with_features(spark, table)
    assert rs_tables.checkpoint(str(table)) is None and _checkpointed(table) == []
