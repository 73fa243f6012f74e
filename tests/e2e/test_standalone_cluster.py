"""The packaged job on a Spark cluster: `ingest package` writes the package zip, the spark-submit entry script and
the jars; spark-submit runs `ingest run` with them on a standalone master with two workers (from pyspark's own
distribution, on loopback), whose work folders are separate, with every table and checkpoint on a local S3 server
so that nothing depends on a shared disk. Then the same cluster through INGEST_SPARK_MASTER, the other way in."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from ingestion.dev.samples import produce_orders
from ingestion.processes import free_port
from tests.conftest import submit_conf

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent


def _state(web_port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/json/", timeout=5) as answer:
        return dict(json.loads(answer.read()))


def _pipeline(path: Path, *, topic: str, servers: str, bucket: str, spark: dict[str, str]) -> Path:
    path.write_text(json.dumps({  # JSON is YAML
        "name": "on_cluster", "topic": topic, "kafka": {"bootstrap.servers": servers},
        "value": {"format": "confluent", "subject": "orders-value"}, "key": {"format": "string"},
        "source": {"maxOffsetsPerTrigger": 150},
        "sink": {"table": f"s3a://{bucket}/bronze/orders", "quarantineTable": f"s3a://{bucket}/bronze/orders_q",
                 "checkpointLocation": f"s3a://{bucket}/checkpoints/orders"},
        "spark": {**spark, "spark.executor.memory": "512m"},
    }))
    return path


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    """A standalone master and two workers of one core each, each worker with its own work folder."""
    port, web = free_port(), free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(tmp_path / "logs"),
           "PYSPARK_PYTHON": sys.executable}  # what pyspark's launch scripts find Spark's home with
    started: list[subprocess.Popen[bytes]] = []
    workers = [tmp_path / "worker-a", tmp_path / "worker-b"]

    def daemon(name: str, *args: str) -> None:
        with open(tmp_path / f"{name}.log", "wb") as out:
            started.append(subprocess.Popen([str(BIN / "spark-class"), *args], stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=env, start_new_session=True))

    try:
        daemon("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
               "--webui-port", str(web))
        for work in workers:
            daemon(work.name, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}", "--host",
                   "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", str(free_port()),
                   "--work-dir", str(work))
        deadline = time.monotonic() + 120
        while True:
            try:
                if len([w for w in _state(web)["workers"] if w["state"] == "ALIVE"]) == 2:
                    break
            except (OSError, ValueError):  # not listening yet, or an empty answer while the UI starts
                pass
            assert time.monotonic() < deadline, (tmp_path / "worker-b.log").read_text()[-2000:]
            time.sleep(1)
        yield f"spark://127.0.0.1:{port}", web, workers
    finally:
        for proc in started:  # stop what this fixture started, by pid (each in its own process group)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
        for work in workers:  # each executor's copy of the jars: 3.4 GB with S3A's SDK bundle
            shutil.rmtree(work, ignore_errors=True)


def test_the_packaged_job_runs_exactly_once_on_a_two_worker_cluster_with_state_on_s3(
        cluster, kafka_servers, make_topic, make_bucket, s3_server, orders_schema, tmp_path: Path) -> None:
    master, web, workers = cluster
    bucket, topic = make_bucket(), make_topic(partitions=4)
    produced = produce_orders(kafka_servers, topic, 300, schema_id=1, schema=orders_schema)
    config = _pipeline(tmp_path / "on_cluster.yaml", topic=topic, servers=kafka_servers, bucket=bucket,
                       spark=s3_server.spark_settings())

    done = subprocess.run([str(BIN / "ingest"), "package", str(config), "--out", str(tmp_path / "dist"),
                           "--master", master], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"--master {master}" in done.stdout and "ingest_main.py run" in done.stdout, done.stdout
    dist = tmp_path / "dist"
    archive = next(dist.glob("ingestion-*.zip"))
    jars = sorted((dist / "jars").glob("*.jar"))
    assert any(j.name.startswith("hadoop-aws-") for j in jars), "an s3a:// pipeline's bundle carries S3A"

    # The driver imports the package from the zip (spark-submit puts --py-files first on its path): the data files
    # the JVM needs as paths are unpacked from it into a jar cache that starts empty.
    cache = tmp_path / "driver-cache"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "INGEST_JAR_CACHE": str(cache),
           "SPARK_LOCAL_IP": "127.0.0.1"}
    submit = [str(BIN / "spark-submit"), "--master", master, *submit_conf(), "--py-files", str(archive),
              "--jars", ",".join(map(str, jars)), str(dist / "ingest_main.py")]
    run = subprocess.run([*submit, "run", str(config), "--available-now"], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert any(cache.glob("data/*/log4j2.properties")), "the driver did not run the package from the zip"

    held = s3_server.coordinates(f"s3a://{bucket}/bronze/orders", f"s3a://{bucket}/bronze/orders_q")
    assert set(held) == {(p.partition, p.offset) for p in produced} and max(held.values()) == 1
    keys = s3_server.keys(bucket)
    assert "checkpoints/orders/_ingest_app_id" in keys
    assert any(k.startswith("checkpoints/orders/offsets/") for k in keys)
    assert not any((tmp_path / name).exists() for name in ("bronze", "checkpoints", "on_cluster"))
    apps = _state(web)["completedapps"]
    assert [a["name"] for a in apps] == ["ingest-on_cluster"]
    for work in workers:  # both workers ran executors of the job, each in its own folder
        assert any(work.glob("app-*/*/stderr")), f"no executor ran on {work.name}"

    # The same cluster reached from a plain `ingest run` (INGEST_SPARK_MASTER): it goes on where the job stopped.
    more = produce_orders(kafka_servers, topic, 100, schema_id=1, schema=orders_schema, first_seq=300)
    run = subprocess.run([str(BIN / "ingest"), "run", str(config), "--available-now"], capture_output=True,
                         text=True, env={**os.environ, "INGEST_SPARK_MASTER": master}, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    held = s3_server.coordinates(f"s3a://{bucket}/bronze/orders", f"s3a://{bucket}/bronze/orders_q")
    assert set(held) == {(p.partition, p.offset) for p in produced + more} and max(held.values()) == 1
    done = subprocess.run([str(BIN / "ingest"), "verify", str(config)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
