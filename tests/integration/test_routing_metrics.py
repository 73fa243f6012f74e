"""A routed pipeline's tables, each watched on its own (docs/routing.md#operating-a-routed-pipeline): a routed run
scraped through the exporter's real endpoint shows one series per route table (rows, version, last commit), a new
process shows them from the tables' ledgers before any batch, and `status` gives each table's last commit and the
offsets it holds."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable
from prometheus_client.parser import text_string_to_metric_families

from ingestion.config import load_pipeline
from ingestion.delta.rs_reads import DeltaRsReader
from ingestion.ops import status
from ingestion.stream import context, pipeline
from ingestion.stream.prometheus import Exporter, watch
from tests.helpers import routed_by_field

pytestmark = pytest.mark.integration

ROUTE_SERIES = ("ingest_route_rows_total", "ingest_route_table_version", "ingest_route_last_commit_timestamp_seconds")


def _scrape(exporter: Exporter) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    assert exporter.address is not None
    host, port = exporter.address
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_routed_run_exposes_one_series_per_route_table_and_status_each_tables_offsets(
        spark: Any, kafka_servers: str, make_topic: Any, tmp_path: Path) -> None:
    schema = tmp_path / "event.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"kind": {"type": "string"},
                                                                   "id": {"type": "integer"}}}))
    topic = make_topic(partitions=2)
    landed: dict[str, dict[int, int]] = {}  # table -> partition -> its last offset
    producer = Producer({"bootstrap.servers": kafka_servers})
    for i in range(10):
        kind = "Sale" if i % 5 else "Refund"  # 8 sales, 2 refunds (ids 0 and 5: one in each partition)
        table = "refunds" if kind == "Refund" else "outbox_sale"
        producer.produce(topic, value=json.dumps({"kind": kind, "id": i}).encode(), partition=i % 2,
                         on_delivery=lambda err, msg, t=table: landed.setdefault(t, {}).__setitem__(
                             msg.partition(), max(landed.get(t, {}).get(msg.partition(), -1), msg.offset())))
    producer.flush(30)
    config = load_pipeline(routed_by_field(tmp_path, "outbox", topic, kafka_servers, schema,
                                           routing="  tables: {Refund: refunds}\n"))
    exporter = Exporter()
    exporter.serve("127.0.0.1", 0)
    started = time.time()
    try:
        pipeline.run(spark, config, available_now=True, exporter=exporter)
        found = _scrape(exporter)
    finally:
        exporter.close()
    versions = {t: DeltaTable(config.route_path(t)).version() for t in ("outbox_sale", "refunds")}
    for table, rows in (("outbox_sale", 8), ("refunds", 2)):
        labels = (("pipeline", "outbox"), ("table", table))
        assert found[("ingest_route_rows_total", labels)] == rows
        assert found[("ingest_route_table_version", labels)] == versions[table]
        assert started <= found[("ingest_route_last_commit_timestamp_seconds", labels)] <= time.time()
    for name in ROUTE_SERIES:  # one series per route table, nothing else
        assert {dict(labels)["table"] for n, labels in found if n == name} == {"outbox_sale", "refunds"}, name
    assert found[("ingest_rows_total", (("pipeline", "outbox"),))] == 10  # the pipeline's totals as before

    # A new process (a restart): the tables' series come from their ledgers at the first lag refresh, before any
    # batch, with the time of each table's last commit.
    ctx = context.resolve(config)
    later = Exporter()
    later.serve("127.0.0.1", 0)
    try:
        watch(later, ctx, available_now=True).refresh()
        again = _scrape(later)
    finally:
        later.close()
    for table in ("outbox_sale", "refunds"):
        labels = (("pipeline", "outbox"), ("table", table))
        assert again[("ingest_route_rows_total", labels)] == 0  # counted by this process: none yet
        assert again[("ingest_route_table_version", labels)] == versions[table]
        assert again[("ingest_route_last_commit_timestamp_seconds", labels)] == pytest.approx(
            found[("ingest_route_last_commit_timestamp_seconds", labels)], abs=5)

    # status: each route table's last commit and the offsets its own ledger holds (the lag is the pipeline's).
    now = status.pipeline_status(DeltaRsReader(), ctx)
    assert now.lag_records == 0
    routes = {r.table: r for r in now.routes}
    assert sorted(routes) == ["outbox_sale", "refunds"]
    for table, parts in landed.items():
        assert routes[table].ingested_up_to == {topic: {str(p): last + 1 for p, last in parts.items()}}
        assert routes[table].last_batch_at is not None
        assert 0 <= (routes[table].last_commit_age_seconds or 0) <= time.time() - started
    assert "ago)" in status.render(now)
