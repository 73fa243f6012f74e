"""A pipeline whose tables and checkpoint live on object storage (`s3a://` on a local S3-compatible server), run
as a user runs it: onboard, a streaming run killed with SIGKILL while a second writer is refused, a restart that
drains the topic, then status, verify, history and rewind. Exactly once is checked by an independent
delta-rs read of the bucket."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable

from ingestion.dev.samples import produce_orders
from tests.helpers import ingest_here, wait_while_running

pytestmark = pytest.mark.e2e

INGEST = str(Path(sys.executable).parent / "ingest")
# 980 orders and 20 undecodable records, read in batches of 60: enough batches that the kill lands with some left,
# few enough that the S3 commits and the read-only commands' walks of the log stay short.
GOOD, BAD = 980, 20


def _pipeline(path: Path, *, topic: str, servers: str, bucket: str, spark: dict[str, str]) -> Path:
    config = {
        "name": "orders", "topic": topic, "kafka": {"bootstrap.servers": servers},
        "value": {"format": "confluent", "subject": "orders-value"}, "key": {"format": "string"},
        # Batches of 60 offsets (the driver-side path's, with delta-rs commits to the bucket): the kill below lands
        # while there are batches left.
        "source": {"maxOffsetsPerTrigger": 60},
        # No quarantineTable: it is kept beside bronze, in the bucket (s3a://<bucket>/tables/orders_quarantine).
        # One start batch (60 offsets) while the JVM boots; the rest is the query's.
        "sink": {"startBatchMaxOffsets": 60, "table": f"s3a://{bucket}/tables/orders",
                 "checkpointLocation": f"s3a://{bucket}/checkpoints/orders", "trigger": "1 second"},
        "spark": spark,
    }
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


def _ingest(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([INGEST, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)


def _held(bucket: str, s3: Any) -> collections.Counter[tuple[int, int]]:
    """(partition, offset) of every row of bronze and quarantine, read with delta-rs straight from the bucket."""
    return s3.coordinates(f"s3a://{bucket}/tables/orders", f"s3a://{bucket}/tables/orders_quarantine")


def _live_files(bucket: str, s3: Any) -> set[str]:
    """The keys of the data files bronze's log names now (delta-rs)."""
    import pyarrow as pa

    table = DeltaTable(f"s3a://{bucket}/tables/orders", storage_options=s3.storage_options())
    return {f"tables/orders/{p}" for p in pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()}


def _bronze_version(bucket: str, s3: Any) -> int:
    try:
        return DeltaTable(f"s3a://{bucket}/tables/orders", storage_options=s3.storage_options()).version()
    except Exception:  # noqa: BLE001 - not created yet
        return -1


