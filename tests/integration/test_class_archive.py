"""The JVM's class archive with real JVMs: a session told to record it (as `ingest run`'s is) lists its classes,
the archive is written after it exits, the next one starts with its classes already parsed, and one that will
not load is removed rather than stopping the JVM."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ingestion.runtime import class_archive
from tests.conftest import missing_tool

pytestmark = pytest.mark.jvm

# A driver memory of its own gives this test an archive (key) no other session shares.
SESSION = """
import sys
import tempfile
from ingestion.runtime import session
spark = session.get_session(conf={"spark.driver.memory": "700m",
                                  "spark.driver.extraJavaOptions": " ".join(sys.argv[1:])}, record_classes=True)
spark.range(3).write.format("delta").save(tempfile.mkdtemp())  # the classes a batch loads, as a run's JVM does
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
        missing_tool("no java on PATH or in JAVA_HOME")
    from ingestion.runtime import session

    options = dict(session.builder(conf={"spark.driver.memory": "700m"})._options)
    path = class_archive.folder() / f"{class_archive.key(options, java)}.jsa"
    for leftover in (path, path.with_suffix(".claim")):
        leftover.unlink(missing_ok=True)
    yield path
    path.unlink(missing_ok=True)


def test_recorded_at_exit_used_at_the_next_start_and_removed_when_broken(archive: Path, tmp_path: Path) -> None:
    start()
    # after the JVM's exit `finish` writes it (about 30 s), checks it, moves it into place, then (at the lowest CPU
    # priority, so a moment later on a busy machine) releases its claim
    claim = archive.with_suffix(".claim")
    deadline = time.monotonic() + 240
    while not (archive.is_file() and not claim.exists()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert archive.is_file(), sorted(p.name for p in archive.parent.iterdir())
    assert not claim.exists()

    loaded = tmp_path / "classes.log"
    start(f"-Xlog:class+load=info:file={loaded}")
    shared = [line for line in loaded.read_text().splitlines()
              if "source: shared objects file" in line and " org.apache." in line]  # Spark's, Parquet's, Hadoop's
    assert len(shared) > 3000, f"{len(shared)} classes from the archive"
    assert any("org.apache.spark.sql.SparkSession " in line for line in shared)

    # cut short: Java cannot start with it. Replaced whole (a new file renamed over it), never truncated in place: a
    # JVM that has the archive mapped (the test session's own) would crash on the pages cut from under it.
    cut = archive.with_name(archive.name + ".cut")
    cut.write_bytes(archive.read_bytes()[:1_000_000])
    cut.replace(archive)
    broken = start()  # Java starts without an archive it cannot map, silently: the run notices and removes it
    assert "could not use its class archive" in broken.stderr
    assert not archive.exists()
