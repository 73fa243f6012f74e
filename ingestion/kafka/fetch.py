"""Records of known offset ranges, fetched by this process's own consumer, as the rows Spark's Kafka source makes.

A small batch's offsets are known from its plan before it runs (`runtime.batch_plan`); `RangeFetcher` reads
exactly those with confluent-kafka, under the same settings as the source (its isolation level included: with
`read_committed`, records of aborted transactions and transaction markers are skipped, as the source skips them),
and returns them as an Arrow batch of `columns.KAFKA_SOURCE_SCHEMA`. Its consumer stays assigned between batches and
fetches ahead into a small queue (a broker answers a fetch at the end of a partition once records arrive, or after
`fetch.wait.max.ms`), so the next batch, starting where the last one ended, finds its records there. A consumer
paused between batches took 0.5 to 1 s to fetch again once resumed. Within a fetch, every partition gets its share of
each fetch response, and a partition whose range is complete is paused while others are still pending: at the start
of a backlog, the first partitions otherwise took every response.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import pyarrow as pa

from ingestion.columns import KAFKA_SOURCE_SCHEMA
from ingestion.kafka import access, clients
from ingestion.runtime.arrow_types import to_arrow_schema

log = logging.getLogger(__name__)

SOURCE_ARROW_SCHEMA = to_arrow_schema(KAFKA_SOURCE_SCHEMA)
# librdkafka's timestamp types -> the Java client's TimestampType ids, as Spark's `timestampType` column has them
_TIMESTAMP_TYPES = {0: -1, 1: 0, 2: 1}
# The fetch-ahead queue of one consumer: a pipeline's small batches, not its backlog (librdkafka's default is
# 64 MiB per consumer, and a run may hold a hundred of them).
_QUEUE_KBYTES = 2048
# How long a broker holds a fetch at the end of a partition: also how late the end is reported when a batch's range
# ends in transaction markers (librdkafka's default is 500 ms).
_FETCH_WAIT_MS = 200
# How long librdkafka waits before fetching again for a partition whose queue was full (its default, 1000 ms, since
# 2.3): with the small queue above, a backlog filled it every few milliseconds and each fill cost a second's pause.
# 100,000 records of 240 bytes: 3.3 to 4.6 s to fetch at the default, 0.31 to 0.52 s at 10 ms (a plain consumer with
# a 64 MiB queue: 0.22 to 0.26 s), docs/performance.md#the-driver-side-fetch.
_FETCH_QUEUE_BACKOFF_MS = 10
# The least a partition may take of one fetch response (librdkafka's max.partition.fetch.bytes is 1 MiB).
_MIN_PARTITION_BYTES = 16 * 1024


class Span(Protocol):
    """Offsets `start` (included) to `until` (excluded) of one topic partition."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def start(self) -> int: ...
    @property
    def until(self) -> int: ...


