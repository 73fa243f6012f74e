"""The maintenance section and the retention rules it is checked with (no JVM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingestion import retention
from ingestion.config import load_pipeline
from ingestion.delta.ledger import BatchKind, BatchRecord, PartitionRange, coverage, next_offsets
from ingestion.delta.restorable import Commit, oldest_restorable
from tests.unit.test_config import MINIMAL, config_error, write


def test_defaults_and_typed_keys(tmp_path: Path) -> None:
    config = load_pipeline(write(tmp_path, MINIMAL))
    m = config.maintenance
    assert (m.target_file_size, m.vacuum_retention, m.z_order_by, m.every_batches, m.every) == (
        "128mb", "168 hours", (), None, None)
    assert m.target_bytes == 128 * 1024 * 1024 and m.window_seconds == 168 * 3600
    config = load_pipeline(write(tmp_path, MINIMAL + "maintenance:\n  targetFileSize: 256 KB\n  zOrderBy: "
                                 "[_kafka_timestamp]\n  everyBatches: 500\n  every: 60 minutes\n"))
    assert config.maintenance.target_bytes == 256 * 1024 and config.maintenance.z_order_by == ("_kafka_timestamp",)


@pytest.mark.parametrize(("text", "expected"), [
    ("maintenance:\n  vacuumRetention: 7 dayz\n", "key 'maintenance.vacuumRetention': must be a duration such as "
     "'168 hours', got '7 dayz'"),
    ("maintenance:\n  targetFileSize: huge\n", "key 'maintenance.targetFileSize' must be a size such as '128mb', "
     "got 'huge'"),
    ("maintenance:\n  everyBatches: 0\n", "key 'maintenance.everyBatches' must be positive, got 0"),
    ("maintenance:\n  zorderBy: [a]\n", "unknown key 'maintenance.zorderBy' (value ['a']); known keys here: "
     "allowShortRetention, autoCompact, every, everyBatches, targetFileSize, vacuumRetention, zOrderBy"),
    ("maintenance:\n  vacuumRetention: 30 minutes\n", "key 'maintenance.vacuumRetention': '30 minutes' is under 1 "
     "hour: a VACUUM could delete the files a running batch has written"),
    ("sink:\n  tableProperties:\n    delta.setTransactionRetentionDuration: interval 30 days\n",
     "key 'sink.tableProperties.delta.setTransactionRetentionDuration': 'interval 30 days' lets Delta forget a "
     "batch's (txnAppId, txnVersion)"),
    ("sink:\n  tableProperties:\n    delta.logRetentionDuration: interval 3 days\n",
     "key 'sink.tableProperties.delta.logRetentionDuration': 'interval 3 days' is shorter than "
     "maintenance.vacuumRetention '168 hours': log cleanup would delete the commits"),
    ("sink:\n  tableProperties:\n    delta.deletedFileRetentionDuration: interval 1 day\n",
     "key 'sink.tableProperties.delta.deletedFileRetentionDuration': 'interval 1 day' is shorter than "
     "maintenance.vacuumRetention '168 hours': Delta refuses time travel older than it"),
    ("sink:\n  tableProperties:\n    delta.deletedFileRetentionDuration: interval 30 days\n",
     "'interval 30 days' is longer than maintenance.vacuumRetention '168 hours': Delta's VACUUM refuses"),
])
def test_bad_maintenance_and_retention_settings_name_file_key_value_and_reason(tmp_path: Path, text: str,
                                                                              expected: str) -> None:
    path = write(tmp_path, MINIMAL + text)
    message = config_error(path)
    assert message.startswith(f"{path}: ") and expected in message, message


def test_a_longer_window_with_matching_retentions_is_accepted(tmp_path: Path) -> None:
    config = load_pipeline(write(tmp_path, MINIMAL + "maintenance:\n  vacuumRetention: 720 hours\nsink:\n"
                                 "  tableProperties:\n    delta.logRetentionDuration: interval 60 days\n"))
    assert config.maintenance.window_seconds == 30 * 86400
    assert retention.problems("720 hours", {retention.DELETED_FILE_RETENTION: "interval 30 days",
                                            retention.LOG_RETENTION: "interval 60 days"}) == []
    assert retention.as_interval(720 * 3600) == "interval 720 hours" and retention.as_interval(15) == \
        "interval 15 seconds"


def _batch(version: int, first: int, last: int, partition: int = 0) -> BatchRecord:
    return BatchRecord(pipeline="p", app_id="a", batch_id=version, kind=BatchKind.STREAM, rows=last - first + 1,
                       schema_ids=(1,), ranges=(PartitionRange("t", partition, first, last, last - first + 1),),
                       version=version)


def test_a_maintenance_baseline_keeps_offsets_known_after_log_cleanup() -> None:
    batches = [_batch(1, 0, 9), _batch(2, 0, 4, partition=1), _batch(3, 10, 19), _batch(5, 20, 29)]
    full = batches[:3]
    optimize = BatchRecord(pipeline="p", app_id="maintenance", batch_id=-3, kind=BatchKind.OPTIMIZE, rows=0,
                           schema_ids=(), ranges=(), baseline=coverage(full), as_of=3, version=6)
    everything = [*batches, optimize, _batch(7, 30, 39)]
    expected = {"t": {"0": 40, "1": 5}}
    assert next_offsets(everything) == expected
    # Delta's log cleanup deleted versions 1-5: the baseline still says what they held. Version 5, committed
    # between the OPTIMIZE's read (as of 3) and its commit (6), is counted from its own record.
    assert next_offsets([batches[3], optimize, everything[-1]]) == expected
    assert coverage([batches[3], optimize, everything[-1]]) == coverage(everything) == (
        PartitionRange("t", 0, 0, 39, 40), PartitionRange("t", 1, 0, 4, 5))
    # A batch's document is unchanged; a maintenance record round-trips its baseline.
    assert "baseline" not in batches[0].to_user_metadata()
    back = BatchRecord.from_user_metadata(optimize.to_user_metadata(), version=6)
    assert back == optimize and back.baseline == optimize.baseline and back.as_of == 3


def test_oldest_restorable_version() -> None:
    hour = 3600 * 1000
    now = 100 * hour
    commits = [Commit(0, 0, "CREATE TABLE", {}), Commit(1, 10 * hour, "WRITE", {}),
               Commit(2, 20 * hour, "OPTIMIZE", {}), Commit(3, 90 * hour, "WRITE", {}),
               Commit(4, 95 * hour, "OPTIMIZE", {}), Commit(5, 99 * hour, "WRITE", {})]
    week = {retention.DELETED_FILE_RETENTION: "interval 1 week"}
    assert oldest_restorable(commits, week, now) == 0
    assert oldest_restorable(commits, {retention.DELETED_FILE_RETENTION: "interval 12 hours"}, now) == 3
    # A VACUUM run with 1 hour (its check off) at hour 99.5 deleted the files version 4 removed at hour 95.
    vacuum = Commit(6, int(99.5 * hour), "VACUUM START", {"specifiedRetentionMillis": str(hour),
                                                          "defaultRetentionMillis": str(7 * 24 * hour)})
    assert oldest_restorable([*commits, vacuum], week, now) == 4
    assert oldest_restorable([], week, now) is None
