"""Current-state tables from a Debezium topic: silver equals the fold of the changes Kafka carried, in upsert and
history mode, across incremental steps, late changes under a field's order, a row altered behind silver's back
(verify), a rewind of bronze and a rebuild."""

from __future__ import annotations

import os
import random
import uuid
from pathlib import Path
from typing import Any

import deltalake
import pytest
from delta.tables import DeltaTable

from ingestion.config import PipelineConfig, load_pipeline
from ingestion.dev import cdc
from ingestion.ops import rewind
from ingestion.ops.onboard import onboard
from ingestion.silver import audit, ledger, rs_audit
from ingestion.silver.follower import SilverFollower
from ingestion.stream import pipeline
from tests.helpers import commits_without_txn, table_rows
from tests.integration.test_silver_rows import _same_fold

pytestmark = pytest.mark.integration

PAYLOAD = ("id", "name", "email", "tier", "balance_cents")
# `make test` runs small; INGEST_SILVER_ACCEPTANCE=1 runs the acceptance scale (20,000 changes on 2,000 keys).
ACCEPTANCE = os.environ.get("INGEST_SILVER_ACCEPTANCE") == "1"


def _rows(spark: Any, path: str) -> dict[int, dict[str, Any]]:
    rows = table_rows(path)
    out = {r["id"]: r.asDict(recursive=True) for r in rows}
    assert len(out) == len(rows), "one row per key"
    return out


def _assert_state(spark: Any, path: str, model: cdc.History) -> None:
    """Silver holds each live key's newest change, in every column, and no deleted key."""
    expected = model.state()
    found = _rows(spark, path)
    assert sorted(found) == sorted(expected)
    newest = {k: changes[-1] for k, changes in model.by_key().items()}
    for key, row in expected.items():
        got = found[key]
        assert {c: got[c] for c in PAYLOAD} == row, key
        assert got["_op"] == newest[key].op and got["_source"]["lsn"] == newest[key].lsn
        assert got["_ts_ms"] == newest[key].ts_ms + 7 and got["_kafka_key"] == {"id": key}


def _assert_history(spark: Any, path: str, model: cdc.History) -> None:
    """One row per change, valid from the database's commit time to the next change's; one current row per live
    key; a delete is a row valid for no time that closes the one before it."""
    rows = table_rows(path)
    assert len(rows) == len(model.changes)
    for key, changes in model.by_key().items():
        mine = sorted((r for r in rows if r["id"] == key), key=lambda r: r["_source"]["lsn"])
        assert [r["_op"] for r in mine] == [c.op for c in changes]
        for i, (row, change) in enumerate(zip(mine, changes, strict=True)):
            assert int(row["_valid_from"].timestamp() * 1000) == change.ts_ms
            following = changes[i + 1].ts_ms if i + 1 < len(changes) else None
            valid_to = None if row["_valid_to"] is None else int(row["_valid_to"].timestamp() * 1000)
            assert valid_to == (change.ts_ms if change.op == "d" else following), (key, i)
            assert row["_is_current"] == (following is None and change.op != "d")
    assert {r["id"] for r in rows if r["_is_current"]} == set(model.state())


def _config(tmp_path: Path, name: str, topic: str, servers: str, silver: str, file: str = "p.yaml") -> PipelineConfig:
    return load_pipeline(cdc.pipeline_yaml(tmp_path / file, name=name, topic=topic, servers=servers, root=tmp_path,
                                           silver=silver))


