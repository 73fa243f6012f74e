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


def test_spark_fetches_at_the_end_are_held_briefly_unless_the_pipeline_says_otherwise() -> None:
    # The Java client's 500 ms default made every batch of a caught-up stream wait for its consumer's prefetch.
    default = kafka_options(known(_config({})))  # type: ignore[arg-type]
    assert default["kafka.fetch.max.wait.ms"] == "20"
    chosen = kafka_options(known(_config({"fetch.max.wait.ms": "300"})))  # type: ignore[arg-type]
    assert chosen["kafka.fetch.max.wait.ms"] == "300"


def test_a_setting_only_one_client_knows_goes_to_that_client_only() -> None:
    settings = known(_config({"fetch.max.wait.ms": "300", "fetch.wait.max.ms": "40",  # type: ignore[arg-type]
                                         "max.poll.records": "10", "queued.min.messages": "1000"})).kafka
    assert "fetch.max.wait.ms" not in settings.client and "max.poll.records" not in settings.client
    assert settings.client["fetch.wait.max.ms"] == "40" and settings.client["queued.min.messages"] == "1000"
    assert settings.java["fetch.max.wait.ms"] == "300" and settings.java["max.poll.records"] == "10"
    assert "fetch.wait.max.ms" not in settings.java and "queued.min.messages" not in settings.java
    # librdkafka refused the Java name when the admin client was made, with its own error and a trace
    from ingestion.kafka.clients import admin_client

    admin_client(settings.client)
