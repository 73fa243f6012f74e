"""Failing well, as an operator sees it: a signal to the whole process group stops cleanly, an unreachable broker is
one line with nothing left behind, a broker restarted under a run costs no traceback. (A second writer refused at
once, and a killed writer's lock gone with it: tests/e2e/test_crash_restart.py.)"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ingestion.dev.samples import produce_orders
from tests.conftest import pipeline_yaml
from tests.helpers import group_offsets, table_rows, wait_while_running

pytestmark = pytest.mark.e2e

INGEST = str(Path(sys.executable).parent / "ingest")


def _start(config: Path, log: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen([INGEST, "run", str(config), *extra], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env or dict(os.environ), start_new_session=True)


def _wait_for(log: Path, text: str, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    wait_while_running(lambda: text in log.read_text(), proc, log, repr(text), timeout)


def test_sigterm_to_the_process_group_stops_cleanly(spark, kafka_servers, make_topic, orders_schema,
                                                    tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from ingestion.stream.metrics import tracking_uri

    topic = make_topic(partitions=3)
    produce_orders(kafka_servers, topic, 3000, schema_id=1, schema=orders_schema)
    experiment = f"ingest/sigterm-{topic}"
    config = pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers,
                           sink="  trigger: 1 second\n  startBatchMaxOffsets: 300\n",  # the rest is the query's
                           extra=f"source:\n  maxOffsetsPerTrigger: 300\nmetrics:\n  experiment: {experiment}\n")
    with open(tmp_path / "out.log", "wb") as out, open(tmp_path / "err.log", "wb") as err:
        proc = subprocess.Popen([INGEST, "run", str(config)], stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    _wait_for(tmp_path / "out.log", "batch 1:", proc)
    os.killpg(proc.pid, signal.SIGTERM)  # what `timeout`, Ctrl-C in a terminal or a container stop do
    assert proc.wait(120) == 0, (tmp_path / "err.log").read_text()[-3000:]
    errors = (tmp_path / "err.log").read_text().strip().splitlines()
    assert len(errors) <= 5, errors
    assert not any("Traceback" in line for line in errors)
    assert "stopped on request" in (tmp_path / "out.log").read_text()
    client = MlflowClient(tracking_uri())
    (run,) = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    assert run.info.status == "KILLED"
    verify = subprocess.run([INGEST, "verify", str(config), "--json"], capture_output=True, text=True, timeout=300)
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]
    assert json.loads(verify.stdout)["ok"] is True


def test_a_closed_bootstrap_port_is_one_line_and_leaves_nothing_behind(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    home = tmp_path / "state"
    config = pipeline_yaml(tmp_path, topic="orders", servers=f"127.0.0.1:{port}",
                           extra="source:\n  brokerTimeout: 5 seconds\n")
    # JAVA_HOME names a folder with no java: the refusal comes before a JVM, which would fail with another error.
    env = {**os.environ, "INGEST_HOME": str(home), "JAVA_HOME": str(tmp_path / "no-java")}
    env.pop("MLFLOW_TRACKING_URI", None)
    done = subprocess.run([INGEST, "run", str(config)], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: no Kafka broker answered at 127.0.0.1:{port} within 5s ("), line
    assert line.endswith("check kafka.bootstrap.servers and that the brokers run"), line
    assert not home.exists() or not any(home.rglob("*")), sorted(home.rglob("*"))
    assert not (tmp_path / "tables").exists() and not (tmp_path / "checkpoints").exists()


def test_a_broker_killed_and_restarted_under_a_run_costs_no_traceback_and_the_group_catches_up(
        spark, orders_schema, tmp_path: Path) -> None:
    from ingestion.dev.broker import Broker
    from ingestion.kafka import clients as kafka_admin

    broker = Broker(tmp_path / "own-broker")  # a broker of this test's own, to kill
    servers = broker.start()
    try:
        settings = {"bootstrap.servers": servers}
        kafka_admin.create_topic(settings, "restarts", 2)
        produce_orders(servers, "restarts", 200, schema_id=1, schema=orders_schema)
        group = "ingest-restarts"
        config = pipeline_yaml(tmp_path, topic="restarts", servers=servers, sink="  trigger: 1 second\n",
                               extra=f"metrics:\n  consumerGroup: {group}\n")
        log = tmp_path / "run.log"
        proc = _start(config, log)
        try:
            ends = {p: high for p, (_, high) in kafka_admin.watermarks(settings, "restarts").items()}
            _wait_until(lambda: group_offsets(settings, group, "restarts") == ends, proc, log)
            pid = broker.pid()
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            time.sleep(3)
            assert broker.start() == servers  # the same port
            produce_orders(servers, "restarts", 200, schema_id=1, schema=orders_schema, first_seq=200)
            ends = {p: high for p, (_, high) in kafka_admin.watermarks(settings, "restarts").items()}
            _wait_until(lambda: group_offsets(settings, group, "restarts") == ends, proc, log,
                        timeout=180)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            assert proc.wait(120) == 0, log.read_text()[-3000:]
        assert "Traceback" not in log.read_text()
        rows = len(table_rows(str(tmp_path / "tables" / "orders")))
        assert rows == sum(ends.values()) == 400
    finally:
        broker.stop()


def _wait_until(predicate: object, proc: subprocess.Popen[bytes], log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():  # type: ignore[operator]
                return
        except Exception:  # noqa: BLE001 - the broker is restarting
            pass
        if proc.poll() is not None:
            raise AssertionError(f"ingest exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)
    raise AssertionError(f"timed out; log:\n{log.read_text()[-3000:]}")
