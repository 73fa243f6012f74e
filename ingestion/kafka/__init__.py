"""Kafka clients (confluent-kafka): admin, offsets, consumer groups. Below `stream` and `ops`; imports only
`config`/`errors`."""

from ingestion.kafka.clients import (
    ISOLATION,
    READ_COMMITTED,
    admin_client,
    check_reachable,
    commit_group_offsets,
    committed_offsets,
    consumer,
    create_topic,
    first_unread,
    for_admin,
    for_consumer,
    for_producer,
    partitions,
    watermarks,
)

__all__ = ["ISOLATION", "READ_COMMITTED", "admin_client", "check_reachable", "commit_group_offsets",
           "committed_offsets", "consumer", "create_topic", "first_unread", "for_admin", "for_consumer", "for_producer",
           "partitions", "watermarks"]
