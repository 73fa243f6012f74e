"""Expectations under a SIGKILL between a batch's quarantine commit and its bronze commit: the restarted run
commits bronze once and skips the quarantine commit it made already (its txn), on both write paths; each offset is
in bronze + quarantine once, bronze holds exactly the rows that pass the quarantine rules, and `verify` agrees."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ingestion.config import load_pipeline
from ingestion.delta.rs_reads import DeltaRsReader
from ingestion.ops import verify
from tests.conftest import pipeline_yaml
from tests.helpers import assert_exactly_produced, table_rows, wait_while_running
from tests.integration.test_expectations import RULES, _expected_rules, _orders, _produce

pytestmark = pytest.mark.e2e

INGEST = str(Path(sys.executable).parent / "ingest")
# driver: the whole backlog in start batches, no JVM; spark: every batch a Spark job
PATHS = {"driver": "", "spark": "  startBatchMaxOffsets: 0\n  directWriteMaxOffsets: 0\n"}


@pytest.mark.parametrize("path", ["driver", "spark"])
def test_a_kill_between_the_quarantine_and_bronze_commits_loses_and_duplicates_nothing(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path, path: str) -> None:
    topic = make_topic(partitions=2)
    produced = _produce(kafka_servers, topic, orders_schema, _orders(40))
    file = pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers, name=f"rules_kill_{path}", sink=PATHS[path],
                         extra=RULES)
    config = load_pipeline(file)
    marker = tmp_path / "fault"
    env = {**os.environ, "INGEST_TEST_FAULT": "quarantine_committed:*", "INGEST_TEST_FAULT_FILE": str(marker)}
    with open(tmp_path / "killed.log", "wb") as out:
        proc = subprocess.Popen([INGEST, "run", str(file), "--available-now"], stdout=out, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
    try:
        wait_while_running(marker.exists, proc, tmp_path / "killed.log", "the quarantine_committed fault", 240)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    committed = len(table_rows(config.quarantine_path))
    assert committed > 0  # the quarantine commit was made before the kill

    if path == "spark":  # its restart starts a JVM: in this process instead (the kill is behind us)
        from ingestion.stream import launch

        launch.run(spark, load_pipeline(file), available_now=True)  # raises unless the run caught up
    else:  # its restart writes start batches without a JVM, as `ingest run` does (a process of its own)
        done = subprocess.run([INGEST, "run", str(file), "--available-now"], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "no Spark session started" in done.stdout + done.stderr, done.stdout[-3000:] + done.stderr[-3000:]

    refused = {(p.partition, p.offset) for p, _ in produced if _expected_rules(p.record)}
    bronze = table_rows(config.table_path)
    assert_exactly_produced(bronze, [p for p, _ in produced if (p.partition, p.offset) not in refused])
    quarantine = [(r["_kafka_partition"], r["_kafka_offset"], r["_error_class"]) for r in
                  table_rows(config.quarantine_path)]
    assert sorted((p, o) for p, o, _ in quarantine) == sorted(refused)  # once each: the replay skipped its commit
    assert {c for _, _, c in quarantine} == {"ExpectationFailed"}
    audit = verify.audit(DeltaRsReader(), config)
    assert audit.ok and all(v.rows == 0 for v in audit.expectations), verify.render(audit)
