"""A Protobuf topic end to end (real Kafka, Spark, Delta): records written by confluent-kafka's own
ProtobufSerializer (the second message of a file that imports another, through a registry), every field in bronze
as produced, a version that adds fields arriving mid-stream, invalid bodies quarantined naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ingestion import start_pipeline
from ingestion.config import load_pipeline
from ingestion.decode.wire import encode
from ingestion.delta.rs_reads import DeltaRsReader
from ingestion.ops import quarantine, verify
from ingestion.schema.registry import registry_client
from ingestion.stream import pipeline
from tests import protobuf as shop
from tests.conftest import pipeline_yaml
from tests.helpers import decode_both_ways, table_rows, wait_rows
from tests.unit.test_protobuf import INVALID, _mutated, framed, spec

pytestmark = pytest.mark.integration



def test_a_protobuf_topic_lands_every_field_evolves_mid_stream_and_quarantines_naming_the_field(
        spark, kafka_servers, make_topic, tmp_path: Path) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = make_topic(partitions=2)
    url = f"mock://{topic}"
    client = registry_client({"url": url})
    context = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": kafka_servers})
    serialize = ProtobufSerializer(shop.message_class(1), client, {"use.deprecated.format": False})
    produced: dict[str, Any] = {}
    first = b""
    for seq in range(8):
        msg = shop.order(seq)
        value = serialize(msg, context)
        first = first or value
        producer.produce(topic, key=msg.id.encode(), value=value, partition=seq % 2)
        produced[msg.id] = msg
    assert first[5:6] == b"\x02" and first[6:7] == b"\x02"  # message indexes [1]: the file's second message
    schema_id = int.from_bytes(first[1:5], "big")
    for name, (value, _, _) in INVALID.items():
        if value[:5] == b"\x00\x00\x00\x00\x01":  # the unit tests' schema id: this registry's instead
            value = encode(schema_id, value[5:])
        producer.produce(topic, key=name.encode(), value=value, partition=0)
    producer.flush(30)

    config = load_pipeline(pipeline_yaml(
        tmp_path, topic=topic, servers=kafka_servers, sink="  trigger: 1 second\n",
        extra=f"value:\n  format: protobuf\n  registry:\n    url: \"{url}\"\n"))
    running = start_pipeline(spark, config)
    try:
        wait_rows(config.table_path, 8)
        # Version 2 (two more fields, one of them nested) is registered by its first record, mid-stream.
        serialize_v2 = ProtobufSerializer(shop.message_class(2), client, {"use.deprecated.format": False})
        for seq in range(8, 12):
            msg = shop.order(seq, version=2)
            value = serialize_v2(msg, context)
            producer.produce(topic, key=msg.id.encode(), value=value, partition=seq % 2)
            produced[msg.id] = msg
        # A record of a version its producer has not registered yet: quarantined, re-decoded once it is.
        late_id = int.from_bytes(value[1:5], "big") + 1
        late = shop.order(12, version=2)
        producer.produce(topic, key=late.id.encode(), value=encode(late_id, b"\x02\x02" + late.SerializeToString()),
                         partition=1)
        producer.flush(30)
        wait_rows(config.table_path, 12)
        wait_rows(config.quarantine_path, len(INVALID) + 1)
    finally:
        pipeline.stop(spark, running)

    rows = {r["id"]: r.asDict(recursive=True) for r in table_rows(config.table_path)}
    assert sorted(rows) == sorted(produced)
    for key, msg in produced.items():
        want = shop.expected_row(msg)
        if "channel" not in want:  # a version 1 record in the version 2 table
            want["channel"] = None
            want["ship_to"]["zip"] = None
        got = {name: rows[key][name] for name in want}
        assert got == want, key
    assert rows["o9"]["_schema_id"] != rows["o1"]["_schema_id"]

    failed = {bytes(r["_kafka_key"]).decode(): r for r in table_rows(config.quarantine_path)}
    assert sorted(failed) == sorted([*INVALID, "o12"])
    for name, (_, error_class, message) in INVALID.items():
        assert (failed[name]["_error_class"], failed[name]["_error_message"][:len(message)]) == \
            (error_class, message), name
    assert failed["o12"]["_error_class"] == "UnknownSchemaError"
    assert verify.audit(DeltaRsReader(), config).ok

    # Version 3 (the same fields as version 2, registered under another id) appears: re-decoding lands the record.
    from confluent_kafka.schema_registry import Schema

    late_schema = Schema(shop.proto_text(2) + "\n// version 3\n", "PROTOBUF",
                         client.get_latest_version(f"{topic}-value").schema.references)
    assert client.register_schema(f"{topic}-value", late_schema) == late_id
    result = quarantine.redecode(spark, config)
    assert (result.examined, result.redecoded, result.still_failing) == (len(INVALID) + 1, 1, len(INVALID))
    landed = [r for r in table_rows(config.table_path) if r["id"] == "o12"]
    assert [r.asDict(recursive=True)["channel"] for r in landed] == ["web-12"]


def test_the_jvm_decoder_gives_the_python_decoders_rows_and_leaves_it_every_body_it_cannot_vouch_for(spark) -> None:
    """Valid Orders, every invalid value and 6,000 mutated bodies, decoded both ways in one Spark job each: the
    same rows, error classes and messages; the JVM vouched for every valid Order."""
    valid = [framed(shop.order(seq).SerializeToString()) for seq in range(50)]
    values = [*valid, *(v for v, _, _ in INVALID.values()), *(framed(b) for b in _mutated(45)), None]
    jvm_rows, python_rows, unverified = decode_both_ways(spark, spec(), values)
    assert not unverified & set(range(len(valid)))
    differences = [(a["offset"], found) for a, b in zip(jvm_rows, python_rows, strict=True)
                   if (found := _diff(a.asDict(recursive=True), b.asDict(recursive=True)))]
    assert not differences, "\n".join(map(str, differences[:8]))
    accepted_by_jvm = len(values) - len(unverified)
    assert accepted_by_jvm > 0.1 * len(values)


def _diff(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in a for d in _diff(a[k], b.get(k), f"{path}.{k}")]
    return [] if a == b or (a != a and b != b) else [f"{path}: {a!r} != {b!r}"]  # NaN is NaN


def test_with_value_strict_both_decoders_quarantine_the_same_unknown_fields(spark) -> None:
    """value.strict: the JVM decoder vouches for no body with an unknown field, and the rows, error classes and
    messages of both paths are the same on valid Orders, every unknown-field case and mutated bodies."""
    from tests.unit.test_protobuf_strict import UNKNOWN, strict_spec

    valid = [framed(shop.order(seq).SerializeToString()) for seq in range(30)]
    unknown = [framed(body) for body, _ in UNKNOWN.values()]
    values = [*valid, *unknown, *(framed(b) for b in _mutated(47)[:1500])]
    strict = strict_spec()
    jvm_rows, python_rows, unverified = decode_both_ways(spark, strict, values)
    assert not unverified & set(range(len(valid)))
    assert set(range(len(valid), len(valid) + len(unknown))) <= unverified
    differences = [(a["offset"], found) for a, b in zip(jvm_rows, python_rows, strict=True)
                   if (found := _diff(a.asDict(recursive=True), b.asDict(recursive=True)))]
    assert not differences, "\n".join(map(str, differences[:8]))
    classes = [r["_error_class"] for r in jvm_rows]
    assert classes[len(valid):len(valid) + len(unknown)] == ["UnknownFieldError"] * len(unknown)
    assert classes.count("UnknownFieldError") > len(unknown)  # mutated bodies with unknown fields too
