"""The project's Kafka clients on confluent-kafka: topics, offsets and consumer groups, with a pipeline's client
settings. Every consumer the project creates comes from `consumer`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ingestion.errors import IngestionError


def create_topic(settings: Mapping[str, Any], topic: str, partitions: int, replication: int = 1) -> bool:
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


def partitions(settings: Mapping[str, Any], topic: str) -> list[int]:
    from confluent_kafka.admin import AdminClient

    meta = AdminClient(dict(settings)).list_topics(topic, timeout=30)
    found = meta.topics.get(topic)
    if found is None or found.error is not None:
        raise IngestionError(f"topic {topic!r} does not exist on {settings.get('bootstrap.servers')}")
    return sorted(found.partitions)


def consumer(settings: Mapping[str, Any], group: str, **overrides: Any) -> Any:
    """A confluent-kafka Consumer in `group` that never commits offsets (the project commits explicitly)."""
    from confluent_kafka import Consumer

    return Consumer({**settings, "group.id": group, "enable.auto.commit": False, **overrides})


def watermarks(settings: Mapping[str, Any], topic: str) -> dict[int, tuple[int, int]]:
    """Per partition: (earliest offset, end offset), the end being the offset the next record will get."""
    from confluent_kafka import TopicPartition

    client = consumer(settings, "ingest-watermarks")
    try:
        return {p: client.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
                for p in partitions(settings, topic)}
    finally:
        client.close()


def commit_group_offsets(admin: Any, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Set `group`'s committed offsets (the next offset to read per partition), as a consumer commit would."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p, o) for p, o in sorted(offsets.items())])
    for future in admin.alter_consumer_group_offsets([request]).values():
        future.result(30)


def committed_offsets(settings: Mapping[str, Any], group: str, topic: str) -> dict[int, int]:
    """`group`'s committed offset per partition of `topic` (partitions without a commit are left out)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in partitions(settings, topic)])
    admin = AdminClient(dict(settings))  # kept referenced until the future resolves, or it never does
    result = admin.list_consumer_group_offsets([request])[group].result(30)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}
