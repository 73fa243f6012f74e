"""The helper jar: compiled from the shipped Java source once per version of it, stale builds removed."""

from __future__ import annotations

from pathlib import Path
from zipfile import ZipFile

import pytest

from ingestion.runtime import jars as jvm

pytestmark = pytest.mark.jvm  # compiles the helper with javac (a JDK)


def test_helper_jar_is_compiled_once_per_source_version(tmp_path: Path) -> None:
    stale = tmp_path / "helper" / "ingest-helper-000000000000.jar"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"an older build")

    jar = jvm.helper_jar(tmp_path)
    assert jar.parent == tmp_path / "helper" and jar.name.startswith("ingest-helper-")
    with ZipFile(jar) as built:
        assert {"ingest/AvroBodyCheck.class", "ingest/PartitionSummary.class"} <= set(built.namelist())
    assert not stale.exists()
    assert sorted(p.name for p in jar.parent.iterdir()) == [jar.name]  # no staging file left behind

    built_at = jar.stat().st_mtime_ns
    assert jvm.helper_jar(tmp_path) == jar and jar.stat().st_mtime_ns == built_at
