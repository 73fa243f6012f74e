"""`ingest maintain` on real Spark, Delta and Kafka: OPTIMIZE compacts a table of many small commits without
changing a row, beside a running stream without a duplicate or a gap; VACUUM keeps what the promised window needs
and rewind beyond it fails in one line; retention settings that could allow a duplicate are refused."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from pyspark.sql import Row

from ingestion.config import load_pipeline
from ingestion.delta import ledger
from ingestion.delta.reads import SparkReader
from ingestion.delta.rs_reads import DeltaRsReader
from ingestion.dev.samples import produce_orders
from ingestion.errors import ConfigError, IngestionError
from ingestion.ops import catalog, history, rewind, status, verify
from ingestion.ops.maintain import maintain
from ingestion.stream import context, pipeline, setup
from tests.conftest import pipeline_yaml
from tests.helpers import append_in_commits, assert_exactly_produced, table_rows

pytestmark = pytest.mark.integration

INGEST = str(Path(sys.executable).parent / "ingest")


def _rows(spark, path: str, version: int | None = None) -> list:
    rows = [Row(**{k: v for k, v in r.asDict().items() if k != "_ingested_at"}) for r in table_rows(path, version)]
    return sorted(rows, key=lambda r: (r["_kafka_partition"], r["_kafka_offset"]))


def _small_commits(spark, kafka_servers, topic, orders_schema, tmp_path: Path, commits: int, *, records: int,
                   maintenance: str = "") -> tuple:
    """A pipeline whose bronze table holds `records` produced orders in `commits` small commits (and a staging
    pipeline that decoded them for real)."""
    produced = produce_orders(kafka_servers, topic, records, schema_id=1, schema=orders_schema)
    stage = load_pipeline(pipeline_yaml(tmp_path / "stage", topic=topic, servers=kafka_servers, name="stage"))
    pipeline.run(spark, stage, available_now=True)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers, extra=maintenance))
    setup.ensure_tables(spark, config, setup.resolver(spark, context.known(config)).spec)
    version = append_in_commits(stage.table_path, config.table_path, commits, pipeline=config.name,
                                app_id=f"{config.name}-test")
    return config, produced, version


def test_maintain_compacts_many_small_commits_and_keeps_rows_ledger_and_time_travel(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from ingestion.stream.metrics import tracking_uri

    topic = make_topic(partitions=2)
    config, produced, last = _small_commits(spark, kafka_servers, topic, orders_schema, tmp_path, 200, records=400,
                                            maintenance="maintenance:\n  targetFileSize: 256kb\n")
    assert last == 200
    rs = DeltaRsReader()
    before = rs.layout(config.table_path)
    assert before is not None and before.files == 200
    pre = _rows(spark, config.table_path)
    pre_version = 120
    at_pre_version = _rows(spark, config.table_path, pre_version)
    offsets_before = ledger.next_offsets(rs.history(config.table_path))

    dry = maintain(spark, config, dry_run=True)
    assert any("now 200 files" in line for line in dry.lines), dry.lines
    assert any("would leave about 6 files" in line for line in dry.lines), dry.lines  # 1.5 MiB / 256 KiB
    assert ledger.table_version(spark, config.table_path) == 200  # nothing written

    report = maintain(spark, config)
    bronze = report.tables[0]
    assert bronze.before.count == 200 and bronze.files_removed == 200
    assert bronze.after.count <= max(1, math.ceil(bronze.before.bytes / config.maintenance.target_bytes))
    assert _rows(spark, config.table_path) == pre  # the same rows
    assert_exactly_produced(table_rows(config.table_path), produced)
    assert _rows(spark, config.table_path, pre_version) == at_pre_version  # time travel before the OPTIMIZE

    records = DeltaRsReader().history(config.table_path)
    assert [r.kind for r in records[-3:]] == ["optimize", "vacuum", "vacuum"]  # OPTIMIZE, VACUUM START/END
    assert records[-3].as_of == 200 and ledger.next_offsets(records) == offsets_before
    audit = verify.audit(DeltaRsReader(), config)
    assert audit.ok, verify.render(audit)

    rs = DeltaRsReader()
    assert rs.layout(config.table_path) == SparkReader(spark).layout(config.table_path)
    now = status.pipeline_status(rs, config)
    assert now.files == bronze.after.count and now.last_maintenance.startswith("vacuum at version 203")
    assert now.oldest_restorable == 0
    assert history.restorable(rs, config).startswith("oldest version still restorable (VERSION AS OF, rewind): 0")
    assert "maintenance: no offsets of its own" in history.render(history.history(rs, config))

    client = MlflowClient(tracking_uri())
    run = client.get_run(report.run_id)
    assert run.data.metrics["maintenance_bronze_files_before"] == 200
    assert run.data.metrics["maintenance_bronze_files_after"] == bronze.after.count
    assert run.data.metrics["maintenance_bronze_bytes_after"] == bronze.after.bytes

    # Delta's log cleanup deletes the commits before a checkpoint: the maintenance record's baseline keeps every
    # offset known, so recovery and verify read the same from the newest commits alone.
    log = Path(config.table_path) / "_delta_log"
    for old in log.glob("*.json"):
        if int(old.name.split(".")[0]) < bronze.version:
            old.unlink()
    cleaned = DeltaRsReader()
    assert ledger.next_offsets(cleaned.history(config.table_path)) == offsets_before
    assert ledger.next_offsets(SparkReader(spark).history(config.table_path)) == offsets_before
    assert verify.audit(cleaned, config).to_json() == audit.to_json()


def test_optimize_beside_a_streaming_run_loses_and_duplicates_nothing(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path) -> None:
    topic = make_topic(partitions=2)
    path = pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers,
                         extra="source:\n  maxOffsetsPerTrigger: 20\nmaintenance:\n  everyBatches: 4\n",
                         sink="  trigger: 500 milliseconds\n")
    config = load_pipeline(path)
    produced = produce_orders(kafka_servers, topic, 40, schema_id=1, schema=orders_schema)
    running = pipeline.start(spark, config, with_metrics=False)
    more: list = []
    producer = threading.Thread(target=lambda: more.extend(
        p for i in range(8) for p in (time.sleep(1.0), produce_orders(kafka_servers, topic, 20, schema_id=1,
                                                                       schema=orders_schema,
                                                                       first_seq=40 + 20 * i))[1]))
    producer.start()
    optimized_by_hand = 0
    try:
        deadline = time.monotonic() + 240
        while (producer.is_alive() or len({(b.batch_id) for b in running.batches if b.committed}) < 4
               or sum(b.rows for b in running.batches if b.committed) < 200) and time.monotonic() < deadline:
            if optimized_by_hand < 2 and len(running.batches) >= 3 * (optimized_by_hand + 1):
                maintain(spark, config, optimize=True, vacuum=False, with_metrics=False)  # and one by hand
                optimized_by_hand += 1
            time.sleep(0.5)
            assert running.query.exception() is None
    finally:
        producer.join()
        running.stop_between_batches()
        pipeline.stop(spark, running)
    produced += more
    pipeline.run(spark, config, available_now=True)  # whatever the stream had not reached yet
    assert all(b.committed for b in running.batches), [b for b in running.batches if not b.committed]
    kinds = [r.kind for r in DeltaRsReader().history(config.table_path)]
    assert "optimize" in kinds and kinds.index("optimize") < len(kinds) - 1 - kinds[::-1].index("stream")
    assert running.maintenance is not None and running.maintenance.runs, "no scheduled maintenance ran"
    assert_exactly_produced(table_rows(config.table_path), produced)
    audit = verify.audit(DeltaRsReader(), config)
    assert audit.ok, verify.render(audit)


def test_vacuum_honours_the_retention_and_rewind_beyond_it_fails_clearly(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path) -> None:
    topic = make_topic(partitions=1)
    retention = 10
    config, produced, _ = _small_commits(
        spark, kafka_servers, topic, orders_schema, tmp_path, 6, records=60,
        maintenance=f"maintenance:\n  vacuumRetention: {retention} seconds\n  allowShortRetention: true\n")
    first_files = set(spark.read.format("delta").load(config.table_path).inputFiles())
    maintain(spark, config, optimize=True, vacuum=False, with_metrics=False)  # removes the first small files
    time.sleep(retention + 2)
    stage = load_pipeline(tmp_path / "stage" / "stage.yaml")
    more = produce_orders(kafka_servers, topic, 20, schema_id=1, schema=orders_schema, first_seq=60)
    pipeline.run(spark, stage, available_now=True)
    append_in_commits(stage.table_path, config.table_path, 4, pipeline=config.name, app_id=f"{config.name}-test",
                      min_offset=60, first_batch=6)  # small files again, removed by the next OPTIMIZE
    second_files = set(spark.read.format("delta").load(config.table_path).inputFiles()) - first_files
    inside = maintain(spark, config, with_metrics=False)  # OPTIMIZE removes the second files now: inside the window
    assert inside.tables[0].files_removed >= 2
    existing = {f for f in first_files | second_files if Path(f.removeprefix("file:")).exists()}
    assert not existing & first_files, "files removed before the retention were kept"
    assert second_files <= existing, "files removed inside the retention were deleted"
    assert_exactly_produced(table_rows(config.table_path), produced + more)

    # The window slides with the clock (10 s here), so each answer is at least the one before it, and past every
    # version whose files VACUUM deleted.
    layout = SparkReader(spark).layout(config.table_path)
    assert layout is not None and layout.oldest_restorable is not None and layout.oldest_restorable > 6
    assert DeltaRsReader().layout(config.table_path).oldest_restorable >= layout.oldest_restorable
    with pytest.raises(IngestionError, match=r"^cannot rewind orders to version 3: its data files were vacuumed or "
                                             r"are older than the table's retention \(10 seconds\); the oldest "
                                             r"version still restorable is (\d+)$") as refused:
        rewind.rewind(spark, config, to_version=3)
    assert int(str(refused.value).rsplit(" ", 1)[1]) >= layout.oldest_restorable
    tables = catalog.register(spark, [config])
    try:
        spark.sql("SELECT count(*) FROM orders VERSION AS OF 3").collect()
        raise AssertionError("time travel to a vacuumed version worked")
    except Exception as exc:  # noqa: BLE001 - what `ingest sql` turns into one line
        found = catalog.time_travel_failure(spark, tables, "SELECT count(*) FROM orders VERSION AS OF 3", exc)
    finally:
        spark.sql("DROP TABLE IF EXISTS orders")
        spark.sql("DROP TABLE IF EXISTS orders_quarantine")
    named = re.search(r"oldest version still restorable: orders: version (\d+)", str(found))
    assert named is not None and int(named[1]) >= layout.oldest_restorable, found
    shown = re.search(r"restorable \(VERSION AS OF, rewind\): (\d+)", history.restorable(DeltaRsReader(), config))
    assert shown is not None and int(shown[1]) >= layout.oldest_restorable


def test_a_retention_that_allows_a_duplicate_is_refused_at_onboard_and_run(
        spark, kafka_servers, make_topic, tmp_path: Path) -> None:
    topic = make_topic(partitions=1)
    risky = pipeline_yaml(tmp_path / "risky", topic=topic, servers=kafka_servers,
                          sink="  tableProperties:\n    delta.setTransactionRetentionDuration: interval 2 days\n")
    for command in (["onboard", str(risky), "--dry-run"], ["run", str(risky), "--available-now"]):
        done = subprocess.run([INGEST, *command], capture_output=True, text=True, timeout=120)
        assert done.returncode == 1, done.stdout + done.stderr
        assert done.stderr.strip().splitlines() == [
            f"error: {risky}: key 'sink.tableProperties.delta.setTransactionRetentionDuration': 'interval 2 days' "
            "lets Delta forget a batch's (txnAppId, txnVersion): a checkpoint resumed after a longer stop would "
            "write its last batch again, a duplicate; leave it unset (Delta then keeps one record per checkpoint's "
            "app id)"]
    short_log = pipeline_yaml(tmp_path / "log", topic=topic, servers=kafka_servers,
                              sink="  tableProperties:\n    delta.logRetentionDuration: interval 2 days\n")
    with pytest.raises(ConfigError, match=r"delta.logRetentionDuration': 'interval 2 days' is shorter than "
                                          r"maintenance.vacuumRetention"):
        load_pipeline(short_log)

    # A table changed behind the pipeline's back is refused when the pipeline starts.
    config = load_pipeline(pipeline_yaml(tmp_path / "table", topic=topic, servers=kafka_servers))
    setup.ensure_tables(spark, config, setup.resolver(spark, context.known(config)).spec)
    spark.sql(f"ALTER TABLE delta.`{config.table_path}` SET TBLPROPERTIES "
              "('delta.setTransactionRetentionDuration' = 'interval 7 days')")
    with pytest.raises(ConfigError, match=rf"table {config.table_path}: key 'delta.setTransactionRetentionDuration': "
                                          "'interval 7 days' lets Delta forget"):
        pipeline.start(spark, config, with_metrics=False)
    assert not Path(config.checkpoint_path, "offsets").exists()
