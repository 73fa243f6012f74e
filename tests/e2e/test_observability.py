"""Lag and throughput you can see: a pipeline runs while records arrive in bursts; MLflow, Kafka's consumer group,
`ingest status --json` and `ingest report` must all agree with Kafka and the table."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ingestion.dev.samples import produce_orders
from ingestion.kafka import clients as kafka_admin
from tests.conftest import pipeline_yaml
from tests.helpers import ingest_here, table_rows

pytestmark = pytest.mark.e2e

INGEST = str(Path(sys.executable).parent / "ingest")


def test_bursts_show_lag_rising_and_falling_in_mlflow_kafka_status_and_report(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mlflow.tracking import MlflowClient

    from ingestion.stream.metrics import tracking_uri

    topic = make_topic(partitions=3)
    group = f"ingest-observed-{topic}"
    experiment = f"ingest/observed-{topic}"
    config = pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers, sink="  trigger: 1 second\n",
                           extra=f"source:\n  maxOffsetsPerTrigger: 50\nmetrics:\n  experiment: {experiment}\n"
                                 f"  consumerGroup: {group}\n")
    log = tmp_path / "run.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([INGEST, "run", str(config)], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=dict(os.environ))
    settings = {"bootstrap.servers": kafka_servers}
    try:
        _wait(lambda: "txnAppId" in log.read_text(), proc, log)
        produced = 0
        for burst in range(3):
            produced += len(produce_orders(kafka_servers, topic, 150, schema_id=1, schema=orders_schema,
                                           first_seq=burst * 150))
            time.sleep(2)
        ends = {p: high for p, (_, high) in kafka_admin.watermarks(settings, topic).items()}
        _wait(lambda: kafka_admin.committed_offsets(settings, group, topic) == ends, proc, log, timeout=240)
    finally:
        proc.send_signal(signal.SIGINT)  # to the driver only: it stops the query and closes the MLflow run
        assert proc.wait(120) == 0, log.read_text()[-3000:]

    # Kafka's own view: the group's committed offsets are the topic's end offsets.
    assert kafka_admin.committed_offsets(settings, group, topic) == ends
    # MLflow: lag rose above zero and came back to zero; the rows logged add up to what was produced.
    client = MlflowClient(tracking_uri())
    exp = client.get_experiment_by_name(experiment)
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.status == "KILLED"
    assert run.data.params["topic"] == topic and run.data.params["consumer_group"] == group

    def history(key: str) -> list[float]:
        return [m.value for m in sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)]

    lag = history("lag_records")
    assert max(lag) > 0 and lag[-1] == 0, lag
    assert sum(history("rows")) == produced == 450
    assert sum(history("input_rows")) == produced
    assert sum(history("input_bytes")) > produced * 50
    assert len(history("lag_seconds")) == len(lag) and min(history("lag_seconds")) >= 0
    assert history("lag_records_p0")[-1] == history("lag_records_p1")[-1] == history("lag_records_p2")[-1] == 0
    # version 0 created the empty table; each batch that wrote rows committed one version (a new query's first
    # batch, planned before any record arrived, writes nothing and is reported with lag 0 all the same)
    assert history("table_version")[-1] == len(history("rows")) and len(history("rows")) <= len(lag)

    # `ingest status --json` matches Kafka's end offsets and the table.
    # (status and report need no JVM: in this process, through ingest's own main, where a process each would only
    # add its start)
    code, said, err = ingest_here(capsys, "status", str(config), "--json")
    assert code == 0, err[-3000:]
    shown = json.loads(said)
    (status,) = shown
    assert {p["partition"]: (p["latest_offset"], p["ingested_up_to"], p["lag_records"], p["lag_seconds"])
            for p in status["partitions"]} == {p: (end, end, 0, 0.0) for p, end in ends.items()}
    assert len(table_rows(tmp_path / "tables" / "orders")) == sum(ends.values()) == 450
    assert status["table_version"] == history("table_version")[-1]

    # `ingest report` draws the same metrics to a PNG.
    png = tmp_path / "report.png"
    code, said, err = ingest_here(capsys, "report", str(config), "--output", str(png))
    assert code == 0, said[-3000:] + err[-3000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def _wait(predicate: object, proc: subprocess.Popen[bytes], log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        if proc.poll() is not None:
            raise AssertionError(f"ingest exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)
    raise AssertionError(f"timed out; log:\n{log.read_text()[-3000:]}")
