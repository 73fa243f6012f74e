"""`ingest shadow start` and `ingest shadow promote` SIGKILLed at their commits' fault points: start after the
shadow's commit (its state not yet `ready`), promote between the live quarantine's commit and bronze's; a routed
pipeline's start after its first shadow route table's commit, and its promote between two route tables' commits.
Each leaves the live table's old rows readable, says where it stopped (`status`), and a rerun completes with every
offset once and each txn action once, as an uninterrupted promote would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ingestion.config import load_pipeline
from ingestion.delta import routed
from ingestion.delta.ledger import PROMOTE_BATCH_ID, REPLAY_BATCH_ID
from ingestion.delta.rs_reads import DeltaRsReader
from ingestion.ops import shadow, verify
from ingestion.stream import pipeline
from tests.helpers import commits_without_txn, delta_txns, ingest_here, killed_at
from tests.integration.test_shadow import (
    _pipelines,
    _produce,
    _rows,
    assert_each_offset_once,
    assert_txns_once,
    land_in_two_runs,
    routed_pipelines,
    routed_rows,
)

pytestmark = pytest.mark.e2e


def test_shadow_start_and_promote_killed_at_their_commits_then_rerun(spark: Any, kafka_servers: str,
                                                                     make_topic: Any, tmp_path: Path) -> None:
    topic = make_topic(partitions=2)
    live_file, other_file = _pipelines(tmp_path, topic, kafka_servers)
    config = load_pipeline(live_file)
    produced: dict[tuple[int, int], dict[str, Any]] = {}
    for seqs in (range(0, 40), range(40, 80)):
        produced.update(_produce(kafka_servers, topic, seqs))
        pipeline.run(spark, config, available_now=True)
    last = DeltaRsReader().history(config.table_path)[-1]
    in_range = {(p, o) for (p, o), d in produced.items() if int(d["id"][1:]) >= 40}

    # start, killed once the shadow's bronze is committed and before its state says `ready`
    args = ("shadow", "start", str(live_file), "--config", str(other_file), "--from", str(last.version))
    killed_at(f"after_commit:{REPLAY_BATCH_ID}", tmp_path / "start.log", *args)
    (stopped,) = shadow.status(config)
    assert (stopped["state"], stopped["rows"]) == ("starting", 40)
    table = stopped["table"]
    committed = delta_txns(Path(table))
    started = shadow.start(spark, config, shadow.plan_start(config, load_pipeline(other_file),
                                                            start=str(last.version), end=None))
    assert (started.state, started.rows, started.quarantined) == ("ready", 40, 0)
    assert delta_txns(Path(table)) == committed  # the rerun found the rows committed: nothing written twice

    # promote, killed between the live quarantine's commit and bronze's: bronze still holds the old rows, the
    # pipeline's file is the old one, and the shadow says it is being promoted
    old = _rows(spark, config.table_path)
    old_text = live_file.read_text()
    killed_at(f"quarantine_committed:{PROMOTE_BATCH_ID}", tmp_path / "promote.log", "shadow", "promote",
               str(live_file))
    assert _rows(spark, config.table_path) == old and live_file.read_text() == old_text
    assert [s["state"] for s in shadow.status(config)] == ["promoting"]
    promoted = shadow.promote(spark, config, "shadow")
    assert promoted.shadow.state == "promoted" and live_file.read_text() == other_file.read_text()
    config = load_pipeline(live_file)
    rows, failed = _rows(spark, config.table_path), _rows(spark, config.quarantine_path)
    assert not set(rows) & set(failed) and set(rows) | set(failed) == set(produced)
    assert all(rows[k]["channel"] == produced[k]["channel"] for k in in_range)
    assert _rows(spark, config.table_path, promoted.bronze_version - 1) == old
    for path in (config.table_path, config.quarantine_path):
        txns = delta_txns(Path(path))
        assert len({(a, v) for _, a, v in txns}) == len(txns), txns
        assert [(a, v) for _, a, v in txns if a == "promote.shadow"] == [("promote.shadow", 0)]
        assert commits_without_txn(Path(path)) == []
    assert verify.audit(DeltaRsReader(), config).ok


def test_a_routed_start_and_promote_killed_at_their_commits_then_rerun(spark: Any, kafka_servers: str,
                                                                         make_topic: Any, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    topic = make_topic(partitions=2)
    live_file, other_file = routed_pipelines(tmp_path, topic, kafka_servers)
    config = load_pipeline(live_file)
    produced, since = land_in_two_runs(spark, config, kafka_servers, topic)
    # start, killed once its first route table (outbox_gift's shadow) is committed: a rerun writes the rest only
    killed_at(f"after_commit:{REPLAY_BATCH_ID}", tmp_path / "start.log", "shadow", "start", str(live_file),
              "--config", str(other_file), "--from", since)
    (stopped,) = shadow.status(config)
    assert (stopped["state"], stopped["rows"], stopped["quarantined"]) == ("starting", 20, 0)
    gift = config.route_path("outbox_gift") + "__shadow"
    committed = delta_txns(Path(gift))
    started = shadow.start(spark, config, shadow.plan_start(config, load_pipeline(other_file), start=since,
                                                            end=None))
    assert (started.state, started.rows, started.quarantined) == ("ready", 59, 1)
    assert delta_txns(Path(gift)) == committed

    # killed after quarantine's commit and the first route table's (outbox_gift), before outbox_refund's: the
    # pipeline's file is the old one, the shadow says it is being promoted
    old = routed_rows(spark, config)
    old_text = live_file.read_text()
    killed_at(f"between_tables:{PROMOTE_BATCH_ID}", tmp_path / "promote.log", "shadow", "promote", str(live_file))
    assert live_file.read_text() == old_text and [s["state"] for s in shadow.status(config)] == ["promoting"]
    now = routed_rows(spark, config)
    assert now["outbox_gift"] != old["outbox_gift"] and now["outbox_refund"] == old["outbox_refund"]
    assert now["outbox_sale"] == old["outbox_sale"]

    # the rerun, as an operator makes it (`ingest shadow promote`, in this process on the session's JVM: the kills
    # are behind us, and a JVM start of its own would only cost the suite time): the command's one line names each
    # table's promote version
    code, out, err = ingest_here(capsys, "shadow", "promote", str(live_file))
    assert code == 0, err[-3000:]
    promoted = shadow.get(config, "shadow")
    assert promoted.state == "promoted" and live_file.read_text() == other_file.read_text()
    assert sorted(promoted.promoted_versions) == ["outbox_gift", "outbox_refund", "outbox_sale", "refunds"]
    line = out.strip().splitlines()[-1]
    assert "shadow shadow promoted: " + ", ".join(f"{t} version {v}" for t, v in sorted(
        promoted.promoted_versions.items())) in line, line
    config = load_pipeline(live_file)
    assert_each_offset_once(spark, config, produced)
    paths = dict(routed.named_paths(config))
    assert_txns_once(list(paths.values()), {paths[t]: f"promote.shadow.{t}" for t in promoted.promoted_versions} | {
        config.quarantine_path: "promote.shadow"})
    assert verify.audit(DeltaRsReader(), config).ok
