"""The Prometheus exporter without Kafka or Spark: what a scrape of /metrics shows after batches and lag refreshes,
one registry per exporter, the push to a Pushgateway (a tiny loopback receiver stands in for it), the config keys
and their errors."""

from __future__ import annotations

import datetime as dt
import http.server
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ingestion.config import parse_pipeline
from ingestion.delta.ledger import PartitionRange
from ingestion.errors import ConfigError, IngestionError
from ingestion.stream.batch import BatchResult
from ingestion.stream.prometheus import Exporter, LagRefresher, PipelineState, exporter_for

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _samples(text: str) -> Samples:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _scrape(exporter: Exporter) -> Samples:
    assert exporter.address is not None
    host, port = exporter.address
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as answer:
        return _samples(answer.read().decode())


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    found = Exporter()
    found.serve("127.0.0.1", 0)
    yield found
    found.close()


def _batch(batch_id: int, rows: int, quarantined: int, *, committed: bool = True, version: int | None = 3,
           last: int = 9) -> BatchResult:
    return BatchResult(batch_id=batch_id, rows=rows, quarantined=quarantined, bytes=1_000 * rows, version=version,
                       committed=committed, ranges=(PartitionRange("orders", 0, 0, last, last + 1),),
                       max_timestamp=dt.datetime(2026, 1, 1, tzinfo=dt.UTC), seconds=0.7)


def test_a_scrape_shows_the_batches_state_and_trigger_of_each_pipeline(exporter: Exporter) -> None:
    orders = exporter.pipeline("orders", 10.0)
    exporter.pipeline("payments", None)  # an --available-now run: no trigger interval
    orders.set_state(PipelineState.RUNNING)
    orders.batch(_batch(0, 98, 2, version=1))
    orders.batch(_batch(1, 50, 0, version=2))
    orders.batch(_batch(1, 50, 0, committed=False, version=2))  # a replay Delta skipped counts apart

    found = _scrape(exporter)
    one = (("pipeline", "orders"),)
    assert found[("ingest_batches_total", one)] == 2.0
    assert found[("ingest_skipped_batches_total", one)] == 1.0
    assert found[("ingest_rows_total", one)] == 148.0
    assert found[("ingest_quarantined_rows_total", one)] == 2.0
    assert found[("ingest_value_bytes_total", one)] == 148_000.0
    assert found[("ingest_batch_duration_seconds_count", one)] == 2.0
    assert found[("ingest_batch_duration_seconds_bucket", (("le", "1.0"), ("pipeline", "orders")))] == 2.0
    assert found[("ingest_batch_duration_seconds_bucket", (("le", "0.5"), ("pipeline", "orders")))] == 0.0
    assert found[("ingest_table_version", one)] == 2.0
    assert found[("ingest_trigger_interval_seconds", one)] == 10.0
    assert ("ingest_trigger_interval_seconds", (("pipeline", "payments"),)) not in found
    # Counters of a pipeline without batches are there at 0 (rate() needs a first sample).
    assert found[("ingest_rows_total", (("pipeline", "payments"),))] == 0.0
    states = {labels[0][1]: v for (name, labels), v in found.items()
              if name == "ingest_pipeline_state" and ("pipeline", "orders") in labels}
    assert states == {"running": 1.0, "starting": 0.0, "failed": 0.0, "stopped": 0.0}
    assert found[("ingest_pipeline_state", (("ingest_pipeline_state", "starting"), ("pipeline", "payments")))] == 1.0


def test_each_exporter_has_its_own_registry() -> None:
    first, second = Exporter(), Exporter()
    first.pipeline("orders", 1.0).batch(_batch(0, 5, 0))
    second.pipeline("orders", 1.0)
    assert first.registry.get_sample_value("ingest_rows_total", {"pipeline": "orders"}) == 5.0
    assert second.registry.get_sample_value("ingest_rows_total", {"pipeline": "orders"}) == 0.0


def test_lag_series_follow_the_refreshes_and_partitions_no_longer_read_go(exporter: Exporter) -> None:
    ends = {"a": {0: (0, 10), 1: (0, 4)}, "b": {0: (0, 3)}}
    refresher = LagRefresher(exporter.pipeline("p", 1.0), {}, lambda: {t: sorted(p) for t, p in ends.items()},
                             lambda: {"a": {0: 7, 1: 4}},
                             interval=60.0)
    rows = [("a", 0, 10, 7, 3, 12.5), ("a", 1, 4, 4, 0, 0.0), ("b", 0, 3, 0, 3, 40.0)]
    refresher.metrics.lag(rows)
    found = _scrape(exporter)

    def labels(topic: str, partition: int) -> tuple[tuple[str, str], ...]:
        return (("partition", str(partition)), ("pipeline", "p"), ("topic", topic))

    assert {k: v for k, v in found.items() if k[0] == "ingest_lag_records"} == {
        ("ingest_lag_records", labels("a", 0)): 3.0, ("ingest_lag_records", labels("a", 1)): 0.0,
        ("ingest_lag_records", labels("b", 0)): 3.0}
    assert found[("ingest_lag_seconds", labels("b", 0))] == 40.0
    assert found[("ingest_kafka_end_offset", labels("a", 0))] == 10.0
    assert found[("ingest_table_offset", labels("a", 0))] == 7.0

    refresher.metrics.lag([("a", 0, 11, 7, 4, None), rows[1]])  # a/0's age unknown this time; b no longer read
    found = _scrape(exporter)
    assert (found[("ingest_lag_records", labels("a", 0))], found[("ingest_lag_seconds", labels("a", 0))]) == (4.0,
                                                                                                               12.5)
    assert sorted(k[1] for k in found if k[0] == "ingest_lag_records") == [labels("a", 0), labels("a", 1)]
    assert ("ingest_lag_seconds", labels("b", 0)) not in found


