"""Correct on data nobody here chose: invalid Avro is never a value (every decode path), records of aborted Kafka
transactions never land, and a producer's allowed type change widens the table instead of stopping it."""

from __future__ import annotations

import json
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import types as T

from ingestion import start_pipeline
from ingestion.config import load_pipeline
from ingestion.decode.wire import encode
from ingestion.delta.rs_reads import DeltaRsReader
from ingestion.dev.samples import avro_body
from ingestion.errors import IngestionError
from ingestion.ops import verify
from ingestion.schema.registry import registry_client
from ingestion.stream import pipeline
from tests.conftest import pipeline_yaml
from tests.helpers import table_rows, wait_rows
from tests.unit.test_validate import SCHEMA, body, zigzag

pytestmark = pytest.mark.integration

# name -> (body, the field path and fault the error message starts with); each breaks the Avro specification.
INVALID: dict[str, tuple[bytes, str]] = {
    "negative enum index": (body(e=zigzag(-1)), "e: enum index -1 outside [0, 3)"),
    "enum index past the symbols": (body(e=zigzag(3)), "e: enum index 3 outside [0, 3)"),
    "negative union index": (body(u=zigzag(-1)), "u: union index -1 outside [0, 3)"),
    "union index past the branches": (body(u=zigzag(3)), "u: union index 3 outside [0, 3)"),
    "negative string length": (body(s=zigzag(-2) + b"ab"), "s: string length -2 is negative"),
    "string length past the end": (body(s=zigzag(1000)), "s: string length 1000 is beyond"),
    "string not UTF-8": (body(s=zigzag(2) + b"\xc3\x28"), "s: string is not valid UTF-8"),
    "a UTF-16 surrogate": (body(s=zigzag(3) + b"\xed\xa0\x80"), "s: string is not valid UTF-8"),
    "negative bytes length": (body(b=zigzag(-1)), "b: bytes length -1 is negative"),
    "absurd array block count": (body(a=zigzag(2**40)), "a: array block count 1099511627776 is beyond"),
    "array block size not a long": (body(a=zigzag(-2) + b"\xff" * 11), "a: array block size varint is longer"),
    "int varint of 6 bytes": (body(a=zigzag(1) + b"\xff\xff\xff\xff\xff\xff"), "a[0]: int varint is longer"),
    "int varint overflowing 32 bits": (body(a=zigzag(1) + b"\xff\xff\xff\xff\x7f"), "a[0]: int varint overflows"),
    "map key not UTF-8": (body(m=zigzag(1) + zigzag(1) + b"\xff" + zigzag(5) + zigzag(0)), "m: map key is not"),
    "long varint of 11 bytes": (body(m=zigzag(1) + zigzag(1) + b"k" + b"\xff" * 11), "m['k']: long varint is"),
    "fixed cut short": (body(f=b"abc", d=b"", ok=b""), "f: fixed of 4 bytes is beyond"),
    "decimal beyond its precision": (body(d=zigzag(2) + (10000).to_bytes(2, "big")), "d: decimal unscaled value"),
    "decimal of no bytes": (body(d=zigzag(0)), "d: decimal has no bytes"),
    "boolean byte 2": (body(ok=b"\x02"), "ok: boolean byte 2 is neither 0 nor 1"),
}
VALID: list[dict[str, Any]] = [
    {"e": "GREEN", "u": "x", "s": "héllo", "b": b"\x00\x01", "a": [1, 2], "m": {"k": 5}, "f": b"abcd",
     "d": Decimal("12.34"), "ok": True},
    {"e": "BLUE", "u": None, "s": "", "b": b"", "a": [], "m": {}, "f": b"\x00\x00\x00\x00", "d": Decimal("-99.99"),
     "ok": False},
    {"e": "RED", "u": -(2**63), "s": "😀", "b": b"\xff" * 3, "a": [-(2**31), 2**31 - 1], "m": {"é": 2**63 - 1},
     "f": b"wxyz", "d": Decimal("0.01"), "ok": True},
]



