"""Silver over a route table (`routing.silver`, docs/routing.md#silver-over-a-route-table): one route of a routed
pipeline keeps a current-state table, equal to the fold of that route's records, in a streaming run (its follower
started once the route's table is made: a rebuild, then an incremental step); the other route has none; `verify`
and `silver status` see the route's silver, `silver rebuild --route` rebuilds it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from ingestion.cli import main
from ingestion.config import load_pipeline
from ingestion.silver import ledger
from ingestion.stream import pipeline
from tests.helpers import routed_by_field, table_rows

pytestmark = pytest.mark.integration

SCHEMA = {"type": "object", "properties": {"kind": {"type": "string"}, "id": {"type": "integer"},
                                           "note": {"type": "string"}, "qty": {"type": "integer"}}}


def test_a_route_keeps_a_silver_table_equal_to_the_fold_of_its_records(
        spark: Any, kafka_servers: str, make_topic: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from confluent_kafka import Producer

    schema = tmp_path / "event.json"
    schema.write_text(json.dumps(SCHEMA))
    topic = make_topic(partitions=2)
    producer = Producer({"bootstrap.servers": kafka_servers})
    sent: list[dict[str, Any]] = []

    def send(first: int, count: int) -> None:
        for n in range(first, first + count):
            doc = {"kind": ("Sale", "Refund")[n % 2], "id": n % 5, "note": f"n{n}", "qty": n}
            sent.append(doc)  # a key's changes in one partition: Kafka orders them
            producer.produce(topic, value=json.dumps(doc).encode(), partition=doc["id"] % 2)
        producer.flush(30)

    path = routed_by_field(tmp_path, "shop", topic, kafka_servers, schema, sink="  trigger: 1 second\n",
                           routing="  silver:\n    Sale: {key: id}\n")
    config = load_pipeline(path)
    (sale,) = config.route_silvers().values()
    assert sale.table_path == config.route_path("shop_sale") and sale.silver_path == sale.table_path + "_silver"

    def fold() -> dict[int, tuple[str, int]]:
        newest: dict[int, tuple[str, int]] = {}
        for doc in sent:
            if doc["kind"] == "Sale":
                newest[doc["id"]] = (doc["note"], doc["qty"])
        return newest

    def silver_rows() -> dict[int, tuple[str, int]]:
        rows = table_rows(sale.silver_path)
        assert len({r["id"] for r in rows}) == len(rows), "one row per key"
        return {r["id"]: (r["note"], r["qty"]) for r in rows}

    def silver_is_the_fold() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and running.query.isActive:
            if ledger.rs_records(sale.silver_path) and silver_rows() == fold():
                return
            time.sleep(1)
        assert silver_rows() == fold()

    send(0, 16)
    running = pipeline.start(spark, config)  # streaming: the route's follower starts once its table is made
    try:
        silver_is_the_fold()
        send(16, 12)  # more changes of the same keys: merged by an incremental step
        silver_is_the_fold()
    finally:
        pipeline.stop(spark, running)
    kinds = [r.kind for _, r in ledger.records(spark, sale.silver_path)]
    assert str(kinds[0]) == "merge" and str(kinds[-1]) == "rebuild", kinds
    assert not Path(config.route_path("shop_refund") + "_silver").exists()  # no silver for the other route

    capsys.readouterr()
    assert main(["verify", str(path), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert list(found["silver"]) == ["shop_sale"] and found["silver"]["shop_sale"]["differing"] == 0
    assert main(["silver", "status", str(path), "--json"]) == 0
    state = json.loads(capsys.readouterr().out)["shop_sale"]
    assert (state["rows"], state["lag_versions"]) == (len(fold()), 0)

    assert main(["silver", "rebuild", str(path), "--route", "Sale"]) == 0  # a route's silver, by its value
    assert str(ledger.records(spark, sale.silver_path)[0][1].kind) == "rebuild" and silver_rows() == fold()
    assert main(["silver", "run", str(path)]) == 1  # which route: said in one line
    assert "name one with --route (one of ['Sale'])" in capsys.readouterr().err
