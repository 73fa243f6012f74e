"""Several topics into one table: a `topicPattern` pipeline over three topics, a fourth created (with its own
subject and a newer schema version) while the stream runs, every record of all four exactly once, `verify`
clean per topic-partition, `status` per topic-partition, and `replay --topic` writing only that topic."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import TableNotFoundError

from ingestion.dev.samples import produce_orders
from ingestion.kafka.clients import create_topic
from tests.helpers import ingest_here

pytestmark = pytest.mark.e2e

INGEST = str(Path(sys.executable).parent / "ingest")
REPO = Path(__file__).resolve().parents[2]


def _rows(table: Path) -> list[tuple[str, int, int]]:
    try:
        found = DeltaTable(str(table))
    except TableNotFoundError:  # not created yet, or the first run is writing its first commit
        return []
    rows = pa.table(QueryBuilder().register("t", found).execute(
        'SELECT "_kafka_topic", "_kafka_partition", "_kafka_offset" FROM t'))
    return list(zip(rows["_kafka_topic"].to_pylist(), rows["_kafka_partition"].to_pylist(),
                    rows["_kafka_offset"].to_pylist(), strict=True))


def _wait_for(expected: set[tuple[str, int, int]], table: Path, stream: subprocess.Popen[bytes], log: Path,
              timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if expected <= set(_rows(table)):
            return
        assert stream.poll() is None, log.read_text()[-4000:]
        time.sleep(0.25)
    raise AssertionError(f"{len(expected - set(_rows(table)))} records not landed; log:\n{log.read_text()[-4000:]}")


def test_pattern_reads_three_topics_and_a_fourth_created_while_streaming(
        spark: Any, kafka_servers: str, orders_schema: dict[str, Any], tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = f"ev{uuid.uuid4().hex[:6]}"
    first = [f"{prefix}.{name}" for name in ("acme", "globex", "initech")]
    schemas, table = tmp_path / "schemas", tmp_path / "tables" / "events"
    v1 = (REPO / "schemas/orders-value/1.avsc").read_text()
    v2 = dict(orders_schema, fields=[*orders_schema["fields"],
                                     {"name": "channel", "type": ["null", "string"], "default": None}])
    produced: dict[str, list] = {}
    for i, topic in enumerate(first):
        create_topic({"bootstrap.servers": kafka_servers}, topic, i + 1)
        (schemas / f"{topic}-value").mkdir(parents=True)
        (schemas / f"{topic}-value" / "1.avsc").write_text(v1)
        produced[topic] = produce_orders(kafka_servers, topic, 40, schema_id=1, schema=orders_schema, seed=i)
    outsider = f"x{prefix}.acme"  # the anchored pattern does not match it: never read
    create_topic({"bootstrap.servers": kafka_servers}, outsider, 1)
    produce_orders(kafka_servers, outsider, 5, schema_id=1, schema=orders_schema)
    config = tmp_path / "events.yaml"
    config.write_text(f"""name: events
topicPattern: "^{prefix}\\\\..*"
kafka:
  bootstrap.servers: "{kafka_servers}"
key:
  format: string
sink:
  root: {tmp_path}
  trigger: 2 seconds
""")
    env = {**os.environ, "INGEST_SCHEMAS_DIR": str(schemas)}
    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(schemas))
    monkeypatch.chdir(tmp_path)

    def ingest(*args: str) -> subprocess.CompletedProcess[str]:
        """The commands after the stream, in this process (ingest's own main; replay on the session's JVM, where a
        process of its own would start one more)."""
        code, out, err = ingest_here(capsys, *args)
        return subprocess.CompletedProcess(["ingest", *args], code, out, err)

    # No onboard: the first run creates the tables (onboard of a pattern is in tests/integration/test_topic_list).
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        stream = subprocess.Popen([INGEST, "run", str(config)], stdout=out, stderr=subprocess.STDOUT, env=env,
                                  cwd=tmp_path, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_for({(t, p.partition, p.offset) for t in first for p in produced[t]}, table, stream, log)
        # A fourth topic, with its own subject holding a newer version (a column added), while the stream runs.
        late = f"{prefix}.umbrella"
        (schemas / f"{late}-value").mkdir()
        (schemas / f"{late}-value" / "2.avsc").write_text(json.dumps(v2))
        create_topic({"bootstrap.servers": kafka_servers}, late, 2)
        produced[late] = produce_orders(kafka_servers, late, 30, schema_id=2, schema=v2, seed=9)
        produced[first[0]] += produce_orders(kafka_servers, first[0], 10, schema_id=1, schema=orders_schema,
                                             first_seq=1000)
        _wait_for({(t, p.partition, p.offset) for t, ps in produced.items() for p in ps}, table, stream, log)
    finally:
        os.killpg(stream.pid, signal.SIGTERM)  # the group of the process we started: a stop between batches
        stream.wait(120)
    ran = log.read_text()

    rows = _rows(table)
    counts = Counter(rows)
    assert not [k for k, n in counts.items() if n > 1], "duplicates"
    assert set(rows) == {(t, p.partition, p.offset) for t, ps in produced.items() for p in ps}
    assert not (tmp_path / "tables" / "events_quarantine").exists() or not _rows(
        tmp_path / "tables" / "events_quarantine"), ran[-3000:]
    columns = DeltaTable(str(table)).schema().to_arrow().names
    assert "channel" in columns  # the fourth topic's newer version, from its own subject

    done = ingest("verify", str(config), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    audit = json.loads(done.stdout)
    assert audit["ok"] and audit["topics"] == sorted(produced)
    per_partition = {(p["topic"], p["partition"]): p["rows"] for p in audit["partitions"]}
    assert per_partition == dict(Counter((t, p.partition) for t, ps in produced.items() for p in ps))

    status = ingest("status", str(config), "--json")
    assert status.returncode == 0, status.stderr
    found, = json.loads(status.stdout)  # one document per pipeline
    assert found["lag_records"] == 0 and found["topics"] == sorted(produced)
    assert {(p["topic"], p["partition"]) for p in found["partitions"]} == set(per_partition)

    # Stream stopped; new records in two topics; a replay of one topic writes that topic's only.
    fresh_a = produce_orders(kafka_servers, first[1], 6, schema_id=1, schema=orders_schema, first_seq=2000)
    fresh_b = produce_orders(kafka_servers, first[2], 7, schema_id=1, schema=orders_schema, first_seq=3000)
    done = ingest("replay", str(config), "--topic", first[2], "--from", "earliest")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert (f"\n{len(produced[first[2]]) + 7} records read, {len(produced[first[2]])} already present, 7 written"
            in done.stdout), done.stdout
    after = set(_rows(table))
    assert {(first[2], p.partition, p.offset) for p in fresh_b} <= after
    assert not {(first[1], p.partition, p.offset) for p in fresh_a} & after
    replay_commit = DeltaTable(str(table)).history(1)[0]
    ranges = json.loads(replay_commit["userMetadata"])["ingest"]["ranges"]
    assert {r["topic"] for r in ranges} == {first[2]}

    done = ingest("replay", str(config), "--from", "0:1")  # positions per partition need the topic named
    assert done.returncode == 1 and "name it with --topic" in done.stderr, done.stderr

    # A matched topic deleted later: verify and status name it as gone and audit the rest.
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": kafka_servers})
    admin.delete_topics([late])[late].result(30)
    deadline = time.monotonic() + 60
    while late in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.5)
    done = ingest("verify", str(config), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    audit = json.loads(done.stdout)
    assert audit["ok"] and audit["gone_topics"] == [late] and late not in audit["topics"]
    assert {p["topic"] for p in audit["partitions"]} == set(first)
