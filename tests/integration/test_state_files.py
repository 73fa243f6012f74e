"""The checkpoint's own files without a JVM (`state_files`): in a local folder and in a bucket of the local S3
server, read and written alike; the writer lease on S3 taken and refused before any JVM starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ingestion import state_files
from ingestion.stream import checkpoint
from ingestion.stream.lock import PipelineRunning, WriterLock

pytestmark = pytest.mark.integration


def _exercise(files: Any, root: str) -> None:
    assert files.read_text(f"{root}/a") is None
    files.write_text(f"{root}/a", "one")
    files.write_text(f"{root}/a", "two")  # replaced whole
    assert files.read_text(f"{root}/a") == "two"
    assert not files.has_children(f"{root}/offsets")
    files.write_text(f"{root}/offsets/0", "v1")
    assert files.has_children(f"{root}/offsets")
    files.delete(f"{root}/a")
    files.delete(f"{root}/a")  # gone already: nothing to do
    assert files.read_text(f"{root}/a") is None


def test_state_files_in_a_local_folder_and_in_s3_alike(tmp_path: Path, s3_server: Any, make_bucket: Any) -> None:
    local = state_files.for_location(str(tmp_path / "checkpoint"))
    assert isinstance(local, state_files.LocalFiles)
    _exercise(local, str(tmp_path / "checkpoint"))
    bucket = make_bucket()
    settings = s3_server.spark_settings()  # the pipeline's spark: section, Hadoop's names
    remote = state_files.for_location(f"s3a://{bucket}/checkpoints/orders", settings)
    assert isinstance(remote, state_files.ArrowFiles)
    _exercise(remote, f"s3a://{bucket}/checkpoints/orders")
    assert "checkpoints/orders/offsets/0" in s3_server.keys(bucket)  # what Hadoop's S3A would read back
    assert state_files.for_location("hdfs://namenode/checkpoints/orders") is None  # the JVM's: no pyarrow HDFS


def test_a_lease_on_s3_is_taken_refused_and_released_without_a_jvm(s3_server: Any, make_bucket: Any) -> None:
    location = f"s3a://{make_bucket()}/checkpoints/orders"
    settings = s3_server.spark_settings()
    assert checkpoint.reachable_without_jvm(location, settings)
    first = WriterLock("orders", location, settings=settings)
    first.acquire()
    try:
        assert first.held
        with pytest.raises(PipelineRunning, match=r"already running \(pid \d+ on .*_ingest_writer\.lease"):
            WriterLock("orders", location, settings=settings).probe()
        app_id = checkpoint.app_id(location, "orders", settings)
        assert app_id.startswith("orders-") and checkpoint.app_id(location, "orders", settings) == app_id
        assert not checkpoint.has_progress(location, settings)
    finally:
        first.release()
    WriterLock("orders", location, settings=settings).probe()  # released: the next writer may start
