"""Each Kafka client gets the settings of its role, and consumers read committed records unless told otherwise."""

from __future__ import annotations

from pathlib import Path

from ingestion.config import parse_pipeline
from ingestion.kafka.clients import for_admin, for_consumer, for_producer
from ingestion.stream.context import known
from ingestion.stream.source import kafka_options

SETTINGS = {"bootstrap.servers": "127.0.0.1:9", "security.protocol": "SSL", "isolation.level": "read_uncommitted",
            "auto.offset.reset": "latest", "linger.ms": "5", "enable.idempotence": "true"}


def without_logger(settings: dict[str, object]) -> dict[str, object]:
    assert settings["logger"].name == "ingestion.librdkafka"  # type: ignore[attr-defined]
    return {k: v for k, v in settings.items() if k != "logger"}


def test_each_role_gets_its_settings() -> None:
    assert without_logger(for_admin(SETTINGS)) == {"bootstrap.servers": "127.0.0.1:9", "security.protocol": "SSL"}
    assert without_logger(for_producer(SETTINGS)) == {"bootstrap.servers": "127.0.0.1:9", "security.protocol": "SSL",
                                      "linger.ms": "5", "enable.idempotence": "true"}
    assert without_logger(for_consumer(SETTINGS)) == {"bootstrap.servers": "127.0.0.1:9", "security.protocol": "SSL",
                                      "isolation.level": "read_uncommitted", "auto.offset.reset": "latest"}


def test_consumers_read_committed_records_by_default() -> None:
    assert for_consumer({"bootstrap.servers": "x"})["isolation.level"] == "read_committed"


def _config(kafka: dict[str, str]) -> object:
    return parse_pipeline({"name": "p", "topic": "t", "value": {"subject": "s"},
                           "kafka": {"bootstrap.servers": "127.0.0.1:9", **kafka}}, Path("p.yaml"))


def test_spark_reads_committed_records_unless_the_pipeline_says_otherwise() -> None:
    assert kafka_options(known(_config({})))["kafka.isolation.level"] == "read_committed"  # type: ignore[arg-type]
    chosen = kafka_options(known(_config({"isolation.level": "read_uncommitted"})))  # type: ignore[arg-type]
    assert chosen["kafka.isolation.level"] == "read_uncommitted"