def test_a_pipeline_on_s3_is_exactly_once_through_a_kill_and_every_command(
        kafka_servers, make_topic, make_bucket, s3_server, orders_schema, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    bucket, topic = make_bucket(), make_topic(partitions=3)
    produced = produce_orders(kafka_servers, topic, GOOD, schema_id=1, schema=orders_schema)
    bad: list[tuple[int, int]] = []
    producer = Producer({"bootstrap.servers": kafka_servers})
    for i in range(BAD):
        producer.produce(topic, value=b"\x07not avro", partition=i % 3,
                         on_delivery=lambda err, msg: bad.append((msg.partition(), msg.offset())))
    producer.flush(30)
    expected = {(p.partition, p.offset) for p in produced} | set(bad)
    assert len(expected) == GOOD + BAD
    config = _pipeline(tmp_path / "orders.yaml", topic=topic, servers=kafka_servers, bucket=bucket,
                       spark=s3_server.spark_settings())

    done = _ingest("onboard", str(config), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]

    # A streaming run, killed with SIGKILL (driver and JVM at once) once it has committed a few batches; while it
    # runs, a second writer of the same pipeline is refused by the lease on the bucket.
    with open(tmp_path / "stream.log", "wb") as out:
        stream = subprocess.Popen([INGEST, "run", str(config)], stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_while_running(lambda: _bronze_version(bucket, s3_server) >= 2, stream, tmp_path / "stream.log",
                           "bronze version 2", 300)
        second = _ingest("run", str(config), "--available-now", cwd=tmp_path)
        assert second.returncode == 1, second.stdout[-2000:] + second.stderr[-2000:]
        assert "already running" in second.stderr and "_ingest_writer.lease" in second.stderr, second.stderr
        assert stream.poll() is None, "the second writer must not disturb the first"
    finally:
        if stream.poll() is None:
            os.killpg(stream.pid, signal.SIGKILL)
        stream.wait(30)
    assert len(_held(bucket, s3_server)) < GOOD + BAD, "the kill should land before the topic is drained"

    # Killed again with a batch's data file written to the bucket by the driver-side path and not committed.
    live = _live_files(bucket, s3_server)
    marker = tmp_path / "files_written.fault"
    with open(tmp_path / "fault.log", "wb") as out:
        faulted = subprocess.Popen([INGEST, "run", str(config), "--available-now"], stdout=out,
                                   stderr=subprocess.STDOUT, cwd=tmp_path, stdin=subprocess.DEVNULL,
                                   start_new_session=True,
                                   env={**os.environ, "INGEST_TEST_FAULT": "files_written:*",
                                        "INGEST_TEST_FAULT_FILE": str(marker)})
    try:
        wait_while_running(marker.exists, faulted, tmp_path / "fault.log", "the files_written fault", 300)
    finally:
        os.killpg(faulted.pid, signal.SIGKILL)
        faulted.wait(30)
    orphans = {k for k in s3_server.keys(bucket, "tables/orders/") if k.endswith(".parquet")} - live
    assert orphans and not orphans & _live_files(bucket, s3_server)  # a file no commit names

    # Restarted on the same host: the killed holder's lease does not block it; it drains the topic exactly once.
    done = _ingest("run", str(config), "--available-now", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    held = _held(bucket, s3_server)
    assert set(held) == expected and max(held.values()) == 1

    keys = s3_server.keys(bucket)
    assert "checkpoints/orders/_ingest_app_id" in keys
    assert any(k.startswith("checkpoints/orders/commits/") for k in keys)
    assert "checkpoints/orders/_ingest_writer.lease" not in keys  # released at the end of the run
    assert not any((tmp_path / name).exists() for name in ("tables", "checkpoints", "orders"))  # nothing local

    # The read-only commands answer from the bucket without a JVM (in this process, through ingest's own main: a
    # process each would only add its start); verify and status say all is well.
    monkeypatch.chdir(tmp_path)
    code, said, err = ingest_here(capsys, "verify", str(config), "--json")
    assert code == 0, said[-2000:] + err[-2000:]
    assert sum(p["rows"] for p in json.loads(said)["partitions"]) == GOOD + BAD
    code, said, err = ingest_here(capsys, "status", str(config), "--json")
    assert code == 0, err[-2000:]
    assert json.loads(said)[0]["lag_records"] == 0
    code, said, err = ingest_here(capsys, "history", str(config), "--json")
    assert code == 0, err[-2000:]
    history = json.loads(said)
    assert sum(r["rows"] for r in history) == GOOD and sum(r["quarantined"] for r in history) == BAD
    # The first run's first records were written while its JVM booted: the start batch, committed by delta-rs to the
    # bucket under the lease taken without a JVM.
    assert [r["batch_id"] for r in history][:1] == [-4], history[:2]

    # A rewind moves the checkpoint aside in the bucket, and the run after it reads again what followed: still
    # exactly once. The rewind goes back to just before the first batch that quarantined records (the undecodable
    # ones were produced last): the run after it reads the topic's tail again, bronze and quarantine, without
    # reading most of the topic a second time. (Replay is the same code on any store: tests/integration.)
    back_to = min(r["version"] for r in history if r["quarantined"]) - 1
    assert back_to >= 2, history
    done = _ingest("rewind", str(config), "--to-version", str(back_to), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(_held(bucket, s3_server)) < GOOD + BAD
    assert any(k.startswith("checkpoints/orders.rewound-") for k in s3_server.keys(bucket))
    done = _ingest("run", str(config), "--available-now", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    held = _held(bucket, s3_server)
    assert set(held) == expected and max(held.values()) == 1
