"""`ingest run` on a Protobuf topic (schemas from `schemas/<subject>/<id>.proto`), killed with SIGKILL between a
Delta commit and Spark's checkpoint, then restarted: every record once in bronze, and verify's audit holds."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import pytest

from ingestion.config import load_pipeline
from ingestion.decode.protobuf_wire import index_bytes
from ingestion.decode.wire import encode
from ingestion.delta.rs_reads import DeltaRsReader
from ingestion.ops import verify
from tests import protobuf as shop
from tests.conftest import pipeline_yaml
from tests.e2e.test_crash_restart import IngestProcess, _no_process_left  # noqa: F401 - the fixture kills runs
from tests.helpers import delta_txns, table_rows

pytestmark = pytest.mark.e2e


def test_a_protobuf_pipeline_killed_after_a_commit_restarts_without_loss_or_duplicate(
        spark, kafka_servers, make_topic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    from confluent_kafka import Producer

    topic = make_topic(partitions=3)
    subject = tmp_path / "schemas" / f"{topic}-value"
    (subject / "shop" / "v1").mkdir(parents=True)
    (subject / "shop" / "v1" / "common.proto").write_text(shop.common_text())
    (subject / "5.proto").write_text(shop.proto_text())
    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(tmp_path / "schemas"))  # for this process and the runs
    producer = Producer({"bootstrap.servers": kafka_servers})
    produced = {}
    for seq in range(240):
        msg = shop.order(seq)
        producer.produce(topic, key=msg.id.encode(), value=encode(5, index_bytes([1]) + msg.SerializeToString()),
                         partition=seq % 3)
        produced[msg.id] = shop.expected_row(msg)
    producer.flush(30)
    path = pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers, sink="  startBatchMaxOffsets: 80\n",
                         extra="source:\n  maxOffsetsPerTrigger: 80\nvalue:\n  format: protobuf\n")
    table = tmp_path / "tables" / "orders"

    run1 = IngestProcess(path, tmp_path / "run1.log", fault="after_commit:1")
    run1.wait_for(run1.marker.exists)
    run1.kill()
    assert [v for _, a, v in delta_txns(table) if not a.endswith(".start")] == [0, 1]

    # Restarted in this process, through `ingest run`'s launch sequence (the kill is behind us, and a second JVM
    # start would only cost the suite time): Spark replays batch 1, which Delta skips.
    from ingestion.stream import launch

    with caplog.at_level(logging.WARNING, logger="ingestion.stream.batch"):
        launch.run(spark, load_pipeline(path), available_now=True)  # raises unless the run caught up
    assert "orders batch 1: skipped by Delta" in caplog.text

    rows = table_rows(str(table))
    offsets = Counter((r["_kafka_partition"], r["_kafka_offset"]) for r in rows)
    assert len(offsets) == 240 and set(offsets.values()) == {1}
    for row in rows:
        got = row.asDict(recursive=True)
        want = produced[got["id"]]
        assert {k: got[k] for k in want} == want, got["id"]
    assert verify.audit(DeltaRsReader(), load_pipeline(path)).ok
