"""The project's Kafka clients on confluent-kafka: topics, offsets and consumer groups, with a pipeline's client
settings. Every consumer the project creates comes from `consumer`, every admin client from `admin_client`.

A pipeline's `kafka:` section holds settings for every client. Each client gets only the settings of its role:
librdkafka warns on the screen about a consumer setting given to a producer or an admin client, and the reverse.
Consumers read committed records only (`isolation.level: read_committed`) unless the settings say otherwise, as
the Spark source does (see `stream.source`): records of aborted transactions never land.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ingestion.errors import IngestionError

ISOLATION = "isolation.level"
READ_COMMITTED = "read_committed"

# librdkafka's consumer-only and producer-only settings (its CONFIGURATION.md, column C/P).
CONSUMER_ONLY = frozenset({
    "group.id", "group.instance.id", "partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms",
    "group.protocol", "group.remote.assignor", "coordinator.query.interval.ms", "max.poll.interval.ms",
    "enable.auto.commit", "auto.commit.interval.ms", "enable.auto.offset.store", "queued.min.messages",
    "queued.max.messages.kbytes", "fetch.wait.max.ms", "fetch.queue.backoff.ms", "fetch.message.max.bytes",
    "max.partition.fetch.bytes", "fetch.max.bytes", "fetch.min.bytes", "fetch.error.backoff.ms", ISOLATION,
    "auto.offset.reset", "enable.partition.eof", "check.crcs", "allow.auto.create.topics",
    "consume.callback.max.messages",
})
PRODUCER_ONLY = frozenset({
    "transactional.id", "transaction.timeout.ms", "enable.idempotence", "enable.gapless.guarantee",
    "queue.buffering.max.messages", "queue.buffering.max.kbytes", "queue.buffering.max.ms", "linger.ms",
    "message.send.max.retries", "retries", "queue.buffering.backpressure.threshold",
    "compression.codec", "compression.type", "batch.num.messages", "batch.size", "delivery.report.only.error",
    "sticky.partitioning.linger.ms", "acks", "request.required.acks", "request.timeout.ms", "message.timeout.ms",
    "delivery.timeout.ms", "partitioner", "compression.level",
})


# librdkafka's own log lines (connection refusals while a broker restarts, ...) go to this logger, shown with -v,
# instead of straight to the screen.
LIBRDKAFKA_LOG = logging.getLogger("ingestion.librdkafka")


def _logged(settings: dict[str, Any]) -> dict[str, Any]:
    return {"logger": LIBRDKAFKA_LOG, **settings}


def for_consumer(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a consumer takes: read_committed by default, no producer settings."""
    return _logged({ISOLATION: READ_COMMITTED, **{k: v for k, v in settings.items() if k not in PRODUCER_ONLY}})


