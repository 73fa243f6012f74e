"""`ingest run` killed with SIGKILL at several moments and restarted: no duplicate, no gap, and no MLflow run of a
killed writer left RUNNING. While a run holds the pipeline, a second writer is refused at once in one line.

The process group (Python driver and its Spark JVM) is killed at once, as a crashed machine would be. Fault
points (INGEST_TEST_FAULT) hold the writer right after a Delta commit, right before one, and (the driver-side path)
with a data file written that no commit names, so the kill lands exactly between the Delta commit and Spark's
checkpoint, the window exactly-once depends on, and in the others.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from ingestion.delta import ledger
from ingestion.delta.rs_reads import DeltaRsReader
from ingestion.dev.samples import produce_orders
from tests.conftest import pipeline_yaml
from tests.helpers import assert_exactly_produced, delta_txns, java_command_line, table_rows

pytestmark = pytest.mark.e2e

INGEST = str(Path(sys.executable).parent / "ingest")


class IngestProcess:
    started: ClassVar[list[IngestProcess]] = []  # killed after each test, whatever its outcome

    def __init__(self, config: Path, log: Path, fault: str | None = None, *, streaming: bool = False) -> None:
        self.log = log
        self.marker = log.with_suffix(".fault")
        env = dict(os.environ)
        if fault:
            env.update({"INGEST_TEST_FAULT": fault, "INGEST_TEST_FAULT_FILE": str(self.marker)})
        with open(log, "wb") as out:
            self.proc = subprocess.Popen([INGEST, "run", str(config), *([] if streaming else ["--available-now"])],
                                         stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                         start_new_session=True)
        IngestProcess.started.append(self)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, predicate: object, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():  # type: ignore[operator]
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"ingest exited with {self.proc.returncode} too early:\n{self.text()[-3000:]}")
            time.sleep(0.1)
        self.kill()
        raise AssertionError(f"timed out waiting; log:\n{self.text()[-3000:]}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the group of the process we started: driver and its JVM
        self.proc.wait(30)


@pytest.fixture(autouse=True)
def _no_process_left() -> Iterator[None]:
    """A failed assertion must not leave a run waiting at its fault point for ever."""
    yield
    while IngestProcess.started:
        IngestProcess.started.pop().kill()


def test_sigkill_at_several_moments_then_restart_loses_and_duplicates_nothing(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path) -> None:
    topic = make_topic(partitions=3)
    produced = produce_orders(kafka_servers, topic, 600, schema_id=1, schema=orders_schema)
    experiment = f"ingest/crash-{topic}"
    # One start batch of 100 records at most (sink.startBatchMaxOffsets), the rest for the query's batches.
    config = pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers, sink="  startBatchMaxOffsets: 100\n",
                           extra=f"source:\n  maxOffsetsPerTrigger: 100\nmetrics:\n  experiment: {experiment}\n")
    table = tmp_path / "tables" / "orders"
    commits = tmp_path / "checkpoints" / "orders" / "commits"

    # 0. Killed right after the start batch's commit (100 records, before the JVM), then right before the next
    #    one's: the next run's start batch goes on from the first's offsets.
    for n, fault in enumerate(("after_commit", "before_commit")):
        run0 = IngestProcess(config, tmp_path / f"run0-{n}.log", fault=f"{fault}:{ledger.START_BATCH_ID}")
        run0.wait_for(run0.marker.exists)
        run0.kill()
    # the start batch commits its own SetTransaction: the checkpoint's app id with `.start`, the version it follows
    assert [(v, a.endswith(".start"), t) for v, a, t in delta_txns(table)] == [(1, True, 0)]
    assert not commits.exists()
    assert sum(r.rows for r in DeltaRsReader().history(str(table))) == 100

    def query_txns() -> list[int]:
        return [v for _, a, v in delta_txns(table) if not a.endswith(".start")]

    # 1. Killed right after batch 1's Delta commit, before Spark's checkpoint marks batch 1 done.
    run1 = IngestProcess(config, tmp_path / "run1.log", fault="after_commit:1")
    run1.wait_for(run1.marker.exists)
    java = java_command_line(run1.proc.pid)  # a local JVM's small heap and collector
    assert {"-Xmx1g", "-XX:+UseSerialGC", "-XX:NewRatio=1", "-XX:MetaspaceSize=256m"} <= set(java), java
    assert not any(o.startswith("-Xms") for o in java), java
    # While run 1 holds the pipeline, a second writer is refused at once, in one line naming it: before a JVM, which
    # its JAVA_HOME (a folder with no java) would have stopped with another error.
    second = subprocess.run([INGEST, "run", str(config)], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "JAVA_HOME": str(tmp_path / "no-java")})
    assert second.returncode == 1
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1, second.stderr
    assert lines[0].startswith("error: pipeline 'orders' is already running (pid ")
    assert f"pid {run1.proc.pid} on " in lines[0]
    run1.kill()
    assert query_txns() == [0, 1]
    assert not (commits / "1").exists(), "the checkpoint must not know batch 1 is done yet"

    # 2. Restarted: Spark replays batch 1 under the same batch id and txnAppId; Delta must skip it. Then killed
    #    right before batch 3's commit.
    run2 = IngestProcess(config, tmp_path / "run2.log", fault="before_commit:3")
    run2.wait_for(run2.marker.exists)
    run2.kill()
    assert "orders batch 1: skipped by Delta" in run2.text()
    assert query_txns() == [0, 1, 2]

    # 2b. Killed with batch 3's data file written by the driver-side path, not committed: a file no commit names.
    committed_files = set(table.glob("*.parquet"))
    run2b = IngestProcess(config, tmp_path / "run2b.log", fault="files_written:3")
    run2b.wait_for(run2b.marker.exists)
    run2b.kill()
    assert query_txns() == [0, 1, 2]
    orphans = set(table.glob("*.parquet")) - committed_files
    live = {f["path"] for f in _adds(table)}
    assert orphans and not {f.name for f in orphans} & live

    # 3. More records arrive; a run is killed at an arbitrary moment, just after its first commit.
    produced += produce_orders(kafka_servers, topic, 150, schema_id=1, schema=orders_schema, first_seq=600)
    run3 = IngestProcess(config, tmp_path / "run3.log")
    run3.wait_for(lambda: "table version" in run3.text())
    run3.kill()

    # 4. A last run catches up and exits 0.
    run4 = IngestProcess(config, tmp_path / "run4.log")
    assert run4.proc.wait(300) == 0, run4.text()[-3000:]
    # and says nothing went wrong (a progress event that reached the monitor after Python had gone was logged
    # as an ERROR of Spark's listener bus, with a py4j stack)
    assert "ERROR" not in run4.text(), run4.text()[-3000:]

    rows = table_rows(str(table))
    assert_exactly_produced(rows, produced)

    # From the Delta log: one txn action per batch id, all under one app id, so no batch was written twice;
    # the replay of batch 1 left no trace but the skip.
    txns = [t for t in delta_txns(table) if not t[1].endswith(".start")]
    app_ids = {app for _, app, _ in txns}
    versions = [v for _, _, v in txns]
    assert len(app_ids) == 1
    assert versions == sorted(set(versions)), f"a txn version was committed twice: {versions}"
    assert set(versions) == {r["_batch_id"] for r in rows} - {ledger.START_BATCH_ID}
    # two start batches committed (run 0's first, run 1's), 100 records each, under the checkpoint's app id with
    # `.start`, each with the table version it followed as its txnVersion
    app_id = app_ids.pop()
    starts = [r for r in DeltaRsReader().history(str(table)) if r.batch_id == ledger.START_BATCH_ID]
    assert [(r.rows, r.app_id) for r in starts] == [(100, f"{app_id}.start")] * 2
    assert [(a, t) for v, a, t in delta_txns(table) if a.endswith(".start")] == [
        (f"{app_id}.start", r.version - 1) for r in starts]
    assert sum(1 for r in rows if r["_batch_id"] == ledger.START_BATCH_ID) == 200
    # the file batch 3 left uncommitted is still no commit's: no reader sees it (VACUUM removes it)
    assert orphans and not {f.name for f in orphans} & {f["path"] for f in _adds(table)}

    # 5. A streaming run killed with nothing left to read; the next run finds the table caught up and needs no JVM,
    #    and still ends the killed run's MLflow run (it takes the writer lock from the dead pid first).
    run5 = IngestProcess(config, tmp_path / "run5.log", streaming=True)
    run5.wait_for(lambda: "query started" in run5.text())
    run5.kill()
    run6 = IngestProcess(config, tmp_path / "run6.log")
    assert run6.proc.wait(120) == 0, run6.text()[-3000:]
    assert "caught up, nothing to do" in run6.text() and "no Spark session started" in run6.text()

    # Each killed run's MLflow run was ended by the next run, which took the writer lock from its dead pid.
    from mlflow.tracking import MlflowClient

    from ingestion.stream.metrics import ENDED_BY_TAG, tracking_uri

    client = MlflowClient(tracking_uri())
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id], order_by=["start_time ASC"])
    assert [(r.info.status, r.data.tags.get(ENDED_BY_TAG)) for r in runs] == [
        ("KILLED", f"writer lock taken from dead pid {run1.proc.pid}"),
        ("KILLED", f"writer lock taken from dead pid {run2.proc.pid}"),
        ("KILLED", f"writer lock taken from dead pid {run2b.proc.pid}"),
        ("KILLED", f"writer lock taken from dead pid {run3.proc.pid}"),
        ("FINISHED", None),
        ("KILLED", f"writer lock taken from dead pid {run5.proc.pid}")]
    assert all(r.info.end_time is not None and r.info.end_time >= r.info.start_time for r in runs)
    assert (tmp_path / "checkpoints" / "orders" / "_ingest_writer.lock").read_text() == ""  # released cleanly


def _adds(table: Path) -> list[dict[str, object]]:
    """The data files the table's log names now (delta-rs)."""
    import pyarrow as pa
    from deltalake import DeltaTable

    return pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).to_pylist()
