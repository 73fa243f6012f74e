"""Onboarding: registry schemas evolving mid-stream, incompatible versions, start positions, several pipelines,
every Avro type, and `onboard`'s dry run and idempotence."""

from __future__ import annotations

import copy
import datetime as dt
import json
import random
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from ingestion import start_pipeline
from ingestion.config import load_pipeline
from ingestion.decode.wire import encode
from ingestion.delta import ledger
from ingestion.delta.rs_reads import DeltaRsReader
from ingestion.dev.samples import avro_body, order
from ingestion.errors import IngestionError
from ingestion.kafka import clients as kafka_admin
from ingestion.ops.onboard import onboard
from ingestion.schema.registry import registry_client
from ingestion.stream import pipeline
from tests.conftest import pipeline_yaml
from tests.helpers import table_rows, wait_rows

pytestmark = pytest.mark.integration


def _versions(orders_schema: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    v2 = copy.deepcopy(orders_schema)
    v2["fields"].append({"name": "channel", "type": "string", "default": "web"})
    v3 = copy.deepcopy(v2)
    v3["fields"].append({"name": "coupon", "type": ["null", "string"], "default": None})
    return orders_schema, v2, v3



def test_v1_v2_v3_interleaved_mid_stream_evolve_the_table_and_an_incompatible_version_is_quarantined(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import Schema

    topic = make_topic(partitions=2)
    url = f"mock://{topic}"
    registry = registry_client({"url": url})
    subject = f"{topic}-value"
    v1, v2, v3 = _versions(orders_schema)
    ids = [registry.register_schema(subject, Schema(json.dumps(v1), "AVRO"))]
    config = load_pipeline(pipeline_yaml(
        tmp_path, topic=topic, servers=kafka_servers, sink="  trigger: 1 second\n",
        extra=f"value:\n  format: confluent\n  subject: {subject}\n  registry:\n    url: \"{url}\"\n"))
    producer = Producer({"bootstrap.servers": kafka_servers})
    produced: list[tuple[int, dict[str, Any]]] = []

    def send(version: int, seq: int) -> None:
        record = order(seq, random.Random(seq))
        if version >= 2:
            record["channel"] = f"app-{seq}"
        if version >= 3:
            record["coupon"] = f"C{seq}"
        schema = (v1, v2, v3)[version - 1]
        producer.produce(topic, value=encode(ids[version - 1], avro_body(schema, record)), partition=seq % 2)
        produced.append((version, record))

    for seq in range(10):
        send(1, seq)
    producer.flush(30)
    running = start_pipeline(spark, config)
    try:
        wait_rows(config.table_path, 10)
        ids.append(registry.register_schema(subject, Schema(json.dumps(v2), "AVRO")))  # mid-stream
        for seq in range(10, 30):
            send(1 if seq % 2 else 2, seq)
        producer.flush(30)
        wait_rows(config.table_path, 30)
        ids.append(registry.register_schema(subject, Schema(json.dumps(v3), "AVRO")))
        for seq in range(30, 60):
            send(seq % 3 + 1, seq)
        # an incompatible version: customer_id changes type
        bad = copy.deepcopy(v3)
        bad["fields"][1]["type"] = "string"
        bad_id = registry.register_schema(subject, Schema(json.dumps(bad), "AVRO"))
        bad_record = {**order(99, random.Random(99)), "customer_id": "not-a-number", "channel": "x", "coupon": None}
        producer.produce(topic, value=encode(bad_id, avro_body(bad, bad_record)), partition=0)
        producer.flush(30)
        wait_rows(config.table_path, 60)
        wait_rows(config.quarantine_path, 1)
    finally:
        pipeline.stop(spark, running)

    rows = {r["order_id"]: r for r in table_rows(config.table_path)}
    assert len(rows) == 60
    columns = spark.read.format("delta").load(config.table_path).columns
    assert {"channel", "coupon"} <= set(columns)
    for version, record in produced:
        row = rows[record["order_id"]]
        assert row["_schema_id"] == ids[version - 1]
        assert row["customer_id"] == record["customer_id"]
        if version >= 2:
            assert row["channel"] == record["channel"]
        if version == 3:
            assert row["coupon"] == record["coupon"]
    # v1 records decoded after the table evolved get v2's default, as Avro's resolution rules say
    late_v1 = [rows[r["order_id"]] for v, r in produced if v == 1 and int(r["order_id"][2:]) >= 30]
    assert late_v1 and all(r["channel"] == "web" for r in late_v1)
    (quarantined,) = table_rows(config.quarantine_path)
    assert quarantined["_schema_id"] == bad_id and quarantined["_error_class"] == "SchemaResolutionError"


def test_every_start_position(spark, kafka_servers, make_topic, orders_schema, tmp_path: Path) -> None:
    from confluent_kafka import Producer

    topic = make_topic(partitions=2)
    # An hour ago, on a whole second: within the broker's 7-day retention. A fixed date months back was deleted
    # by the broker's retention check whenever that ran between producing and reading (offset out of range).
    base = (int(time.time()) - 3600) * 1000
    producer = Producer({"bootstrap.servers": kafka_servers})
    for seq in range(20):  # partition = seq % 2, offset = seq // 2, timestamp = base + seq seconds
        producer.produce(topic, value=encode(1, avro_body(orders_schema, order(seq, random.Random(seq)))),
                         partition=seq % 2, timestamp=base + seq * 1000)
    producer.flush(30)

    def ingest(name: str, source: str) -> set[tuple[int, int]]:
        config = load_pipeline(pipeline_yaml(tmp_path / name, topic=topic, servers=kafka_servers,
                                             extra=f"source:\n{source}"))
        pipeline.run(spark, config, available_now=True)
        return {(r["_kafka_partition"], r["_kafka_offset"])
                for r in table_rows(config.table_path)}

    everything = {(p, o) for p in (0, 1) for o in range(10)}
    assert ingest("earliest", "  startingOffsets: earliest\n") == everything
    assert ingest("latest", "  startingOffsets: latest\n") == set()
    assert ingest("json", f"  startingOffsets: '{{\"{topic}\": {{\"0\": 7, \"1\": -2}}}}'\n") == {
        (0, o) for o in range(7, 10)} | {(1, o) for o in range(10)}
    # seq 12 is partition 0 offset 6: from its timestamp on, seqs 12..19
    assert ingest("timestamp", f"  startingTimestamp: {base + 12_000}\n") == {(s % 2, s // 2) for s in range(12, 20)}
    by_partition = json.dumps({topic: {"0": base + 16_000, "1": base}})
    assert ingest("by-timestamp", f"  startingOffsetsByTimestamp: '{by_partition}'\n") == {
        (0, o) for o in range(8, 10)} | {(1, o) for o in range(10)}


def test_run_all_reports_a_failing_pipeline_by_name_and_the_other_completes(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path) -> None:
    from confluent_kafka import Producer

    good_topic, bad_topic = make_topic(partitions=2), make_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_servers})
    for seq in range(30):
        producer.produce(good_topic, value=encode(1, avro_body(orders_schema, order(seq, random.Random(seq)))))
    producer.produce(bad_topic, value=b"\x01broken")
    producer.flush(30)
    good = load_pipeline(pipeline_yaml(tmp_path / "a", topic=good_topic, servers=kafka_servers, name="good",
                                       extra="source:\n  maxOffsetsPerTrigger: 10\n",
                                       sink="  directWriteMaxOffsets: 0\n"))  # Spark jobs, in its pool
    bad = load_pipeline(pipeline_yaml(tmp_path / "b", topic=bad_topic, servers=kafka_servers, name="bad",
                                      sink="  onError: fail\n  directWriteMaxOffsets: 0\n"))  # Spark jobs too

    outcome = pipeline.run_all(spark, [good, bad], available_now=True)

    assert outcome["good"] == pipeline.RunOutcome(pipeline.RunStatus.FINISHED)
    assert outcome["bad"].status is pipeline.RunStatus.FAILED
    assert outcome["bad"].reason.startswith(f"cannot decode record {bad_topic}/0@0: WireFormatError")
    assert len(table_rows(good.table_path)) == 30
    assert len({r.app_id for r in DeltaRsReader().history(good.table_path)}) == 1
    assert len(table_rows(bad.table_path)) == 0
    # each pipeline's batches ran in a scheduler pool of its own (Spark makes a pool when a job first names it)
    for config in (good, bad):
        assert spark._jsc.sc().getPoolForName(pipeline.pool_name(config)).isDefined(), config.name


ALL_TYPES = {
    "type": "record", "name": "Everything", "namespace": "test", "fields": [
        {"name": "b", "type": "boolean"}, {"name": "i", "type": "int"}, {"name": "l", "type": "long"},
        {"name": "f", "type": "float"}, {"name": "d", "type": "double"}, {"name": "raw", "type": "bytes"},
        {"name": "s", "type": "string"},
        {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
        {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
        {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 3}},
        {"name": "decfx", "type": {"type": "fixed", "name": "Money", "size": 8, "logicalType": "decimal",
                                   "precision": 12, "scale": 2}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "tmil", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "tmic", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "tsmil", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tsmic", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "ltsmil", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "ltsmic", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "opt", "type": ["null", "string"]},
        {"name": "multi", "type": ["null", "int", "string"]},
        {"name": "nums", "type": {"type": "array", "items": "long"}},
        {"name": "tags", "type": {"type": "map", "values": "string"}},
        {"name": "inner", "type": {"type": "record", "name": "Inner", "fields": [
            {"name": "x", "type": "int"}, {"name": "c", "type": "Color"}]}},
        {"name": "again", "type": "Four"},
    ]}


def test_every_avro_type_lands_with_its_spark_type_and_value(spark, kafka_servers, make_topic, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from confluent_kafka import Producer

    schemas = tmp_path / "schemas"
    (schemas / "everything-value").mkdir(parents=True)
    (schemas / "everything-value" / "1.avsc").write_text(json.dumps(ALL_TYPES))
    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(schemas))
    ident = uuid.UUID("12345678-1234-5678-1234-567812345678")
    record = {
        "b": True, "i": -7, "l": 2**40, "f": 1.5, "d": 2.25, "raw": b"\x00\xff", "s": "héllo", "e": "GREEN",
        "fx": b"abcd", "dec": Decimal("12.345"), "decfx": Decimal("-99.50"), "day": dt.date(2026, 2, 28),
        "tmil": dt.time(1, 2, 3, 4000), "tmic": dt.time(1, 2, 3, 4005),
        "tsmil": dt.datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=dt.UTC),
        "tsmic": dt.datetime(2026, 1, 2, 3, 4, 5, 6007, tzinfo=dt.UTC),
        "ltsmil": dt.datetime(2026, 1, 2, 3, 4, 5, 6000), "ltsmic": dt.datetime(2026, 1, 2, 3, 4, 5, 6007),
        "id": ident, "opt": None, "multi": "text", "nums": [1, 2, 3], "tags": {"k": "v"},
        "inner": {"x": 1, "c": "RED"}, "again": b"wxyz",
    }
    topic = make_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_servers})
    producer.produce(topic, value=encode(1, avro_body(ALL_TYPES, record)))
    producer.produce(topic, value=encode(1, avro_body(ALL_TYPES, {**record, "multi": 5, "opt": "x"})))
    producer.flush(30)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers,
                                         extra="value:\n  format: confluent\n  subject: everything-value\n"))
    pipeline.run(spark, config, available_now=True)

    table = spark.read.format("delta").load(config.table_path)
    types = {f.name: f.dataType.simpleString() for f in table.schema.fields}
    assert {k: types[k] for k in record} == {
        "b": "boolean", "i": "int", "l": "bigint", "f": "float", "d": "double", "raw": "binary", "s": "string",
        "e": "string", "fx": "binary", "dec": "decimal(10,3)", "decfx": "decimal(12,2)", "day": "date",
        "tmil": "int", "tmic": "bigint", "tsmil": "timestamp", "tsmic": "timestamp", "ltsmil": "timestamp_ntz",
        "ltsmic": "timestamp_ntz", "id": "string", "opt": "string", "multi": "struct<member0:int,member1:string>",
        "nums": "array<bigint>", "tags": "map<string,string>", "inner": "struct<x:int,c:string>", "again": "binary",
    }
    first, second = sorted(table.collect(), key=lambda r: r["_kafka_offset"])
    assert (first["b"], first["i"], first["l"], first["f"], first["d"], bytes(first["raw"]), first["s"]) == (
        True, -7, 2**40, 1.5, 2.25, b"\x00\xff", "héllo")
    assert (first["e"], bytes(first["fx"]), first["dec"], first["decfx"], first["day"]) == (
        "GREEN", b"abcd", Decimal("12.345"), Decimal("-99.50"), dt.date(2026, 2, 28))
    assert (first["tmil"], first["tmic"]) == (3723004, 3723004005)
    assert first["tsmil"].replace(tzinfo=dt.UTC) == record["tsmil"]
    assert first["tsmic"].replace(tzinfo=dt.UTC) == record["tsmic"]
    assert (first["ltsmil"], first["ltsmic"]) == (record["ltsmil"], record["ltsmic"])
    assert (first["id"], first["opt"], first["nums"], first["tags"]) == (str(ident), None, [1, 2, 3], {"k": "v"})
    assert first["multi"].asDict() == {"member0": None, "member1": "text"}
    assert second["multi"].asDict() == {"member0": 5, "member1": None} and second["opt"] == "x"
    assert (first["inner"]["x"], first["inner"]["c"], bytes(first["again"])) == (1, "RED", b"wxyz")


