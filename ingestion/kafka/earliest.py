"""A topic's earliest available records, read once before a table exists: the first records of a Protobuf topic
name the message its table holds when the schema's file leaves it open (docs/protobuf.md#which-message); `ingest
init` tells the format of a topic without a subject, and its keys, from them.

The consumer has the pipeline's own client settings (read_committed unless they say otherwise, as the source reads),
is assigned each partition at its beginning, never joins or commits to its group, and reads a few records per
partition: an empty partition answers at once with its end.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ingestion.kafka import clients

log = logging.getLogger(__name__)


def earliest_values(settings: Mapping[str, Any], partitions: Mapping[str, Iterable[int]], *, per_partition: int = 5,
                    timeout: float = 10.0) -> list[bytes]:
    """The values of up to `per_partition` earliest records of each partition (tombstones left out), in (topic,
    partition, offset) order. Partitions that did not answer within `timeout` seconds give what they gave; a refusal
    of a topic is its KafkaAccessError."""
    return [value for _, value in earliest_records(settings, partitions, per_partition=per_partition,
                                                   timeout=timeout) if value is not None]


def earliest_records(settings: Mapping[str, Any], partitions: Mapping[str, Iterable[int]], *,
                     per_partition: int = 5, timeout: float = 10.0) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of up to `per_partition` earliest records of each partition, tombstones included, in (topic,
    partition, offset) order; as `earliest_values` otherwise."""
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

    wanted = [(topic, int(p)) for topic, parts in partitions.items() for p in parts]
    if not wanted or per_partition <= 0:
        return []
    client = clients.consumer(settings, "ingest-earliest-records", **{"enable.partition.eof": True,
                                                                      "auto.offset.reset": "earliest"})
    found: dict[tuple[str, int], list[tuple[int, bytes | None, bytes | None]]] = {key: [] for key in wanted}
    pending = set(wanted)
    try:
        client.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in wanted])
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            msg = client.poll(min(0.5, max(0.0, deadline - time.monotonic())))
            if msg is None:
                continue
            key = (msg.topic(), msg.partition())
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    pending.discard(key)
                elif not clients.raise_refusal(error, settings, msg.topic() or wanted[0][0]):
                    log.debug("earliest records of %s: %s", key, error)
                continue
            if key not in pending:
                continue
            found[key].append((msg.offset(), msg.key(), msg.value()))
            if len(found[key]) >= per_partition:
                pending.discard(key)
                client.pause([TopicPartition(*key)])
        if pending:
            log.debug("earliest records: %d partitions did not reach %d records or their end within %.0fs",
                      len(pending), per_partition, timeout)
    finally:
        client.close()
    return [(key, value) for place in sorted(found) for _, key, value in sorted(found[place], key=lambda r: r[0])]
