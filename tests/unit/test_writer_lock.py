"""The writer lock's record of its holder: a holder that dies (SIGKILL) leaves its record, with its MLflow run, for
the next holder; one that releases the lock leaves none."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from ingestion.stream.lock import LOCK_FILE, Holder, WriterLock, _without_password

HOLD = """
import sys, time
from ingestion.stream.lock import WriterLock
lock = WriterLock("orders", sys.argv[1])
lock.acquire()
lock.note_run("run-1", "https://ingest:secret@mlflow.example:5000")
print("held", flush=True)
time.sleep(600)
"""


def test_a_killed_holder_leaves_its_mlflow_run_to_the_next_holder_and_a_release_leaves_nothing(
        tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(checkpoint)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        record = json.loads((checkpoint / LOCK_FILE).read_text())
    finally:
        holder.kill()
        holder.wait()
    lock = WriterLock("orders", str(checkpoint))
    lock.probe()  # a probe neither takes the lock for good nor touches the record
    assert json.loads((checkpoint / LOCK_FILE).read_text()) == record
    lock.acquire()
    assert lock.taken_from == Holder(pid=holder.pid, host=socket.gethostname(), started=record["started"],
                                     mlflow_run="run-1", mlflow_uri="https://ingest@mlflow.example:5000",
                                     reason=f"writer lock taken from dead pid {holder.pid}")
    lock.release()
    assert (checkpoint / LOCK_FILE).read_text() == ""
    again = WriterLock("orders", str(checkpoint))
    again.acquire()
    assert again.taken_from is None
    again.release()


def test_a_tracking_uri_is_recorded_without_its_password() -> None:
    assert _without_password("https://ingest:secret@host:5000/x") == "https://ingest@host:5000/x"
    assert _without_password("sqlite:////tmp/a@b/mlflow.db") == "sqlite:////tmp/a@b/mlflow.db"
    assert _without_password("databricks") == "databricks"
