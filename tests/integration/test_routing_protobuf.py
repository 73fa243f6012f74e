"""routing by recordName over Protobuf values (docs/routing.md): the route of a record is the message its Confluent
message indexes name in its schema's file.

Three messages of one file (`two.proto`: Audit [0], Order [1] and its nested Order.Line [1, 0]) produced to one
topic with confluent-kafka's `ProtobufSerializer` and `TopicRecordNameStrategy` against the registry stand-in (one
schema id for all three subjects, as the registry gives one schema one id: the indexes tell them apart): each
message's table holds exactly its records, every field as produced, on both write paths; a value without Confluent
framing goes to quarantine as RouteError; `verify` passes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ingestion.config import load_pipeline
from ingestion.delta.rs_reads import DeltaRsReader
from ingestion.ops import verify
from ingestion.stream import pipeline
from ingestion.stream.batch import WritePath
from tests import protobuf as shop
from tests.helpers import table_rows
from tests.integration.test_routing import Registry

pytestmark = pytest.mark.integration

LINE = f"{shop.TWO_ORDER}.Line"


def _values(msg: Any) -> dict[str, Any]:
    if msg.DESCRIPTOR.full_name == shop.TWO_ORDER:
        return shop.two_expected_row(msg)
    return {f.name: getattr(msg, f.name) for f in msg.DESCRIPTOR.fields}


def test_protobuf_messages_of_one_topic_land_each_in_its_table_on_both_write_paths(
        spark: Any, kafka_servers: str, make_topic: Any, tmp_path: Path) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient, topic_record_subject_name_strategy
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = make_topic(partitions=3)
    registry = Registry(tmp_path / "registry")
    client = SchemaRegistryClient(registry.client_conf)
    at = SerializationContext(topic, MessageField.VALUE)
    conf = {"use.deprecated.format": False, "subject.name.strategy": topic_record_subject_name_strategy}
    serializers = {name: ProtobufSerializer(shop.two_class(name), client, conf)
                   for name in (shop.AUDIT, shop.TWO_ORDER, LINE)}
    messages = {shop.AUDIT: lambda n: shop.two_class(shop.AUDIT)(actor=f"a{n}", at_ms=n * 1000, action="refund"),
                shop.TWO_ORDER: shop.two_order,
                LINE: lambda n: shop.two_class(LINE)(sku=f"sku-{n}", qty=2**32 - 1 - n)}
    producer = Producer({"bootstrap.servers": kafka_servers})
    produced: dict[tuple[int, int], tuple[str, dict[str, Any]]] = {}
    order = [shop.TWO_ORDER, LINE, shop.AUDIT, shop.TWO_ORDER, shop.TWO_ORDER, LINE] * 4
    framed: dict[str, bytes] = {}
    for n, name in enumerate(order):
        msg = messages[name](n)
        value = serializers[name](msg, at)
        framed[name] = value
        values = _values(msg)

        def done(err: Any, sent: Any, name: str = name, values: dict[str, Any] = values) -> None:
            assert err is None, err
            produced[(sent.partition(), sent.offset())] = (name, values)

        producer.produce(topic, value=value, key=f"k{n}".encode(), partition=n % 3, on_delivery=done)
    producer.produce(topic, value=b"no framing", key=b"junk", partition=0)
    producer.flush(30)
    assert (framed[shop.AUDIT][5:6], framed[shop.TWO_ORDER][5:7], framed[LINE][5:8]) == \
        (b"\x00", b"\x02\x02", b"\x04\x02\x00")  # message indexes [0], [1] and [1, 0]
    assert len({v[1:5] for v in framed.values()}) == 1  # one schema id: the indexes tell the messages apart

    path = tmp_path / "bar.yaml"
    path.write_text(f"""name: bar
topic: {topic}
kafka:
  bootstrap.servers: "{kafka_servers}"
source:
  startingOffsets: earliest
  maxOffsetsPerTrigger: 9
value:
  format: protobuf
  subjectNameStrategy: TopicRecordNameStrategy
  registry:
{registry.yaml()}key:
  format: string
sink:
  root: {tmp_path / 'lake'}
routing:
  by: recordName
  tables: {{Audit: bar_audits}}