def test_a_committed_batch_advances_the_table_position_the_lag_counts_from() -> None:
    exporter = Exporter()
    refresher = LagRefresher(exporter.pipeline("p", 1.0), {}, dict, lambda: {"orders": {0: 3}}, interval=60.0)
    refresher.batch(_batch(0, 7, 0))  # offsets 0-9, perhaps also in the ledger the first refresh reads
    refresher.batch(_batch(1, 10, 0, last=19))
    refresher.batch(_batch(1, 10, 0, last=29, committed=False))  # skipped: the table did not move
    assert refresher._committed == {"orders": {0: 20}}


class _Receiver(http.server.BaseHTTPRequestHandler):
    got: ClassVar[list[tuple[str, str, bytes]]] = []

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Receiver.got.append((self.command, self.path, body))
        self.send_response(202)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_an_available_now_run_pushes_its_series_to_the_pushgateway() -> None:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Receiver.got.clear()
    try:
        exporter = Exporter()
        exporter.push(f"http://127.0.0.1:{server.server_address[1]}", "orders")  # no pipeline yet: nothing sent
        assert _Receiver.got == []
        metrics = exporter.pipeline("orders", None)
        metrics.batch(_batch(0, 42, 1))
        metrics.set_state(PipelineState.STOPPED)
        exporter.push(f"http://127.0.0.1:{server.server_address[1]}", "orders")
    finally:
        server.shutdown()
        server.server_close()
    ((method, path, body),) = _Receiver.got
    assert (method, path) == ("PUT", "/metrics/job/ingest/instance/orders")
    pushed = _samples(body.decode())
    assert pushed[("ingest_rows_total", (("pipeline", "orders"),))] == 42.0
    assert pushed[("ingest_quarantined_rows_total", (("pipeline", "orders"),))] == 1.0
    assert pushed[("ingest_pipeline_state", (("ingest_pipeline_state", "stopped"), ("pipeline", "orders")))] == 1.0


def test_a_pushgateway_that_does_not_answer_costs_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    exporter = Exporter()
    exporter.pipeline("orders", None)
    exporter.push("http://127.0.0.1:9", "orders")  # the discard port: refused
    assert "metrics not pushed to the Pushgateway (instance 'orders')" in caplog.text


def _config(tmp_path: Path, name: str = "orders", **prometheus: object) -> object:
    return parse_pipeline({"name": name, "topic": "orders", "value": {"subject": "s"},
                           "metrics": {"prometheus": prometheus}}, tmp_path / f"{name}.yaml")


def test_the_endpoint_is_off_by_default_and_loopback_when_on(tmp_path: Path) -> None:
    options = parse_pipeline({"name": "x", "topic": "t", "value": {"subject": "s"}}, tmp_path / "x.yaml")\
        .metrics.prometheus
    assert (options.port, options.host, options.lag_interval, options.pushgateway) == (0, "127.0.0.1", "15 seconds",
                                                                                       "")
    config = _config(tmp_path)
    assert exporter_for([config], port=None, available_now=False) is None  # type: ignore[list-item]
    assert exporter_for([config], port=0, available_now=True) is None  # type: ignore[list-item]


def test_bad_prometheus_settings_name_file_key_and_value(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"orders.yaml: key 'metrics.prometheus.port' must be a TCP port .*got 70000"):
        _config(tmp_path, port=70000)
    with pytest.raises(ConfigError, match=r"key 'metrics.prometheus.lagInterval' must be a positive interval .*"
                                          r"got 'often'"):
        _config(tmp_path, lagInterval="often")
    with pytest.raises(ConfigError, match=r"key 'metrics.prometheus.pushgateway' must be an http\(s\) URL, got "
                                          r"'gateway:9091'"):
        _config(tmp_path, pushgateway="gateway:9091")
    with pytest.raises(ConfigError, match=r"unknown key 'metrics.prometheus.prot'"):
        _config(tmp_path, prot=9464)


def test_pipelines_of_one_run_must_agree_on_the_endpoint(tmp_path: Path) -> None:
    a, b = _config(tmp_path, "a", port=9464), _config(tmp_path, "b", port=9465)
    with pytest.raises(IngestionError, match=r"share one metrics endpoint .*a.yaml: 127.0.0.1:9464, .*b.yaml: "
                                             r"127.0.0.1:9465"):
        exporter_for([a, b], port=None, available_now=False)  # type: ignore[list-item]


def test_a_port_in_use_is_refused_with_the_address(exporter: Exporter) -> None:
    assert exporter.address is not None
    with pytest.raises(IngestionError, match=rf"cannot listen on 127.0.0.1:{exporter.address[1]}"):
        Exporter().serve("127.0.0.1", exporter.address[1])
