"""`ingest shadow` end to end (real Kafka, Spark, Delta): a JSON topic landed with a schema file that requires a
property some records lack (they are quarantined) and leaves out one every record has (no column); a shadow over
the versions of one run with the corrected file while the live pipeline goes on; diff names the moves out of
quarantine and the added column with exact counts; promote replaces those offsets' rows in one commit per table;
the stream continues with the corrected file."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from ingestion.config import load_pipeline
from ingestion.delta import ledger
from ingestion.delta.ledger import BatchKind
from ingestion.delta.rs_reads import DeltaRsReader
from ingestion.ops import rewind, shadow, shadow_diff, verify
from ingestion.stream import pipeline
from ingestion.stream.lock import PipelineRunning, WriterLock
from tests.conftest import pipeline_yaml
from tests.helpers import commits_without_txn, delta_txns, table_rows

pytestmark = pytest.mark.integration

PAYLOAD = ("id", "amount", "status", "coupon")


def _schema(path: Path, *, corrected: bool) -> Path:
    properties: dict[str, Any] = {"id": {"type": "string"}, "amount": {"type": "integer"},
                                  "status": {"type": "string"}, "coupon": {"type": "string"}}
    if corrected:
        properties["channel"] = {"type": "string"}
    path.write_text(json.dumps({"type": "object", "properties": properties,
                                "required": ["id"] if corrected else ["id", "coupon"]}))
    return path


def _pipelines(tmp_path: Path, topic: str, servers: str, extra: str = "") -> tuple[Path, Path]:
    """The live pipeline's file (the wrong schema file) and the other config's (the same with the corrected one)."""
    wrong, right = _schema(tmp_path / "wrong.json", corrected=False), _schema(tmp_path / "right.json", corrected=True)
    live_file = pipeline_yaml(tmp_path / "live", topic=topic, servers=servers,
                              extra=f"value:\n  format: json\n  schemaFile: {wrong}\n{extra}")
    other_file = tmp_path / "orders-fixed.yaml"
    other_file.write_text(live_file.read_text().replace(str(wrong), str(right)))
    return live_file, other_file


def _produce(servers: str, topic: str, seqs: range, ids: int = 0) -> dict[tuple[int, int], dict[str, Any]]:
    """Orders `seqs` over two partitions (or the topic's one); every fourth lacks its coupon; `ids`: the order ids
    repeat every `ids` (later ones update earlier ones). (partition, offset) -> document."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True})
    found: dict[tuple[int, int], dict[str, Any]] = {}
    for seq in seqs:
        doc: dict[str, Any] = {"id": f"o{seq % ids if ids else seq}", "amount": seq * 10, "status": "NEW",
                               "channel": f"ch{seq % 3}"}
        if seq % 4:
            doc["coupon"] = f"C{seq}"

        def delivered(err: Any, msg: Any, doc: dict[str, Any] = doc) -> None:
            assert err is None, err
            found[(msg.partition(), msg.offset())] = doc

        producer.produce(topic, key=doc["id"].encode(), value=json.dumps(doc).encode(),
                         partition=0 if ids else seq % 2, on_delivery=delivered)
    producer.flush(30)
    assert len(found) == len(seqs)
    return found


def _rows(spark: Any, path: str, version: int | None = None) -> dict[tuple[int, int], dict[str, Any]]:
    return {(r["_kafka_partition"], r["_kafka_offset"]): r.asDict() for r in table_rows(path, version)}


def test_shadow_diff_promote(spark: Any, kafka_servers: str, make_topic: Any, tmp_path: Path) -> None:
    topic = make_topic(partitions=2)
    live_file, other_file = _pipelines(tmp_path, topic, kafka_servers)
    config = load_pipeline(live_file)

    produced: dict[tuple[int, int], dict[str, Any]] = {}
    versions = []
    for seqs in (range(0, 80), range(80, 160), range(160, 240)):
        produced.update(_produce(kafka_servers, topic, seqs))
        before = ledger.table_version(spark, config.table_path) if ledger.is_table(spark, config.table_path) else -1
        pipeline.run(spark, config, available_now=True)
        versions.append([r for r in DeltaRsReader().history(config.table_path) if (r.version or 0) > before])
    second = versions[1]
    low, high = min(r.version or 0 for r in second), max(r.version or 0 for r in second)
    in_range = {(p, o) for (p, o), d in produced.items() if 80 <= int(d["id"][1:]) < 160}

    plan = shadow.plan_start(config, load_pipeline(other_file), start=str(low), end=str(high))
    assert [(s.partition, s.first, s.last) for s in plan.shadow.spans] == sorted(
        (p, min(o for q, o in in_range if q == p), max(o for q, o in in_range if q == p)) for p in (0, 1))
    started = shadow.start(spark, config, plan)
    assert (started.state, started.rows, started.quarantined) == ("ready", 80, 0)
    # The live pipeline goes on meanwhile, with the old file.
    produced.update(_produce(kafka_servers, topic, range(240, 300)))
    pipeline.run(spark, config, available_now=True)
    # A rerun of start with the same range completes nothing more: same rows, no new commit.
    shadow_version = ledger.table_version(spark, started.table)
    again = shadow.start(spark, config, shadow.plan_start(config, load_pipeline(other_file), start=str(low),
                                                          end=str(high)))
    assert again.rows == 80 and ledger.table_version(spark, started.table) == shadow_version

    d = shadow_diff.diff(config, "shadow")
    lacking = sorted(k for k in in_range if "coupon" not in produced[k])
    assert len(lacking) == 20
    assert (d.live_rows, d.live_quarantined, d.shadow_rows, d.shadow_quarantined) == (60, 20, 80, 0)
    assert d.from_quarantine.count == 20 and d.to_quarantine.count == 0
    assert d.from_quarantine.samples == [[topic, p, o] for p, o in lacking[:3]]
    assert d.only_live.count == d.only_shadow.count == d.error_changed.count == 0
    assert d.added_columns == ["channel"] and list(d.columns) == ["channel"] and d.columns["channel"].count == 60
    assert "channel: 60" in shadow_diff.render(d)
    listed = shadow.status(config)
    assert [(s["name"], s["state"], s["rows"], s["quarantined"]) for s in listed] == [("shadow", "ready", 80, 0)]

    # A second shadow of the same range, made before the first is promoted: stale once it is.
    stale = shadow.start(spark, config, shadow.plan_start(config, load_pipeline(other_file), start=str(low),
                                                          end=str(high), name="stale"))
    old = _rows(spark, config.table_path)
    old_failed = _rows(spark, config.quarantine_path)
    promoted = shadow.promote(spark, config, "shadow")
    assert promoted.shadow.state == "promoted"
    assert promoted.bronze_version == promoted.shadow.promoted_version
    # The pipeline's file is the corrected one now, the old kept beside it.
    assert live_file.read_text() == other_file.read_text()
    wrong = tmp_path / "wrong.json"  # the live file's schema file (`_pipelines`)
    assert Path(promoted.backup).read_text().count(str(wrong)) == 1
    config = load_pipeline(live_file)

    rows, failed = _rows(spark, config.table_path), _rows(spark, config.quarantine_path)
    assert not set(rows) & set(failed)
    assert set(rows) | set(failed) == set(produced)  # every offset once across bronze and quarantine
    for key, doc in produced.items():
        if key in in_range:
            assert key in rows and rows[key]["channel"] == doc["channel"], key
            assert {c: rows[key][c] for c in PAYLOAD} == {c: doc.get(c) for c in PAYLOAD}
        elif "coupon" in doc:
            assert rows[key]["channel"] is None and {c: rows[key][c] for c in PAYLOAD} == {c: doc[c] for c in PAYLOAD}
        else:
            assert key in failed
    # The version before the promote reads the old rows; the promote is one commit per table, with its txn.
    assert _rows(spark, config.table_path, promoted.bronze_version - 1) == old
    assert promoted.quarantine_version is not None
    assert _rows(spark, config.quarantine_path, promoted.quarantine_version - 1) == old_failed
    for path in (config.table_path, config.quarantine_path):
        txns = delta_txns(Path(path))
        assert len({(a, v) for _, a, v in txns}) == len(txns), txns
        assert [(a, v) for _, a, v in txns if a == "promote.shadow"] == [("promote.shadow", 0)]
        assert commits_without_txn(Path(path)) == []
    record = DeltaRsReader().history(config.table_path)[-1]
    assert (record.kind, record.rows, record.quarantined) == (BatchKind.PROMOTE, 80, 0)
    assert verify.audit(DeltaRsReader(), config).ok

    # The stream continues where it was, with the corrected file: new records land with their channel, once.
    produced.update(_produce(kafka_servers, topic, range(300, 320)))
    pipeline.run(spark, config, available_now=True)
    rows, failed = _rows(spark, config.table_path), _rows(spark, config.quarantine_path)
    assert set(rows) | set(failed) == set(produced) and not set(rows) & set(failed)
    assert all(rows[k]["channel"] == d["channel"] for k, d in produced.items() if int(d["id"][1:]) >= 300)
    assert verify.audit(DeltaRsReader(), config).ok

    with pytest.raises(shadow.ShadowError, match="promoted"):
        shadow.drop(config, "shadow")
    with pytest.raises(shadow.ShadowError, match="promoted already"):
        shadow.promote(spark, config, "shadow")
    # The stale shadow would put back rows made from the table before the promote: refused, nothing changed.
    version = ledger.table_version(spark, config.table_path)
    with pytest.raises(shadow.ShadowError, match=rf"live version {promoted.bronze_version} \(promote\) changed"):
        shadow.promote(spark, config, "stale")
    assert ledger.table_version(spark, config.table_path) == version and shadow.get(config, "stale").state == "ready"
    shadow.drop(config, "stale")
    assert not Path(stale.table).exists()
    # A rewind to before the promote undoes it: the promoted shadow may be dropped then.
    rewind.rewind(spark, config, to_version=promoted.bronze_version - 1)
    shadow.drop(config, "shadow")
    assert shadow.status(config) == [] and not Path(promoted.shadow.table).exists()


def test_shadow_drop(spark: Any, kafka_servers: str, make_topic: Any, tmp_path: Path) -> None:
    topic = make_topic(partitions=2)
    wrong = _schema(tmp_path / "wrong.json", corrected=False)
    live_file = pipeline_yaml(tmp_path / "live", topic=topic, servers=kafka_servers,
                              extra=f"value:\n  format: json\n  schemaFile: {wrong}\n")
    config = load_pipeline(live_file)
    _produce(kafka_servers, topic, range(0, 20))
    pipeline.run(spark, config, available_now=True)
    plan = shadow.plan_start(config, config, start="0", end=None, name="same")
    made = shadow.start(spark, config, plan)
    assert (made.rows, made.quarantined) == (15, 5)
    d = shadow_diff.diff(config, "same")
    assert d.same, shadow_diff.render(d)
    # While a writer holds the pipeline's lock, promote is refused in one line, and the shadow stays as it was.
    held = WriterLock(config.name, config.checkpoint_path)
    held.acquire()
    try:
        with pytest.raises(PipelineRunning) as refused:
            shadow.promote(spark, config, "same")
        assert "\n" not in str(refused.value)
    finally:
        held.release()
    assert shadow.get(config, "same").state == "ready"
    shadow.drop(config, "same")
    assert not Path(made.table).exists() and not Path(made.quarantine).exists()
    assert shadow.status(config) == []
    # A config whose schema lacks a live column (a rename, say) is refused before anything is made: the live
    # table keeps its columns, and the stream switched to that config could not start after a promote.
    narrow = tmp_path / "narrow.json"
    narrow.write_text(json.dumps({"type": "object", "properties": {"id": {"type": "string"},
                                                                   "amount": {"type": "integer"},
                                                                   "status": {"type": "string"}}}))
    other_file = tmp_path / "orders-narrow.yaml"
    other_file.write_text(live_file.read_text().replace(str(wrong), str(narrow)))
    with pytest.raises(shadow.ShadowError) as refused_schema:
        shadow.start(spark, config, shadow.plan_start(config, load_pipeline(other_file), start="0", end=None,
                                                      name="narrow"))
    text = str(refused_schema.value)
    assert "\n" not in text and str(other_file) in text and "'value.schemaFile'" in text and "coupon" in text
    assert shadow.status(config) == [] and not Path(shadow.shadow_path(config.table_path, "narrow")).exists()


def test_a_promote_rebuilds_the_pipelines_silver_table_from_the_promoted_bronze(spark: Any, kafka_servers: str,
                                                                                make_topic: Any,
                                                                                tmp_path: Path) -> None:
    from ingestion.silver import rs_audit

    topic = make_topic(partitions=1)  # silver in Kafka's order: one partition, one order
    live_file, other_file = _pipelines(tmp_path, topic, kafka_servers, extra="silver:\n  key: id\n")
    config = load_pipeline(live_file)
    # 24 orders, then an update of each (seq and seq + 24 name one id); the wrong file quarantines every fourth
    # (no coupon): live silver lacks those six ids
    for seqs in (range(0, 24), range(24, 48)):
        _produce(kafka_servers, topic, seqs, ids=24)
        pipeline.run(spark, config, available_now=True)
    before = rs_audit.audit(config)
    assert before.ok and before.rows == 18
    last = DeltaRsReader().history(config.table_path)[-1]
    started = shadow.start(spark, config, shadow.plan_start(config, load_pipeline(other_file),
                                                            start=str(last.version), end=None))
    assert (started.rows, started.quarantined) == (24, 0)

    promoted = shadow.promote(spark, config, "shadow")
    config = load_pipeline(live_file)
    assert promoted.silver == ledger.table_version(spark, config.table_path)
    audit = rs_audit.audit(config)
    assert audit.ok and audit.bronze_version == promoted.bronze_version and audit.rows == audit.expected_rows
    # the fold of the promoted bronze: each id's newest row is one the corrected file decoded, with its channel
    current = {r["id"]: r.asDict() for r in table_rows(config.silver_path)}
    assert len(current) == 24 and all(row["channel"] is not None for row in current.values())


# --- a routed pipeline -------------------------------------------------------------------------------------------

def _kind(seq: int) -> str | None:
    """Refunds only in 60..119 and from 180 on (so no refund outside the range lands in its old table); 61 none."""
    if seq == 61:
        return None
    return "Refund" if (60 <= seq < 120 or seq >= 180) and seq % 3 == 0 else ("Sale" if seq % 2 else "Gift")


def routed_pipelines(tmp_path: Path, topic: str, servers: str, routing: str = "") -> tuple[Path, Path]:
    """A JSON topic routed by its `kind` field: the live file with the wrong schema file (coupon required, no
    channel), the other config with the corrected one and the refunds routed to a table of their own name;
    `routing`: more lines of the routing section in both."""
    from tests.helpers import routed_by_field

    files = []
    for corrected in (False, True):
        path = _schema(tmp_path / f"{'right' if corrected else 'wrong'}.json", corrected=corrected)
        body = json.loads(path.read_text())
        body["properties"]["kind"] = {"type": "string"}
        path.write_text(json.dumps(body))
        files.append(path)
    live_file = routed_by_field(tmp_path, "outbox", topic, servers, files[0], routing=routing)
    other_file = tmp_path / "outbox-fixed.yaml"
    other_file.write_text(live_file.read_text().replace(str(files[0]), str(files[1]))
                          + "  tables: {Refund: refunds}\n")
    return live_file, other_file


def produce_kinds(servers: str, topic: str, seqs: range) -> dict[tuple[int, int], dict[str, Any]]:
    """Records `seqs` of kind `_kind(seq)` on partition seq % 2, every fourth without its coupon."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": servers, "enable.idempotence": True})
    found: dict[tuple[int, int], dict[str, Any]] = {}
    for seq in seqs:
        doc: dict[str, Any] = {"id": f"o{seq}", "amount": seq * 10, "status": "NEW", "channel": f"ch{seq % 3}"}
        if (kind := _kind(seq)) is not None:
            doc["kind"] = kind
        if seq % 4:
            doc["coupon"] = f"C{seq}"

        def delivered(err: Any, msg: Any, doc: dict[str, Any] = doc) -> None:
            assert err is None, err
            found[(msg.partition(), msg.offset())] = doc

        producer.produce(topic, value=json.dumps(doc).encode(), partition=seq % 2, on_delivery=delivered)
    producer.flush(30)
    assert len(found) == len(seqs)
    return found


def land_in_two_runs(spark: Any, config: Any, servers: str, topic: str) -> tuple[dict[tuple[int, int], dict[str, Any]],
                                                                             str]:
    """Records 0-59 landed by one available-now run, 60-119 by a second: (what was produced, the ISO time between
    the two runs, where a shadow of the second run's commits starts)."""
    produced = produce_kinds(servers, topic, range(0, 60))
    pipeline.run(spark, config, available_now=True)
    since = dt.datetime.now(dt.UTC).isoformat()
    produced.update(produce_kinds(servers, topic, range(60, 120)))
    pipeline.run(spark, config, available_now=True)
    return produced, since


def routed_rows(spark: Any, config: Any) -> dict[str, dict[tuple[int, int], dict[str, Any]]]:
    """Each route table's rows (and `quarantine`'s) by (partition, offset)."""
    from ingestion.delta import routed

    return {table: _rows(spark, path) for table, path in routed.named_paths(config)}


def assert_each_offset_once(spark: Any, config: Any, produced: dict[tuple[int, int], dict[str, Any]]) -> None:
    """Every produced offset in exactly one of the route tables and quarantine, in the table its kind names."""
    held: dict[tuple[int, int], str] = {}
    for table, rows in routed_rows(spark, config).items():
        for key in rows:
            assert key not in held, (key, table, held[key])
            held[key] = table
    assert set(held) == set(produced)
    for key, doc in produced.items():
        if held[key] != "quarantine":
            assert held[key] == config.route_table(doc["kind"]), (key, doc, held[key])


def assert_txns_once(paths: list[str], promote: dict[str, str]) -> None:
    """Each table's txn actions once each, its promote's (`promote`: path -> app id) at version 0, and no data commit
    without a txn."""
    for path in paths:
        txns = delta_txns(Path(path))
        assert len({(a, v) for _, a, v in txns}) == len(txns), (path, txns)
        assert [(a, v) for _, a, v in txns if a.startswith("promote.")] == \
            ([(promote[path], 0)] if path in promote else []), path
        assert commits_without_txn(Path(path)) == [], path


def test_a_routed_pipelines_shadow_moves_records_between_route_tables_and_makes_a_new_one(
        spark: Any, kafka_servers: str, make_topic: Any, tmp_path: Path) -> None:

    from ingestion.delta import routed
    from ingestion.silver import rs_audit

    topic = make_topic(partitions=2)
    # the sales keep a current-state table (one row per id): the promote brings it along
    live_file, other_file = routed_pipelines(tmp_path, topic, kafka_servers,
                                             routing="  silver:\n    Sale: {key: id}\n")
    config = load_pipeline(live_file)
    produced, since = land_in_two_runs(spark, config, kafka_servers, topic)
    until = dt.datetime.now(dt.UTC).isoformat()
    in_range = {k for k, d in produced.items() if 60 <= int(d["id"][1:]) < 120}
    assert sorted(routed.route_tables(config)) == ["outbox_gift", "outbox_refund", "outbox_sale"]

    with pytest.raises(shadow.ShadowError, match=r"--from 3: a routed pipeline's tables .* give an ISO time") as no:
        shadow.plan_start(config, load_pipeline(other_file), start="3", end=None)
    assert "\n" not in str(no.value) and str(live_file) in str(no.value)
    plan = shadow.plan_start(config, load_pipeline(other_file), start=since, end=until)
    assert [(s.partition, s.first, s.last) for s in plan.shadow.spans] == [(0, 30, 59), (1, 30, 59)]
    started = shadow.start(spark, config, plan)
    assert (started.state, started.rows, started.quarantined) == ("ready", 59, 1)
    assert sorted(started.routes) == ["outbox_gift", "outbox_sale", "refunds"]
    assert all(p.endswith("__shadow") for p in started.routes.values())
    # the live pipeline goes on with the old file, and does not take the shadow's tables for route tables
    produced.update(produce_kinds(kafka_servers, topic, range(120, 180)))
    pipeline.run(spark, config, available_now=True)
    assert sorted(routed.route_tables(config)) == ["outbox_gift", "outbox_refund", "outbox_sale"]
    versions = {p: ledger.table_version(spark, p) for p in started.routes.values()}
    again = shadow.start(spark, config, shadow.plan_start(config, load_pipeline(other_file), start=since, end=until))
    assert again.rows == 59 and {p: ledger.table_version(spark, p) for p in again.routes.values()} == versions

    d = shadow_diff.diff(config, "shadow")
    refunds_with_coupon = sorted(k for k in in_range if produced[k].get("kind") == "Refund" and "coupon" in
                                 produced[k])
    assert (d.live_rows, d.live_quarantined, d.shadow_rows, d.shadow_quarantined) == (44, 16, 59, 1)
    assert d.tables == {"outbox_gift": [10, 20], "outbox_refund": [15, 0], "outbox_sale": [19, 19],
                        "refunds": [0, 20]}
    assert (d.from_quarantine.count, d.to_quarantine.count, d.error_changed.count) == (15, 0, 0)
    assert d.only_live.count == d.only_shadow.count == 0
    assert d.moved_tables.count == 15 and d.moves == {"outbox_refund -> refunds": 15}
    assert d.moved_tables.samples == [[topic, p, o] for p, o in refunds_with_coupon[:3]]
    assert {c: m.count for c, m in d.columns.items()} == {"outbox_gift.channel": 10, "outbox_sale.channel": 19}
    assert sorted(d.added_columns) == ["outbox_gift.channel", "outbox_sale.channel"]
    assert json.loads(json.dumps(d.to_json()))["moves"] == {"outbox_refund -> refunds": 15}
    assert "outbox_refund -> refunds 15" in shadow_diff.render(d)
    assert [(s["state"], s["rows"], s["quarantined"]) for s in shadow.status(config)] == [("ready", 59, 1)]
    # a second shadow, of the live config itself: the same as live; dropped, its four tables go
    same = shadow.start(spark, config, shadow.plan_start(config, config, start=since, end=until, name="same"))
    assert sorted(same.routes) == ["outbox_gift", "outbox_refund", "outbox_sale"]
    assert shadow_diff.diff(config, "same").same
    shadow.drop(config, "same")
    assert not any(Path(p).exists() for p in [*same.routes.values(), same.quarantine])
    assert [s["name"] for s in shadow.status(config)] == ["shadow"]

    old = routed_rows(spark, config)
    promoted = shadow.promote(spark, config, "shadow")
    assert promoted.shadow.state == "promoted" and live_file.read_text() == other_file.read_text()
    config = load_pipeline(live_file)
    assert sorted(promoted.tables) == ["outbox_gift", "outbox_refund", "outbox_sale", "refunds"]
    assert sorted(routed.route_tables(config)) == ["outbox_gift", "outbox_refund", "outbox_sale", "refunds"]
    rows = routed_rows(spark, config)
    assert rows["outbox_refund"] == {}  # emptied out: the table stays
    assert len(rows["refunds"]) == 20 and all(r["channel"] is not None for r in rows["refunds"].values())
    assert set(rows["quarantine"]) == {k for k, d in produced.items() if "kind" not in d or (
        "coupon" not in d and k not in in_range)}
    for key in in_range:
        table = "quarantine" if "kind" not in produced[key] else config.route_table(produced[key]["kind"])
        if table != "quarantine":
            assert rows[table][key]["channel"] == produced[key]["channel"]
            assert {c: rows[table][key][c] for c in PAYLOAD} == {c: produced[key].get(c) for c in PAYLOAD}
    assert_each_offset_once(spark, config, produced)
    # the version before each table's promote reads its old rows
    paths = dict(routed.named_paths(config))
    for table, version in promoted.tables.items():
        assert _rows(spark, paths[table], version - 1) == old.get(table, {}), table
    assert promoted.quarantine_version is not None
    assert _rows(spark, config.quarantine_path, promoted.quarantine_version - 1) == old["quarantine"]
    promote_ids = {paths[t]: f"promote.shadow.{t}" for t in promoted.tables} | {
        config.quarantine_path: "promote.shadow"}
    assert_txns_once(list(paths.values()), promote_ids)
    assert verify.audit(DeltaRsReader(), config).ok
    (sales,) = config.route_silvers().values()
    assert promoted.silvers == {"outbox_sale": promoted.tables["outbox_sale"]}
    audit = rs_audit.audit(sales)
    assert audit.ok and audit.bronze_version == promoted.tables["outbox_sale"]
    assert audit.rows == sum(1 for d in produced.values() if d.get("kind") == "Sale") == 79
    current = {r["id"]: r.asDict() for r in table_rows(sales.silver_path)}
    assert sum(1 for r in current.values() if r["channel"] is not None) == 19  # the range's sales

    # the stream continues with the corrected file: new refunds land in their new table, each record once
    produced.update(produce_kinds(kafka_servers, topic, range(180, 200)))
    pipeline.run(spark, config, available_now=True)
    assert_each_offset_once(spark, config, produced)
    assert verify.audit(DeltaRsReader(), config).ok
