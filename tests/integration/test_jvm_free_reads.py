"""Read-only answers without a JVM: delta-rs reads what Spark wrote, and `status`, `history`, `verify` and
`quarantine list|show` answer through it alone (a JVM they tried to start would fail here). Every answer equals the
one the same code gives from a Spark read of the same tables."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from ingestion import kafka
from ingestion.config import load_pipeline
from ingestion.decode.wire import encode
from ingestion.delta import ledger, rs_reads
from ingestion.delta.reads import SparkReader
from ingestion.delta.rs_reads import DeltaRsReader
from ingestion.dev.samples import avro_body, order, produce_orders
from ingestion.ops import history, quarantine, rewind, status, verify
from ingestion.stream import context, pipeline
from ingestion.stream.facts import caught_up, read_facts
from tests.conftest import pipeline_yaml

pytestmark = pytest.mark.integration


def _caught_up(config: Any) -> Any:
    ctx = context.resolve(config)
    return caught_up(ctx, read_facts(ctx))

INGEST = str(Path(sys.executable).parent / "ingest")
NO_JVM = {**os.environ, "JAVA_HOME": "/nonexistent-java"}  # a JVM started now would fail


def ingest(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([INGEST, *args], capture_output=True, text=True, env=NO_JVM, timeout=120)


def test_delta_rs_reads_the_same_ledger_as_spark_and_history_needs_no_jvm(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path) -> None:
    topic = make_topic(partitions=2)
    path = pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers)
    config = load_pipeline(path)
    assert rs_reads.history(config.table_path) is None  # no table yet
    produce_orders(kafka_servers, topic, 60, schema_id=1, schema=orders_schema)
    pipeline.run(spark, config, available_now=True)
    produce_orders(kafka_servers, topic, 40, schema_id=1, schema=orders_schema, first_seq=60)
    pipeline.run(spark, config, available_now=True)
    rewind.rewind(spark, config, to_version=1)  # a RESTORE commit with its rewind record

    by_spark = ledger.history(spark, config.table_path)
    by_delta_rs = rs_reads.history(config.table_path)
    assert [r.kind for r in by_spark] == ["stream", "stream", "rewind"]
    assert by_delta_rs == by_spark
    assert [r.version for r in by_delta_rs] == [r.version for r in by_spark]
    assert [r.committed_at for r in by_delta_rs] == [r.committed_at for r in by_spark]
    # The second run's batch, undone by the rewind, is not the last batch any more.
    kept = by_spark[0]
    assert kept.version is not None and kept.version <= 1 < (by_spark[1].version or 0)
    rewound = status.offline_status(DeltaRsReader(), config, "not asked")
    assert kept.committed_at is not None
    assert (rewound.last_batch_id, rewound.last_batch_at) == (kept.batch_id,
                                                              kept.committed_at.replace(tzinfo=dt.UTC).isoformat())

    done = ingest("history", str(path), "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == json.loads(json.dumps([asdict(r) for r in by_spark], default=str))

    # Rewound to version 1, the table lacks the last 40 records: an available-now run has work (and needs a JVM).
    assert _caught_up(config) is None
    pipeline.run(spark, config, available_now=True)
    assert _caught_up(config) == {topic: {p: o for p, (_, o) in kafka.watermarks(
        kafka.resolve_settings(config).client, topic).items()}}
    done = ingest("run", str(path), "--available-now")  # caught up: answered without a JVM
    assert done.returncode == 0, done.stderr[-3000:]
    assert "caught up, nothing to do" in done.stdout and "no Spark session started" in done.stdout


def test_status_verify_and_quarantine_answer_alike_from_delta_rs_and_spark(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path) -> None:
    """A table with quarantined records of three error classes in three partitions, an aborted transaction, a
    duplicate and a lost record: every read-only answer is the same whichever reader made it."""
    from delta.tables import DeltaTable

    topic = make_topic(partitions=3)
    produce_orders(kafka_servers, topic, 90, schema_id=1, schema=orders_schema)
    good = avro_body(orders_schema, order(1, random.Random(3)))
    txn = Producer({"bootstrap.servers": kafka_servers, "transactional.id": f"tx-{topic}"})
    txn.init_transactions(30)

    def aborted(partition: int) -> None:
        txn.begin_transaction()
        txn.produce(topic, partition=partition, value=encode(1, good))
        txn.flush(30)  # the record reaches the log before the abort
        txn.abort_transaction(30)

    aborted(2)  # inside what the pipeline reads: an explained gap
    bad = Producer({"bootstrap.servers": kafka_servers})
    for i in range(12):
        value = [b"\x07" + encode(1, good)[1:], encode(1, good + b"\x02\x04"), encode(1, b"\xff" * 12)][i % 3]
        bad.produce(topic, key=b"k", value=value, partition=i % 3)
    bad.flush(30)
    aborted(0)  # at the end of partition 0: not lag, as the table can never hold it
    path = pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers, extra="source:\n  maxOffsetsPerTrigger: 40\n")
    config = load_pipeline(path)
    pipeline.run(spark, config, available_now=True)

    spark_reader, rs_reader = SparkReader(spark), DeltaRsReader()
    caught_up = status.pipeline_status(rs_reader, config)
    assert caught_up.lag_records == 0, caught_up
    assert caught_up.partitions[0].ingested_up_to < caught_up.partitions[0].latest_offset  # the aborted tail
    assert _caught_up(config) is not None
    produce_orders(kafka_servers, topic, 9, schema_id=1, schema=orders_schema, first_seq=90)  # lag: not ingested
    assert _caught_up(config) is None
    now = dt.datetime.now(dt.UTC)
    assert status.pipeline_status(rs_reader, config, now) == status.pipeline_status(spark_reader, config, now)
    lagging = status.pipeline_status(rs_reader, config, now)
    assert lagging.lag_records == 9 and sum(p.quarantined for p in lagging.partitions) == 12
    assert history.history(rs_reader, config) == history.history(spark_reader, config)

    groups = quarantine.groups(rs_reader, config)
    assert groups == quarantine.groups(spark_reader, config)
    assert {(g.error_class, g.partition): g.records for g in groups} == {
        ("WireFormatError", 0): 4, ("TrailingBytesError", 1): 4, ("MalformedAvroError", 2): 4}
    assert all(g.newest is not None and g.newest.tzinfo is None for g in groups)
    for limit, error_class in ((20, None), (5, None), (3, "TrailingBytesError"), (0, None), (5, "NoSuchError")):
        by_rs = quarantine.records(rs_reader, config, limit=limit, error_class=error_class)
        assert by_rs == quarantine.records(spark_reader, config, limit=limit, error_class=error_class)
        assert len(by_rs) == min(limit, 4 if error_class == "TrailingBytesError" else
                                 0 if error_class == "NoSuchError" else 12)
    assert quarantine.records(rs_reader, config, limit=1)[0].value == b"\x07" + encode(1, good)[1:]

    clean = verify.audit(rs_reader, config)
    assert clean.ok, verify.render(clean)
    assert clean.to_json() == verify.audit(spark_reader, config).to_json()
    assert clean.partitions[2].explained["not in Kafka (transaction marker, aborted or compacted)"]  # the abort

    # After maintenance (an OPTIMIZE and a VACUUM, commits with no offsets of their own), both readers still give
    # the same history, status (files, average size, last maintenance, oldest restorable version) and audit.
    from ingestion.ops.maintain import maintain

    maintain(spark, config, with_metrics=False)
    rs_reader = DeltaRsReader()
    assert [r.kind for r in history.history(rs_reader, config)][-3:] == ["optimize", "vacuum", "vacuum"]
    assert history.history(rs_reader, config) == history.history(spark_reader, config)
    assert rs_reader.layout(config.table_path) == spark_reader.layout(config.table_path)
    assert rs_reader.layout(config.quarantine_path) == spark_reader.layout(config.quarantine_path)
    now = dt.datetime.now(dt.UTC)
    maintained = status.pipeline_status(rs_reader, config, now)
    assert maintained == status.pipeline_status(spark_reader, config, now)
    assert maintained.files == 1 and maintained.last_maintenance.startswith("vacuum at version")
    assert maintained.oldest_restorable == 0
    assert verify.audit(rs_reader, config).to_json() == verify.audit(spark_reader, config).to_json()

    # A duplicated row and a lost one: both readers name the same offsets.
    rows = spark.read.format("delta").load(config.table_path).where("_kafka_partition = 1").orderBy(
        "_kafka_offset").collect()
    duplicate, removed = rows[2], rows[5]
    spark.createDataFrame([duplicate], schema=spark.read.format("delta").load(config.table_path).schema) \
        .write.format("delta").mode("append").save(config.table_path)
    DeltaTable.forPath(spark, config.table_path).delete(
        f"_kafka_partition = 1 AND _kafka_offset = {removed['_kafka_offset']}")
    broken = verify.audit(DeltaRsReader(), config)  # a new reader: the table has new versions
    assert broken.to_json() == verify.audit(spark_reader, config).to_json()
    assert broken.partitions[1].duplicates == [duplicate["_kafka_offset"]]
    assert broken.partitions[1].lost == [[removed["_kafka_offset"], removed["_kafka_offset"]]]

    # The commands answer from delta-rs alone, exactly what the Spark reads give.
    done = ingest("verify", str(path), "--json")
    assert done.returncode == 1, done.stderr[-3000:]
    assert json.loads(done.stdout) == verify.audit(spark_reader, config).to_json()
    done = ingest("quarantine", "list", str(path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == quarantine.render_groups(quarantine.groups(spark_reader, config),
                                                   config.quarantine_path) + "\n"
    done = ingest("quarantine", "show", str(path), "--limit", "4", "--error-class", "MalformedAvroError")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == quarantine.render_records(
        quarantine.records(spark_reader, config, limit=4, error_class="MalformedAvroError")) + "\n"
    done = ingest("status", str(path), "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    answered = json.loads(done.stdout)[0]
    expected = asdict(status.pipeline_status(spark_reader, config))
    for found in (answered, expected):  # the age of the oldest record not ingested grows between the two calls
        for p in found["partitions"]:
            p["lag_seconds"] = p["lag_seconds"] > 0
    assert answered == expected
    assert "warning" not in done.stderr.lower(), done.stderr


EVENT = {"type": "record", "name": "Event", "fields": [  # `at` is a word DuckDB reserves
    {"name": "kind", "type": "string"}, {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "n", "type": "long"}]}


def test_a_silver_pipeline_answers_verify_status_and_sql_by_every_name_without_a_jvm(
        spark, kafka_servers, make_topic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pipeline with silver (upsert by `kind`, a tombstone deleting one key): `verify` (silver's fold checked row
    by row in DuckDB), `silver status`, `status`, `history` and `sql` over bronze, quarantine and silver by their
    catalog names answer with no JVM to start; a row of silver changed behind its back (through delta-rs) fails
    `verify` naming its key; a table no pipeline has is one line naming those there are."""
    from deltalake import DeltaTable

    from ingestion.silver import audit

    (tmp_path / "schemas" / "events-value").mkdir(parents=True)
    (tmp_path / "schemas" / "events-value" / "1.avsc").write_text(json.dumps(EVENT))
    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(tmp_path / "schemas"))
    topic = make_topic(partitions=1)
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    events = [(kind, start + dt.timedelta(minutes=i)) for i, kind in enumerate("abcabcab")]
    producer = Producer({"bootstrap.servers": kafka_servers})
    for n, (kind, at) in enumerate(events):
        producer.produce(topic, key=kind.encode(), value=encode(1, avro_body(EVENT, {"kind": kind, "at": at, "n": n})))
    producer.produce(topic, key=b"c", value=None)  # deletes c
    producer.flush(30)
    silver = "silver:\n  key: [kind]\n"
    value = "value:\n  format: confluent\n  subject: events-value\n"
    path = pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers, name="events", extra=value + silver)
    config = load_pipeline(path)
    pipeline.run(spark, config, available_now=True)
    expected = {"a": (events[6][1], 6), "b": (events[7][1], 7)}
    bronze_version = DeltaTable(config.table_path).version()

    env = {**os.environ, "JAVA_HOME": "/nonexistent-java", "INGEST_CONF_DIR": str(tmp_path / "conf")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([INGEST, *args], capture_output=True, text=True, env=env, timeout=120)

    done = run("verify", str(path), "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)["silver"]
    assert found == audit.audit(spark, config).to_json()  # Spark's fold, the same findings
    assert (found["ok"], found["rows"], found["bronze_version"]) == (True, 2, bronze_version)
    done = run("silver", "status", str(path), "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    state = json.loads(done.stdout)
    assert (state["bronze_version"], state["rows"], state["lag_versions"], state["mode"]) == (bronze_version, 2, 0,
                                                                                               "upsert")
    assert state["steps"] and state["steps"][0]["bronze_version"] == bronze_version
    done = run("status", str(path), "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)[0]["silver"]["bronze_version"] == bronze_version
    done = run("history", str(path))
    assert done.returncode == 0 and "offsets (partition:first-last)" in done.stdout, done.stderr[-3000:]

    # `ingest sql` over the catalog names (a pipeline file of conf/pipelines/ that has them), answered by DuckDB.
    (tmp_path / "conf" / "pipelines").mkdir(parents=True)
    (tmp_path / "conf" / "pipelines" / "events.yaml").write_text(
        path.read_text().replace(silver, silver + "  catalogTable: silver.events\n")
        .replace("sink:\n", "sink:\n  catalogTable: bronze.events\n", 1))
    done = run("sql", "SELECT kind, min(at), count(*) FROM bronze.events GROUP BY 1 ORDER BY 1")
    assert done.returncode == 0 and done.stderr == "", done.stderr[-3000:]
    shown = lambda at: [f"{at:%Y-%m-%d}", f"{at:%H:%M:%S}+00:00"]  # noqa: E731
    assert [line.split() for line in done.stdout.splitlines()[1:]] == [
        ["NULL", "NULL", "1"],  # the tombstone
        ["a", *shown(events[0][1]), "3"], ["b", *shown(events[1][1]), "3"], ["c", *shown(events[2][1]), "2"]]
    done = run("sql", "SELECT kind, at, n FROM silver.events ORDER BY kind")
    assert done.returncode == 0 and done.stderr == "", done.stderr[-3000:]
    assert [line.split() for line in done.stdout.splitlines()[1:]] == [
        [kind, *shown(at), str(n)] for kind, (at, n) in sorted(expected.items())]
    done = run("sql", "SELECT count(*) FROM bronze.events_quarantine")
    assert done.returncode == 0 and done.stdout.splitlines()[1].strip() == "0", done.stderr[-3000:]
    done = run("sql", "SELECT count(*) FROM events_silver")
    assert done.returncode == 1
    assert done.stderr == ("error: no table 'events_silver': the pipelines' tables are bronze.events, "
                           "bronze.events_quarantine, silver.events (`--engine spark` asks Spark's catalog for "
                           "others)\n")

    # A row changed behind silver's back: verify names its key (and exits 1), still without a JVM.
    assert config.silver_path is not None
    DeltaTable(config.silver_path).update(updates={"n": "60"}, predicate="kind = 'a'")
    done = run("verify", str(path))
    assert done.returncode == 1, done.stderr[-3000:]
    assert (f"silver {config.silver_path}: 2 rows at bronze version {bronze_version}, 2 expected from bronze: 2 rows "
            "differ") in done.stdout
    assert "as bronze has them, missing or different in silver: kind='a'" in done.stdout
    assert "in silver, not as bronze has them: kind='a'" in done.stdout
