"""Rewind before a JVM and its pure parts: the quarantine version of a bronze version, a version the table lacks."""

from __future__ import annotations

from pathlib import Path

from ingestion.delta.ledger import BatchKind
from ingestion.ops.rewind import quarantine_version_for

STREAM, REDECODE = BatchKind.STREAM, BatchKind.REDECODE


def test_a_batch_quarantine_commit_goes_with_the_bronze_commit_after_it() -> None:
    # batch 0: quarantine v0 at 100, bronze v1 at 110; batch 1: quarantine v1 at 200, bronze v2 at 210
    bronze = {0: 50, 1: 110, 2: 210}
    quarantine = {0: 100, 1: 200}
    kinds = {0: STREAM, 1: STREAM}
    assert [quarantine_version_for(v, bronze, quarantine, kinds) for v in (0, 1, 2)] == [None, 0, 1]


def test_a_reprocess_quarantine_commit_goes_with_the_bronze_commit_before_it() -> None:
    # a batch (quarantine v0, bronze v1), a reprocess (bronze v2 at 300, quarantine v1 at 302), a batch that
    # quarantined nothing (bronze v3 at 400)
    bronze = {0: 50, 1: 110, 2: 300, 3: 400}
    quarantine = {0: 100, 1: 302}
    kinds = {0: STREAM, 1: REDECODE}
    assert [quarantine_version_for(v, bronze, quarantine, kinds) for v in (1, 2, 3)] == [0, 1, 1]


def test_a_reprocess_rerun_after_later_batches_is_not_taken_back_past_them() -> None:
    # the reprocess killed after its bronze commit (v2); a batch (quarantine v1 at 350, bronze v3 at 360); the
    # rerun's quarantine commit (v2 at 500): back at v2, the newest quarantine whose commits all belong is v0
    bronze = {0: 50, 1: 110, 2: 300, 3: 360}
    quarantine = {0: 100, 1: 350, 2: 500}
    kinds = {0: STREAM, 1: STREAM, 2: REDECODE}
    assert [quarantine_version_for(v, bronze, quarantine, kinds) for v in (2, 3)] == [0, 2]


def test_a_rewinds_quarantine_restore_goes_with_the_bronze_restore_before_it() -> None:
    # batches (quarantine v1 at 100, bronze v1 at 110; quarantine v2 at 200, bronze v2 at 210), a rewind (bronze
    # RESTORE v3 at 300, quarantine RESTORE v3 at 305), a batch (quarantine v4 at 400, bronze v4 at 410)
    bronze = {0: 0, 1: 110, 2: 210, 3: 300, 4: 410}
    quarantine = {0: 0, 1: 100, 2: 200, 3: 305, 4: 400}
    kinds = {1: STREAM, 2: STREAM, 3: BatchKind.REWIND, 4: STREAM}
    assert [quarantine_version_for(v, bronze, quarantine, kinds) for v in (2, 3, 4)] == [2, 3, 4]


def test_a_version_the_table_does_not_have_is_refused_before_a_jvm(tmp_path: Path) -> None:
    import pyarrow as pa
    import pytest
    from deltalake import write_deltalake

    from ingestion.config import load_pipeline
    from ingestion.errors import IngestionError
    from ingestion.ops.rewind import check_version

    file = tmp_path / "orders.yaml"
    file.write_text(f"name: orders\ntopic: orders\nsink:\n  table: {tmp_path / 'orders'}\n")
    config = load_pipeline(file)
    with pytest.raises(IngestionError, match=r"no table at .* yet: nothing to rewind"):
        check_version(config, 0)
    for _ in range(2):
        write_deltalake(str(tmp_path / "orders"), pa.table({"a": [1]}), mode="append")
    check_version(config, 1)
    check_version(config, None)
    with pytest.raises(IngestionError, match=r"has no version 99 \(its newest is 1\)"):
        check_version(config, 99)
