"""The JVM's class archive step, without a JVM: which archive a start uses, who records it, what is given up."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ingestion.runtime import class_archive
from tests.conftest import missing_tool

OPTIONS = {"spark.master": "local[*]", "spark.jars": "/j/delta.jar,/j/kafka.jar",
           "spark.driver.extraClassPath": "/j/helper.jar", "spark.driver.extraJavaOptions": "-XX:+UseSerialGC"}


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("INGEST_JAR_CACHE", str(tmp_path))
    monkeypatch.setenv(class_archive.SWITCH, class_archive.RECORD)
    if class_archive.java_executable() is None:
        missing_tool("no java on PATH or in JAVA_HOME")
    return tmp_path / "class-archive"


def test_the_first_start_records_the_others_wait_until_the_archive_is_there(cache: Path) -> None:
    first = class_archive.plan(OPTIONS, record=True)
    assert first is not None and not first.use
    assert first.claim.is_file() and first.archive.parent == cache
    assert first.java_option() == f"-XX:DumpLoadedClassList={first.recording}"  # a class list: costs the run nothing
    assert class_archive.plan(OPTIONS, record=True) is None  # claimed: another start neither records nor waits
    first.archive.write_bytes(b"archive")
    second = class_archive.plan(OPTIONS, record=True)
    assert second is not None and second.use and second.archive == first.archive
    options = class_archive.with_option(OPTIONS, second)
    assert options["spark.driver.extraJavaOptions"] == f"-XX:SharedArchiveFile={first.archive} -XX:+UseSerialGC"


def test_a_run_records_by_default_other_starts_only_use_the_archive(cache: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    assert class_archive.plan(OPTIONS, record=False) is None  # a notebook's session: no archive yet, none recorded
    assert not cache.exists() or not list(cache.iterdir())  # nothing claimed
    monkeypatch.delenv(class_archive.SWITCH)  # by default `ingest run` records (its class list costs nothing)
    recording = class_archive.plan(OPTIONS, record=True)
    assert recording is not None
    recording.archive.write_bytes(b"archive")
    using = class_archive.plan(OPTIONS, record=False)
    assert using is not None and using.use


def test_an_archive_per_classpath_jars_and_java() -> None:
    java = class_archive.java_executable()
    assert java is not None
    same = class_archive.key(dict(OPTIONS), java)
    assert class_archive.key(OPTIONS, java) == same
    for name in ("spark.jars", "spark.driver.extraClassPath", "spark.driver.memory"):
        assert class_archive.key({**OPTIONS, name: "/j/other.jar"}, java) != same, name


@pytest.mark.parametrize("own", ["-Xshare:off", "-XX:SharedArchiveFile=/mine.jsa", "-XX:ArchiveClassesAtExit=/x",
                                 "-XX:DumpLoadedClassList=/x"])
def test_a_session_that_chooses_its_own_class_sharing_keeps_it(own: str) -> None:
    assert class_archive.plan({**OPTIONS, "spark.driver.extraJavaOptions": f"-Xmx1g {own}"}, record=True) is None


def test_switched_off(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    monkeypatch.setenv(class_archive.SWITCH, "off")
    assert class_archive.plan(OPTIONS, record=True) is None
    assert not cache.exists()


def test_a_claim_left_by_a_killed_recording_is_taken_over(cache: Path) -> None:
    first = class_archive.plan(OPTIONS, record=True)
    assert first is not None
    stale = first.archive.with_name(f"{first.archive.stem}.4242.recording")
    stale.write_bytes(b"half an archive")
    first.claim.write_text(str(os.getppid()))  # a live process holds it: a recording that runs for hours
    assert class_archive.plan(OPTIONS, record=True) is None
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    first.claim.write_text(str(dead.pid))
    again = class_archive.plan(OPTIONS, record=True)
    assert again is not None and not again.use
    assert not stale.exists()
    assert again.claim.read_text() == str(os.getpid())


@pytest.mark.parametrize("listed", [b"\0" * 4096, b"java/lang/Object id: 0\n" * 200])
def test_finish_keeps_no_archive_of_a_short_class_list(cache: Path, listed: bytes) -> None:
    """A class list Java cannot read, or one of a JVM killed during its start, leaves no archive (one without the
    classes a batch loads would stay for good), and nothing behind: the next run records again."""
    step = class_archive.plan(OPTIONS, record=True)
    assert step is not None
    step.recording.write_bytes(listed)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    java = class_archive.java_executable()
    assert not class_archive.finish(dead.pid, step.recording, step.archive, step.claim, str(java), "/j/helper.jar")
    assert not step.archive.exists() and not step.recording.exists() and not step.claim.exists()
    assert not list(cache.glob("*.hs_err")) and not list(cache.glob("*.writing"))


def test_the_most_recently_used_archives_are_kept(cache: Path) -> None:
    cache.mkdir()
    for age, name in enumerate(["d", "c", "b", "a"]):
        path = cache / f"{name}.jsa"
        path.write_bytes(b"archive")
        os.utime(path, (time.time() - 100 * age, time.time() - 100 * age))
    class_archive.prune(cache, keep=3)
    assert sorted(p.name for p in cache.glob("*.jsa")) == ["b.jsa", "c.jsa", "d.jsa"]