def test_onboard_dry_run_changes_nothing_then_creates_then_is_idempotent(
        spark, kafka_servers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from delta.tables import DeltaTable

    from tests.conftest import REPO

    topic = f"onboard-{uuid.uuid4().hex[:8]}"
    subject = f"{topic}-value"
    shutil.copytree(REPO / "schemas" / "orders-value", tmp_path / "schemas" / subject)
    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(tmp_path / "schemas"))
    config = load_pipeline(pipeline_yaml(
        tmp_path, topic=topic, servers=kafka_servers,
        sink="  partitionBy: [_kafka_partition]\n  tableProperties:\n    delta.appendOnly: 'true'\n"
             "    delta.dataSkippingStatsColumns: _kafka_offset,_kafka_timestamp\n",  # docs/configuration.md tip
        extra=f"value:\n  format: confluent\n  subject: {subject}\n  registry:\n    url: \"mock://{topic}\"\n"
              "topicSettings:\n  partitions: 4\n"))

    def no_jvm() -> SparkSession:  # a pipeline without catalog names is onboarded without a JVM (delta-rs)
        pytest.fail("onboard started a Spark session")

    with pytest.raises(IngestionError, match=f"topic '{topic}' does not exist .*--create-topic"):
        onboard(no_jvm, config)

    # The dry run has the broker check the creation: a replication above the brokers' count is refused by it.
    three = load_pipeline(pipeline_yaml(tmp_path / "three", topic=topic, servers=kafka_servers,
                                        extra="topicSettings:\n  replicationFactor: 3\n"))
    with pytest.raises(IngestionError, match=rf"cannot create topic '{topic}' with 3 partitions, replication 3: "
                                             r".*INVALID_REPLICATION_FACTOR"):
        onboard(no_jvm, three, dry_run=True, create_topic=True)
    assert topic not in _topics(kafka_servers)

    dry = onboard(no_jvm, config, dry_run=True, create_topic=True, register_schemas=True)
    text = "\n".join(dry.lines)
    assert "would be created with 4 partitions, replication 1" in text
    assert "would be registered" in text and text.count("would be created") == 3  # topic, bronze, quarantine
    assert "_kafka_partition: integer" in text and "order_id: string" in text  # the bronze schema is printed
    assert dry.changes == 4 and dry.lines[-1] == "dry run: 4 change(s) not made"
    assert topic not in _topics(kafka_servers)
    assert not ledger.is_table(spark, config.table_path)

    done = onboard(no_jvm, config, create_topic=True, register_schemas=True)
    assert done.changes == 4
    assert kafka_admin.partitions({"bootstrap.servers": kafka_servers}, topic) == [0, 1, 2, 3]
    detail = DeltaTable.forPath(spark, config.table_path).detail().first()
    assert detail["partitionColumns"] == ["_kafka_partition"]
    assert detail["properties"]["delta.appendOnly"] == "true"
    assert detail["properties"]["delta.dataSkippingStatsColumns"] == "_kafka_offset,_kafka_timestamp"
    assert ledger.is_table(spark, config.quarantine_path)

    again = onboard(no_jvm, config, create_topic=True, register_schemas=True)
    assert again.changes == 0 and again.lines[-1] == "everything is in place: nothing to change"
    assert "already registered" in "\n".join(again.lines)


