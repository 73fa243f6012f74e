"""The JVM's class archive with real JVMs: a session told to record it (as `ingest run`'s is, with
INGEST_CLASS_ARCHIVE=record) does at exit, the next one starts with its classes already parsed, and one that will
not load is removed rather than stopping the JVM."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ingestion.runtime import class_archive

# A driver memory of its own gives this test an archive (key) no other session shares.
SESSION = """
import sys
from ingestion.runtime import session
spark = session.get_session(conf={"spark.driver.memory": "700m",
                                  "spark.driver.extraJavaOptions": " ".join(sys.argv[1:])}, record_classes=True)
print("session ok", spark.version)
"""


def start(*java_options: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, class_archive.SWITCH: class_archive.RECORD}
    done = subprocess.run([sys.executable, "-c", SESSION, *java_options], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0 and "session ok" in done.stdout, done.stderr[-3000:]
    return done


@pytest.fixture
def archive() -> Path:
    java = class_archive.java_executable()
    if java is None:
        pytest.skip("no java")
    from ingestion.runtime import session

    options = dict(session.builder(conf={"spark.driver.memory": "700m"})._options)
    path = class_archive.folder() / f"{class_archive.key(options, java)}.jsa"
    for leftover in (path, path.with_suffix(".claim")):
        leftover.unlink(missing_ok=True)
    yield path
    path.unlink(missing_ok=True)


def test_recorded_at_exit_used_at_the_next_start_and_removed_when_broken(archive: Path, tmp_path: Path) -> None:
    start()
    deadline = time.monotonic() + 180  # the JVM writes it on its way out; `finish` checks it, then moves it
    while not archive.is_file() and time.monotonic() < deadline:
        time.sleep(1)
    assert archive.is_file(), sorted(p.name for p in archive.parent.iterdir())
    assert not archive.with_suffix(".claim").exists()

    loaded = tmp_path / "classes.log"
    start(f"-Xlog:class+load=info:file={loaded}")
    shared = [line for line in loaded.read_text().splitlines() if "source: shared objects file (top)" in line]
    assert len(shared) > 3000, f"{len(shared)} classes from the archive"
    assert any("org.apache.spark.sql.SparkSession " in line for line in shared)

    # cut short: Java cannot start with it. Replaced whole (a new file renamed over it), never truncated in place: a
    # JVM that has the archive mapped (the test session's own) would crash on the pages cut from under it.
    cut = archive.with_name(archive.name + ".cut")
    cut.write_bytes(archive.read_bytes()[:1_000_000])
    cut.replace(archive)
    broken = start()
    assert "did not start with its class archive" in broken.stderr
    assert not archive.exists()
