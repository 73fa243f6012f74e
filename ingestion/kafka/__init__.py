"""Kafka clients (confluent-kafka): topics, offsets, consumer groups, and Kafka's refusals as one line (`access`).
Below `stream` and `ops`; imports only `config`, `security`, `units` and `errors`.

A command resolves a pipeline's settings once (`resolve_settings`) and lists its topics once
(`pipeline_partitions`); everything else takes those answers.
"""

from ingestion.kafka.clients import (
    ISOLATION,
    READ_COMMITTED,
    GroupCommitter,
    admin_client,
    check_access,
    commit_group_offsets,
    committed_offsets,
    consumer,
    create_topic,
    first_unread,
    partitions,
    raise_refusal,
    watermarks,
    watermarks_of,
)
from ingestion.kafka.earliest import earliest_records, earliest_values
from ingestion.kafka.settings import KafkaSettings
from ingestion.kafka.settings import resolve as resolve_settings
from ingestion.kafka.topics import check_pipeline, pipeline_partitions

__all__ = ["ISOLATION", "READ_COMMITTED", "GroupCommitter", "KafkaSettings", "admin_client", "check_access",
           "check_pipeline", "commit_group_offsets", "committed_offsets", "consumer", "create_topic",
           "earliest_records", "earliest_values", "first_unread",
           "partitions", "pipeline_partitions", "raise_refusal", "resolve_settings", "watermarks",
           "watermarks_of"]
