"""JSON topics end to end (real Kafka, Spark, Delta), one module fixture for every assertion (CI time):

- `jsonschema`: records of confluent-kafka's own JSONSerializer through a registry (a version with a reference),
  a version adding a property arriving mid-stream, every invalid value and every type mismatch the mapping allows;
- `json`: plain JSON produced by kcat (a producer that is not Python) with a schema file;
- `connect-json`: Kafka Connect JsonConverter records with embedded schemas (Decimal, Date, Timestamp, Time);
- a Debezium JSON envelope (schemas.enable=false, a schema file) feeding a silver upsert table.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from ingestion import start_pipeline
from ingestion.config import load_pipeline
from ingestion.decode.wire import encode
from ingestion.dev import cdc
from ingestion.kafka.clients import create_topic
from ingestion.ops.onboard import onboard
from ingestion.schema.registry import registry_client
from ingestion.stream import pipeline
from tests.conftest import missing_tool, pipeline_yaml
from tests.helpers import decode_both_ways, table_rows, wait_rows
from tests.unit.test_json import (
    BODIES,
    CONNECT_SCHEMA,
    ORDER,
    ORDER_V2,
    connect_record,
    connect_row,
    expected_row,
    order,
)

pytestmark = pytest.mark.integration

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
_CANDIDATES: list[Any] = ["text", 7, 2.5, True, None, [1], {"a": 1}]


def _topic(servers: str, partitions: int = 1) -> str:
    name = f"t-json-{uuid.uuid4().hex[:8]}"
    create_topic({"bootstrap.servers": servers}, name, partitions)
    return name


def _spark_form(row: dict[str, Any]) -> dict[str, Any]:
    """An expected row as Spark collects it: naive UTC timestamps (the tests' session time zone), maps as dicts."""
    out: dict[str, Any] = {}
    for name, value in row.items():
        if isinstance(value, dt.datetime):
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        elif isinstance(value, list) and value and isinstance(value[0], tuple):
            value = dict(value)
        elif isinstance(value, dict):
            value = _spark_form(value)
        out[name] = value
    return out


def mismatches() -> dict[str, dict[str, Any]]:
    """An order per (property, wrong JSON value) that the schema rejects: every type mismatch a column of the
    mapping can meet, at the top and nested (ship_to.city, items[0].qty, counts.x), by the validator's judgement."""
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(ORDER, format_checker=Draft202012Validator.FORMAT_CHECKER)
    found: dict[str, dict[str, Any]] = {}
    targets = [(name,) for name in ORDER["properties"] if name != "id"] + [
        ("ship_to", "city"), ("items", 0, "qty"), ("items", 0, "sku"), ("counts", "x"), ("tags", 0)]
    for path in targets:
        for i, candidate in enumerate(_CANDIDATES):
            doc = order(4)  # four has two items... and tags
            doc["items"] = [{"sku": "s", "qty": 1}]
            doc["tags"] = ["a"]
            parent: Any = doc
            for part in path[:-1]:
                parent = parent[part]
            parent[path[-1]] = copy.deepcopy(candidate)
            doc["id"] = f"m-{'.'.join(map(str, path))}-{i}"
            if not validator.is_valid(doc):
                found[doc["id"]] = doc
    return found


@pytest.fixture(scope="module")
def landed(spark: Any, kafka_servers: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every JSON pipeline run once; what they wrote, collected."""
    root = tmp_path_factory.mktemp("json")
    out: dict[str, Any] = {}
    out["jsonschema"] = _jsonschema_run(spark, kafka_servers, root / "jsonschema")
    out["kcat"] = _kcat_run(spark, kafka_servers, root / "kcat") if KCAT else None
    out["connect"] = _connect_run(spark, kafka_servers, root / "connect")
    out["debezium"] = _debezium_run(spark, kafka_servers, root / "debezium")
    return out


def _collect(spark: Any, config: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    rows = {r["id"]: r.asDict(recursive=True) for r in table_rows(config.table_path)}
    failed = {bytes(r["_kafka_key"]).decode(): r.asDict() for r in
              table_rows(config.quarantine_path)}
    return rows, failed


def _jsonschema_run(spark: Any, servers: str, tmp: Path) -> dict[str, Any]:
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import Schema, SchemaReference
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = _topic(servers, partitions=2)
    url = f"mock://{topic}"
    client = registry_client({"url": url})
    context = SerializationContext(topic, MessageField.VALUE)
    # Version 1 names its address through a reference (another subject), as a registry's users split schemas.
    client.register_schema(f"{topic}-address", Schema(json.dumps(ORDER["$defs"]["address"]), "JSON"))
    references = [SchemaReference("address.json", f"{topic}-address", 1)]

    def with_reference(schema: dict[str, Any]) -> Schema:
        schema = copy.deepcopy(schema)
        schema["properties"]["ship_to"] = {"$ref": "address.json"}
        del schema["$defs"]["address"]
        return Schema(json.dumps(schema), "JSON", references)

    producer = Producer({"bootstrap.servers": servers})
    serialize = JSONSerializer(with_reference(ORDER), client, conf={"auto.register.schemas": True})
    produced: dict[str, dict[str, Any]] = {}
    for seq in range(8):
        doc = order(seq)
        value = serialize(doc, context)
        producer.produce(topic, key=doc["id"].encode(), value=value, partition=seq % 2)
        produced[doc["id"]] = doc
    schema_id = int.from_bytes(value[1:5], "big")
    for name, (body, _, _) in BODIES.items():
        producer.produce(topic, key=name.encode(), value=encode(schema_id, body), partition=0)
    wrong = mismatches()
    for key, doc in wrong.items():
        producer.produce(topic, key=key.encode(), value=encode(schema_id, json.dumps(doc).encode()), partition=1)
    producer.produce(topic, key=b"magic-byte", value=b"\x01" + value[1:], partition=0)
    producer.flush(30)

    config = load_pipeline(pipeline_yaml(
        tmp, topic=topic, servers=servers, sink="  trigger: 1 second\n",
        extra=f"value:\n  format: jsonschema\n  registry:\n    url: \"{url}\"\n"))
    running = start_pipeline(spark, config)
    try:
        wait_rows(config.table_path, 8)
        # Version 2 adds `channel`; its first record registers it, mid-stream.
        serialize_v2 = JSONSerializer(with_reference(ORDER_V2), client, conf={"auto.register.schemas": True})
        for seq in range(8, 12):
            doc = {**order(seq), "channel": f"web-{seq}"}
            producer.produce(topic, key=doc["id"].encode(), value=serialize_v2(doc, context), partition=seq % 2)
            produced[doc["id"]] = doc
        producer.flush(30)
        wait_rows(config.table_path, 12)
        wait_rows(config.quarantine_path, len(BODIES) + len(wrong) + 1)
    finally:
        pipeline.stop(spark, running)
    rows, failed = _collect(spark, config)
    return {"produced": produced, "rows": rows, "failed": failed, "mismatches": wrong, "schema_id": schema_id}


def _kcat_run(spark: Any, servers: str, tmp: Path) -> dict[str, Any]:
    topic = _topic(servers)
    schema = tmp / "order.schema.json"
    tmp.mkdir(parents=True, exist_ok=True)
    schema.write_text(json.dumps(ORDER, indent=2))
    lines = [f"{d['id']}|{json.dumps(d)}" for d in (order(seq) for seq in range(5))]
    lines += ['bad-type|{"id": "x", "amount_cents": "7", "status": "NEW", "placed_at": "2026-01-01T00:00:00Z"}',
              'bad-dup|{"id": "y", "id": "z"}', "bad-text|{not json"]
    subprocess.run([KCAT, "-P", "-b", servers, "-t", topic, "-K", "|"], input="\n".join(lines) + "\n", text=True,
                   check=True, timeout=60, capture_output=True)
    config = load_pipeline(pipeline_yaml(tmp, topic=topic, servers=servers,
                                         extra=f"value:\n  format: json\n  schemaFile: {schema}\n"))
    plan = "\n".join(onboard(spark, config, dry_run=True).lines)
    pipeline.run(spark, config, available_now=True)
    rows, failed = _collect(spark, config)
    return {"produced": {f"o{seq}": order(seq) for seq in range(5)}, "rows": rows, "failed": failed, "plan": plan}


def _connect_run(spark: Any, servers: str, tmp: Path) -> dict[str, Any]:
    from confluent_kafka import Producer

    topic = _topic(servers)
    tmp.mkdir(parents=True, exist_ok=True)
    schema = tmp / "connect.json"
    schema.write_text(json.dumps(CONNECT_SCHEMA))
    producer = Producer({"bootstrap.servers": servers})
    for seq in range(1, 6):
        producer.produce(topic, key=str(seq).encode(), value=json.dumps(connect_record(seq)).encode())
    # A newer schema version travels with its record: an added optional field becomes a column mid-stream.
    newer = connect_record(6)
    newer["schema"] = {**CONNECT_SCHEMA, "fields": [*CONNECT_SCHEMA["fields"],
                                                    {"field": "added", "type": "string", "optional": True}]}
    newer["payload"]["added"] = "x"
    producer.produce(topic, key=b"6", value=json.dumps(newer).encode())
    bad_range = connect_record(7)
    bad_range["payload"]["small"] = 300
    changed = connect_record(8)
    changed["schema"] = {**CONNECT_SCHEMA, "fields": [{"field": "id", "type": "string", "optional": False},
                                                      *CONNECT_SCHEMA["fields"][1:]]}
    changed["payload"]["id"] = "eight"
    producer.produce(topic, key=b"bad-range", value=json.dumps(bad_range).encode())
    producer.produce(topic, key=b"changed-type", value=json.dumps(changed).encode())
    producer.produce(topic, key=b"no-envelope", value=json.dumps(connect_record(9)["payload"]).encode())
    producer.flush(30)
    config = load_pipeline(pipeline_yaml(tmp, topic=topic, servers=servers,
                                         extra=f"value:\n  format: connect-json\n  schemaFile: {schema}\n"))
    pipeline.run(spark, config, available_now=True)
    rows, failed = _collect(spark, config)
    return {"rows": rows, "failed": failed}


def _debezium_run(spark: Any, servers: str, tmp: Path) -> dict[str, Any]:
    from confluent_kafka import Producer

    topic = _topic(servers, partitions=3)
    model = cdc.history(150, 30, seed=4)
    producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True})
    for change in model.changes:
        key = json.dumps({"id": change.key}).encode()
        where = cdc.partition_of(change.key, 3)
        producer.produce(topic, key=key, value=json.dumps(change.envelope()).encode(), partition=where)
        if change.op == "d":
            producer.produce(topic, key=key, value=None, partition=where)
    producer.flush(30)
    tmp.mkdir(parents=True, exist_ok=True)
    config = load_pipeline(pipeline_yaml(
        tmp, topic=topic, servers=servers,
        extra="value:\n  format: json\n  schemaFile: customers-cdc.schema.json\n"
              "silver:\n  key: [id]\n  envelope: debezium\n"))
    pipeline.run(spark, config, available_now=True)
    assert config.silver_path is not None
    silver = table_rows(config.silver_path)
    return {"model": model, "silver": [r.asDict(recursive=True) for r in silver],
            "quarantined": len(table_rows(config.quarantine_path))}


def test_json_schema_records_land_every_field_and_a_new_version_adds_a_column(landed: dict[str, Any]) -> None:
    run = landed["jsonschema"]
    rows, produced = run["rows"], run["produced"]
    assert sorted(rows) == sorted(produced)
    for key, doc in produced.items():
        want = _spark_form({**expected_row(doc, ORDER_V2), "channel": doc.get("channel")})
        got = {name: rows[key][name] for name in want}
        assert got == want, key
    assert rows["o9"]["_schema_id"] != rows["o1"]["_schema_id"] == run["schema_id"]
    assert rows["o1"]["channel"] is None and rows["o9"]["channel"] == "web-9"


def test_invalid_json_schema_values_are_quarantined_naming_the_path(landed: dict[str, Any]) -> None:
    failed = landed["jsonschema"]["failed"]
    for name, (_, error_class, message) in BODIES.items():
        assert (failed[name]["_error_class"], failed[name]["_error_message"][:len(message)]) == \
            (error_class, message), name
    assert failed["magic-byte"]["_error_class"] == "WireFormatError"
    assert len({r["_error_class"] for r in failed.values()}) >= 9


def test_no_type_mismatch_lands_as_a_null(landed: dict[str, Any]) -> None:
    run = landed["jsonschema"]
    wrong = run["mismatches"]
    assert len(wrong) >= 60  # every column type meets several wrong JSON types
    assert not set(wrong) & set(run["rows"])
    for key in wrong:
        row = run["failed"][key]
        assert row["_error_class"] in ("JsonTypeError", "JsonEnumError", "JsonFormatError", "JsonConstraintError",
                                       "JsonRangeError", "MissingPropertyError"), key
        path = key.split("-")[1]
        assert row["_error_message"].startswith(f"$.{path.split('.')[0]}"), (key, row["_error_message"])


@pytest.mark.debian
def test_plain_json_from_kcat_with_a_schema_file(landed: dict[str, Any]) -> None:
    if KCAT is None:
        missing_tool("kcat is not installed (make kcat installs Debian's package)")
    run = landed["kcat"]
    assert sorted(run["rows"]) == sorted(run["produced"])
    for key, doc in run["produced"].items():
        want = _spark_form(expected_row(doc))
        assert {name: run["rows"][key][name] for name in want} == want, key
        assert run["rows"][key]["_schema_id"] == 0
    assert {k: r["_error_class"] for k, r in run["failed"].items()} == {
        "bad-type": "JsonTypeError", "bad-dup": "DuplicateKeyError", "bad-text": "MalformedJsonError"}
    assert run["failed"]["bad-type"]["_error_message"].startswith("$.amount_cents: expected integer")
    # onboard shows the schema file and the columns it gives, before the table exists
    assert "(value.format json): the table's columns" in run["plan"]
    assert "|-- amount_cents: long" in run["plan"] and "|-- placed_at: timestamp" in run["plan"]


def test_kafka_connect_records_with_embedded_schemas(landed: dict[str, Any]) -> None:
    run = landed["connect"]
    assert sorted(run["rows"]) == [1, 2, 3, 4, 5, 6]
    for seq in range(1, 7):
        got = run["rows"][seq]
        want = _spark_form(connect_row(seq))
        assert {name: got[name] for name in want} == {**want, "raw": bytearray(b"\x00\xff")}, seq
    assert run["rows"][6]["added"] == "x"  # the field the record's own schema added, null for the others
    assert [run["rows"][seq]["added"] for seq in range(1, 6)] == [None] * 5
    failed = run["failed"]
    assert {k: r["_error_class"] for k, r in failed.items()} == {
        "bad-range": "JsonRangeError", "changed-type": "ConnectSchemaError", "no-envelope": "MalformedJsonError"}
    assert failed["bad-range"]["_error_message"] == "$.payload.small: 300 is beyond int8"
    assert failed["changed-type"]["_error_message"].startswith("$.payload.id: the record's schema makes it string")


def test_a_debezium_json_envelope_feeds_a_silver_upsert_table_equal_to_the_model(landed: dict[str, Any]) -> None:
    run = landed["debezium"]
    model: cdc.History = run["model"]
    assert run["quarantined"] == 0
    found = {r["id"]: r for r in run["silver"]}
    assert len(found) == len(run["silver"])
    expected = model.state()
    assert sorted(found) == sorted(expected)
    newest = {k: changes[-1] for k, changes in model.by_key().items()}
    for key, row in expected.items():
        got = found[key]
        assert {c: got[c] for c in row} == row, key
        assert got["_op"] == newest[key].op and got["_source"]["lsn"] == newest[key].lsn


# The orders without what the JVM path leaves to Python (the free-form `extra` column, the `pattern` on tags).
JVM_ORDER: dict[str, Any] = {**ORDER, "properties": {
    **{k: v for k, v in ORDER["properties"].items() if k != "extra"}, "tags": {"type": "array",
                                                                              "items": {"type": "string"}}}}
# Texts the JVM must leave to Python or read exactly as Python does.
EDGE_TEXTS = [
    '\ufeff{"id": "bom"}', '{"id": "o", "amount_cents": 1, "status": "NEW", "placed_at": "2026-01-01T00:00:00Z"} x',
    '{"id": "\\ud800", "amount_cents": 1, "status": "NEW", "placed_at": "2026-01-01T00:00:00Z"}',
    '{"id": "\\ud83d\\ude00", "amount_cents": 1, "status": "NEW", "placed_at": "2026-01-01T00:00:00Z"}',
    '{"id": "o", "amount_cents": 1.0, "status": "NEW", "placed_at": "2026-01-01T00:00:00Z"}',
    '{"id": "o", "amount_cents": 1e2, "status": "NEW", "placed_at": "2026-01-01T00:00:00Z"}',
    '{"id": "o", "amount_cents": -0, "price": -0.0, "status": "NEW", "placed_at": "2026-01-01t00:00:00.1234567z"}',
    '{"id": "o", "amount_cents": 1, "price": 1e308, "status": "NEW", "placed_at": "2026-01-01T23:59:59-23:59"}',
    '{"id": "o", "amount_cents": 1, "price": 123456789012345678901234567890, "status": "NEW", '
    '"placed_at": "9999-12-31T23:59:59Z"}',
    '{"id": "o", "amount_cents": 1, "status": "NEW", "placed_at": "0001-01-01T00:00:00+00:01"}',
    ' \t\n{"id":"é\\u00e9\\n","amount_cents":1,"status":"NEW","placed_at":"2026-01-01T00:00:00+05:30"}\r\n',
    '{"id": "o", "amount_cents": 1, "status": "NEW", "placed_at": "2026-01-01T00:00:00Z", "ship_on": "0000-01-01"}',
    '{"id": "o", "amount_cents": 1, "status": "NEW", "placed_at": "2026-01-01T00:00:00Z", "counts": {"a": 1, "a": 2}}',
    '{"id": "o", "amount_cents": 01, "status": "NEW", "placed_at": "2026-01-01T00:00:00Z"}',
    '{"id": "o", "amount_cents": 1, "status": "NEW", "placed_at": "2026-01-01T00:00:00Z", "zz": {"deep": [1, {}]}}',
]


def test_the_jvm_decoder_gives_the_python_decoders_rows_and_leaves_it_what_it_cannot_vouch_for(spark) -> None:
    """Valid orders, every invalid value, the edge texts and 3,000 mutated documents, decoded both ways: the same
    rows, error classes and messages; the JVM vouched for every valid order."""
    import random

    from ingestion.schema import json_schemas
    from tests.unit.test_json import INVALID, mutate, spec

    decoding = spec(schemas={1: json_schemas.document(JVM_ORDER)})
    rng = random.Random(41)
    valid = [encode(1, json.dumps({k: v for k, v in order(seq).items() if k != "extra"}).encode())
             for seq in range(50)]
    values = [*valid, *(v for v, _, _ in INVALID.values()), *(encode(1, t.encode()) for t in EDGE_TEXTS),
              *(encode(1, json.dumps(mutate(order(n % 50), rng)).encode()) for n in range(3000)), None]
    jvm_rows, python_rows, unverified = decode_both_ways(spark, decoding, values)
    assert not unverified & set(range(len(valid)))
    differences = [(a["offset"], a.asDict(recursive=True), b.asDict(recursive=True))
                   for a, b in zip(jvm_rows, python_rows, strict=True) if a != b]
    assert not differences, "\n".join(map(str, differences[:5]))
    accepted_by_jvm = len(values) - len(unverified)
    accepted_by_python = sum(1 for r in python_rows if r["_error_class"] is None)
    assert accepted_by_jvm > 0.9 * accepted_by_python > 300
