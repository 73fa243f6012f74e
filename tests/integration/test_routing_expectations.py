"""Expectations of a routed pipeline (docs/routing.md): the pipeline's rules hold on every route table, each rule
compiled against that table's columns; a record that breaks a `quarantine` rule goes to the pipeline's quarantine
table as ExpectationFailed under its route's quarantine txnAppId, on both write paths; `verify` checks each route
table's rows against the rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ingestion.config import load_pipeline
from ingestion.delta.rs_reads import DeltaRsReader
from ingestion.ops import verify
from ingestion.stream import checkpoint, pipeline
from ingestion.stream.batch import WritePath
from tests.helpers import delta_txns, routed_by_field, table_rows

pytestmark = pytest.mark.integration

SCHEMA = {"type": "object", "properties": {"kind": {"type": "string"}, "id": {"type": "integer"},
                                           "qty": {"type": "integer"}}}


def test_expectations_hold_on_every_route_table(spark: Any, kafka_servers: str, make_topic: Any,
                                                 tmp_path: Path) -> None:
    from confluent_kafka import Producer

    schema = tmp_path / "event.json"
    schema.write_text(json.dumps(SCHEMA))
    topic = make_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_servers})
    sent = [{"kind": ("Sale", "Refund")[n % 2], "id": n, "qty": -1 if n % 5 == 3 else n} for n in range(24)]
    for doc in sent:
        producer.produce(topic, value=json.dumps(doc).encode())
    producer.flush(30)
    path = routed_by_field(tmp_path, "shop", topic, kafka_servers, schema, source="  maxOffsetsPerTrigger: 8\n",
                           extra='expectations:\n  - {name: qty_known, expect: "qty >= 0", onViolation: quarantine}\n'
                                 '  - {name: small_id, expect: "id < 100", onViolation: warn}\n')
    config = load_pipeline(path)
    ran = pipeline.run(spark, config, available_now=True)
    assert {b.path for b in ran.batches if b.rows} == {WritePath.SPARK, WritePath.DRIVER}
    assert sum(b.violated.get("qty_known", 0) for b in ran.batches) == 5
    for kind in ("Sale", "Refund"):
        rows = table_rows(config.route_path(config.route_table(kind)))
        assert sorted((r["id"], r["qty"]) for r in rows) == \
            [(d["id"], d["qty"]) for d in sent if d["kind"] == kind and d["qty"] >= 0]
    failed = table_rows(config.quarantine_path)
    assert sorted(json.loads(r["_kafka_value"])["id"] for r in failed) == [d["id"] for d in sent if d["qty"] < 0]
    assert {r["_error_class"] for r in failed} == {"ExpectationFailed"}
    app_id = checkpoint.app_id(config.checkpoint_path, config.name, config.spark)
    txns = {a for _, a, _ in delta_txns(Path(config.quarantine_path))}
    assert txns == {f"{app_id}.shop_sale.quarantine", f"{app_id}.shop_refund.quarantine"}, txns
    audit = verify.audit(DeltaRsReader(), config)
    assert audit.ok and [v.rule for v in audit.expectations] == ["shop_refund.qty_known", "shop_sale.qty_known"]
