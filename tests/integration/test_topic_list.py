"""A list of topics into one table: each topic's writer schemas from its own subject (a registry), a missing
topic created by onboard, every record exactly once, verify and status per topic-partition, and the consumer
group's offsets committed for every topic."""

from __future__ import annotations

import copy
import json
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from ingestion import kafka, start_pipeline
from ingestion.config import load_pipeline
from ingestion.delta.rs_reads import DeltaRsReader
from ingestion.dev.samples import produce_orders
from ingestion.ops import status, verify
from ingestion.ops.onboard import onboard
from ingestion.schema.registry import registry_client
from ingestion.stream import context, launch, pipeline
from ingestion.stream.facts import caught_up, read_facts
from tests.helpers import table_rows

pytestmark = pytest.mark.integration


def test_a_list_of_topics_lands_in_one_table_each_by_its_own_subject(spark, kafka_servers, make_topic,
                                                                     orders_schema, tmp_path: Path) -> None:
    from confluent_kafka.schema_registry import Schema

    first = make_topic(partitions=2)
    second = f"{first}-later"  # not there yet: onboard --create-topic makes it (topicSettings: 1 partition)
    url = f"mock://{first}"
    registry = registry_client({"url": url})
    v2 = copy.deepcopy(orders_schema)
    v2["fields"].append({"name": "channel", "type": "string", "default": "web"})
    id1 = registry.register_schema(f"{first}-value", Schema(json.dumps(orders_schema), "AVRO"))
    id2 = registry.register_schema(f"{second}-value", Schema(json.dumps(v2), "AVRO"))
    assert id1 != id2
    path = tmp_path / "both.yaml"
    path.write_text(f"""name: both-{uuid.uuid4().hex[:6]}
topics: [{first}, {second}]
kafka:
  bootstrap.servers: "{kafka_servers}"
value:
  registry:
    url: "{url}"
key:
  format: string
topicSettings:
  partitions: 1
sink:
  root: {tmp_path}
""")
    config = load_pipeline(path)

    report = onboard(spark, config, create_topic=True)
    text = "\n".join(report.lines)
    assert f"topic {first!r}: exists with 2 partitions" in text and f"topic {second!r}: created with 1" in text
    assert f"subjects '{second}-value', '{first}-value'" in text and f"the table follows id {id2}" in text, text

    produced = {first: produce_orders(kafka_servers, first, 30, schema_id=id1, schema=orders_schema),
                second: produce_orders(kafka_servers, second, 20, schema_id=id2, schema=v2, seed=3)}
    ran = pipeline.run(spark, config, available_now=True)
    assert sum(b.rows for b in ran.batches if b.committed) == 50

    rows = [(r["_kafka_topic"], r["_kafka_partition"], r["_kafka_offset"], r["channel"])
            for r in table_rows(config.table_path)]
    assert sorted((r[0], r[1], r[2]) for r in rows) == sorted(
        (t, p.partition, p.offset) for t, ps in produced.items() for p in ps)
    assert {r[3] for r in rows if r[0] == first} == {"web"}  # v1 records read with v2's default

    audit = verify.audit(DeltaRsReader(), config)
    assert audit.ok and audit.topics == sorted(produced), verify.render(audit)
    assert {(p.topic, p.partition) for p in audit.partitions} == {(first, 0), (first, 1), (second, 0)}
    now = status.pipeline_status(spark, config)
    assert now.lag_records == 0 and [p.topic for p in now.partitions] == [first, first, second]
    ctx = context.resolve(config)
    assert caught_up(ctx, read_facts(ctx)) is not None

    # The same topics by a pattern: onboard lists what matches now (a dry run creates nothing).
    pattern = tmp_path / "pattern.yaml"
    pattern.write_text(path.read_text().replace(f"topics: [{first}, {second}]", f'topicPattern: "^{first}"')
                       .replace(f"root: {tmp_path}", f"root: {tmp_path / 'pattern'}"))
    report = onboard(spark, load_pipeline(pattern), dry_run=True)
    assert f"topics matching '^{first}': {first} (2 partitions), {second} (1 partitions)" in report.lines[1]
    assert "dry run:" in report.lines[-1] and not (tmp_path / "pattern").exists()

    settings = kafka.resolve_settings(config).client
    ends = {t: {p: high for p, (_, high) in kafka.watermarks(settings, t).items()} for t in produced}
    deadline = time.monotonic() + 60
    committed: dict[str, Any] = {}
    while time.monotonic() < deadline:
        committed = {t: kafka.committed_offsets(settings, config.consumer_group, t) for t in produced}
        if committed == ends:
            break
        time.sleep(1)
    assert committed == ends


