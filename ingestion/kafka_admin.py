"""Small Kafka admin helpers on confluent-kafka: topics and offsets, with the pipeline's client settings."""

from __future__ import annotations

from collections.abc import Mapping

from ingestion.errors import IngestionError


def create_topic(settings: Mapping[str, str], topic: str, partitions: int, replication: int = 1) -> bool:
    """Create `topic`; False when it already exists."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(dict(settings))
    try:
        admin.create_topics([NewTopic(topic, partitions, replication)])[topic].result(30)
        return True
    except KafkaException as exc:
        if exc.args and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise IngestionError(f"cannot create topic {topic!r}: {exc}") from None


def partitions(settings: Mapping[str, str], topic: str) -> list[int]:
    from confluent_kafka.admin import AdminClient

    meta = AdminClient(dict(settings)).list_topics(topic, timeout=30)
    found = meta.topics.get(topic)
    if found is None or found.error is not None:
        raise IngestionError(f"topic {topic!r} does not exist on {settings.get('bootstrap.servers')}")
    return sorted(found.partitions)


def watermarks(settings: Mapping[str, str], topic: str) -> dict[int, tuple[int, int]]:
    """Per partition: (earliest offset, end offset), the end being the offset the next record will get."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**settings, "group.id": "ingest-watermarks", "enable.auto.commit": False})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
                for p in partitions(settings, topic)}
    finally:
        consumer.close()
