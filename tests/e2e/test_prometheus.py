"""A real Prometheus (Debian's package, started here on a free loopback port, stopped by its pid) scrapes a streaming
`ingest run --metrics-port N` under a producer. While the pipeline's JVM is frozen (SIGSTOP) and Kafka fills, the
per-partition lag Prometheus holds equals `ingest status --json`; with the driver frozen too (its endpoint silent)
the no-commit alert (the shipped rule, with a short `for:`) fires; once both go on, the lag drains to 0 and the
series keep being reported at 0."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from ingestion.dev.samples import produce_orders
from tests.conftest import pipeline_yaml
from tests.helpers import wait_while_running as _wait

pytestmark = [pytest.mark.e2e, pytest.mark.debian]

INGEST = str(Path(sys.executable).parent / "ingest")
SCRAPE = 1  # seconds between scrapes and between rule evaluations in the test's Prometheus
LAG_INTERVAL = 0.5  # seconds between the pipeline's lag refreshes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def get(self, path: str, **params: str) -> Any:
        with urllib.request.urlopen(f"{self.url}{path}?{urllib.parse.urlencode(params)}", timeout=10) as answer:
            found = json.loads(answer.read())
        assert found["status"] == "success", found
        return found["data"]

    def per_partition(self, query: str) -> dict[int, float]:
        return {int(r["metric"]["partition"]): float(r["value"][1]) for r in self.get("/api/v1/query",
                                                                                      query=query)["result"]}

    def scalar(self, query: str) -> float | None:
        result = self.get("/api/v1/query", query=query)["result"]
        return float(result[0]["value"][1]) if result else None

    def alert_states(self, name: str) -> list[str]:
        return [a["state"] for a in self.get("/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == name]


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[int], _Prometheus]]:
    """start(target_port): a Prometheus scraping 127.0.0.1:<target_port> as job `ingest`, with the shipped rules
    whose `for:` is cut to 1 s; stopped by its pid."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is missing: `make prometheus` installs Debian's prometheus package")
    started: list[subprocess.Popen[bytes]] = []

    def start(target_port: int) -> _Prometheus:
        shipped = resources.files("ingestion.stream") / "data" / "prometheus-rules.yml"
        rules = yaml.safe_load(shipped.read_text())
        for group in rules["groups"]:
            for rule in group["rules"]:
                rule["for"] = "1s"
        (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules))
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": f"{SCRAPE}s", "evaluation_interval": f"{SCRAPE}s",
                       "scrape_timeout": f"{int(SCRAPE * 800)}ms"},
            "rule_files": [str(tmp_path / "rules.yml")],
            "scrape_configs": [{"job_name": "ingest", "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}]}],
        }))
        port = _free_port()
        with open(tmp_path / "prometheus.log", "wb") as out:
            started.append(subprocess.Popen(
                [binary, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{port}"], stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL))
        server = _Prometheus(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and started[-1].poll() is None:
            try:
                with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return server
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"prometheus not ready: {(tmp_path / 'prometheus.log').read_text()[-2000:]}")

    yield start
    for proc in started:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _descendants(pid: int) -> list[int]:
    """The processes under `pid` (the Spark JVM the driver started), children first."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):  # a process that ended meanwhile
            continue
    out: list[int] = []
    for child in sorted(c for c, parent in parents.items() if parent == pid):
        out += [child, *_descendants(child)]
    return out


def test_prometheus_sees_the_lag_of_a_frozen_pipeline_fires_the_no_commit_alert_and_sees_it_drain(
        kafka_servers: str, make_topic: Callable[..., str], orders_schema: dict[str, Any], tmp_path: Path,
        prometheus: Callable[[int], _Prometheus]) -> None:
    topic = make_topic(partitions=3)
    metrics_port = _free_port()
    config = pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers, sink="  trigger: 1 second\n",
                           extra=f"metrics:\n  prometheus:\n    lagInterval: {LAG_INTERVAL * 1000:g} milliseconds\n")
    server = prometheus(metrics_port)
    # Two bursts before the run starts (its first batch takes them while the JVM warms up).
    produced = [*produce_orders(kafka_servers, topic, 150, schema_id=1, schema=orders_schema),
                *produce_orders(kafka_servers, topic, 150, schema_id=1, schema=orders_schema, first_seq=150)]
    log = tmp_path / "run.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([INGEST, "run", str(config), "--metrics-port", str(metrics_port)], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=dict(os.environ))
    frozen: list[int] = []
    try:
        _wait(lambda: server.scalar('ingest_pipeline_state{pipeline="orders",ingest_pipeline_state="running"}')
              == 1.0, proc, log, "the pipeline running, as Prometheus scrapes it")
        _wait(lambda: server.scalar('ingest_rows_total{pipeline="orders"}') == 300.0, proc, log, "300 rows")

        # The pipeline's JVM stops (the driver, its endpoint and its lag refresher go on) while Kafka fills.
        frozen = _descendants(proc.pid)
        assert frozen, "no Spark JVM under the driver"
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        more = produce_orders(kafka_servers, topic, 120, schema_id=1, schema=orders_schema, first_seq=300)
        behind = Counter(p.partition for p in more)
        expected = {p: float(behind.get(p, 0)) for p in range(3)}
        status = json.loads(subprocess.run([INGEST, "status", str(config), "--json"], capture_output=True, text=True,
                                           check=True, timeout=120).stdout)
        shown = {p["partition"]: float(p["lag_records"]) for p in status[0]["partitions"]}
        time.sleep(SCRAPE + LAG_INTERVAL + 0.5)  # one refresh and one scrape after status answered
        assert server.per_partition(f'ingest_lag_records{{pipeline="orders",topic="{topic}"}}') == shown == expected
        seconds = server.per_partition('ingest_lag_seconds{pipeline="orders"}')
        assert {p for p, s in seconds.items() if s > 0} == {p for p, n in expected.items() if n > 0}
        assert server.scalar('sum(ingest_kafka_end_offset{pipeline="orders"})') == len(produced) + len(more)
        assert server.scalar('sum(ingest_table_offset{pipeline="orders"})') == len(produced)
        # Now the driver stops too (its endpoint no longer answers): no commit for 5 triggers while Kafka had
        # data when last scraped, so the shipped rule fires all the same; the endpoint is seen down.
        os.kill(proc.pid, signal.SIGSTOP)
        frozen.append(proc.pid)
        _wait(lambda: server.scalar('up{job="ingest"}') == 0.0, proc, log, "the endpoint seen down", timeout=30)
        time.sleep(2 * SCRAPE)  # rule evaluations over the stale series, not only the state from before
        _wait(lambda: server.alert_states("IngestNoCommit") == ["firing"], proc, log, "IngestNoCommit firing",
              timeout=60)
        _resume(frozen)
        _wait(lambda: server.scalar('ingest_rows_total{pipeline="orders"}') == 420.0, proc, log, "420 rows")
        _wait(lambda: server.per_partition('ingest_lag_records{pipeline="orders"}') == {0: 0.0, 1: 0.0, 2: 0.0},
              proc, log, "lag 0 in every partition")
        caught_up = time.time()
        time.sleep(3 * max(SCRAPE, LAG_INTERVAL))
        # Still reported at 0 (not dropped), by refreshes and scrapes after the last batch.
        assert server.per_partition('ingest_lag_records{pipeline="orders"}') == {0: 0.0, 1: 0.0, 2: 0.0}
        newest = server.per_partition('timestamp(ingest_lag_records{pipeline="orders"})')
        assert len(newest) == 3 and min(newest.values()) > caught_up + SCRAPE
        assert server.alert_states("IngestNoCommit") == []
    finally:
        _resume(frozen)
        code = _stop(proc)
    assert code == 0, log.read_text()[-3000:]


def _resume(frozen: list[int]) -> None:
    while frozen:
        os.kill(frozen.pop(), signal.SIGCONT)


def _stop(proc: subprocess.Popen[bytes]) -> int:
    """SIGINT to the driver (it stops the query and closes its run); killed with its JVM if it does not end."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(120)
    except subprocess.TimeoutExpired:
        for pid in [*_descendants(proc.pid), proc.pid]:
            os.kill(pid, signal.SIGKILL)
        return proc.wait(30)
