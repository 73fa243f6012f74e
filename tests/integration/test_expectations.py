"""Data-quality expectations (issue 62, docs/expectations.md) on real Kafka, Spark and Delta: `quarantine` rules keep
rows out of bronze (ExpectationFailed, the rule names), `warn` rules count, a `fail` rule stops the batch with
nothing committed; on both write paths, with Spark and DuckDB agreeing on the rows they flag."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from fastavro import parse_schema
from mlflow import MlflowClient
from pyspark.sql import functions as F

from ingestion.config import load_pipeline
from ingestion.decode import expectations
from ingestion.decode.wire import encode
from ingestion.delta.rs_reads import DeltaRsReader
from ingestion.dev.samples import Produced, avro_body, order
from ingestion.stream import pipeline
from ingestion.stream.batch import WritePath
from ingestion.stream.metrics import tracking_uri
from ingestion.stream.prometheus import Exporter
from tests.conftest import pipeline_yaml
from tests.helpers import assert_exactly_produced, table_rows

pytestmark = pytest.mark.integration

INGEST = str(Path(sys.executable).parent / "ingest")

RULES = """expectations:
  - name: positive_amount
    expect: "amount > 0"
    onViolation: quarantine
  - name: recent
    expect: "placed_at >= TIMESTAMP '2000-01-01 00:00:00'"
    onViolation: quarantine
  - name: has_note
    expect: "note IS NOT NULL"
