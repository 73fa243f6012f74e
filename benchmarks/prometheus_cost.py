"""The Prometheus endpoint's own CPU cost, measured in-process where a shared machine's load does not drown it:
one scrape (rendering the registry) and one batch fed to the series, for a process of `pipelines` pipelines of
`partitions` partitions each; with the scrape interval, the share of one core the endpoint takes."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from prometheus_client import generate_latest

from ingestion.delta.ledger import PartitionRange
from ingestion.stream.batch import BatchResult
from ingestion.stream.prometheus import Exporter


def endpoint_cost(pipelines: int = 20, partitions: int = 12, scrapes: int = 200, batches: int = 2000,
                  scrape_every: float = 15.0) -> dict[str, Any]:
    exporter = Exporter()
    series = [exporter.pipeline(f"pipeline-{i}", 10.0) for i in range(pipelines)]
    for metrics in series:
        metrics.lag([("topic", p, 1_000_000, 999_000, 1_000, 2.5) for p in range(partitions)])
    result = BatchResult(batch_id=1, rows=20_000, quarantined=3, bytes=4_800_000, version=7, committed=True,
                         ranges=tuple(PartitionRange("topic", p, 0, 1_000, 1_001) for p in range(partitions)),
                         max_timestamp=dt.datetime.now(dt.UTC), seconds=1.2)
    start = time.process_time()
    for _ in range(scrapes):
        body = generate_latest(exporter.registry)
    scrape_s = (time.process_time() - start) / scrapes
    start = time.process_time()
    for i in range(batches):
        series[i % pipelines].batch(result)
    batch_s = (time.process_time() - start) / batches
    return {"pipelines": pipelines, "partitions": partitions, "scrape_bytes": len(body),
            "scrape_cpu_ms": round(scrape_s * 1000, 3), "batch_feed_cpu_us": round(batch_s * 1e6, 1),
            "scrape_every_s": scrape_every, "core_share_pct": round(scrape_s / scrape_every * 100, 4)}


def refresh_cost(servers: str, topic: str, refreshes: int = 20, interval: float = 15.0) -> dict[str, Any]:
    """CPU of one lag refresh against a broker (this process's, librdkafka's threads included): end offsets of every
    partition, and the first record past a table position halfway through each partition (lag in every one)."""
    from ingestion import kafka
    from ingestion.stream.prometheus import LagRefresher

    settings = {"bootstrap.servers": servers}
    marks = kafka.watermarks(settings, topic)
    halfway = {topic: {p: (low + high) // 2 for p, (low, high) in marks.items()}}
    partitions = {topic: sorted(marks)}
    refresher = LagRefresher(Exporter().pipeline("bench", 10.0), settings, lambda: partitions, lambda: halfway,
                             interval)
    refresher.refresh()  # the first opens nothing more, but warms Python's imports
    start, wall = time.process_time(), time.monotonic()
    for _ in range(refreshes):
        refresher.refresh()
    cpu = (time.process_time() - start) / refreshes
    return {"partitions": len(marks), "refresh_cpu_ms": round(cpu * 1000, 1),
            "refresh_wall_ms": round((time.monotonic() - wall) / refreshes * 1000, 1), "interval_s": interval,
            "core_share_pct": round(cpu / interval * 100, 3)}


if __name__ == "__main__":
    import json

    for pipelines, every in ((1, 1.0), (1, 15.0), (20, 15.0)):
        print(json.dumps(endpoint_cost(pipelines=pipelines, partitions=12 if pipelines > 1 else 3,
                                       scrape_every=every)))
