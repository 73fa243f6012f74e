"""connect-json evolves from the records themselves, through Kafka, Spark and Delta: Debezium envelopes as the
JsonConverter writes them (schemas.enable=true) on a 3-partition topic, a column added at the source mid-stream
(`ALTER TABLE ADD COLUMN points`: a new optional field inside before/after), then widened (`TYPE bigint`), and one
record whose type the table cannot take (`TYPE text`).

- a pipeline run before and after the change (typeWidening off): nothing quarantined but the record of text and
  the widened one (each with its reason), older rows null in `points`, Debezium's types as timestamp/date;
- a new pipeline over the whole topic (old and new shapes interleaved from offset 0, every batch through Spark);
- `replay` of the whole topic into a new table; `quarantine reprocess` once typeWidening is on:
  all three tables end equal, row for row and type for type.
A JSON Schema file gaining a nested optional property: the records without it read null.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from ingestion.config import load_pipeline
from ingestion.kafka.clients import create_topic
from ingestion.stream import pipeline
from tests.conftest import pipeline_yaml
from tests.connect_envelopes import change, customer_row, envelope_schema
from tests.helpers import table_rows

PAYLOAD = ("before", "after", "op", "ts_ms")


def _spark_form(row: Any) -> Any:
    import datetime as dt

    if isinstance(row, dict):
        return {k: _spark_form(v) for k, v in row.items()}
    if isinstance(row, dt.datetime):
        return row.astimezone(dt.UTC).replace(tzinfo=None)
    return row


def _config(tmp: Path, topic: str, servers: str, schema: Path, name: str, sink: str = "") -> Any:
    return load_pipeline(pipeline_yaml(tmp, topic=topic, servers=servers, name=name, sink=sink, extra=(
        f"value:\n  format: connect-json\n  schemaFile: {schema}\nkey:\n  format: string\n")))


def _tables(spark: Any, config: Any) -> tuple[dict[tuple[int, int], Any], dict[tuple[int, int], Any], Any]:
    bronze = spark.read.format("delta").load(config.table_path)
    rows = {(r["_kafka_partition"], r["_kafka_offset"]): {k: v for k, v in r.asDict(recursive=True).items()
                                                          if k in PAYLOAD} for r in bronze.collect()}
    failed = {(r["_kafka_partition"], r["_kafka_offset"]): (r["_error_class"], r["_error_message"])
              for r in table_rows(config.quarantine_path)}
    return rows, failed, bronze.schema


@pytest.fixture(scope="module")
def evolved(spark: Any, kafka_servers: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from confluent_kafka import Producer

    from ingestion.ops import quarantine, replay

    tmp = tmp_path_factory.mktemp("connect-evolve")
    topic = f"t-connect-{uuid.uuid4().hex[:8]}"
    create_topic({"bootstrap.servers": kafka_servers}, topic, 3)
    schema = tmp / "customers.connect.json"
    schema.write_text(json.dumps(envelope_schema()))
    producer = Producer({"bootstrap.servers": kafka_servers, "enable.idempotence": True})
    sent: list[tuple[int, dict[str, Any]]] = []  # (partition, record) in the order produced

    def send(key: int, record: dict[str, Any]) -> None:
        producer.produce(topic, key=json.dumps({"id": key}).encode(), value=json.dumps(record).encode(),
                         partition=key % 3)
        sent.append((key % 3, record))

    lsn = 100
    for key in range(1, 13):  # the table as it was: creates, then updates of every third row
        send(key, change(key, 1, "c", lsn=(lsn := lsn + 1)))
    for key in range(3, 13, 3):
        send(key, change(key, 2, "u", lsn=(lsn := lsn + 1)))
    producer.flush(30)
    first = _config(tmp, topic, kafka_servers, schema, "p1", sink="  typeWidening: false\n")
    pipeline.run(spark, first, available_now=True)
    middle = _tables(spark, first)
    # ALTER TABLE customers ADD COLUMN points int: every row image carries it from now on
    for key in range(1, 7):
        send(key, change(key, 3, "u", lsn=(lsn := lsn + 1), points="int32", after_points=key * 10))
    for key in (13, 14, 15):
        send(key, change(key, 1, "c", lsn=(lsn := lsn + 1), points="int32", after_points=key))
    send(7, change(7, 2, "d", lsn=(lsn := lsn + 1), points="int32"))
    for key in (8, 9):  # a record of the old shape after them (a lagging producer): its row reads null
        send(key, change(key, 3, "u", lsn=(lsn := lsn + 1)))
    send(10, change(10, 3, "u", lsn=(lsn := lsn + 1), points="string", after_points=None))  # a type changed
    send(13, change(13, 2, "u", lsn=(lsn := lsn + 1), points="int64", before_points=13, after_points=2**40))
    producer.flush(30)
    pipeline.run(spark, first, available_now=True)
    before_reprocess = _tables(spark, first)
    fresh = _config(tmp, topic, kafka_servers, schema, "p2", sink="  directWriteMaxOffsets: 0\n")
    pipeline.run(spark, fresh, available_now=True)
    replayed = _config(tmp, topic, kafka_servers, schema, "p3")
    replay.replay(spark, replayed, start="earliest", end="latest")
    widening = _config(tmp, topic, kafka_servers, schema, "p1")  # the same tables, typeWidening back on
    redecoded = quarantine.redecode(spark, widening)
    return {"sent": sent, "middle": middle, "first": before_reprocess, "fresh": _tables(spark, fresh),
            "replayed": _tables(spark, replayed), "reprocessed": _tables(spark, first), "redecoded": redecoded}


def _offsets(sent: list[tuple[int, dict[str, Any]]]) -> dict[tuple[int, int], dict[str, Any]]:
    seen: dict[int, int] = {}
    out = {}
    for partition, record in sent:
        seen[partition] = seen.get(partition, -1) + 1
        out[(partition, seen[partition])] = record
    return out


def _with_points(records: dict[tuple[int, int], dict[str, Any]], kind: str) -> tuple[int, int]:
    """Where the one record whose schema gives points `kind` is."""
    found = [at for at, r in records.items()
             if any(f.get("field") == "points" and f["type"] == kind for f in r["schema"]["fields"][0]["fields"])]
    assert len(found) == 1
    return found[0]


def _expected(record: dict[str, Any]) -> dict[str, Any]:
    """The bronze row of a change record: its row images as Debezium's types mean them, null where the record's
    schema has no points."""
    payload = record["payload"]

    def image(row: dict[str, Any] | None) -> dict[str, Any] | None:
        if row is None:
            return None
        key, version = row["id"], int(row["name"].split("-")[1])
        return _spark_form(customer_row(key, version, points=row.get("points")))
    return {"before": image(payload["before"]), "after": image(payload["after"]), "op": payload["op"],
            "ts_ms": payload["ts_ms"]}


def test_a_run_before_and_after_a_column_is_added_at_the_source(evolved: dict[str, Any]) -> None:
    records = _offsets(evolved["sent"])
    rows, failed, schema = evolved["middle"]
    assert not failed and len(rows) == 16
    assert "points" not in schema["after"].dataType.names
    rows, failed, schema = evolved["first"]
    text, wide = _with_points(records, "string"), _with_points(records, "int64")
    assert failed == {
        text: ("ConnectSchemaError",
               "$.payload.before.points: the record's schema makes it string, the table's column is int"),
        wide: ("ConnectSchemaError", "$.payload.before.points: bigint, wider than the table's int; the table did "
                                     "not take this schema (sink.typeWidening is off)")}
    assert sorted(rows) == sorted(set(records) - {text, wide})
    for at, row in rows.items():
        assert row == _expected(records[at]), at
    assert sum(1 for r in rows.values() if r["after"] and r["after"]["points"] is not None) == 9
    after = schema["after"].dataType
    assert {f.name: f.dataType.simpleString() for f in after.fields} == {
        "id": "int", "name": "string", "updated_at": "timestamp", "created": "timestamp", "seen_ms": "timestamp",
        "birthday": "date", "opens": "string", "balance": "decimal(38,18)", "prefs": "string", "ref": "string",
        "tier": "string", "points": "int"}
    assert schema["before"].dataType == after


def test_a_new_pipeline_replay_and_reprocess_give_the_same_table(evolved: dict[str, Any]) -> None:
    records = _offsets(evolved["sent"])
    text = _with_points(records, "string")
    rows, failed, schema = evolved["fresh"]
    assert list(failed) == [text]
    assert sorted(rows) == sorted(set(records) - {text})
    for at, row in rows.items():
        assert row == _expected(records[at]), at
    assert schema["after"].dataType["points"].dataType.simpleString() == "bigint"
    for other in ("replayed", "reprocessed"):
        other_rows, other_failed, other_schema = evolved[other]
        assert other_rows == rows, other
        assert list(other_failed) == [text], other
        assert other_schema["after"].dataType == schema["after"].dataType, other
    assert (evolved["redecoded"].redecoded, evolved["redecoded"].still_failing) == (1, 1)


def test_a_json_schema_file_gains_a_nested_optional_property(spark: Any, kafka_servers: str, tmp_path: Path) -> None:
    """value.format json: a new version of the schema file with a nested optional property takes the records
    before and after it (the first batch by the driver, the second by Spark's JVM decoder as the table evolves):
    those without it read null, none quarantined."""
    from confluent_kafka import Producer

    topic = f"t-json-evolve-{uuid.uuid4().hex[:8]}"
    create_topic({"bootstrap.servers": kafka_servers}, topic, 1)
    city = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    schema = tmp_path / "people.schema.json"
    schema.write_text(json.dumps({"type": "object", "required": ["id"], "properties": {
        "id": {"type": "integer"}, "home": city}}))
    producer = Producer({"bootstrap.servers": kafka_servers})
    docs = [{"id": 1, "home": {"city": "Oslo"}}, {"id": 2}]
    for doc in docs:
        producer.produce(topic, value=json.dumps(doc).encode())
    producer.flush(30)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers, name="people",
                                         extra=f"value:\n  format: json\n  schemaFile: {schema}\n"))
    pipeline.run(spark, config, available_now=True)
    zip_code = {"type": ["string", "null"]}
    schema.write_text(json.dumps({"type": "object", "required": ["id"], "properties": {
        "id": {"type": "integer"}, "home": {**city, "properties": {"city": {"type": "string"}, "zip": zip_code}}}}))
    later = [{"id": 3, "home": {"city": "Bergen", "zip": "5003"}}, {"id": 4, "home": {"city": "Moss"}}]
    for doc in later:
        producer.produce(topic, value=json.dumps(doc).encode())
    producer.flush(30)
    pipeline.run(spark, config, available_now=True)
    rows = {r["id"]: r["home"] and r["home"].asDict()
            for r in table_rows(config.table_path)}
    assert len(table_rows(config.quarantine_path)) == 0
    assert rows == {1: {"city": "Oslo", "zip": None}, 2: None, 3: {"city": "Bergen", "zip": "5003"},
                    4: {"city": "Moss", "zip": None}}
    # a new pipeline over the whole topic with the new file reads the old records as null too
    fresh = load_pipeline(pipeline_yaml(tmp_path / "fresh", topic=topic, servers=kafka_servers, name="people",
                                        extra=f"value:\n  format: json\n  schemaFile: {schema}\n"))
    pipeline.run(spark, fresh, available_now=True)
    assert {r["id"]: r["home"] and r["home"].asDict()
            for r in table_rows(fresh.table_path)} == rows