def _topics(servers: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": servers}).list_topics(timeout=10).topics)


def test_plain_avro_values_with_avro_keys_or_no_keys(spark, kafka_servers, make_topic, orders_schema,
                                                     tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from confluent_kafka import Producer

    from tests.conftest import REPO

    key_schema = {"type": "record", "name": "CustomerKey", "fields": [
        {"name": "customer", "type": "long"}, {"name": "region", "type": "string"}]}
    schemas = tmp_path / "schemas"
    shutil.copytree(REPO / "schemas" / "orders-value", schemas / "orders-value")
    (schemas / "customer-key").mkdir()
    (schemas / "customer-key" / "5.avsc").write_text(json.dumps(key_schema))
    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(schemas))
    topic = make_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_servers})
    records = [order(seq, random.Random(seq)) for seq in range(3)]
    for seq, record in enumerate(records):  # plain Avro values: no magic byte, no schema id
        key = encode(5, avro_body(key_schema, {"customer": record["customer_id"], "region": f"r{seq}"}))
        producer.produce(topic, key=key, value=avro_body(orders_schema, record))
    producer.produce(topic, key=b"not-avro", value=avro_body(orders_schema, order(9, random.Random(9))))
    producer.flush(30)

    keyed = load_pipeline(pipeline_yaml(tmp_path / "keyed", topic=topic, servers=kafka_servers,
                                        extra="value:\n  format: avro\n  subject: orders-value\n"
                                              "key:\n  format: avro\n  subject: customer-key\n"))
    pipeline.run(spark, keyed, available_now=True)
    rows = sorted(table_rows(keyed.table_path), key=lambda r: r["_kafka_offset"])
    assert [r["order_id"] for r in rows] == [r["order_id"] for r in records]
    assert [r["_kafka_key"].asDict() for r in rows] == [
        {"customer": r["customer_id"], "region": f"r{i}"} for i, r in enumerate(records)]
    assert {r["_schema_id"] for r in rows} == {1}
    (bad,) = table_rows(keyed.quarantine_path)
    assert (bad["_kafka_offset"], bad["_error_class"], bytes(bad["_kafka_key"])) == (3, "KeyDecodeError", b"not-avro")

    unkeyed = load_pipeline(pipeline_yaml(tmp_path / "unkeyed", topic=topic, servers=kafka_servers,
                                          extra="value:\n  format: avro\n  subject: orders-value\n"
                                                "key:\n  format: none\n"))
    pipeline.run(spark, unkeyed, available_now=True)
    rows = table_rows(unkeyed.table_path)
    assert len(rows) == 4 and {r["_kafka_key"] for r in rows} == {None}


