"""The direct write's consumer (`kafka.fetch.RangeFetcher`) on a real broker: a backlog in every partition."""

from __future__ import annotations

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from ingestion.kafka.fetch import RangeFetcher
from ingestion.runtime.batch_plan import OffsetRange as Span

pytestmark = pytest.mark.integration


def _offsets(rows: pa.RecordBatch) -> list[tuple[int, int]]:
    return sorted(zip(rows.column("partition").to_pylist(), rows.column("offset").to_pylist(), strict=True))


def test_ranges_at_the_start_of_a_backlog_arrive_from_every_partition(kafka_servers, make_topic) -> None:
    # 6 partitions of 4 MB each, far more than the consumer's 2 MiB queue: with librdkafka's 1 MiB per partition
    # and per response, the first partitions took every response and the others got nothing.
    topic = make_topic(partitions=6)
    # (idempotent: in order whatever is retried, so offset i holds the bytes of i)
    producer = Producer({"bootstrap.servers": kafka_servers, "linger.ms": 50, "batch.size": 65536,
                         "enable.idempotence": True})
    for partition in range(6):
        for i in range(400):
            producer.produce(topic, value=bytes([i % 251]) * 10_000, partition=partition)
    assert producer.flush(30) == 0
    fetcher = RangeFetcher({"bootstrap.servers": kafka_servers}, "range-fetch-test")
    try:
        first = fetcher.fetch([Span(topic, p, 0, 10) for p in range(6)], timeout=5)
        assert first is not None
        assert _offsets(first) == [(p, o) for p in range(6) for o in range(10)]
        # The partitions done first stopped fetching until the others were: no backlog piled up in the driver
        # (120 of the 2,400 records here on a quiet machine, 300 on a slow one, where the responses already in
        # flight when a partition is paused still land; 960 without the pause and the shares).
        assert sum(len(held) for held in fetcher._held.values()) < 600
        # The next ranges follow on, from what was held and from the consumer fetching again.
        second = fetcher.fetch([Span(topic, p, 10, 120) for p in range(6)], timeout=5)
        assert second is not None
        assert _offsets(second) == [(p, o) for p in range(6) for o in range(10, 120)]
        assert second.column("value").to_pylist()[0] == bytes([10]) * 10_000
    finally:
        fetcher.close()


def test_a_fetch_that_keeps_receiving_records_outlasts_its_timeout(kafka_servers, make_topic) -> None:
    """The timeout bounds a pause, not the whole fetch: records produced over three times the timeout, one every
    0.1 s, all arrive; a range whose records stop coming is given up after the timeout (the caller reads it
    another way). A whole-fetch deadline made a busy machine's slow fetch start a JVM."""
    import threading
    import time

    topic = make_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_servers, "linger.ms": 0})

    def produce() -> None:
        for i in range(30):
            producer.produce(topic, value=b"%d" % i, partition=0)
            producer.flush(5)
            time.sleep(0.1)

    fetcher = RangeFetcher({"bootstrap.servers": kafka_servers}, "range-fetch-pause")
    producing = threading.Thread(target=produce)
    started = time.monotonic()
    producing.start()
    try:
        rows = fetcher.fetch([Span(topic, 0, 0, 30)], timeout=1.0)
        took = time.monotonic() - started
        assert rows is not None, f"gave up after {took:.1f}s while records kept coming"
        assert _offsets(rows) == [(0, o) for o in range(30)]
        assert took > 1.0  # the fetch outlasted its timeout (30 records 0.1 s apart)
        producing.join()
        assert fetcher.fetch([Span(topic, 0, 30, 31)], timeout=0.5) is None  # offset 30 never comes
    finally:
        producing.join()
        fetcher.close()
