"""`ingest status` when no broker answers (an outage, when on-call asks for it most): each pipeline's tables' side
(what every partition's rows and quarantine hold, the last batch, the files) with the lag unknown, one error line
naming the pipelines and the address, exit 1; brokers that did not answer are not waited for again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from ingestion.config import load_pipeline
from ingestion.dev.samples import produce_orders
from ingestion.errors import KafkaUnreachableError
from ingestion.kafka import clients
from ingestion.processes import free_port
from ingestion.stream import launch
from tests.conftest import pipeline_yaml
from tests.helpers import ingest_here


def test_status_without_a_broker_shows_the_tables_side_names_the_address_and_exits_1(
        kafka_servers: str, make_topic: Any, orders_schema: dict[str, Any], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    topic = make_topic(partitions=2)
    produced = produce_orders(kafka_servers, topic, 30, schema_id=1, schema=orders_schema)
    producer = Producer({"bootstrap.servers": kafka_servers})
    producer.produce(topic, value=b"not avro", partition=1)
    producer.flush(30)
    folder = tmp_path / "conf" / "pipelines"
    config = load_pipeline(pipeline_yaml(folder, topic=topic, servers=kafka_servers))
    done = launch.run(None, config, available_now=True)  # start batches alone: no JVM
    assert sum(batch.rows for batch in done.batches) == 30

    # The same tables, and a pipeline without any yet, at an address where no broker listens.
    dead = f"127.0.0.1:{free_port()}"
    for name in ("orders", "payments"):
        pipeline_yaml(folder, topic=topic, servers=dead, name=name, extra="source:\n  brokerTimeout: 1 second\n")
    monkeypatch.setenv("INGEST_CONF_DIR", str(tmp_path / "conf"))
    asked: list[str] = []  # the metadata requests that found no broker (each waits source.brokerTimeout)
    metadata = clients._metadata

    def counted(settings: Any, topic: str | None, timeout: float) -> Any:
        try:
            return metadata(settings, topic, timeout)
        except KafkaUnreachableError:
            asked.append(settings["bootstrap.servers"])
            raise

    monkeypatch.setattr(clients, "_metadata", counted)

    code, out, err = ingest_here(capsys, "status")
    assert code == 1, err
    assert asked == [dead]  # waited for once, not once per pipeline
    assert err.splitlines() == [f"error: orders, payments: lag unknown, the tables' side only: no Kafka broker "
                                f"answered at {dead} within 1s (Failed to get metadata: Local: Broker transport "
                                "failure); check kafka.bootstrap.servers and that the brokers run"], err
    ends = {p: max(r.offset for r in produced if r.partition == p) + 1 for p in (0, 1)}
    ends[1] += 1  # the record that did not decode, quarantined
    orders, payments = out.split("\n\n")
    assert orders.splitlines()[0].endswith(", lag unknown (no answer from Kafka)"), orders
    assert orders.splitlines()[-3:] == [
        "  partition     latest   ingested      lag    lag s quarantined",
        f"          0          - {ends[0]:>10}        -        -           0",
        f"          1          - {ends[1]:>10}        -        -           1"], orders
    assert payments.splitlines()[0] == f"payments: topic {topic}, no table yet, no batch yet, lag unknown (no answer " \
                                       "from Kafka)", payments

    code, out, _ = ingest_here(capsys, "status", "orders", "--json")
    assert code == 1
    (status,) = json.loads(out)
    assert status["lag_records"] is None and status["kafka_error"].startswith(f"no Kafka broker answered at {dead}")
    assert [(p["partition"], p["latest_offset"], p["ingested_up_to"], p["lag_records"], p["quarantined"])
            for p in status["partitions"]] == [(0, None, ends[0], None, 0), (1, None, ends[1], None, 1)]