def for_admin(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings an admin client takes: neither consumer nor producer settings."""
    return _logged({k: v for k, v in settings.items() if k not in CONSUMER_ONLY and k not in PRODUCER_ONLY})


def for_producer(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a producer takes: no consumer settings."""
    return _logged({k: v for k, v in settings.items() if k not in CONSUMER_ONLY})


def check_reachable(settings: Mapping[str, Any], topic: str, timeout: float) -> list[int]:
    """The topic's partitions, asked of the brokers within `timeout` seconds; IngestionError naming the cause when
    no broker answers or the topic does not exist."""
    from confluent_kafka import KafkaException

    servers = settings.get("bootstrap.servers")
    admin = admin_client({**settings, "socket.connection.setup.timeout.ms": int(max(1.0, timeout) * 1000)})
    try:
        meta = admin.list_topics(topic, timeout=timeout)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else exc
        reason = error.str() if hasattr(error, "str") else str(error)
        raise IngestionError(f"no Kafka broker answered at {servers} within {timeout:.0f}s ({reason}); check "
                             "kafka.bootstrap.servers and that the brokers run") from None
    found = meta.topics.get(topic)
    if found is None or found.error is not None:
        reason = f" ({found.error.str()})" if found is not None and found.error is not None else ""
        raise IngestionError(f"topic {topic!r} does not exist on {servers}{reason}; create it, or run `ingest "
                             "onboard <pipeline> --create-topic`")
    return sorted(found.partitions)


def admin_client(settings: Mapping[str, Any]) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(for_admin(settings))


def create_topic(settings: Mapping[str, Any], topic: str, partitions: int, replication: int = 1) -> bool:
    """Create `topic`; False when it already exists."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    admin = admin_client(settings)
    try:
        admin.create_topics([NewTopic(topic, partitions, replication)])[topic].result(30)
        return True
    except KafkaException as exc:
        if exc.args and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise IngestionError(f"cannot create topic {topic!r}: {exc}") from None


def partitions(settings: Mapping[str, Any], topic: str) -> list[int]:
    meta = admin_client(settings).list_topics(topic, timeout=30)
    found = meta.topics.get(topic)
    if found is None or found.error is not None:
        raise IngestionError(f"topic {topic!r} does not exist on {settings.get('bootstrap.servers')}")
    return sorted(found.partitions)


def consumer(settings: Mapping[str, Any], group: str, **overrides: Any) -> Any:
    """A confluent-kafka Consumer in `group` that never commits offsets (the project commits explicitly) and
    reads committed records unless the settings or `overrides` say otherwise."""
    from confluent_kafka import Consumer

    return Consumer({**for_consumer(settings), "group.id": group, "enable.auto.commit": False, **overrides})


def watermarks(settings: Mapping[str, Any], topic: str) -> dict[int, tuple[int, int]]:
    """Per partition: (earliest offset, end offset), the end being the offset the next record will get."""
    from confluent_kafka import TopicPartition

    client = consumer(settings, "ingest-watermarks")
    try:
        return {p: client.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
                for p in partitions(settings, topic)}
    finally:
        client.close()


def commit_group_offsets(admin: Any, group: str, topic: str, offsets: dict[int, int], timeout: float = 30) -> None:
    """Set `group`'s committed offsets (the next offset to read per partition), as a consumer commit would."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p, o) for p, o in sorted(offsets.items())])
    for future in admin.alter_consumer_group_offsets([request], request_timeout=timeout).values():
        future.result(timeout)


def committed_offsets(settings: Mapping[str, Any], group: str, topic: str) -> dict[int, int]:
    """`group`'s committed offset per partition of `topic` (partitions without a commit are left out)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in partitions(settings, topic)])
    admin = admin_client(settings)  # kept referenced until the future resolves, or it never does
    result = admin.list_consumer_group_offsets([request])[group].result(30)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def first_unread(settings: Mapping[str, Any], topic: str, positions: Mapping[int, int],
                 timeout: float = 10.0) -> dict[int, tuple[int, int] | None]:
    """Per partition, the (offset, timestamp ms) of the first record a read_committed consumer gets at or after
    `positions[partition]`, or None when there is none: what lies between the position and the end offset is then
    only transaction markers and aborted records (a transactional producer always ends a partition with a
    marker). Partitions that did not answer within `timeout` seconds are left out."""
    import time

    from confluent_kafka import KafkaError, TopicPartition

    if not positions:
        return {}
    client = consumer(settings, "ingest-first-unread", **{"enable.partition.eof": True,
                                                          "auto.offset.reset": "earliest"})
    found: dict[int, tuple[int, int] | None] = {}
    try:
        client.assign([TopicPartition(topic, p, o) for p, o in positions.items()])
        deadline = time.monotonic() + timeout
        while len(found) < len(positions) and time.monotonic() < deadline:
            msg = client.poll(0.5)
            partition = msg.partition() if msg is not None else None
            if msg is None or partition is None or partition in found or partition not in positions:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    found[partition] = None
                continue
            found[partition] = (int(msg.offset()), int(msg.timestamp()[1]))
            client.pause([TopicPartition(topic, partition)])
    finally:
        client.close()
    return found
