"""A routed pipeline under SIGKILL (docs/routing.md): three Avro event types on one 3-partition topic, produced with
confluent-kafka's AvroSerializer and TopicRecordNameStrategy against the registry stand-in, a streaming `ingest run`
killed at the fault point between two route tables' commits, then killed at a random moment after a fourth type was
registered mid-run (its table made without a restart), then finished. Each route table holds exactly its type's
records, every field as produced; each offset is once across the tables and quarantine; each (txnAppId, txnVersion)
once per table; `status --json` lists every route table; `verify` exits 0, and 1 once a row is moved to another
table behind its back."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ingestion.config import load_pipeline
from tests.helpers import delta_txns, ingest_here, table_rows, wait_while_running
from tests.integration.test_routing import Producer, Registry, assert_route_tables, routed_yaml

pytestmark = pytest.mark.e2e

INGEST = str(Path(sys.executable).parent / "ingest")
KINDS = ["OrderCreated", "OrderPaid", "OrderCancelled"]


def _rows(path: str) -> int:
    from deltalake import DeltaTable

    try:
        return DeltaTable(path).to_pyarrow_table(columns=["_kafka_offset"]).num_rows
    except Exception:  # noqa: BLE001 - not a table yet
        return 0


def _start(file: Path, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([INGEST, "run", str(file)], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})}, start_new_session=True)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def test_a_routed_run_killed_between_two_tables_commits_and_at_random_keeps_each_table_exact(
        spark: Any, kafka_servers: str, make_topic: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    registry = Registry(tmp_path / "registry")
    try:
        _run(spark, kafka_servers, make_topic, registry, tmp_path, capsys)
    finally:
        registry.server.stop()


def _run(spark: Any, kafka_servers: str, make_topic: Any, registry: Registry, tmp_path: Path,
         capsys: pytest.CaptureFixture[str]) -> None:
    topic = make_topic(partitions=3)
    produced = Producer(kafka_servers, registry, topic)
    rng = random.Random(11)
    produced.send([rng.choice(KINDS) for _ in range(45)] + KINDS, raw=[b"\x00\x00\x00\x00"])  # too short: no route
    file = routed_yaml(tmp_path, name="shop", topic=topic, servers=kafka_servers, registry=registry,
                       sink="  directWriteMaxOffsets: 20\n", source="  maxOffsetsPerTrigger: 30\n")
    config = load_pipeline(file)
    log = tmp_path / "run.log"

    # 1. Killed where one route table has committed batch 0 and the next has not.
    marker = tmp_path / "fault"
    proc = _start(file, log, {"INGEST_TEST_FAULT": "between_tables:0", "INGEST_TEST_FAULT_FILE": str(marker)})
    try:
        wait_while_running(marker.exists, proc, log, "the between_tables fault", 300)
    finally:
        _kill(proc)
    tables = sorted(config.route_path(config.route_table(k)) for k in KINDS)
    assert _rows(tables[0]) > 0 and all(_rows(t) == 0 for t in tables[1:])  # one committed, the rest not

    # 2. Restarted: the batch is replayed (the first table skips it by its txn); a fourth type registered while it
    # runs gets its table; killed at a random moment after more records were sent.
    proc = _start(file, log)
    try:
        wait_while_running(lambda: all(_rows(config.route_path(config.route_table(k))) == len(produced.of(k))
                                       for k in KINDS), proc, log, "the three route tables", 300)
        produced.send(["OrderShipped"] * 4 + [rng.choice(KINDS) for _ in range(6)])
        shipped = config.route_path(config.route_table("OrderShipped"))
        wait_while_running(lambda: _rows(shipped) >= 4, proc, log, "the fourth type's table", 240)
        produced.send([rng.choice([*KINDS, "OrderShipped"]) for _ in range(30)])
        time.sleep(rng.uniform(0.0, 3.0))
    finally:
        _kill(proc)

    # 3. Finished: in this process, through `ingest run`'s launch sequence (the kills are behind us, and a third
    #    JVM start would only cost the suite time).
    from ingestion.stream import launch

    launch.run(spark, load_pipeline(file), available_now=True)  # raises unless the run caught up

    assert_route_tables(spark, config, produced, [*KINDS, "OrderShipped"])
    failed = table_rows(config.quarantine_path)
    assert [(r["_kafka_value"], r["_error_class"]) for r in failed] == [(b"\x00\x00\x00\x00", "RouteError")]
    held = Counter((r["_kafka_partition"], r["_kafka_offset"]) for path in
                   [*tables, shipped, config.quarantine_path]
                   for r in table_rows(path))
    assert set(held) == set(produced.produced) and set(held.values()) == {1}  # each offset once, over all
    for path in [*tables, shipped]:
        txns = [(a, v) for _, a, v in delta_txns(Path(path))]
        assert len(txns) == len(set(txns)) and len({a for a, _ in txns}) == 1, txns

    # The read-only commands, in this process through ingest's own main (they need no JVM: a process each would
    # only add its start).
    code, out, err = ingest_here(capsys, "status", str(file), "--json")
    assert code == 0, err[-2000:]
    (shown,) = json.loads(out)
    listed = {r["table"]: r["path"] for r in shown["routes"]}
    assert listed == {config.route_table(k): config.route_path(config.route_table(k))
                      for k in [*KINDS, "OrderShipped"]}
    assert shown["lag_records"] == 0

    code, out, err = ingest_here(capsys, "verify", str(file))
    assert code == 0, out[-3000:] + err[-3000:]

    # A row moved from OrderPaid's table to OrderCancelled's behind the pipeline's back: still once, wrong table.
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    paid, cancelled = (config.route_path(config.route_table(k)) for k in ("OrderPaid", "OrderCancelled"))
    moved = spark.read.format("delta").load(paid).orderBy("_kafka_offset").limit(1)
    offset, partition = moved.first()["_kafka_offset"], moved.first()["_kafka_partition"]
    target = spark.read.format("delta").load(cancelled).schema
    moved.select(*[F.col(f.name) if f.name in moved.columns else F.lit(None).cast(f.dataType).alias(f.name)
                   for f in target.fields]).write.format("delta").mode("append").save(cancelled)
    DeltaTable.forPath(spark, paid).delete((F.col("_kafka_offset") == offset)
                                           & (F.col("_kafka_partition") == partition))
    code, out, err = ingest_here(capsys, "verify", str(file))
    assert code == 1, out[-3000:] + err[-3000:]
    assert f"route table {config.route_table('OrderCancelled')}: 1 row(s)" in out
    assert f"belongs in {config.route_table('OrderPaid')}" in out