def test_debezium_changes_fold_into_upsert_and_history_tables(spark, kafka_servers, make_topic,
                                                            tmp_path: Path) -> None:
    topic = make_topic(partitions=3)
    operations, keys, split = (20_000, 2_000, 13_000) if ACCEPTANCE else (700, 100, 450)
    model = cdc.history(operations, keys, seed=5)
    first = cdc.History(model.changes[:split])
    cdc.produce(kafka_servers, topic, first.changes)
    name = f"cdc-{uuid.uuid4().hex[:6]}"
    config = _config(tmp_path, name, topic, kafka_servers, "  key: [id]\n  envelope: debezium\n")
    assert config.silver_path is not None
    pipeline.run(spark, config, available_now=True)
    _assert_state(spark, config.silver_path, first)

    # The rest arrives: merged change by change (bronze's change feed), the same state as a fold from nothing.
    cdc.produce(kafka_servers, topic, model.changes[split:])
    pipeline.run(spark, config, available_now=True)
    _assert_state(spark, config.silver_path, model)
    steps = [r for _, r in ledger.records(spark, config.silver_path)]
    assert steps[0].kind == ledger.StepKind.MERGE and steps[0].deleted > 0 and steps[0].updated > 0
    assert steps[0].bronze_version == DeltaTable.forPath(spark, config.table_path).history(1).first()["version"]

    # History mode over the same bronze, run alone (ingest silver run), then one more incremental step.
    history = _config(tmp_path, name, topic, kafka_servers, "  key: [id]\n  envelope: debezium\n  mode: history\n"
                      f"  table: {tmp_path / 'history'}\n", "h.yaml")
    SilverFollower(spark, history).drain()
    _assert_history(spark, str(tmp_path / "history"), model)
    # The fold verify computes without a JVM (DuckDB) is Spark's, in both modes.
    assert _same_fold(spark, history) == len(model.changes)
    assert _same_fold(spark, config) == len(model.state())
    # Every data commit so far, bronze's and silver's (upsert, its delete markers, history), carries a txn action.
    for table in (config.table_path, config.silver_path, f"{config.silver_path}_deletes", tmp_path / "history"):
        assert Path(table).is_dir() and commits_without_txn(Path(table)) == [], table

    # verify: equal to bronze's fold, then a row changed behind silver's back is named by its key (by Spark's fold
    # and by DuckDB's alike).
    assert audit.audit(spark, config).ok
    victim = sorted(model.state())[3]
    DeltaTable.forPath(spark, config.silver_path).update(f"id = {victim}", {"tier": "'platinum'"})
    found = audit.audit(spark, config)
    assert not found.ok and found.missing == [f"id={victim}"] and found.unexpected == [f"id={victim}"]
    assert rs_audit.audit(config) == found

    # Rewind bronze to before the second half: silver follows (rebuilt from bronze as restored) on the next run,
    # which reads the second half again from Kafka; a full rebuild gives the same table.
    first_bronze = steps[-1].bronze_version  # silver's first step: bronze as the first run left it
    rewind.rewind(spark, config, to_version=first_bronze)
    after_rewind = SilverFollower(spark, config)
    after_rewind.drain()
    _assert_state(spark, config.silver_path, first)
    assert ledger.position(spark, config.silver_path).kind == ledger.StepKind.REBUILD
    pipeline.run(spark, config, available_now=True)
    _assert_state(spark, config.silver_path, model)
    rebuilt = SilverFollower(spark, config)
    rebuilt.rebuild(reason="test")
    _assert_state(spark, config.silver_path, model)
    assert audit.audit(spark, config).ok


def test_a_field_orders_changes_that_arrive_out_of_order_across_partitions(spark, kafka_servers, make_topic,
                                                                         tmp_path: Path) -> None:
    """With sequenceBy source.lsn, changes spread over partitions in any order: the newest wins, and a delete
    stays deleted when an older update of its key arrives after it, in a later step."""
    topic = make_topic(partitions=3)
    model = cdc.history(500, 50, seed=9)
    rng = random.Random(3)
    shuffled = model.changes[:]
    rng.shuffle(shuffled)
    early, late = shuffled[:250], shuffled[250:]
    revived = [c for c in late if c.op in "cu" and any(d.key == c.key and d.op == "d" and d.lsn > c.lsn
                                                      and d.lsn == max(x.lsn for x in model.changes if x.key == c.key)
                                                      for d in early)]
    assert revived, "the shuffle has a key whose final delete arrives before an older update"
    spread = lambda i, key: rng.randrange(3)  # noqa: E731
    cdc.produce(kafka_servers, topic, early, partition=spread)
    config = _config(tmp_path, f"lsn-{uuid.uuid4().hex[:6]}", topic, kafka_servers,
                     "  key: [id]\n  envelope: debezium\n  sequenceBy: source.lsn\n")
    assert config.silver_path is not None
    shown = "\n".join(onboard(spark, config).lines)
    assert (f"silver {config.silver_path}: keyed by ['id'], upsert, envelope debezium, ordered by source.lsn; "
            "made from bronze by the first run") in shown
    pipeline.run(spark, config, available_now=True)
    cdc.produce(kafka_servers, topic, late, partition=spread)
    pipeline.run(spark, config, available_now=True)
    _assert_state(spark, config.silver_path, model)
    assert all(r.key not in _rows(spark, config.silver_path) for r in revived)
    assert audit.audit(spark, config).ok
    assert _same_fold(spark, config) == len(model.state())  # DuckDB's fold orders by the field as Spark's does