@pytest.mark.parametrize("decoder", ["python", "jvm", "auto"])
def test_every_body_the_specification_rejects_is_quarantined_naming_the_field(
        spark, kafka_servers, make_topic, tmp_path: Path, decoder: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import Schema

    topic = make_topic(partitions=2)
    url, subject = f"mock://{topic}", f"{topic}-value"
    schema_id = registry_client({"url": url}).register_schema(subject, Schema(json.dumps(SCHEMA), "AVRO"))
    producer = Producer({"bootstrap.servers": kafka_servers})
    for i, record in enumerate(VALID):
        producer.produce(topic, key=f"v{i}".encode(), value=encode(schema_id, avro_body(SCHEMA, record)), partition=0)
    for name, (value, _) in INVALID.items():
        producer.produce(topic, key=name.encode(), value=encode(schema_id, value), partition=1)
    producer.flush(30)
    config = load_pipeline(pipeline_yaml(
        tmp_path, topic=topic, servers=kafka_servers,
        extra=f"value:\n  format: confluent\n  subject: {subject}\n  decoder: {decoder}\n  registry:\n"
              f"    url: \"{url}\"\n"))
    pipeline.run(spark, config, available_now=True)

    quarantined = {r["_kafka_key"].decode(): r for r in table_rows(config.quarantine_path)}
    assert set(quarantined) == set(INVALID)
    for name, (_, message) in INVALID.items():
        row = quarantined[name]
        assert row["_error_class"] == "MalformedAvroError", (name, row["_error_class"], row["_error_message"])
        assert row["_error_message"].startswith(message), (name, row["_error_message"])
        assert bytes(row["_kafka_value"]) == encode(schema_id, INVALID[name][0])
    rows = {r["_kafka_key"]: r for r in table_rows(config.table_path)}
    assert sorted(rows) == [f"v{i}" for i in range(len(VALID))]
    for i, record in enumerate(VALID):
        row = rows[f"v{i}"]
        got = {k: row[k] for k in record}
        got["m"], got["b"], got["f"] = dict(got["m"]), bytes(got["b"]), bytes(got["f"])
        want = {**record, "u": None if record["u"] is None else {"member0": record["u"], "member1": None}
                if isinstance(record["u"], str) else {"member0": None, "member1": record["u"]}}
        assert {**got, "u": got["u"].asDict() if got["u"] is not None else None} == want


def _transactions(servers: str, topic: str, schema_id: int) -> dict[str, list[int]]:
    """Committed, aborted, committed transactions of 5 records each on partition 0: their offsets by outcome."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": servers, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    offsets: dict[str, list[int]] = {"committed": [], "aborted": []}
    for outcome in ("committed", "aborted", "committed"):
        producer.begin_transaction()
        landed: list[int] = []
        for seq in range(5):
            record = {**VALID[0], "s": f"{outcome}-{seq}"}
            producer.produce(topic, value=encode(schema_id, avro_body(SCHEMA, record)), partition=0,
                             on_delivery=lambda err, msg, landed=landed: landed.append(msg.offset()))
        producer.flush(30)
        if outcome == "committed":
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
        offsets[outcome].extend(landed)
    return offsets


def test_aborted_transactions_never_land_and_verify_names_them_when_read_uncommitted(
        spark, kafka_servers, make_topic, tmp_path: Path) -> None:
    topic = make_topic(partitions=1)
    url, subject = f"mock://{topic}", f"{topic}-value"
    from confluent_kafka.schema_registry import Schema

    schema_id = registry_client({"url": url}).register_schema(subject, Schema(json.dumps(SCHEMA), "AVRO"))
    offsets = _transactions(kafka_servers, topic, schema_id)
    extra = f"value:\n  format: confluent\n  subject: {subject}\n  registry:\n    url: \"{url}\"\n"

    default = load_pipeline(pipeline_yaml(tmp_path / "default", topic=topic, servers=kafka_servers, extra=extra))
    pipeline.run(spark, default, available_now=True)
    held = sorted(r["_kafka_offset"] for r in table_rows(default.table_path))
    assert held == sorted(offsets["committed"])
    assert verify.audit(DeltaRsReader(), default).ok

    path = pipeline_yaml(tmp_path / "uncommitted", topic=topic, servers=kafka_servers, extra=extra)
    path.write_text(path.read_text().replace("kafka:\n", "kafka:\n  isolation.level: read_uncommitted\n"))
    uncommitted = load_pipeline(path)
    pipeline.run(spark, uncommitted, available_now=True)
    held = sorted(r["_kafka_offset"] for r in table_rows(uncommitted.table_path))
    assert held == sorted(offsets["committed"] + offsets["aborted"])
    audit = verify.audit(DeltaRsReader(), uncommitted)
    assert not audit.ok
    (part,) = audit.partitions
    assert part.not_committed == [[min(offsets["aborted"]), max(offsets["aborted"])]]
    assert part.lost == [] and part.duplicates == []
    assert "held but not committed in Kafka" in verify.render(audit)


def _numbers(version: int) -> dict[str, Any]:
    kind = ("int", "float") if version == 1 else ("long", "double")
    return {"type": "record", "name": "Reading", "fields": [
        {"name": "id", "type": "string"}, {"name": "n", "type": kind[0]}, {"name": "x", "type": kind[1]},
        {"name": "nested", "type": {"type": "record", "name": "Inner", "fields": [
            {"name": "k", "type": kind[0]}]}}]}


def test_a_widening_version_widens_the_table_mid_stream_and_a_narrowing_one_is_quarantined(
        spark, kafka_servers, make_topic, tmp_path: Path) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import Schema

    topic = make_topic(partitions=2)
    url, subject = f"mock://{topic}", f"{topic}-value"
    registry = registry_client({"url": url})
    v1, v2 = _numbers(1), _numbers(2)
    ids = [registry.register_schema(subject, Schema(json.dumps(v1), "AVRO"))]
    extra = f"value:\n  format: confluent\n  subject: {subject}\n  registry:\n    url: \"{url}\"\n"
    config = load_pipeline(pipeline_yaml(tmp_path / "widen", topic=topic, servers=kafka_servers,
                                         sink="  trigger: 1 second\n", extra=extra))
    producer = Producer({"bootstrap.servers": kafka_servers})
    produced: dict[str, dict[str, Any]] = {}
    rng = random.Random(3)

    def send(version: int, seq: int) -> None:
        big = version == 2 and seq % 2 == 0
        record = {"id": f"r{seq}", "n": rng.randint(2**31, 2**40) if big else rng.randint(-100, 100),
                  "x": 0.5 + seq, "nested": {"k": -(2**35) if big else seq}}
        producer.produce(topic, value=encode(ids[version - 1], avro_body((v1, v2)[version - 1], record)),
                         partition=seq % 2)
        produced[record["id"]] = record

    for seq in range(10):
        send(1, seq)
    producer.flush(30)
    # A second table of the same topic that does not widen, created while only v1 exists.
    narrow = load_pipeline(pipeline_yaml(tmp_path / "narrow", topic=topic, servers=kafka_servers,
                                         sink="  typeWidening: false\n", extra=extra))
    pipeline.run(spark, narrow, available_now=True)
    running = start_pipeline(spark, config)
    try:
        wait_rows(config.table_path, 10)
        # start_pipeline is the launch sequence: a second start of the running pipeline is refused by its checks
        # and lock, before anything is made
        with pytest.raises(IngestionError, match=rf"pipeline {config.name!r} is already running"):
            start_pipeline(spark, config)
        ids.append(registry.register_schema(subject, Schema(json.dumps(v2), "AVRO")))
        for seq in range(10, 30):
            send(2 if seq < 25 else 1, seq)
        producer.flush(30)
        wait_rows(config.table_path, 30, spark=spark)  # widened: delta-rs reads no type widening
    finally:
        pipeline.stop(spark, running)

    table = spark.read.format("delta").load(config.table_path)
    types = {f.name: f.dataType for f in table.schema.fields}
    assert types["n"] == T.LongType() and types["x"] == T.DoubleType()
    assert types["nested"] == T.StructType([T.StructField("k", T.LongType())])
    rows = {r["id"]: r for r in table.collect()}
    assert set(rows) == set(produced)
    for key, record in produced.items():
        row = rows[key]
        assert (row["n"], row["x"], row["nested"]["k"]) == (record["n"], record["x"], record["nested"]["k"]), key
    from delta.tables import DeltaTable
    quarantine = DeltaTable.isDeltaTable(spark, config.quarantine_path) and \
        len(table_rows(config.quarantine_path))
    assert not quarantine

    # The table that does not widen: v2's records cannot be read as its int and float (Avro reads long as int
    # nowhere), so they are quarantined, and its v1 records land.
    pipeline.run(spark, narrow, available_now=True)
    narrow_rows = spark.read.format("delta").load(narrow.table_path)
    assert {f.name: f.dataType for f in narrow_rows.schema.fields}["n"] == T.IntegerType()
    failed = table_rows(narrow.quarantine_path)
    assert len(failed) == 15 and {r["_schema_id"] for r in failed} == {ids[1]}
    assert {r["_error_class"] for r in failed} == {"SchemaResolutionError"}
    assert narrow_rows.count() == 15
