"""Any Spark master works: a standalone master and worker from pyspark's own distribution, on loopback, run a
pipeline end to end through `ingest run` with INGEST_SPARK_MASTER."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ingestion.dev.broker import free_port
from ingestion.dev.samples import produce_orders
from tests.conftest import pipeline_yaml
from tests.helpers import assert_exactly_produced

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent


def _state(web_port: int) -> dict[str, object]:
    with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/json/", timeout=5) as answer:
        return dict(json.loads(answer.read()))


def test_pipeline_runs_on_a_standalone_cluster(spark, kafka_servers, make_topic, orders_schema,
                                               tmp_path: Path) -> None:
    port, web, worker_web = free_port(), free_port(), free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(tmp_path / "logs")}
    started: list[subprocess.Popen[bytes]] = []

    def daemon(name: str, *args: str) -> None:
        with open(tmp_path / f"{name}.log", "wb") as out:
            started.append(subprocess.Popen([str(BIN / "spark-class"), *args], stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=env, start_new_session=True))

    try:
        daemon("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
               "--webui-port", str(web))
        daemon("worker", "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}", "--host", "127.0.0.1",
               "--cores", "2", "--memory", "2g", "--webui-port", str(worker_web), "--work-dir", str(tmp_path / "work"))
        deadline = time.monotonic() + 120
        while True:
            try:
                if [w for w in _state(web)["workers"] if w["state"] == "ALIVE"]:  # type: ignore[attr-defined]
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()[-2000:]
            time.sleep(1)

        topic = make_topic(partitions=3)
        produced = produce_orders(kafka_servers, topic, 120, schema_id=1, schema=orders_schema)
        config = pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers, name="on_cluster",
                               extra="source:\n  maxOffsetsPerTrigger: 60\n")
        run = subprocess.run([str(BIN / "ingest"), "run", str(config), "--available-now"], capture_output=True,
                             text=True, env={**os.environ, "INGEST_SPARK_MASTER": f"spark://127.0.0.1:{port}"},
                             timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]

        apps = _state(web)["completedapps"]
        assert [a["name"] for a in apps] == ["ingest-on_cluster"]  # type: ignore[index]
        assert any(Path(tmp_path / "work").glob("app-*/*/stderr")), "no executor ran on the worker"
        rows = spark.read.format("delta").load(str(tmp_path / "tables" / "on_cluster")).collect()
        assert_exactly_produced(rows, produced)
    finally:
        for proc in started:  # stop what this test started, by pid (each in its own process group)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
