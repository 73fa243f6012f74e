"""Kafka clients (confluent-kafka): admin, offsets, consumer groups, and Kafka's refusals as one line (`access`).
Below `stream` and `ops`; imports only `config`, `security` and `errors`."""

from ingestion.kafka.clients import (
    ISOLATION,
    READ_COMMITTED,
    admin_client,
    check_access,
    check_group,
    check_reachable,
    commit_group_offsets,
    committed_offsets,
    consumer,
    create_topic,
    describe_topic,
    first_unread,
    for_admin,
    for_consumer,
    for_producer,
    matching_topics,
    partitions,
    raise_refusal,
    watermarks,
    watermarks_of,
)
from ingestion.kafka.topics import (
    audited_topics,
    check_pipeline,
    may_be_gone,
    pipeline_topics,
    topic_partitions,
    topic_watermarks,
)

__all__ = ["ISOLATION", "READ_COMMITTED", "admin_client", "audited_topics", "check_access", "check_group",
           "check_pipeline", "check_reachable", "commit_group_offsets", "committed_offsets", "consumer",
           "create_topic", "describe_topic", "first_unread", "for_admin", "for_consumer", "for_producer",
           "matching_topics", "may_be_gone", "partitions", "pipeline_topics", "raise_refusal", "topic_partitions",
           "topic_watermarks", "watermarks", "watermarks_of"]
