"""Which topics a pipeline reads now, and what it needs of them, asked of the brokers.

A pipeline names its topics (`topic`, `topics`) or a pattern (`topicPattern`); a pattern's topics are those on
the brokers it matches now (anywhere in the name), as Spark's `subscribePattern` finds them at every trigger.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ingestion.config import PipelineConfig, duration_seconds
from ingestion.errors import TopicNotFoundError
from ingestion.kafka.clients import check_access, check_group, describe_topic, matching_topics, watermarks_of

log = logging.getLogger(__name__)


def pipeline_topics(config: PipelineConfig) -> list[str]:
    """The topics the pipeline reads now: its named topics, or those matching its pattern (maybe none)."""
    if not config.topic_pattern:
        return list(config.topics)
    timeout = duration_seconds(config.source.broker_timeout) or 15.0
    return list(matching_topics(config.kafka_client_settings(), config.topic_pattern, timeout))


def topic_partitions(config: PipelineConfig) -> dict[str, list[int]]:
    """Topic -> partitions of what the pipeline reads now, from one listing for a pattern (the same list Spark
    assigns from, so resume positions name exactly its partitions), from each named topic's description else."""
    timeout = duration_seconds(config.source.broker_timeout) or 15.0
    settings = config.kafka_client_settings()
    if config.topic_pattern:
        return matching_topics(settings, config.topic_pattern, timeout)
    return {topic: describe_topic(settings, topic, timeout) for topic in config.topics}


def check_pipeline(config: PipelineConfig, *, group: str | None = None,
                   missing_ok: bool = False) -> dict[str, list[int]]:
    """Topic -> partitions of what the pipeline reads, or the error `check_access` raises: the brokers answer and
    take the login, each named topic exists (unless `missing_ok`: then a missing one is left out) and may be read,
    the consumer group (`group`) may be used. A pattern's matching topics are listed in one request and the first
    one's read checked (all share the pipeline's ACLs in practice; a refusal of another comes from Spark, named
    the same way)."""
    timeout = duration_seconds(config.source.broker_timeout) or 15.0
    settings = config.kafka_client_settings()
    if config.topic_pattern:
        found = matching_topics(settings, config.topic_pattern, timeout)
        if found:
            check_access(settings, next(iter(found)), timeout, group=group)
        elif group is not None:
            check_group(settings, group, timeout)
        return found
    out: dict[str, list[int]] = {}
    for topic in config.topics:
        try:
            out[topic] = check_access(settings, topic, timeout, group=None if out else group)
        except TopicNotFoundError:
            if not missing_ok:
                raise
    return out


def audited_topics(config: PipelineConfig, recorded: Iterable[str]) -> list[str]:
    """The topics `status` and `verify` report: those read now, and those the table's ledger records that the
    pipeline still reads by its config (a topic of a pattern deleted since is reported by the caller)."""
    return sorted(set(pipeline_topics(config)) | {t for t in recorded if config.reads_topic(t)})


def may_be_gone(config: PipelineConfig, topic: str) -> bool:
    """Whether a missing `topic` is no error of the config: one a pattern matched once (named topics must exist)."""
    return topic not in config.topics


def topic_watermarks(config: PipelineConfig, topics: list[str]) -> dict[str, dict[int, tuple[int, int]]]:
    """Per topic and partition (earliest, end) in one request; a topic missing from the brokers raises the error
    that names it (`describe_topic`: its closest names, or the refusal) when it is one of the config's named
    topics, and is left out when a pattern matched it once (`may_be_gone`)."""
    settings = config.kafka_client_settings()
    marks = watermarks_of(settings, topics)
    for topic in topics:
        if topic in marks:
            continue
        if not may_be_gone(config, topic):
            describe_topic(settings, topic, duration_seconds(config.source.broker_timeout) or 15.0)
        log.warning("%s: topic %r is in the table's ledger but no longer on the brokers", config.name, topic)
    return marks
