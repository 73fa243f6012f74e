"""Delta's transaction API as `commit.DeltaTxn` uses it: the committed txnVersion read from the checksum file
equals Delta's own read, keeps Delta's conflict check, and falls back when the checksum cannot answer.

Real Spark and Delta on a local table; Delta's own `txnVersion` is the reference.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from delta.exceptions import ConcurrentTransactionException  # importing delta converts Delta's JVM errors

from ingestion.runtime import delta_txn as commit


def _append(spark: Any, path: Path, app_id: str, version: int) -> None:
    (spark.range(5).write.format("delta").mode("append")
     .option("txnAppId", app_id).option("txnVersion", version).save(str(path)))


def _deltas_own(spark: Any, path: Path, app_id: str) -> int:
    log = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(path))
    return int(log.startTransaction().txnVersion(app_id))


def test_committed_version_comes_from_the_checksum_and_equals_deltas_own(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "t"
    for app_id, version in [("a", 0), ("b", 7), ("a", 1), ("a", 2), ("b", 8)]:
        _append(spark, path, app_id, version)
        txn = commit.DeltaTxn(spark, str(path))
        assert txn._checksum_transactions() is not None  # answered by the .crc, not by a state reconstruction
        for app in ("a", "b", "never"):
            assert txn.committed_version(app) == _deltas_own(spark, path, app)
    assert commit.DeltaTxn(spark, str(path)).committed_version("a") == 2
    assert commit.DeltaTxn(spark, str(path)).committed_version("never") == -1


def test_a_concurrent_commit_of_the_same_app_id_still_conflicts(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "t"
    _append(spark, path, "app", 0)
    first, second = commit.DeltaTxn(spark, str(path)), commit.DeltaTxn(spark, str(path))
    assert first.committed_version("app") == second.committed_version("app") == 0
    first.commit([], app_id="app", txn_version=1, user_metadata="{}")
    with pytest.raises(ConcurrentTransactionException):
        second.commit([], app_id="app", txn_version=1, user_metadata="{}")
    # Another app id committing meanwhile is no conflict.
    third, other = commit.DeltaTxn(spark, str(path)), commit.DeltaTxn(spark, str(path))
    assert third.committed_version("app") == 1
    other.commit([], app_id="other", txn_version=0, user_metadata="{}")
    third.commit([], app_id="app", txn_version=2, user_metadata="{}")
    assert _deltas_own(spark, path, "app") == 2


def test_without_the_checksum_delta_is_asked(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "t"
    _append(spark, path, "app", 3)
    _append(spark, path, "app", 4)
    for crc in (path / "_delta_log").glob("*.crc"):
        crc.unlink()
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # forget the checksums read or computed
    txn = commit.DeltaTxn(spark, str(path))
    assert txn._checksum_transactions() is None
    assert txn.committed_version("app") == 4

    # A set-transaction retention makes Delta drop expired app ids from its own read: the checksum is not used,
    # even one that lists them (Delta 4.4 leaves them out of it then; another writer might not).
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.setTransactionRetentionDuration' = "
              "'interval 30 days')")
    latest = max((path / "_delta_log").glob("*.crc"))
    checksum = json.loads(latest.read_text())
    assert not checksum.get("setTransactions")
    checksum["setTransactions"] = [{"appId": "app", "version": 3, "lastUpdated": 0}]  # stale on purpose
    latest.write_text(json.dumps(checksum))
    (latest.parent / f".{latest.name}.crc").unlink()  # the local file system's own checksum of the file
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    txn = commit.DeltaTxn(spark, str(path))
    assert txn._checksum_transactions() is None
    assert txn.committed_version("app") == 4


@pytest.mark.parametrize("statistics", ["true", "false"])
def test_written_records_counts_the_files_rows_with_or_without_statistics(spark: Any, tmp_path: Path,
                                                                            statistics: str) -> None:
    path = tmp_path / "t"
    _append(spark, path, "app", 0)
    txn = commit.DeltaTxn(spark, str(path))
    spark.conf.set("spark.databricks.delta.stats.collect", statistics)
    try:
        files = txn.write(spark.range(0, 1234, 1, 3))
    finally:
        spark.conf.unset("spark.databricks.delta.stats.collect")
    assert len(files) == 3 and all(bool(f.stats()) == (statistics == "true") for f in files)
    assert txn.written_records(files) == 1234
    assert txn.written_records([]) == 0
