"""Kafka clients (confluent-kafka): admin, offsets, consumer groups. Below `stream` and `ops`; imports only
`config`/`errors`."""

from ingestion.kafka.clients import (
    commit_group_offsets,
    committed_offsets,
    consumer,
    create_topic,
    partitions,
    watermarks,
)

__all__ = ["commit_group_offsets", "committed_offsets", "consumer", "create_topic", "partitions", "watermarks"]