class RangeFetcher:
    """One pipeline's consumer of offset ranges (no group membership, nothing committed)."""

    def __init__(self, settings: Mapping[str, Any], group: str) -> None:
        self._settings = settings
        self._group = group
        self._consumer: Any = None
        self._expect: dict[tuple[str, int], int] = {}  # where the next batch starts if it follows on, per partition
        self._position: dict[tuple[str, int], int] = {}  # the offset the consumer gives next, per partition
        self._held: dict[tuple[str, int], list[Any]] = {}  # fetched ahead: at or past `_expect`
        self._sized_for = 0  # the partitions the consumer's fetch sizes share its queue among

    def fetch(self, spans: Sequence[Span], timeout: float) -> pa.RecordBatch | None:
        """The records of `spans` in (topic, partition, offset) order, or None when they stopped arriving before all
        had: `timeout` seconds without a record (the caller then reads them another way). A slow fetch that keeps
        coming (a busy machine, a large batch) is waited for: a whole-fetch deadline turned a busy moment into a
        JVM's start."""
        from confluent_kafka import KafkaError, TopicPartition

        consumer = self._assigned(spans)
        # brokers going away and coming back: librdkafka recovers by itself
        passing = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE,
                   access.GROUP_AUTHORIZATION_FAILED}
        start = {(s.topic, s.partition): s.start for s in spans}
        until = {(s.topic, s.partition): s.until for s in spans}
        # each partition's records in offset order (held ones first): the batch in (topic, partition, offset) order
        # without sorting its records
        rows: dict[tuple[str, int], list[Any]] = {key: [] for key in sorted(until)}
        for key, end in until.items():
            held = self._held.pop(key, [])
            rows[key].extend(m for m in held if start[key] <= m.offset() < end)
            self._held[key] = [m for m in held if m.offset() >= end]
        pending = {key for key, end in until.items() if self._position[key] < end}
        paused: set[tuple[str, int]] = set()  # done while others are pending: fetched no further until the end
        deadline = time.monotonic() + timeout
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                log.debug("fetch of %d offset ranges: %d partitions incomplete, nothing for %.1fs", len(spans),
                          len(pending), timeout)
                self.close()  # what it holds is incomplete: the next fetch starts a new consumer
                return None
            # what is queued, at once (consume() with a timeout waits it out unless it fills its batch), else
            # the next message as soon as it comes
            messages = consumer.consume(num_messages=10_000, timeout=0) or [consumer.poll(min(left, 0.1))]
            moved = False  # a partition went on: records, or its end past markers
            for msg in messages:
                if msg is None:  # (not `if not msg`: a tombstone's Message has length 0)
                    continue
                key = (msg.topic(), msg.partition())
                error = msg.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        # A broker coming and going is waited out (within the timeout), the group's lookup ignored
                        # (never used); anything else (a refusal, an offset no longer in the log) is left to Spark's
                        # source, which reports it as it does for every batch (one line; failOnDataLoss).
                        if error.retriable() or error.code() in passing:
                            continue
                        log.debug("fetch of %s: %s", key, error)
                        self.close()
                        return None
                    # The end of what may be read: transaction markers and aborted records before it are skipped.
                    if msg.offset() > self._position.get(key, 0):
                        self._position[key] = msg.offset()
                        moved = True
                elif msg.offset() < self._position.get(key, 0):
                    continue  # given once already (a consumer never should; a row twice would be a duplicate)
                else:
                    self._position[key] = msg.offset() + 1
                    moved = True
                    if start.get(key, 0) <= msg.offset() < until.get(key, -1):
                        rows[key].append(msg)
                    elif msg.offset() >= until.get(key, 0):
                        self._held.setdefault(key, []).append(msg)
                if key in pending and self._position[key] >= until[key]:
                    pending.discard(key)
            if moved:
                deadline = time.monotonic() + timeout
            done = [key for key in until if key not in pending and key not in paused]
            if pending and done:
                # Waiting for some partitions: the others fetch no further until the end, so the fetches serve
                # the ones still pending and no backlog piles up here. (A paused partition fetches again from after
                # the last message it gave.)
                consumer.pause([TopicPartition(*key) for key in done])
                paused.update(done)
        if paused:
            consumer.resume([TopicPartition(*key) for key in sorted(paused)])
        self._expect.update(until)
        return _source_batch([m for part in rows.values() for m in part])

    def _assigned(self, spans: Sequence[Span]) -> Any:
        """The consumer, assigned at the spans' starts unless each follows on from the batch before."""
        from confluent_kafka import TopicPartition

        wanted = {(s.topic, s.partition): s.start for s in spans}
        if self._consumer is not None and len(wanted) > self._sized_for:
            self.close()
        if self._consumer is None:
            # Each partition's share of a fetch response is at most its share of the queue: with librdkafka's
            # 1 MiB per partition, the first partitions of a backlog filled every response and the others got
            # nothing (3 of 6 partitions still empty after 10 s, measured).
            share = max(_MIN_PARTITION_BYTES, _QUEUE_KBYTES * 1024 // len(wanted))
            # (librdkafka refuses a fetch.max.bytes below the settings' message.max.bytes)
            response = max(_QUEUE_KBYTES * 1024, int(clients.for_consumer(self._settings).get("message.max.bytes", 0)))
            self._consumer = clients.consumer(self._settings, self._group, **{
                "enable.partition.eof": True, "auto.offset.reset": "error", "fetch.wait.max.ms": _FETCH_WAIT_MS,
                "queued.max.messages.kbytes": _QUEUE_KBYTES, "fetch.queue.backoff.ms": _FETCH_QUEUE_BACKOFF_MS,
                "fetch.max.bytes": response,
                "max.partition.fetch.bytes": share})
            self._expect, self._sized_for = {}, len(wanted)
        if any(self._expect.get(key) != start for key, start in wanted.items()):
            self._consumer.assign([TopicPartition(t, p, start) for (t, p), start in sorted(wanted.items())])
            self._expect, self._position, self._held = dict(wanted), dict(wanted), {}
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
        self._consumer, self._expect, self._position, self._held, self._sized_for = None, {}, {}, {}, 0


def _source_batch(messages: list[Any]) -> pa.RecordBatch:
    """Messages (in the batch's order) as the rows of Spark's Kafka source (with includeHeaders)."""
    stamps = [m.timestamp() for m in messages]
    headers = [m.headers() for m in messages]
    columns = [
        [m.key() for m in messages],
        [m.value() for m in messages],
        [m.topic() for m in messages],
        [m.partition() for m in messages],
        [m.offset() for m in messages],
        pa.array([ms for _, ms in stamps], pa.int64()).cast(pa.timestamp("ms", tz="UTC")).cast(
            SOURCE_ARROW_SCHEMA.field("timestamp").type),
        [_TIMESTAMP_TYPES.get(kind, -1) for kind, _ in stamps],
        [[{"key": k, "value": v} for k, v in h] if h else None for h in headers],
    ]
    return pa.RecordBatch.from_arrays(
        [c if isinstance(c, pa.Array) else pa.array(c, type=f.type) for c, f in zip(columns, SOURCE_ARROW_SCHEMA,
                                                                                     strict=True)],
        schema=SOURCE_ARROW_SCHEMA)
