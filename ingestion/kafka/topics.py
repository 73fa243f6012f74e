"""Which topics a pipeline reads now, and what it needs of them, asked of the brokers.

A pipeline names its topics (`topic`, `topics`) or a pattern (`topicPattern`); a pattern's topics are those on
the brokers it matches now (anywhere in the name), as Spark's `subscribePattern` finds them at every trigger.
Each command lists them once (`pipeline_partitions`) and hands the answer down.
"""

from __future__ import annotations

from collections.abc import Mapping

from ingestion.config import PipelineConfig
from ingestion.errors import TopicNotFoundError
from ingestion.kafka.clients import check_access, check_group, list_topics, partitions
from ingestion.kafka.settings import KafkaSettings


def pipeline_partitions(config: PipelineConfig, settings: KafkaSettings, *,
                        missing_ok: bool = False) -> dict[str, list[int]]:
    """Topic -> partitions of what the pipeline reads now, from one metadata request: its named topics (a missing
    one raises TopicNotFoundError naming the closest, unless `missing_ok`: then it is left out), or those matching
    its pattern (maybe none: the stream reads them as they come)."""
    if config.topic_pattern:
        return list_topics(settings.client, settings.timeout, pattern=config.topic_pattern)
    if not missing_ok:
        return list_topics(settings.client, settings.timeout, names=config.topics)
    listed = list_topics(settings.client, settings.timeout, pattern="")
    found: dict[str, list[int]] = {}
    for topic in config.topics:
        try:  # asked alone when not listed: a topic this client may not describe is a refusal, not missing
            found[topic] = listed[topic] if topic in listed else partitions(settings.client, topic, settings.timeout)
        except TopicNotFoundError:
            continue
    return found


def check_pipeline(config: PipelineConfig, settings: KafkaSettings, found: Mapping[str, list[int]],
                   group: str | None) -> None:
    """What a pipeline needs of Kafka besides its topics' metadata, asked before anything is created: each named
    topic may be read, and the consumer group (`group`, when offsets are committed) may be used; KafkaAccessError
    naming what to grant otherwise. A pattern's first matching topic is checked (all share the pipeline's ACLs in
    practice; a refusal of another comes from Spark, named the same way)."""
    checked = list(found.items())[:1] if config.topic_pattern else list(found.items())
    for topic, parts in checked:
        check_access(settings.client, topic, parts, settings.timeout)
    if group is not None:
        check_group(settings.client, group, settings.timeout)