def test_a_pattern_pipeline_that_lost_its_checkpoint_resumes_every_topic_from_the_table(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    schemas = tmp_path / "schemas"
    first = make_topic(partitions=2)
    topics = [f"{first}.a", f"{first}.b"]
    for topic in topics:
        kafka.create_topic({"bootstrap.servers": kafka_servers}, topic, 2)
        (schemas / f"{topic}-value").mkdir(parents=True)
        (schemas / f"{topic}-value" / "1.avsc").write_text(json.dumps(orders_schema))
    path = tmp_path / "p.yaml"
    path.write_text(f'name: lost-{uuid.uuid4().hex[:6]}\ntopicPattern: "^{first}\\\\."\nkafka:\n'
                    f'  bootstrap.servers: "{kafka_servers}"\nkey:\n  format: string\nsink:\n  root: {tmp_path}\n')
    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(schemas))
    config = load_pipeline(path)
    produced = {t: produce_orders(kafka_servers, t, 20, schema_id=1, schema=orders_schema) for t in topics}
    pipeline.run(spark, config, available_now=True)
    shutil.rmtree(config.checkpoint_path)  # lost: the table's ledger says where each topic-partition goes on
    late = f"{first}.c"  # a topic the table has never seen: read from its start
    kafka.create_topic({"bootstrap.servers": kafka_servers}, late, 1)
    (schemas / f"{late}-value").mkdir()
    (schemas / f"{late}-value" / "1.avsc").write_text(json.dumps(orders_schema))
    for topic in topics:
        produced[topic] += produce_orders(kafka_servers, topic, 5, schema_id=1, schema=orders_schema,
                                          first_seq=100)
    produced[late] = produce_orders(kafka_servers, late, 7, schema_id=1, schema=orders_schema)
    again = pipeline.run(spark, config, available_now=True)
    assert sum(b.rows for b in again.batches if b.committed) == 5 + 5 + 7  # nothing twice
    rows = [(r["_kafka_topic"], r["_kafka_partition"], r["_kafka_offset"]) for r in table_rows(config.table_path)]
    assert sorted(rows) == sorted((t, p.partition, p.offset) for t, ps in produced.items()
                                                    for p in ps)
    assert verify.audit(DeltaRsReader(), config).ok


def test_one_run_lists_its_topics_once_and_follows_a_pattern_topic_created_mid_run(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from confluent_kafka.admin import AdminClient

    schemas = tmp_path / "schemas"
    first = make_topic(partitions=1)
    early, late = f"{first}.a", f"{first}.b"
    kafka.create_topic({"bootstrap.servers": kafka_servers}, early, 2)
    for topic in (early, late):
        (schemas / f"{topic}-value").mkdir(parents=True)
        (schemas / f"{topic}-value" / "1.avsc").write_text(json.dumps(orders_schema))
    path = tmp_path / "p.yaml"
    path.write_text(f'name: mid-{uuid.uuid4().hex[:6]}\ntopicPattern: "^{first}\\\\."\nkafka:\n'
                    f'  bootstrap.servers: "{kafka_servers}"\nkey:\n  format: string\n'
                    f'sink:\n  root: {tmp_path}\n  trigger: 500 milliseconds\n')
    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(schemas))
    config = load_pipeline(path)
    produced = {early: produce_orders(kafka_servers, early, 10, schema_id=1, schema=orders_schema)}
    listings: list[str | None] = []  # every metadata listing a client of ours asks the brokers for
    listed = AdminClient.list_topics

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        listings.append(args[0] if args else kwargs.get("topic"))
        return listed(self, *args, **kwargs)

    monkeypatch.setattr(AdminClient, "list_topics", counted)
    ctx = launch.check_can_start(config)
    running = start_pipeline(spark, ctx)
    try:
        _wait_for(lambda: any(b.committed for b in running.batches), running)
        assert listings == [None]  # one listing of the cluster's topics from the command's start to its first batch
        kafka.create_topic({"bootstrap.servers": kafka_servers}, late, 1)
        produced[late] = produce_orders(kafka_servers, late, 5, schema_id=1, schema=orders_schema)
        _wait_for(lambda: len(table_rows(config.table_path)) == 15, running)
        assert running.context.topics == [early, late]  # grown where Spark's listing found the new topic
        assert running.context.partitions == {early: [0, 1], late: [0]}
        assert running.writer is not None and running.writer.resolver.subjects == [f"{early}-value", f"{late}-value"]
        recorded = {t: {str(p.partition): p.offset + 1 for p in ps} for t, ps in produced.items()}
        assert sorted(json.loads(pipeline._resume_from_table(running.context, recorded) or "{}")) == [early, late]
    finally:
        pipeline.stop(spark, running)
    assert status.pipeline_status(spark, config).topics == [early, late]


def _wait_for(condition: Any, running: Any, seconds: float = 90.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert running.query.isActive, running.query.exception()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)
