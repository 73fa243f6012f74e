"""An `envelope: debezium` silver that leaves `sequenceBy` unset is ordered by the connector's own position
(`source.lsn` here, PostgreSQL's), not by Kafka: over a topic of several partitions whose Kafka order disagrees with
the LSNs (a truncate and the changes after it arrive before older changes), upsert and history hold exactly the rows
the database has, in the streaming merge, the rebuild and DuckDB's fold alike; a table made under Kafka's order is
rebuilt under the connector's; Kafka's order set in the file is said to be approximate."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from ingestion.dev import cdc
from ingestion.ops.onboard import onboard
from ingestion.silver import audit, changes, ledger
from ingestion.silver.follower import SilverFollower
from ingestion.silver.spec import SilverSpec
from ingestion.stream import pipeline
from tests.helpers import table_rows
from tests.integration.test_silver import PAYLOAD, _config, _rows
from tests.integration.test_silver_rows import _same_fold

pytestmark = pytest.mark.integration


def _current(spark: Any, path: str) -> dict[int, dict[str, Any]]:
    rows = [r.asDict(recursive=True) for r in table_rows(path)]
    current = [r for r in rows if r.get("_is_current", True)]
    out = {r["id"]: r for r in current}
    assert len(out) == len(current), "one current row per key"
    return out


def _payload(rows: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {k: {c: r[c] for c in PAYLOAD} for k, r in rows.items()}


def test_debezium_silver_follows_the_lsn_when_kafka_order_disagrees(spark, kafka_servers, make_topic,
                                                                    tmp_path: Path) -> None:
    topic = make_topic(partitions=3)
    before = cdc.history(60, 20, seed=21)
    cut = cdc.truncate(before.changes[-1])
    after = cdc.history(30, 10, seed=22, snapshot=0, start_lsn=cut.lsn + 1, start_ms=cut.ts_ms + 1)
    model = cdc.History([*before.changes, cut, *after.changes])
    assert set(after.state()) & set(before.state()), "keys changed on both sides of the truncate"
    # Kafka's order disagrees with the LSNs: the truncate and what followed it first, the older changes after.
    cdc.produce(kafka_servers, topic, [cut, *after.changes])
    name = f"lsn-{uuid.uuid4().hex[:6]}"
    config = _config(tmp_path, name, topic, kafka_servers, "  key: [id]\n  envelope: debezium\n")
    history = _config(tmp_path, name, topic, kafka_servers, "  key: [id]\n  envelope: debezium\n  mode: history\n"
                      f"  table: {tmp_path / 'history'}\n", "h.yaml")
    by_kafka = _config(tmp_path, name, topic, kafka_servers, "  key: [id]\n  envelope: debezium\n"
                       f"  sequenceBy: kafka\n  table: {tmp_path / 'kafka'}\n", "k.yaml")
    assert config.silver_path is not None
    shown = "\n".join(onboard(spark, config).lines)
    assert "ordered by the postgresql connector's position (source.lsn)" in shown and "approximate" not in shown
    pipeline.run(spark, config, available_now=True)
    SilverFollower(spark, history).drain()
    SilverFollower(spark, by_kafka).drain()  # a table made under Kafka's order
    assert _payload(_rows(spark, config.silver_path)) == after.state()
    position = ledger.position(spark, config.silver_path)
    assert position is not None and [t[4] for t in position.truncates] == [json.dumps({"lsn": cut.lsn},
                                                                                      separators=(",", ":"))]

    cdc.produce(kafka_servers, topic, before.changes)  # older than the truncate, landed after it
    pipeline.run(spark, config, available_now=True)
    found = _rows(spark, config.silver_path)
    assert _payload(found) == model.state()
    assert all(r["_sequence"] == {"lsn": r["_source"]["lsn"]} for r in found.values())
    assert ledger.position(spark, config.silver_path).kind == ledger.StepKind.MERGE
    SilverFollower(spark, history).drain()
    assert _payload(_current(spark, str(tmp_path / "history"))) == model.state()
    assert audit.audit(spark, config).ok and audit.audit(spark, history).ok
    assert _same_fold(spark, config) == len(model.state())  # DuckDB's fold orders by the LSN as Spark's does
    assert _same_fold(spark, history) == len([c for c in model.changes if c.key is not None])

    # Kafka's order (set in the file) keeps changes the truncate removed and older values: approximate, as onboard
    # says over three partitions; the table made under it is rebuilt when the section leaves the order to the
    # connector.
    bronze = spark.read.format("delta").load(config.table_path)
    kafka_fold, _ = changes.fold(bronze, SilverSpec.of(by_kafka))
    assert _payload({r["id"]: r.asDict(recursive=True) for r in kafka_fold.collect()}) != model.state()
    shown = "\n".join(onboard(spark, by_kafka).lines)
    assert (f"{by_kafka.file}: warning: silver of pipeline {name!r} is ordered by Kafka (silver.sequenceBy: kafka) "
            "over 3 partitions: approximate") in shown
    switched = _config(tmp_path, name, topic, kafka_servers, "  key: [id]\n  envelope: debezium\n"
                       f"  table: {tmp_path / 'kafka'}\n", "s.yaml")
    record = SilverFollower(spark, switched).step()
    assert record is not None and record.kind == ledger.StepKind.REBUILD
    assert _payload(_rows(spark, str(tmp_path / "kafka"))) == model.state()