"""
PATHS = {"driver": "  directWriteMaxOffsets: 1000\n", "spark": "  directWriteMaxOffsets: 0\n"}


def _orders(count: int) -> list[dict[str, Any]]:
    """Orders with some negative amounts (seq % 5 == 1), some placed in 1990 (seq % 7 == 2: seq 16 both) and some
    without a note (seq % 4 == 3)."""
    import random

    records = []
    for seq in range(count):
        record = order(seq, random.Random(seq))
        record["note"] = None if seq % 4 == 3 else f"note {seq}"
        if seq % 5 == 1:
            record["amount"] = Decimal("-1.00")
        if seq % 7 == 2:
            record["placed_at"] = dt.datetime(1990, 5, 1, tzinfo=dt.UTC)
        records.append(record)
    return records


def _produce(servers: str, topic: str, schema: dict[str, Any], records: list[dict[str, Any]]) -> list[tuple[
        Produced, bytes]]:
    parsed = parse_schema(schema)
    producer = Producer({"bootstrap.servers": servers})
    out: list[tuple[Produced, bytes]] = []
    for record in records:
        key = f"customer-{record['customer_id']}"
        value = encode(1, avro_body(parsed, record))
        producer.produce(topic, key=key, value=value,
                         on_delivery=lambda err, msg, k=key, r=record, v=value: out.append(
                             (Produced(msg.partition(), msg.offset(), k, r), v)))
        producer.flush(30)  # one at a time: offsets in order
    assert len(out) == len(records)
    return out


def _expected_rules(record: dict[str, Any]) -> str | None:
    broke = [name for name, bad in (("positive_amount", record["amount"] <= 0),
                                    ("recent", record["placed_at"].year < 2000)) if bad]
    return ", ".join(broke) or None


@pytest.mark.parametrize("path", ["driver", "spark"])
def test_quarantine_rules_keep_rows_out_of_bronze_and_warn_rules_count(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path, path: str) -> None:
    topic = make_topic(partitions=1)
    produced = _produce(kafka_servers, topic, orders_schema, _orders(30))
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers, name=f"rules_{path}",
                                         sink=PATHS[path], extra=RULES))

    exporter = Exporter()
    ran = pipeline.run(spark, config, available_now=True, exporter=exporter)

    assert {b.path for b in ran.batches if b.rows + b.quarantined} == {WritePath(path)}
    refused = {p.offset: (p, value, _expected_rules(p.record)) for p, value in produced if _expected_rules(p.record)}
    assert len(refused) == 9 and refused[16][2] == "positive_amount, recent"  # seq 16 broke both
    bronze = table_rows(config.table_path)
    assert_exactly_produced(bronze, [p for p, _ in produced if p.offset not in refused])
    quarantine = {r["_kafka_offset"]: r for r in table_rows(config.quarantine_path)}
    assert set(quarantine) == set(refused)  # each offset once in bronze + quarantine
    for offset, row in quarantine.items():
        p, value, rules = refused[offset]
        assert (row["_error_class"], row["_error_message"]) == ("ExpectationFailed", rules)
        assert (bytes(row["_kafka_value"]), row["_kafka_key"], row["_kafka_topic"], row["_kafka_partition"]) == (
            value, p.key.encode(), topic, 0)
    # warn: counted over every row checked (the quarantined too), in the batch results, MLflow and the ledger
    no_note = sum(1 for p, _ in produced if p.record["note"] is None)
    violated = {"positive_amount": 6, "recent": 4, "has_note": no_note}
    assert sum(b.checked for b in ran.batches) == 30
    assert {n: sum(b.violated.get(n, 0) for b in ran.batches) for n in violated} == violated
    client = MlflowClient(tracking_uri())
    runs = client.search_runs([client.get_experiment_by_name(config.experiment).experiment_id])
    assert len(runs) == 1
    logged = {n: sum(m.value for m in client.get_metric_history(runs[0].info.run_id, f"expectation_{n}_violated"))
              for n in violated}
    assert logged == violated
    assert sum(m.value for m in client.get_metric_history(runs[0].info.run_id, "expectation_rows_checked")) == 30
    for rule, count in violated.items():  # Prometheus: the same counts, and the rows that passed
        sample = {"pipeline": config.name, "rule": rule}
        assert exporter.registry.get_sample_value("ingest_expectation_rows_total", {**sample, "outcome": "violated"}) \
            == count
        assert exporter.registry.get_sample_value("ingest_expectation_rows_total", {**sample, "outcome": "passed"}) \
            == 30 - count
    records = [r for r in DeltaRsReader().history(config.table_path) if r.batch_id != -1]
    assert sum(r.checked for r in records) == 30
    assert {n: sum(dict(r.violated).get(n, 0) for r in records) for n in violated} == violated


@pytest.mark.parametrize("path", ["driver", "spark"])
def test_a_fail_rule_stops_the_run_naming_the_rule_and_record_with_nothing_committed(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path, path: str) -> None:
    topic = make_topic(partitions=1)
    _produce(kafka_servers, topic, orders_schema, _orders(12))
    config = load_pipeline(pipeline_yaml(
        tmp_path, topic=topic, servers=kafka_servers, name=f"fail_{path}", sink=PATHS[path],
        extra='expectations:\n  - name: positive_amount\n    expect: "amount > 0 AND currency = \'EUR\'"\n'
              "    onViolation: fail\n"))

    outcome = pipeline.run_all(spark, [config], available_now=True)[config.name]

    assert outcome.status is pipeline.RunStatus.FAILED
    assert outcome.reason == (f"expectation 'positive_amount' (amount > 0 AND currency = 'EUR') failed for record "
                              f"{topic}/0@1: amount=Decimal('-1.00'), currency='EUR' (onViolation: fail; nothing "
                              f"of the batch was committed)")
    assert len(table_rows(config.table_path)) == 0
    assert len(table_rows(config.quarantine_path)) == 0
    if path == "driver":  # the command, resuming the checkpoint: exit 1 and the same line, nothing else on stderr
        done = subprocess.run([INGEST, "run", str(config.file), "--available-now"], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and outcome.reason in lines[0], done.stderr
        assert len(table_rows(config.table_path)) == 0


def test_spark_and_duckdb_flag_the_same_rows(spark) -> None:
    """The driver evaluates rules with DuckDB, the Spark path with Spark: the same rows, nulls included."""
    rows = pa.table({
        "qty": pa.array([3, 0, -1, None, 7, 2], pa.int32()),
        "name": pa.array(["ab-1", None, "xyz", "ab-2", "", "AB-3"]),
        "tags": pa.array([["a"], [], None, ["b", "c"], ["d"], None], pa.list_(pa.string())),
        "ts": pa.array([dt.datetime(2024, 1, 1), dt.datetime(1999, 12, 31, 23), None, dt.datetime(2000, 1, 1),
                        dt.datetime(2030, 1, 1), dt.datetime(2001, 1, 1)], pa.timestamp("us", tz="UTC")),
        "_kafka_tombstone": pa.array([False, False, False, False, False, True]),
    })
    texts = ["qty > 0", "qty BETWEEN 1 AND 5", "qty IN (3, 7)", "name IS NOT NULL AND length(name) > 0",
             "name LIKE 'ab%'", "regexp_like(name, '^[a-z]+-[0-9]$')", "lower(name) = 'ab-3'", "size(tags) > 0",
             "ts >= TIMESTAMP '2000-01-01 00:00:00'", "ts < current_timestamp", "coalesce(qty, 0) >= 0",
             "NOT (qty < 0) OR name = 'xyz'", "cast(qty AS string) = '3'", "qty / 2 > 1"]
    rules = expectations.Rules(tuple(expectations.Rule(f"r{i}", t, "quarantine", ()) for i, t in enumerate(texts)))
    duck = expectations.evaluate(rules, rows)
    frame = spark.createDataFrame(rows.to_pylist(), "qty int, name string, tags array<string>, ts timestamp, "
                                                    "_kafka_tombstone boolean")
    flags = frame.select(*(
        (~F.col("_kafka_tombstone") & ~F.coalesce(F.expr(t), F.lit(False))).alias(f"r{i}")
        for i, t in enumerate(texts))).collect()
    for i, text in enumerate(texts):
        assert [bool(r[f"r{i}"]) for r in flags] == duck.violated[f"r{i}"].tolist(), text
    assert duck.checked == 5 and not any(v[5] for v in duck.violated.values())  # the tombstone is not checked


@pytest.mark.parametrize(("expect", "reason"), [
    ("amount >", "syntax error"),
    ("qty > 0", 'column "qty" not found'),
    ("amount + 1", "is not a condition (true or false) but of type DECIMAL"),
])
def test_a_bad_rule_is_refused_by_onboard_and_run_before_anything_exists(
        kafka_servers, make_topic, tmp_path: Path, expect: str, reason: str) -> None:
    topic = make_topic(partitions=1)
    path = pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers,
                         extra=f'expectations:\n  - name: bad_rule\n    expect: "{expect}"\n')
    env = {**os.environ, "JAVA_HOME": "/nonexistent-java", "INGEST_HOME": str(tmp_path / "home")}
    env.pop("MLFLOW_TRACKING_URI", None)
    for command in (["onboard", str(path), "--dry-run"], ["run", str(path), "--available-now"]):
        done = subprocess.run([INGEST, *command], capture_output=True, text=True, env=env, timeout=120,
                              cwd=tmp_path)
        assert done.returncode == 1, done.stdout + done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith(f"error: {path}: key 'expectations[0].expect' (rule 'bad_rule', ")
        assert reason.lower() in lines[0].lower(), lines[0]
        assert not (tmp_path / "tables").exists() and not (tmp_path / "checkpoints").exists()
        assert not (tmp_path / "home" / "mlflow").exists()


def test_verify_checks_bronze_against_the_rules_and_reprocess_follows_them_as_they_are_now(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path) -> None:
    from ingestion.ops import quarantine, verify

    topic = make_topic(partitions=1)
    produced = _produce(kafka_servers, topic, orders_schema, _orders(30))
    path = pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers, name="rules_verify", extra=RULES)
    config = load_pipeline(path)
    pipeline.run(spark, config, available_now=True)
    found = verify.audit(DeltaRsReader(), config)
    assert found.ok and [(v.rule, v.rows) for v in found.expectations] == [("positive_amount", 0), ("recent", 0)]

    # A rule relaxed (the 1990 orders may stay) and one removed: the records they held move to bronze exactly once,
    # a record another rule still refuses stays, its rule names updated.
    path.write_text(path.read_text().replace(RULES, 'expectations:\n  - name: positive_amount\n'
                                                    '    expect: "amount > 0"\n    onViolation: quarantine\n'))
    relaxed = load_pipeline(path)
    result = quarantine.redecode(spark, relaxed)
    negative = {p.offset for p, _ in produced if p.record["amount"] <= 0}
    assert (result.examined, result.redecoded, result.still_failing, result.errors_changed) == (9, 3, 6, 1)
    bronze = table_rows(config.table_path)
    assert_exactly_produced(bronze, [p for p, _ in produced if p.offset not in negative])
    held = {r["_kafka_offset"]: r["_error_message"] for r in
            table_rows(config.quarantine_path)}
    assert held == dict.fromkeys(negative, "positive_amount")  # seq 16 broke both: now only the one left
    assert verify.audit(DeltaRsReader(), relaxed).ok

    # A rule tightened after the rows landed: verify finds the bronze rows that break it, on the table itself.
    path.write_text(path.read_text().replace('"amount > 0"', '"amount > 100"'))
    tightened = verify.audit(DeltaRsReader(), load_pipeline(path))
    big = sorted(p.offset for p, _ in produced if 0 < p.record["amount"] <= 100)
    assert not tightened.ok and tightened.expectations[0].rows == len(big) > 0
    assert [o for _, _, o in tightened.expectations[0].first] == big[:10]
    assert "expectation 'positive_amount': " in verify.render(tightened)
