"""Taking over from a consumer group (`source.startFromGroup`): a new pipeline starts each partition at the group's
committed offset, a partition it never committed at startingOffsets; an active group is refused; once the table
records offsets, they win."""

from __future__ import annotations

import logging
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from ingestion.config import load_pipeline
from ingestion.delta.rs_reads import DeltaRsReader
from ingestion.dev.samples import produce_orders
from ingestion.errors import IngestionError
from ingestion.ops import status, verify
from ingestion.ops.onboard import onboard
from ingestion.stream import launch, pipeline
from tests.helpers import table_rows

pytestmark = pytest.mark.integration


def _commit(servers: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """What a consumer of the group leaves behind when it stops: its committed offsets, no member."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": servers, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def _member(servers: str, group: str, topic: str) -> Any:
    """A consumer still reading in the group: subscribed and assigned its partitions."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": servers, "group.id": group, "client.id": "old-sink",
                         "enable.auto.commit": False, "session.timeout.ms": 6000})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 60
    while not consumer.assignment():
        assert time.monotonic() < deadline, "the member got no assignment"
        consumer.poll(0.5)
    return consumer


def test_a_pipeline_takes_over_exactly_where_a_consumer_group_left_off(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    topic = make_topic(partitions=3)
    produced = produce_orders(kafka_servers, topic, 60, schema_id=1, schema=orders_schema)
    counts = {p: sum(1 for r in produced if r.partition == p) for p in range(3)}
    assert all(counts.values())
    group = f"old-sink-{uuid.uuid4().hex[:6]}"
    committed = {0: counts[0] // 2, 1: counts[1] - 1}  # partition 2: never committed
    _commit(kafka_servers, group, topic, committed)
    path = tmp_path / "p.yaml"
    path.write_text(f"name: take-{uuid.uuid4().hex[:6]}\ntopic: {topic}\nkafka:\n  bootstrap.servers: "
                    f'"{kafka_servers}"\nvalue:\n  subject: orders-value\nkey:\n  format: string\n'
                    f"source:\n  startFromGroup: {group}\nsink:\n  root: {tmp_path}\n")
    config = load_pipeline(path)

    member = _member(kafka_servers, group, topic)
    try:
        with pytest.raises(IngestionError) as refused:
            launch.run(None, config, available_now=True)  # before the JVM: an active group is refused in seconds
    finally:
        member.close()
    assert str(refused.value).startswith(f"{path}: source.startFromGroup: consumer group {group!r} is still "
                                         "active (members: old-sink@")
    assert "set source.startFromActiveGroup: true" in str(refused.value)

    shown = status.pipeline_status(spark, config).group_start  # where a first run would start, per partition
    assert shown is not None and [(p.partition, p.committed, p.start) for p in shown.partitions] == [
        (0, committed[0], committed[0]), (1, committed[1], committed[1]), (2, None, -2)]

    shown_by_onboard = "\n".join(onboard(spark, config, dry_run=True).lines)
    assert f"start from consumer group {group!r}\n  {topic}/0: starts at {committed[0]}, the group's committed " \
           f"offset; the group is {counts[0] - committed[0]} records behind the end ({counts[0]})" in shown_by_onboard
    assert f"{topic}/2: no offset committed, starts at earliest (0) (source.startingOffsets)" in shown_by_onboard

    with caplog.at_level(logging.INFO, logger="ingestion.stream.pipeline"):
        pipeline.run(spark, launch.check_can_start(config), available_now=True)
    assert f"taking over from consumer group {group!r}" in caplog.text
    expected = sorted((r.partition, r.offset) for r in produced if r.offset >= committed.get(r.partition, 0))
    assert _held(spark, config) == expected

    audit = verify.audit(DeltaRsReader(), config)
    assert audit.ok, verify.render(audit)
    reason = f"before the start taken over from consumer group {group!r} (not ingested by design)"
    assert {p.partition: p.explained.get(reason) for p in audit.partitions} == {
        0: [[0, committed[0] - 1]], 1: [[0, committed[1] - 1]], 2: None}

    # The table now records offsets: they win over the group's, even with the checkpoint lost.
    _commit(kafka_servers, group, topic, {0: 0, 1: 0, 2: 0})
    more = produce_orders(kafka_servers, topic, 9, schema_id=1, schema=orders_schema, first_seq=100)
    shutil.rmtree(config.checkpoint_path)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ingestion.stream.pipeline"):
        pipeline.run(spark, config, available_now=True)
    assert f"source.startFromGroup {group!r} ignored: the table records offsets" in caplog.text
    assert _held(spark, config) == sorted(expected + [(r.partition, r.offset) for r in more])


def _held(spark: Any, config: Any) -> list[tuple[int, int]]:
    return sorted((r["_kafka_partition"], r["_kafka_offset"]) for r in table_rows(config.table_path))
