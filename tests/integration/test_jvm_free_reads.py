"""Read-only answers without a JVM: delta-rs reads the ledger Spark wrote, and `ingest history` answers from it
alone (a JVM it tried to start would fail here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from ingestion.config import load_pipeline
from ingestion.delta import ledger, log_reader
from ingestion.dev.samples import produce_orders
from ingestion.ops import rewind
from ingestion.stream import pipeline
from tests.conftest import pipeline_yaml

pytestmark = pytest.mark.integration

INGEST = str(Path(sys.executable).parent / "ingest")


def test_delta_rs_reads_the_same_ledger_as_spark_and_history_needs_no_jvm(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path) -> None:
    topic = make_topic(partitions=2)
    path = pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers)
    config = load_pipeline(path)
    assert log_reader.history(config.table_path) is None  # no table yet
    produce_orders(kafka_servers, topic, 60, schema_id=1, schema=orders_schema)
    pipeline.run(spark, config, available_now=True)
    produce_orders(kafka_servers, topic, 40, schema_id=1, schema=orders_schema, first_seq=60)
    pipeline.run(spark, config, available_now=True)
    rewind.rewind(spark, config, to_version=1)  # a RESTORE commit with its rewind record

    by_spark = ledger.history(spark, config.table_path)
    by_delta_rs = log_reader.history(config.table_path)
    assert [r.kind for r in by_spark] == ["stream", "stream", "rewind"]
    assert by_delta_rs == by_spark
    assert [r.version for r in by_delta_rs] == [r.version for r in by_spark]
    assert [r.committed_at for r in by_delta_rs] == [r.committed_at for r in by_spark]

    env = {**os.environ, "JAVA_HOME": "/nonexistent-java"}  # a JVM started now would fail to start
    done = subprocess.run([INGEST, "history", str(path), "--json"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == json.loads(json.dumps([asdict(r) for r in by_spark], default=str))