def test_onboard_dry_run_of_catalog_names_and_silver_starts_no_jvm(
        spark, kafka_servers, make_topic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ingest onboard --dry-run` of a pipeline with catalog names and a silver section, as a user runs it: the
    bronze schema, the tables, the names (not checked: that takes a JVM) and silver's key checked against bronze's
    columns, with no JVM to start and no Derby server; a wrong silver key is one line naming the file and key."""
    import os
    import subprocess
    import sys

    from ingestion.runtime import metastore

    home = tmp_path / ".ingest"
    monkeypatch.setenv("INGEST_HOME", str(home))
    env = {**os.environ, "JAVA_HOME": "/nonexistent-java"}  # a JVM would fail to start
    topic = make_topic(partitions=1)
    file = pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers, sink="  catalogTable: bronze.dry\n",
                         extra="silver:\n  key: [order_id]\n  catalogTable: silver.dry\n")
    ingest = str(Path(sys.executable).parent / "ingest")
    done = subprocess.run([ingest, "onboard", str(file), "--dry-run"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert f"table {tmp_path / 'tables' / 'orders'}:" in out and "order_id: string" in out  # the bronze schema
    assert (f"catalog table bronze.dry: would be registered for {tmp_path / 'tables' / 'orders'} (not checked against "
            "the catalog: a dry run starts no JVM)") in out
    assert (f"silver {tmp_path / 'tables' / 'orders'}_silver: keyed by ['order_id'], upsert, envelope none, "
            "ordered by Kafka offsets; made from bronze by the first run") in out
    assert out.strip().splitlines()[-1] == "dry run: 4 change(s) not made"  # two tables, two names
    assert metastore.running() is None and not (home / "metastore").exists()
    assert not ledger.is_table(spark, str(tmp_path / "tables" / "orders"))

    file.write_text(file.read_text().replace("key: [order_id]", "key: [customer]"))
    done = subprocess.run([ingest, "onboard", str(file), "--dry-run"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 1
    assert done.stderr.startswith(f"error: {file}: key 'silver.key' names 'customer', which is not a field of the "
                                  "row") and len(done.stderr.splitlines()) == 1, done.stderr


def test_the_documented_test_record_snippet_lands_in_bronze(spark, kafka_servers, make_topic,
                                                            tmp_path: Path) -> None:
    """docs/operations.md's "produce a test record" snippet, run as written (the topic and servers swapped), writes
    a Confluent-framed record that the pipeline decodes into bronze."""
    import re

    from tests.conftest import REPO

    page = (REPO / "docs" / "operations.md").read_text()
    snippet = next(block for block in re.findall(r"^```python\n(.*?)^```", page, re.M | re.S)
                   if "schemaless_writer" in block)
    topic = make_topic(partitions=1)
    code = (snippet.replace('"127.0.0.1:9092"', repr(kafka_servers)).replace('produce("orders"', f'produce({topic!r}')
            .replace('open("schemas/', f'open("{REPO}/schemas/'))
    exec(compile(code, "docs/operations.md", "exec"), {})  # the documented snippet, as written
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers))
    pipeline.run(spark, config, available_now=True)
    rows = table_rows(config.table_path)
    assert [(r["order_id"], r["customer_id"], str(r["amount"]), r["items"][0]["sku"], r["_schema_id"])
            for r in rows] == [("o-1", 42, "12.34", "SKU-1", 1)]
    assert len(table_rows(config.quarantine_path)) == 0


def test_onboard_of_a_debezium_connect_json_pipeline_whose_schema_file_is_laid_out_differently(
        spark, kafka_servers, make_topic, tmp_path: Path) -> None:
    """The schema file of a connect-json pipeline is the `schema` part of a Debezium record, pretty-printed as a user
    writes it: its text differs from the records' embedded schemas (one line each), its content does not. onboard
    matches schemas by content: it checks and creates what `run` would, never `max() arg is an empty sequence`."""
    from confluent_kafka import Producer

    from tests.connect_envelopes import change, envelope_schema

    topic = make_topic(partitions=2)
    producer = Producer({"bootstrap.servers": kafka_servers})
    for lsn, (key, version, op) in enumerate([(1, 1, "c"), (2, 1, "c"), (1, 2, "u"), (2, 2, "d")], start=100):
        producer.produce(topic, key=json.dumps({"id": key}).encode(), value=json.dumps(change(key, version, op,
                         lsn=lsn)).encode(), partition=key % 2)
    producer.flush(30)
    schema = tmp_path / "customers.connect.json"
    schema.write_text(json.dumps(envelope_schema(), indent=2) + "\n")
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers, extra=(
        f"value:\n  format: connect-json\n  schemaFile: {schema}\nsilver:\n  key: [id]\n  envelope: debezium\n")))

    def no_jvm() -> SparkSession:
        pytest.fail("onboard started a Spark session")

    dry = onboard(no_jvm, config, dry_run=True)
    text = "\n".join(dry.lines)
    assert f"schema file {schema} (value.format connect-json): the table's columns" in text
    assert "would be created" in text and "after: struct" in text, text
    assert not ledger.is_table(spark, config.table_path)
    done = onboard(spark, config)
    assert ledger.is_table(spark, config.table_path) and done.changes >= 2
    columns = {f.name for f in spark.read.format("delta").load(config.table_path).schema.fields}
    assert {"before", "after", "source", "op", "_kafka_offset"} <= columns
    assert onboard(spark, config).changes == 0
