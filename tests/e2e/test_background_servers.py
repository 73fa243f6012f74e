"""The catalog's Derby server ends with what needs it: at once when its state folder is deleted (even one started
by hand), and, started on a session's behalf, once no client process is left and it has been idle."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ingestion.processes import alive
from ingestion.runtime import metastore
from tests.helpers import processes_left

pytestmark = pytest.mark.e2e

INGEST = str(Path(sys.executable).parent / "ingest")


def _ended(pid: int, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not alive(pid)


def test_a_catalog_server_ends_when_its_state_folder_is_deleted(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = {**os.environ, "INGEST_HOME": str(state)}
    started = subprocess.run([INGEST, "metastore", "start"], capture_output=True, text=True, env=env, timeout=300)
    assert started.returncode == 0, started.stderr
    pid = int((state / "metastore" / "derby.pid").read_text())
    try:
        assert alive(pid)
        shutil.rmtree(state)
        assert processes_left(state) == {}
    finally:
        if alive(pid):
            os.kill(pid, 9)


def test_an_auto_started_catalog_server_serves_while_a_client_lives_then_ends_idle(tmp_path: Path) -> None:
    folder = tmp_path / "metastore"
    client = subprocess.Popen(["sleep", "600"])  # a session's process, registered by its pid
    try:
        metastore.start(folder=folder, idle=1, client=client.pid)
        found = metastore.running(folder)
        assert found is not None
        pid = found[0]
        time.sleep(5)  # idle for longer than `idle` and two of the server's looks, but its client lives
        assert alive(pid) and metastore.running(folder) == found
    finally:
        client.kill()
        client.wait()
    try:
        assert _ended(pid)
        assert metastore.running(folder) is None
        assert not (folder / "port").exists()
    finally:
        if alive(pid):
            os.kill(pid, 9)