""")
    config = load_pipeline(path)
    try:
        ran = pipeline.run(spark, config, available_now=True)
        audit = verify.audit(DeltaRsReader(), config)
    finally:
        registry.server.stop()
    # new routes' tables by Spark; then batches of known routes by the driver; the record without framing by Spark
    assert {b.path for b in ran.batches if b.rows} == {WritePath.SPARK, WritePath.DRIVER}
    tables = {shop.AUDIT: "bar_audits", shop.TWO_ORDER: "bar_order", LINE: "bar_line"}
    for name, table in tables.items():
        rows = table_rows(config.route_path(table))
        want = {k: v for k, (m, v) in produced.items() if m == name}
        assert sorted((r["_kafka_partition"], r["_kafka_offset"]) for r in rows) == sorted(want), name
        for row in rows:
            got = row.asDict(recursive=True)
            expected = want[(row["_kafka_partition"], row["_kafka_offset"])]
            assert {k: got[k] for k in expected} == expected, name
        assert set(rows[0].asDict()) - {f for f in rows[0].asDict() if f.startswith("_")} == set(
            shop.two_class(name).DESCRIPTOR.fields_by_name), name  # the message's own columns
    failed = table_rows(config.quarantine_path)
    assert [(bytes(r["_kafka_value"]), r["_error_class"]) for r in failed] == [(b"no framing", "RouteError")]
    assert "message-index array" in failed[0]["_error_message"]
    assert audit.ok, json.dumps(audit.to_json())[:2000]


def test_protobuf_route_keys_are_the_same_on_both_paths(spark: Any, tmp_path: Path) -> None:
    """The Spark expression and the driver's Python read the same key (schema id and message-index bytes) from
    every kind of Protobuf header; a key names the message its indexes name."""
    import pyarrow as pa

    from ingestion.columns import KAFKA_SOURCE_SCHEMA
    from ingestion.decode import routes
    from ingestion.kafka.fetch import SOURCE_ARROW_SCHEMA

    head = b"\x00\x00\x00\x00\x07"
    values = [head + b"\x00body", head + b"\x02\x02body", head + b"\x04\x02\x00\x0a", head + b"\x02\x90\x03x",
              head + b"\x03\x02", head + b"\x04\x02", head, b"\x01\x00\x00\x00\x07\x00", None, head + b"\x82\x01",
              head + b"\x04" + b"\x80" * 80 + b"\x00\x00"]
    rows = [{"key": None, "value": v, "topic": "t", "partition": 0, "offset": i, "timestamp": None,
             "timestampType": 0, "headers": []} for i, v in enumerate(values)]
    source = pa.RecordBatch.from_pylist(rows, schema=SOURCE_ARROW_SCHEMA)
    frame = spark.createDataFrame(rows, schema=KAFKA_SOURCE_SCHEMA)
    file = tmp_path / "k.yaml"
    file.write_text("name: k\ntopic: t\nvalue: {format: protobuf, subjectNameStrategy: RecordNameStrategy}\n"
                    "routing: {by: recordName}\n")
    config = load_pipeline(file)
    in_spark = [r[0] for r in frame.select(routes.key_column(config)).collect()]
    assert in_spark == routes.keys_of(config, source)
    assert in_spark == ["7:00", "7:0202", "7:040200", "7:029003"] + [None] * 7

    class Source:
        def by_id(self, schema_id: int) -> str | None:
            return shop.two_document() if schema_id == 7 else None

    names = routes.RouteNames(config, Source())  # type: ignore[arg-type]
    assert [names.route(k) for k in in_spark[:4]] == [
        routes.Route("Audit", shop.AUDIT), routes.Route("Order", shop.TWO_ORDER), routes.Route("Line", LINE), None]
    assert names.reason("7:029003") == "message indexes [200] name no message of schema id 7"
    assert names.tables_of_row("7") == ["k_audit", "k_line", "k_order"]


def test_init_scaffolds_a_routed_protobuf_pipeline_from_message_subjects_in_schemas_folder(
        kafka_servers: str, make_topic: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ingestion.ops import init

    topic = make_topic(partitions=1)
    conf, schemas = tmp_path / "conf", tmp_path / "schemas"
    conf.mkdir()
    (conf / "defaults.yaml").write_text(json.dumps({"kafka": {"bootstrap.servers": kafka_servers}}))
    for message in (shop.AUDIT, shop.TWO_ORDER):  # one file, a subject per message (TopicRecordNameStrategy)
        folder = schemas / f"{topic}-{message}"
        folder.mkdir(parents=True)
        (folder / "1.proto").write_text((shop.PROTO.parent / "two.proto").read_text())
    monkeypatch.setenv("INGEST_CONF_DIR", str(conf))
    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(schemas))
    config = init.draft(topic, "bar").config
    assert config.routing is not None and config.routing.by == "recordName"
    assert (config.value.format, config.value.subject_name_strategy) == ("protobuf", "TopicRecordNameStrategy")
    route = config.routed("Order", record=shop.TWO_ORDER)
    assert (route.value.message_name, route.value_subjects([topic])) == (shop.TWO_ORDER, [f"{topic}-{shop.TWO_ORDER}"])
