"""The lag refresher against the real broker: Kafka's end offsets against the table's position, the age of the
first record not ingested, lag at zero once a batch covers it, and a refresh with no batch at all (no Spark); then
`run --all`'s pipelines in one registry, fed by their batches, from `starting` to `stopped` or `failed`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from ingestion.delta.ledger import PartitionRange
from ingestion.stream.batch import BatchResult
from ingestion.stream.prometheus import Exporter, LagRefresher

pytestmark = pytest.mark.integration


def _produce(servers: str, topic: str, partition: int, count: int) -> list[tuple[int, int]]:
    """(offset, timestamp ms) of each record written to `partition`."""
    landed: list[tuple[int, int]] = []
    producer = Producer({"bootstrap.servers": servers})
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i, partition=partition,
                         on_delivery=lambda err, msg: landed.append((msg.offset(), msg.timestamp()[1])))
    producer.flush(30)
    return sorted(landed)


def test_lag_is_read_from_kafka_per_partition_with_no_batch_and_drops_to_zero_after_one(
        kafka_servers: str, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=2)
    landed = _produce(kafka_servers, topic, 0, 5)
    exporter = Exporter()
    refresher = LagRefresher(exporter.pipeline("p", 1.0), {"bootstrap.servers": kafka_servers}, lambda: {topic: [0, 1]},
                             lambda: {topic: {0: 2}}, interval=60.0)
    now = landed[2][1] / 1000 + 30.0  # 30 s after the first record the table does not hold (offset 2)
    refresher.refresh(now=now)

    def value(name: str, partition: int) -> float | None:
        return exporter.registry.get_sample_value(name, {"pipeline": "p", "topic": topic, "partition": str(partition)})

    assert [value("ingest_lag_records", p) for p in (0, 1)] == [3.0, 0.0]
    assert [value("ingest_lag_seconds", p) for p in (0, 1)] == pytest.approx([30.0, 0.0], abs=1e-6)
    assert [value("ingest_kafka_end_offset", p) for p in (0, 1)] == [5.0, 0.0]
    assert [value("ingest_table_offset", p) for p in (0, 1)] == [2.0, 0.0]

    refresher.batch(BatchResult(batch_id=0, rows=3, quarantined=0, bytes=6, version=1, committed=True,
                                ranges=(PartitionRange(topic, 0, 2, 4, 3),), max_timestamp=None, seconds=0.1))
    # at the commit, before any refresh: the table's offset and the lag against Kafka's end as last read
    assert (value("ingest_table_offset", 0), value("ingest_lag_records", 0), value("ingest_lag_seconds", 0)) == (
        5.0, 0.0, 0.0)
    refresher.refresh(now=now)
    assert [value("ingest_lag_records", p) for p in (0, 1)] == [0.0, 0.0]  # reported at zero, not dropped
    assert [value("ingest_lag_seconds", p) for p in (0, 1)] == [0.0, 0.0]
    assert value("ingest_table_offset", 0) == 5.0
    assert exporter.registry.get_sample_value("ingest_rows_total", {"pipeline": "p"}) == 3.0


def test_a_refresh_that_kafka_does_not_answer_is_counted_and_the_thread_goes_on(
        kafka_servers: str, make_topic: Callable[..., str]) -> None:
    from ingestion.stream.prometheus import PipelineState

    exporter = Exporter()
    asked: list[int] = []

    def topics() -> dict[str, list[int]]:
        asked.append(1)
        raise RuntimeError("broker gone")

    refresher = LagRefresher(exporter.pipeline("p", 1.0), {"bootstrap.servers": kafka_servers}, topics, dict,
                             interval=0.05)
    refresher.start()
    while len(asked) < 3:
        refresher._stop.wait(0.05)
    refresher.stop(PipelineState.STOPPED)
    failures = exporter.registry.get_sample_value("ingest_lag_refresh_failures_total", {"pipeline": "p"})
    assert failures == float(len(asked)) and failures >= 3
    assert exporter.registry.get_sample_value("ingest_pipeline_state", {"pipeline": "p",
                                                                        "ingest_pipeline_state": "stopped"}) == 1.0


def test_run_all_feeds_one_registry_labelled_by_pipeline_from_start_to_stop(
        spark: Any, kafka_servers: str, make_topic: Callable[..., str], orders_schema: dict[str, Any],
        tmp_path: Path) -> None:
    from ingestion.config import load_pipeline
    from ingestion.dev.samples import produce_orders
    from ingestion.stream import pipeline
    from tests.conftest import pipeline_yaml

    configs = []
    for name, count in (("orders", 40), ("payments", 25)):
        topic = make_topic(partitions=2)
        produce_orders(kafka_servers, topic, count, schema_id=1, schema=orders_schema)
        configs.append(load_pipeline(pipeline_yaml(tmp_path / name, topic=topic, servers=kafka_servers, name=name)))
    missing = load_pipeline(pipeline_yaml(tmp_path / "gone", topic="no-such-topic-41", servers=kafka_servers,
                                          name="gone"))
    exporter = Exporter()
    outcome = pipeline.run_all(spark, [*configs, missing], available_now=True, exporter=exporter)
    assert outcome["orders"].status == outcome["payments"].status == pipeline.RunStatus.FINISHED
    assert outcome["gone"].status is pipeline.RunStatus.FAILED

    def sample(name: str, **labels: str) -> float | None:
        return exporter.registry.get_sample_value(name, labels)

    for config, count in zip(configs, (40, 25), strict=True):
        assert sample("ingest_rows_total", pipeline=config.name) == count
        assert sample("ingest_batches_total", pipeline=config.name) == 1.0
        assert sample("ingest_table_version", pipeline=config.name) == 1.0
        assert sample("ingest_pipeline_state", pipeline=config.name, ingest_pipeline_state="stopped") == 1.0
        # The last refresh, at stop: every partition at lag 0, the table at Kafka's end.
        for p in (0, 1):
            labels = {"pipeline": config.name, "topic": config.topic, "partition": str(p)}
            assert sample("ingest_lag_records", **labels) == 0.0
            assert sample("ingest_table_offset", **labels) == sample("ingest_kafka_end_offset", **labels)
        assert sum(sample("ingest_table_offset", pipeline=config.name, topic=config.topic, partition=str(p)) or 0
                   for p in (0, 1)) == count
    assert sample("ingest_pipeline_state", pipeline="gone", ingest_pipeline_state="failed") == 1.0
    assert sample("ingest_rows_total", pipeline="gone") == 0.0
    # Both queries' events crossed py4j through one listener, and no route outlives its pipeline.
    from ingestion.runtime.listener import ProgressRouter, routes

    jvm_listeners = list(spark._jsparkSession.streams().listListeners())
    assert sum(1 for x in jvm_listeners if "PythonStreamingQueryListenerWrapper" in x.getClass().getName()) == 1
    assert isinstance(routes(spark), ProgressRouter) and not routes(spark)._by_name


def test_a_runs_lag_series_are_there_before_its_jvm_starts(kafka_servers: str, make_topic: Callable[..., str],
                                                              orders_schema: Any, tmp_path: Path) -> None:
    """The launch starts the pipeline's series and its lag refresher right after its facts (`facts.watched`),
    before anything waits on a JVM; an available-now run whose start batches take it all then ends with no lag."""
    import time
    from dataclasses import replace

    from ingestion.config import load_pipeline
    from ingestion.dev.samples import produce_orders
    from ingestion.stream import launch
    from ingestion.stream.facts import locked, watched
    from tests.conftest import pipeline_yaml

    topic = make_topic(partitions=2)
    produce_orders(kafka_servers, topic, 40, schema_id=1, schema=orders_schema)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers))
    exporter = Exporter()

    def lag() -> float | None:
        found = [exporter.registry.get_sample_value("ingest_lag_records", {"pipeline": config.name, "topic": topic,
                                                                            "partition": str(p)}) for p in (0, 1)]
        return None if None in found else sum(v or 0.0 for v in found)

    ctx = launch.check_can_start(config)
    handed = watched(locked(ctx), ctx, exporter, available_now=True)
    deadline = time.monotonic() + 5
    while lag() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lag() == 40.0  # within 5 s of the launch, nothing written yet
    handed = replace(handed, prepared=launch.prepare(ctx, handed, more=lambda: True))
    done = launch.finish_without_jvm(ctx, handed, exporter)
    assert done is not None and sum(b.rows for b in done.batches) == 40
    assert lag() == 0.0
    assert exporter.registry.get_sample_value("ingest_rows_total", {"pipeline": config.name}) == 40.0
