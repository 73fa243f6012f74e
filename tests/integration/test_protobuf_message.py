"""A Protobuf topic whose schema's file leaves the table's message open (two top-level messages, neither used by
the other), without value.messageName (real Kafka, Spark, Delta): the records confluent-kafka's own
ProtobufSerializer writes (message index [1]) decide the table's message, every field lands as produced, a record
of the other message is quarantined naming both, and a restart keeps the message though the topic's earliest
records are by then of the other one; both decoders write the same rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ingestion.config import load_pipeline
from ingestion.delta import rs_tables
from ingestion.schema.registry import registry_client
from ingestion.stream import context, launch, pipeline, setup
from tests import protobuf as shop
from tests.conftest import pipeline_yaml
from tests.helpers import decode_both_ways, table_rows

pytestmark = pytest.mark.integration

WRONG_MESSAGE = "message indexes [0] name bar.shop.Audit, the table holds bar.shop.Order"


def test_the_records_message_indexes_choose_the_table_message_and_a_restart_keeps_it(
        spark, kafka_servers, make_topic, tmp_path: Path) -> None:
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = make_topic(partitions=2)
    url = f"mock://{topic}"
    client = registry_client({"url": url})
    at = SerializationContext(topic, MessageField.VALUE)
    orders = ProtobufSerializer(shop.two_class(), client, {"use.deprecated.format": False})
    audits = ProtobufSerializer(shop.two_class(shop.AUDIT), client, {"use.deprecated.format": False})
    producer = Producer({"bootstrap.servers": kafka_servers})
    produced: dict[str, Any] = {}
    values: list[bytes] = []

    def produce_orders(seqs: range) -> None:
        for seq in seqs:
            msg = shop.two_order(seq)
            values.append(orders(msg, at))
            producer.produce(topic, key=msg.id.encode(), value=values[-1], partition=seq % 2)
            produced[msg.id] = shop.two_expected_row(msg)

    produce_orders(range(10))
    audit = audits(shop.two_class(shop.AUDIT)(actor="ops", at_ms=1, action="refund"), at)
    producer.produce(topic, key=b"audit-1", value=audit, partition=0)
    producer.flush(30)
    assert values[0][5:7] == b"\x02\x02" and audit[5:6] == b"\x00"  # message indexes [1] and [0]
    assert values[0][1:5] == audit[1:5]  # one schema (the file) for both

    extra = f"value:\n  format: protobuf\n  registry:\n    url: \"{url}\"\n"
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers, extra=extra))
    launch.run(spark, config, available_now=True)  # the launch sequence: tables made before the query
    table = rs_tables.state(config.table_path)
    assert table.properties["ingest.protobuf.message"] == shop.TWO_ORDER
    _assert_rows(spark, config, produced, {"audit-1"})

    # Retention moves on: the topic's earliest records are Audits now. The table keeps its message.
    for partition in (0, 1):
        producer.produce(topic, key=f"audit-{2 + partition}".encode(), value=audit, partition=partition)
    producer.flush(30)
    admin = AdminClient({"bootstrap.servers": kafka_servers})
    ends = {0: 6, 1: 5}  # past the orders and the first audit: the next records are the audits just produced
    for future in admin.delete_records([TopicPartition(topic, p, o) for p, o in ends.items()]).values():
        future.result(30)
    from ingestion import kafka

    earliest = kafka.earliest_values({"bootstrap.servers": kafka_servers}, {topic: [0, 1]}, per_partition=1)
    assert earliest == [audit, audit]
    produce_orders(range(10, 16))
    producer.flush(30)
    # the second run writes with Spark jobs: the JVM decoder's rows
    restarted = load_pipeline(pipeline_yaml(
        tmp_path, topic=topic, servers=kafka_servers, extra=extra,
        sink="  directWriteMaxOffsets: 0\n  startBatchMaxOffsets: 0\n"))
    spec = setup.resolver(spark, context.resolve(restarted)).spec
    assert (spec.message_name, spec.message_pinned) == (shop.TWO_ORDER, False)
    pipeline.run(spark, restarted, available_now=True)
    _assert_rows(spark, restarted, produced, {"audit-1", "audit-2", "audit-3"})

    # The JVM decoder takes the records of index [1] itself and gives the Python decoder's rows.
    jvm_rows, python_rows, unverified = decode_both_ways(spark, spec, [*values, audit])
    assert unverified == {len(values)}  # only the Audit is left to Python
    assert [r.asDict(recursive=True) for r in jvm_rows] == [r.asDict(recursive=True) for r in python_rows]


def _assert_rows(spark: Any, config: Any, produced: dict[str, Any], quarantined: set[str]) -> None:
    rows = {r["id"]: r.asDict(recursive=True) for r in table_rows(config.table_path)}
    assert sorted(rows) == sorted(produced)
    for key, want in produced.items():
        assert {name: rows[key][name] for name in want} == want, key
    failed = {bytes(r["_kafka_key"]).decode(): r for r in
              table_rows(config.quarantine_path)}
    assert sorted(failed) == sorted(quarantined)
    assert {(r["_error_class"], r["_error_message"]) for r in failed.values()} == {("MessageTypeError", WRONG_MESSAGE)}


def test_init_pins_no_message_when_the_file_leaves_it_to_the_records(kafka_servers, make_topic, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from ingestion.ops import init

    topic = make_topic(partitions=1)
    conf, schemas = tmp_path / "conf", tmp_path / "schemas"
    conf.mkdir()
    (conf / "defaults.yaml").write_text(json.dumps({"kafka": {"bootstrap.servers": kafka_servers}}))
    (schemas / f"{topic}-value").mkdir(parents=True)
    (schemas / f"{topic}-value" / "1.proto").write_text((shop.PROTO.parent / "two.proto").read_text())
    monkeypatch.setenv("INGEST_CONF_DIR", str(conf))
    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(schemas))
    draft = init.draft(topic)
    assert "value: {format: protobuf}  # a Protobuf subject; its file has bar.shop.Audit, bar.shop.Order: the table " \
           "holds the message the topic's first records name" in draft.text, draft.text
    assert (draft.config.value.format, draft.config.value.message_name) == ("protobuf", "")
