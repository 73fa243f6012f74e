"""`ingest init` on topics without a schema subject, through the broker: plain JSON gets a JSON Schema inferred
from its first records, JsonConverter envelopes (`schemas.enable=true`) get their own Kafka Connect schema, and
keys that are all text `key.format: string`; the files load unchanged, and the run that follows (start batches, no
JVM) lands every record exactly once, the one that is not JSON in quarantine. A topic of other bytes is refused in
one line naming what was found: a schema registry's wire format names the registry setting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from ingestion.config import load_pipeline
from ingestion.errors import IngestionError
from ingestion.ops import init
from ingestion.stream import launch
from tests.connect_envelopes import change
from tests.helpers import table_rows


@pytest.fixture
def project(kafka_servers: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder whose defaults name the broker and keep tables under it."""
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "defaults.yaml").write_text(json.dumps({
        "kafka": {"bootstrap.servers": kafka_servers}, "sink": {"root": str(tmp_path / "lake")}}))
    monkeypatch.setenv("INGEST_CONF_DIR", str(tmp_path / "conf"))
    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(tmp_path / "schemas"))
    return tmp_path


def _produce(servers: str, topic: str, values: list[bytes], *,
             binary_keys: bool = False) -> dict[tuple[int, int], bytes]:
    producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True})
    landed: dict[tuple[int, int], bytes] = {}
    failures = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(err)
        else:
            landed[(msg.partition(), msg.offset())] = msg.value()

    for index, value in enumerate(values):
        key = index.to_bytes(4, "big") if binary_keys else str(index).encode()
        producer.produce(topic, key=key, value=value, partition=index % 2, on_delivery=delivered)
    producer.flush(30)
    assert not failures and len(landed) == len(values), failures
    return landed


def _landed(config: Any) -> tuple[dict[tuple[int, int], Any], dict[tuple[int, int], str]]:
    rows = {(r["_kafka_partition"], r["_kafka_offset"]): r for r in table_rows(config.table_path)}
    failed = {(r["_kafka_partition"], r["_kafka_offset"]): r["_error_class"]
              for r in table_rows(config.quarantine_path)}
    return rows, failed


def test_plain_json_gets_an_inferred_schema_that_lands_every_record(project: Path, kafka_servers: str,
                                                                    make_topic) -> None:
    topic = make_topic(partitions=2)
    documents = [{"id": i, "page": f"/p{i % 3}", "ms": i * 1.5 if i % 2 else i, "at": f"2026-12-07T10:00:{i:02d}Z",
                  "user": {"name": "ann" if i % 4 else None, "tags": ["a"] * (i % 3)}, "mixed": i if i % 2 else "x"}
                 for i in range(30)]
    produced = _produce(kafka_servers, topic, [json.dumps(d).encode() for d in documents] + [b"{not json"])

    draft = init.draft(topic)
    assert init.write([draft]) == [project / "schemas" / f"{topic}.schema.json", draft.path]
    text = draft.path.read_text()
    assert f"no schema subject: {topic}.schema.json is inferred from 30 of 31 sampled records (1 not a JSON " \
           "object: quarantined when read)" in text, text
    assert f"value: {{format: json, schemaFile: {topic}.schema.json}}" in text, text
    assert f"key: {{format: string}}  # no subject {topic}-key; the first 31 keys are UTF-8 text" in text, text
    config = load_pipeline(draft.path)  # the files load as written
    assert (config.value.format, config.value.schema_file, config.key.format) == (
        "json", f"{topic}.schema.json", "string")

    done = launch.run(None, config, available_now=True)  # start batches alone: no JVM
    assert sum(batch.rows for batch in done.batches) == 30
    rows, failed = _landed(config)
    assert failed == {key: "MalformedJsonError" for key, value in produced.items() if value == b"{not json"}
    assert set(rows) | set(failed) == set(produced) and not set(rows) & set(failed)
    for key, row in rows.items():
        sent = json.loads(produced[key])
        assert (row["id"], row["ms"], row["page"], row["user"]["name"]) == (
            sent["id"], sent["ms"], sent["page"], sent["user"]["name"])
        assert row["at"].isoformat() == sent["at"].removesuffix("Z")  # a timestamp column, in UTC
        assert row["mixed"] == json.dumps(sent["mixed"])  # number and text at one place: its JSON text
        assert row["_kafka_key"] == str(sent["id"])


def test_jsonconverter_envelopes_get_their_connect_schema_binary_keys_stay_bytes_and_other_values_are_refused(
        project: Path, kafka_servers: str, make_topic) -> None:
    topic = make_topic(partitions=2)
    events = [change(key, 1, "c", lsn=100 + key) for key in range(1, 9)]
    produced = _produce(kafka_servers, topic, [json.dumps(e).encode() for e in events], binary_keys=True)
    draft = init.draft(topic)
    assert f"value: {{format: connect-json, schemaFile: {topic}.connect.json}}" in draft.text, draft.text
    assert f"# keys: no subject {topic}-key, so _kafka_key keeps the bytes" in draft.text, draft.text
    init.write([draft])
    assert json.loads((project / "schemas" / f"{topic}.connect.json").read_text()) == events[0]["schema"]
    config = load_pipeline(draft.path)
    launch.run(None, config, available_now=True)
    rows, failed = _landed(config)
    assert not failed and set(rows) == set(produced)
    assert sorted(row["after"]["id"] for row in rows.values()) == list(range(1, 9))

    framed = make_topic(partitions=2)  # Confluent's wire format: a registry this project does not name
    _produce(kafka_servers, framed, [b"\x00\x00\x00\x00\x01\x02abc", b"\x00\x00\x00\x00\x03\x02abc"] * 2)
    with pytest.raises(IngestionError) as refused:
        init.draft(framed)
    assert str(refused.value) == (
        f"topic {framed!r}: no subject '{framed}-value' in schemas/; its first 4 records are in a schema registry's "
        "wire format (schema ids 1, 3): name that registry (value.registry.url, in conf/defaults.yaml for every "
        "pipeline) or put its schemas under schemas/")
    text = make_topic(partitions=2)
    _produce(kafka_servers, text, [b"hello", b"\x00\x00", b'{"id": 1}', b"world"])
    with pytest.raises(IngestionError) as refused:
        init.draft(text)
    assert str(refused.value) == (
        f"topic {text!r}: no subject '{text}-value' in schemas/; 3 of its first 4 records are not JSON objects: "
        "write "
        "value.format and its schema by hand (docs/configuration.md)")
