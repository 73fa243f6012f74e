"""Bad input never stops the stream and is never lost: every bad case lands in quarantine, the rest in bronze."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ingestion.config import load_pipeline
from ingestion.decode.wire import encode
from ingestion.delta import ledger
from ingestion.delta.rs_reads import DeltaRsReader
from ingestion.dev.samples import avro_body, order
from ingestion.kafka import clients as kafka_admin
from ingestion.stream import pipeline
from ingestion.stream.lock import PipelineRunning, WriterLock
from tests.conftest import pipeline_yaml
from tests.helpers import commits_without_txn, delta_txns, table_rows

pytestmark = pytest.mark.integration


def _zigzag(n: int) -> bytes:
    z, out = (n << 1) ^ (n >> 63), bytearray()
    while True:
        byte = z & 0x7F
        z >>= 7
        if z:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _cached(spark: Any) -> dict[int, str]:
    """The persisted RDDs of the session: id -> name."""
    rdds = spark.sparkContext._jsc.getPersistentRDDs()
    return {int(k): str(rdds.get(k).name()) for k in rdds.keySet().toArray()}


def bad_cases(schema: dict[str, Any]) -> dict[str, tuple[bytes | None, bytes | None, str]]:
    """name -> (key, value, expected error class); None as class for records that belong in bronze."""
    good = avro_body(schema, order(5, random.Random(5)))
    too_big = avro_body(schema, {**order(6, random.Random(6)), "note": "x" * 3000})
    return {
        "wrong magic byte": (b"k", b"\x07" + good[1:], "WireFormatError"),
        "short header": (b"k", b"\x00\x00", "WireFormatError"),
        "unknown schema id": (b"k", encode(99, good), "UnknownSchemaError"),
        "truncated payload": (b"k", encode(1, good[: len(good) // 2]), "MalformedAvroError"),
        "varint never terminates": (b"k", encode(1, b"\xff" * 12), "MalformedAvroError"),
        "negative length": (b"k", encode(1, _zigzag(-3) + b"abc"), "MalformedAvroError"),
        "enum index out of range": (b"k", encode(1, _zigzag(3) + b"o-1" + _zigzag(9) + _zigzag(17)),
                                    "MalformedAvroError"),
        "union index out of range": (b"k", encode(1, good[:-1] + _zigzag(5)), "MalformedAvroError"),
        "incompatible schema (trailing bytes)": (b"k", encode(1, good + b"\x02\x04"), "TrailingBytesError"),
        "larger than value.maxBytes": (b"k", encode(1, too_big), "RecordTooLargeError"),
        "key not UTF-8": (b"\xff\xfe", encode(1, good), "KeyDecodeError"),
        "tombstone": (b"k", None, None),
        "null key": (None, encode(1, good), None),
    }


def test_every_bad_case_is_quarantined_and_every_offset_lands_once(spark, kafka_servers, make_topic,
                                                                   orders_schema, tmp_path: Path) -> None:
    from confluent_kafka import Producer

    topic = make_topic(partitions=3)
    cases = bad_cases(orders_schema)
    producer = Producer({"bootstrap.servers": kafka_servers})
    # (partition, offset) -> (case, expected error class or None for bronze, raw key, raw value)
    produced: dict[tuple[int, int], tuple[str, str | None, bytes | None, bytes | None]] = {}

    def send(partition: int, case: str, key: bytes | None, value: bytes | None, error: str | None,
             headers: list[tuple[str, bytes | None]] | None = None) -> None:
        def landed(err: Any, msg: Any) -> None:
            assert err is None, err
            produced[(msg.partition(), msg.offset())] = (case, error, msg.key(), msg.value())
        producer.produce(topic, key=key, value=value, partition=partition, headers=headers, on_delivery=landed)

    for round_ in range(2):
        for partition in range(3):
            for seq in range(4):  # good records around the bad ones, with a null header value
                value = encode(1, avro_body(orders_schema, order(seq + 10 * partition, random.Random(seq))))
                send(partition, "good", b"good", value, None, headers=[("h", None), ("trace", b"1")])
            for i, (case, (key, value, error)) in enumerate(cases.items()):
                if i % 3 == partition or round_ == 1:
                    send(partition, case, key, value, error)
    producer.flush(30)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers,
                                         extra="key:\n  format: string\nvalue:\n  format: confluent\n"
                                               "  subject: orders-value\n  maxBytes: 2000\n"
                                               "source:\n  maxOffsetsPerTrigger: 40\n"))

    cached_before = _cached(spark)
    running = pipeline.run(spark, config, available_now=True)
    # Batches with bad records cache the JVM-decoded rows and the Python decoder's part: both are dropped. (Delta
    # caches table states of its own, and drops them when their snapshots are collected, whenever that is.)
    assert {k: v for k, v in _cached(spark).items() if k not in cached_before
            and not v.startswith("Delta Table State")} == {}
    assert any(b.quarantined for b in running.batches)

    bronze = table_rows(config.table_path)
    quarantine = table_rows(config.quarantine_path)
    # The invariant: per partition, bronze and quarantine together hold every offset of the topic exactly once.
    seen = Counter([(r["_kafka_partition"], r["_kafka_offset"]) for r in bronze] +
                   [(r["_kafka_partition"], r["_kafka_offset"]) for r in quarantine])
    ends = kafka_admin.watermarks({"bootstrap.servers": kafka_servers}, topic)
    assert seen == Counter({(p, o): 1 for p, (lo, hi) in ends.items() for o in range(lo, hi)})
    assert len(seen) == len(produced) > 60
    # Each record is where it belongs, for the stated reason, with its raw bytes kept for re-decoding.
    got = {(r["_kafka_partition"], r["_kafka_offset"]): r["_error_class"] for r in quarantine}
    got.update({(r["_kafka_partition"], r["_kafka_offset"]): None for r in bronze})
    assert got == {coords: error for coords, (_, error, _, _) in produced.items()}
    for r in quarantine:
        _, _, key, value = produced[(r["_kafka_partition"], r["_kafka_offset"])]
        assert (r["_kafka_key"], r["_kafka_value"]) == (key, value)
        assert r["_error_message"]
    # Tombstones and null keys are bronze rows; header values that are null survive.
    bronze_case = {(r["_kafka_partition"], r["_kafka_offset"]): r for r in bronze}
    for coords, (case, _, _, _) in produced.items():
        if case == "tombstone":
            assert bronze_case[coords]["_kafka_tombstone"] and bronze_case[coords]["order_id"] is None
        elif case == "null key":
            row = bronze_case[coords]
            assert row["_kafka_key"] is None and not row["_kafka_tombstone"] and row["order_id"] == "o-00000005"
        elif case == "good":
            assert [(h["key"], h["value"]) for h in bronze_case[coords]["_kafka_headers"]] == [("h", None),
                                                                                             ("trace", b"1")]
    # The stream did not stop, and each quarantine commit records its offsets like bronze's.
    assert sum(b.quarantined for b in running.batches) == len(quarantine)
    recorded = {(r.batch_id, x.partition): (x.first, x.last, x.count)
                for r in DeltaRsReader().history(config.quarantine_path) for x in r.ranges}
    actual: dict[tuple[int, int], list[int]] = {}
    for r in quarantine:
        actual.setdefault((r["_batch_id"], r["_kafka_partition"]), []).append(r["_kafka_offset"])
    assert recorded == {k: (min(v), max(v), len(v)) for k, v in actual.items()}


def test_reprocess_moves_what_now_decodes_exactly_once_and_twice_changes_nothing(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    import shutil

    from confluent_kafka import Producer

    from ingestion.ops import quarantine
    from tests.conftest import REPO

    schemas = tmp_path / "schemas"
    shutil.copytree(REPO / "schemas", schemas)
    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(schemas))
    topic = make_topic(partitions=2)
    producer = Producer({"bootstrap.servers": kafka_servers})
    for seq in range(12):
        schema_id = 7 if seq % 3 == 0 else 1  # id 7 is not registered yet
        body = avro_body(orders_schema, order(seq, random.Random(seq)))
        producer.produce(topic, key=b"k", value=encode(schema_id, body), partition=seq % 2)
    producer.produce(topic, key=b"k", value=b"\x05garbage", partition=0)  # stays bad forever
    producer.flush(30)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers))
    pipeline.run(spark, config, available_now=True)
    assert sorted(r["_error_class"] for r in table_rows(config.quarantine_path)) == [
        "UnknownSchemaError"] * 4 + ["WireFormatError"]

    # The missing schema gets registered (same schema, new id, as happens when a producer re-registers it).
    (schemas / "orders-value" / "7.avsc").write_text(json.dumps(orders_schema))
    result = quarantine.redecode(spark, config)

    assert (result.examined, result.redecoded, result.already_in_bronze, result.still_failing) == (5, 4, 0, 1)
    bronze_rows = table_rows(config.table_path)
    assert sorted(r["order_id"] for r in bronze_rows) == [f"o-{i:08d}" for i in range(12)]
    assert sorted(r["_schema_id"] for r in bronze_rows) == [1] * 8 + [7] * 4
    left = table_rows(config.quarantine_path)
    assert [(r["_kafka_partition"], r["_error_class"]) for r in left] == [(0, "WireFormatError")]
    assert DeltaRsReader().history(config.table_path)[-1].kind == "redecode"
    # Both of its commits carry its transaction id (Delta skips a repeat), as every stream commit does.
    bronze_version, quarantine_version = (ledger.table_version(spark, p) for p in (config.table_path,
                                                                                    config.quarantine_path))
    assert delta_txns(Path(config.table_path))[-1] == (bronze_version, "redecode", 0)
    assert delta_txns(Path(config.quarantine_path))[-1] == (quarantine_version, "redecode", 0)
    assert commits_without_txn(Path(config.table_path)) == commits_without_txn(Path(config.quarantine_path)) == []

    versions = (ledger.table_version(spark, config.table_path), ledger.table_version(spark, config.quarantine_path))
    again = quarantine.redecode(spark, config)
    assert (again.redecoded, again.still_failing, again.errors_changed) == (0, 1, 0)
    assert (ledger.table_version(spark, config.table_path),
            ledger.table_version(spark, config.quarantine_path)) == versions


def test_reprocess_into_an_additive_version_no_run_has_seen_evolves_bronze_and_a_rewind_says_it_undid_it(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every record of version 2 (one new nullable field) is quarantined until its schema is added; the reprocess
    then adds the column as the stream would, moves each record to bronze once, and a rewind that undoes it says so
    (reprocessing again moves them once more)."""
    import json
    import shutil

    from confluent_kafka import Producer

    from ingestion.ops import quarantine, rewind
    from tests.conftest import REPO

    schemas = tmp_path / "schemas"
    shutil.copytree(REPO / "schemas", schemas)
    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(schemas))
    v2 = {**orders_schema, "fields": [*orders_schema["fields"],
                                      {"name": "channel", "type": ["null", "string"], "default": None}]}
    topic = make_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_servers})
    for seq in range(6):
        if seq < 3:
            value = encode(1, avro_body(orders_schema, order(seq, random.Random(seq))))
        else:
            value = encode(2, avro_body(v2, {**order(seq, random.Random(seq)), "channel": f"web-{seq}"}))
        producer.produce(topic, key=b"k", value=value, partition=0)
    producer.flush(30)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers))
    pipeline.run(spark, config, available_now=True)
    assert len(table_rows(config.quarantine_path)) == 3
    before = ledger.table_version(spark, config.table_path)
    assert before is not None

    (schemas / "orders-value" / "2.avsc").write_text(json.dumps(v2))
    result = quarantine.redecode(spark, config)

    assert (result.examined, result.redecoded, result.already_in_bronze, result.still_failing) == (3, 3, 0, 0)
    bronze = spark.read.format("delta").load(config.table_path)
    assert bronze.columns[-2:] == ["_ingested_at", "channel"]  # where docs/columns.md says an added field goes
    assert sorted((r["order_id"], r["channel"], r["_kafka_offset"]) for r in table_rows(config.table_path)) == [
        ("o-00000000", None, 0), ("o-00000001", None, 1), ("o-00000002", None, 2),
        ("o-00000003", "web-3", 3), ("o-00000004", "web-4", 4), ("o-00000005", "web-5", 5)]
    assert len(table_rows(config.quarantine_path)) == 0
    again = quarantine.redecode(spark, config)
    assert (again.examined, again.redecoded) == (0, 0)

    # A later run, then a rewind to the reprocess's version: the reprocess committed bronze first and quarantine
    # after it, so that quarantine commit goes with this version and each record is in bronze only (by time, the
    # quarantine went back to before it and held the three again).
    producer.produce(topic, key=b"k", value=encode(1, avro_body(orders_schema, order(6, random.Random(6)))),
                     partition=0)
    producer.flush(30)
    pipeline.run(spark, config, available_now=True)
    latest = ledger.table_version(spark, config.table_path)
    assert latest is not None and latest > result.bronze_version
    # While a writer holds the pipeline's lock (a run), the rewind is refused in one line and changes nothing.
    held = WriterLock(config.name, config.checkpoint_path)
    held.acquire()
    try:
        with pytest.raises(PipelineRunning) as refused:
            rewind.rewind(spark, config, to_version=result.bronze_version)
        assert "already running" in str(refused.value) and "\n" not in str(refused.value)
    finally:
        held.release()
    assert ledger.table_version(spark, config.table_path) == latest
    kept = rewind.rewind(spark, config, to_version=result.bronze_version)
    assert kept.quarantine_version == result.quarantine_version
    assert table_rows(config.quarantine_path) == []
    assert sorted(r["_kafka_offset"] for r in table_rows(config.table_path)) == [0, 1, 2, 3, 4, 5]

    undone = rewind.rewind(spark, config, to_version=before)
    assert (undone.undone_reprocesses, undone.requarantined) == ((result.bronze_version,), 3)
    assert len(table_rows(config.quarantine_path)) == 3
    redone = quarantine.redecode(spark, config)
    assert (redone.redecoded, redone.already_in_bronze) == (3, 0)
    offsets = [r["_kafka_offset"] for r in table_rows(config.table_path)]
    assert sorted(offsets) == [0, 1, 2, 3, 4, 5]
    # A second rewind to the same version undoes the reprocess made after the first one, not the first one again.
    assert rewind.rewind(spark, config, to_version=before).undone_reprocesses == (redone.bronze_version,)


