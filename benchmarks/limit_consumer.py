"""Limit (a): read a whole topic with the confluent-kafka consumer and throw the records away.

Run as its own process by bench.py; prints one `BENCH_RESULT {json}` line: records, value bytes, and the seconds
from the first poll to the last record.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any


def consume_all(servers: str, topic: str, batch: int = 10_000) -> dict[str, Any]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": servers, "group.id": "bench-limit", "enable.auto.commit": False,
                         "enable.partition.eof": False, "fetch.max.bytes": 52_428_800})
    try:
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        ends: dict[int, int] = {}
        for p in meta.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            if high > low:
                ends[p] = high
        total = 0
        value_bytes = 0
        started = time.monotonic()
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        remaining = dict(ends)
        while remaining:
            for msg in consumer.consume(batch, timeout=1.0):
                if msg.error():
                    raise RuntimeError(str(msg.error()))
                total += 1
                value = msg.value()
                value_bytes += len(value) if value is not None else 0
                p, offset = msg.partition(), msg.offset()
                if p in remaining and offset is not None and offset + 1 >= remaining[p]:
                    del remaining[p]
        seconds = time.monotonic() - started
    finally:
        consumer.close()
    return {"records": total, "value_bytes": value_bytes, "processing_s": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    args = parser.parse_args()
    print("BENCH_RESULT " + json.dumps(consume_all(args.bootstrap, args.topic)), flush=True)


if __name__ == "__main__":
    main()
