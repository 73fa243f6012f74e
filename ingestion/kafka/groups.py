"""Another consumer group, as a pipeline taking over from it sees it: its committed offsets and its members."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ingestion.kafka.clients import admin_client, consumer, refusals


@dataclass(frozen=True)
class GroupState:
    """A consumer group's committed offsets (topic -> partition -> the next offset it would read; partitions it
    never committed are absent) and its members now (`client.id@host`, empty when no consumer is in it)."""

    group: str
    committed: dict[str, dict[int, int]]
    members: tuple[str, ...]

    @property
    def active(self) -> bool:
        return bool(self.members)


def group_state(settings: Mapping[str, object], group: str, partitions: Mapping[str, list[int]],
                timeout: float) -> GroupState:
    """`group`'s committed offsets for these partitions (one OffsetFetch for all of them, by a consumer that never
    joins the group) and its members (one DescribeGroups); KafkaAccessError when Kafka refuses either."""
    from confluent_kafka import TopicPartition

    wanted = [TopicPartition(t, p) for t, parts in partitions.items() for p in parts]
    committed: dict[str, dict[int, int]] = {}
    if wanted:
        client = consumer(settings, group)
        try:
            with refusals(settings, next(iter(partitions)), group):
                found = client.committed(wanted, timeout=timeout)
        finally:
            client.close()
        for tp in found:
            if tp.offset >= 0:
                committed.setdefault(tp.topic, {})[tp.partition] = tp.offset
    admin = admin_client(settings)
    with refusals(settings, group=group):
        described = admin.describe_consumer_groups([group], request_timeout=timeout)[group].result(timeout)
    members = tuple(sorted(f"{m.client_id}@{m.host}" for m in described.members))
    return GroupState(group, committed, members)