def test_reprocess_into_a_widening_version_widens_bronze_as_the_stream_would(
        spark, kafka_servers, make_topic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Version 2 widens an int to a long and adds a field; every record of it is quarantined until its schema is
    there; the reprocess widens the column (Delta type widening) and adds the other, each record once."""
    import json

    from confluent_kafka import Producer

    from ingestion.ops import quarantine

    v1 = {"type": "record", "name": "Reading", "fields": [{"name": "id", "type": "string"},
                                                          {"name": "n", "type": "int"}]}
    v2 = {**v1, "fields": [{"name": "id", "type": "string"}, {"name": "n", "type": "long"},
                           {"name": "unit", "type": ["null", "string"], "default": None}]}
    (tmp_path / "schemas" / "readings-value").mkdir(parents=True)
    (tmp_path / "schemas" / "readings-value" / "1.avsc").write_text(json.dumps(v1))
    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(tmp_path / "schemas"))
    topic = make_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_servers})
    producer.produce(topic, value=encode(1, avro_body(v1, {"id": "a", "n": 1})))
    producer.produce(topic, value=encode(2, avro_body(v2, {"id": "b", "n": 2**40, "unit": "kg"})))
    producer.flush(30)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers,
                                         extra="value:\n  format: confluent\n  subject: readings-value\n"))
    pipeline.run(spark, config, available_now=True)
    assert len(table_rows(config.quarantine_path)) == 1

    (tmp_path / "schemas" / "readings-value" / "2.avsc").write_text(json.dumps(v2))
    result = quarantine.redecode(spark, config)

    assert (result.examined, result.redecoded, result.still_failing) == (1, 1, 0)
    bronze = spark.read.format("delta").load(config.table_path)
    assert bronze.schema["n"].dataType.simpleString() == "bigint"
    assert sorted((r["id"], r["n"], r["unit"]) for r in bronze.collect()) == [
        ("a", 1, None), ("b", 2**40, "kg")]