def test_a_debezium_truncate_empties_silver_once_and_older_changes_stay_out(spark, kafka_servers, make_topic,
                                                                           tmp_path: Path) -> None:
    """`op: t` truncates by default: upsert holds only what came after it, history closes every row it found
    current; a pre-truncate change produced again after it (a connector's redelivery) resurrects nothing."""
    topic = make_topic(partitions=3)
    before = cdc.history(120, 30, seed=12)
    cut = cdc.truncate(before.changes[-1])
    after = cdc.history(60, 30, seed=13, snapshot=0, start_lsn=cut.lsn + 1, start_ms=cut.ts_ms + 1)
    model = cdc.History([*before.changes, cut, *after.changes])
    cdc.produce(kafka_servers, topic, before.changes)
    config = _config(tmp_path, f"trunc-{uuid.uuid4().hex[:6]}", topic, kafka_servers,
                     "  key: [id]\n  envelope: debezium\n  sequenceBy: source.lsn\n")
    assert config.silver_path is not None
    pipeline.run(spark, config, available_now=True)
    _assert_state(spark, config.silver_path, before)
    gone = sorted(set(before.state()) - set(after.state()))[0]
    redelivered = next(c for c in reversed(before.changes) if c.key == gone and c.op != "d")
    cdc.produce(kafka_servers, topic, [cut, *after.changes, redelivered], partition=lambda i, key: (
        1 if key is None else cdc.partition_of(key, 3)))
    pipeline.run(spark, config, available_now=True)
    _assert_state(spark, config.silver_path, model)
    assert gone not in _rows(spark, config.silver_path)
    position = ledger.position(spark, config.silver_path)
    assert position is not None and [t[4] for t in position.truncates] == [str(cut.lsn)]
    assert rs_audit.audit(config).ok
    # Redelivered again, now in a step of its own (the driver's, `rs_step`), with a change after the truncate:
    # the truncate the ledger records keeps the older one out, the newer one is not newer than silver's row.
    again = next(c for c in reversed(after.changes) if c.key in after.state())
    cdc.produce(kafka_servers, topic, [redelivered, again])
    pipeline.run(spark, config, available_now=True)
    _assert_state(spark, config.silver_path, model)
    stepped = ledger.position(spark, config.silver_path)
    assert stepped is not None and stepped.bronze_version > position.bronze_version
    assert (stepped.kind, stepped.changes, stepped.keys, stepped.truncates) == ("merge", 1, 1, position.truncates)
    newest = deltalake.DeltaTable(config.silver_path).history(1)[0]
    assert newest["operation"] == "MERGE" and newest["engineInfo"].startswith("delta-rs"), newest

    history = _config(tmp_path, config.name, topic, kafka_servers, "  key: [id]\n  envelope: debezium\n"
                      f"  sequenceBy: source.lsn\n  mode: history\n  table: {tmp_path / 'history'}\n", "h.yaml")
    SilverFollower(spark, history).drain()
    rows = table_rows(str(tmp_path / "history"))
    assert sorted(r["id"] for r in rows if r["_is_current"]) == sorted(model.state())
    closed = [r for r in rows if r["_source"]["lsn"] < cut.lsn and r["_valid_to"] is not None
              and int(r["_valid_to"].timestamp() * 1000) == cut.ts_ms]
    assert sorted(r["id"] for r in closed) == sorted(before.state())  # each row current at the truncate, closed
    assert _same_fold(spark, history) == len(rows)


def test_verify_names_change_records_in_quarantine_and_exits_3(spark, kafka_servers, make_topic, tmp_path: Path,
                                                               capsys) -> None:
    from confluent_kafka import Producer

    from ingestion.cli import main
    from ingestion.decode.wire import encode
    from ingestion.dev.samples import avro_body

    topic = make_topic(partitions=1)
    model = cdc.history(20, 10, seed=3)
    cdc.produce(kafka_servers, topic, model.changes, partitions=1)
    _, key_schema = cdc.schemas()
    from fastavro import parse_schema

    key = encode(cdc.KEY_ID, avro_body(parse_schema(key_schema), {"id": 77}))
    producer = Producer({"bootstrap.servers": kafka_servers})
    producer.produce(topic, key=key, value=encode(cdc.VALUE_ID, b"\x02\xff\xff\xff"))  # not an Envelope
    producer.flush(30)
    config = _config(tmp_path, f"quar-{uuid.uuid4().hex[:6]}", topic, kafka_servers,
                     "  key: [id]\n  envelope: debezium\n")
    pipeline.run(spark, config, available_now=True)
    capsys.readouterr()
    assert main(["verify", str(config.file)]) == 3
    shown = capsys.readouterr().out
    assert "OK, equal to bronze's fold" in shown
    assert "1 change record(s) in quarantine" in shown and "first keys: id=77" in shown
    assert main(["silver", "status", str(config.file)]) == 0
    assert "1 change record(s) in quarantine" in capsys.readouterr().out
