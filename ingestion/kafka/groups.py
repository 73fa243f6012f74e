"""Another consumer group, as a pipeline taking over from it sees it: its committed offsets and its members."""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ingestion.kafka import access
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
    joins the group) and its members (DescribeGroups); KafkaAccessError when Kafka refuses either."""
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
    members = tuple(sorted(f"{m.client_id}@{m.client_host}" for m in _described(settings, group, timeout)))
    return GroupState(group, committed, members)


# A broker of the cluster not answering (restarting): the group's listing is asked again until the timeout.
_PASSING = frozenset({"_TRANSPORT", "_TIMED_OUT", "_ALL_BROKERS_DOWN", "_PARTIAL", "_WAIT_COORD", "_RESOLVE",
                      "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS", "NOT_COORDINATOR"})


def _described(settings: Mapping[str, object], group: str, timeout: float) -> list[Any]:
    """The group's members, from librdkafka's list_groups (ListGroups, then DescribeGroups at the broker that
    lists the group), not from the admin client's describe_consumer_groups: that is a coordinator-targeted admin
    request, which aborts the process when its coordinator has just gone away (see `clients.GroupCommitter`).
    list_groups sends its requests itself and fails as an error; it asks every broker, so a broker restarting
    fails it (`_PASSING`), and it is asked again until `timeout`. A group this client may not describe is not
    listed: a refusal shows in the committed offsets' request instead (OffsetFetch needs DESCRIBE too)."""
    from confluent_kafka import KafkaException

    admin = admin_client(settings)
    deadline = time.monotonic() + timeout
    while True:
        try:
            with warnings.catch_warnings():  # deprecated in confluent-kafka 2, kept for its request path
                warnings.simplefilter("ignore", DeprecationWarning)
                found = admin.list_groups(group, timeout=max(0.5, min(10.0, deadline - time.monotonic())))
            break
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            refused = access.from_error(error, settings, group=group) if error is not None else None
            if refused is not None:
                raise refused from None
            if error is None or error.name() not in _PASSING or time.monotonic() >= deadline:
                raise
            time.sleep(0.5)
    for described in found:
        if described.id == group and described.error is not None:
            if described.error.code() == access.GROUP_AUTHORIZATION_FAILED:
                raise access.group_denied(settings, group)
            raise KafkaException(described.error)
    return [m for described in found if described.id == group for m in described.members]
