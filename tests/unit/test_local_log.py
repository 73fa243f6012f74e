"""Commits of files to a local table's log without Spark (`delta.local_log`): once per version, and the checksum
derived from the previous one as Spark's Delta derives it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingestion.delta import local_log


def _add(name: str, size: int, records: int) -> dict[str, object]:
    return {"path": name, "partitionValues": {}, "size": size, "modificationTime": 0, "dataChange": True,
            "stats": json.dumps({"numRecords": records})}


def test_a_commit_of_a_version_taken_meanwhile_fails_and_writes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "_delta_log"
    folder.mkdir()
    (folder / f"{1:020d}.json").write_text('{"commitInfo":{}}\n')
    with pytest.raises(local_log.CommitConflict):
        local_log.append_files(tmp_path, 0, [_add("a.parquet", 10, 1)], user_metadata="{}")
    assert (folder / f"{1:020d}.json").read_text() == '{"commitInfo":{}}\n'
    assert sorted(p.name for p in folder.iterdir()) == [f"{1:020d}.json"]


def test_the_commit_records_an_append_and_its_checksum_follows_the_previous_one(tmp_path: Path) -> None:
    folder = tmp_path / "_delta_log"
    folder.mkdir()
    previous = {"txnId": "t0", "tableSizeBytes": 100, "numFiles": 1, "numMetadata": 1, "numProtocol": 1,
                "setTransactions": [{"appId": "a", "version": 3, "lastUpdated": 1}], "domainMetadata": [],
                "metadata": {"id": "m"}, "protocol": {"minReaderVersion": 1, "minWriterVersion": 2},
                "allFiles": [{**_add("old.parquet", 100, 5), "dataChange": False}],
                "fileSizeHistogram": {"sortedBinBoundaries": [0, 8192, 16384], "fileCounts": [1, 0, 0],
                                      "totalBytes": [100, 0, 0]}}
    (folder / f"{4:020d}.crc").write_text(json.dumps(previous))

    version = local_log.append_files(tmp_path, 4, [_add("new.parquet", 9000, 7)], user_metadata='{"ingest":{}}')

    assert version == 5
    actions = [json.loads(line) for line in (folder / f"{5:020d}.json").read_text().splitlines()]
    info = actions[0]["commitInfo"]
    assert (info["operation"], info["readVersion"], info["isBlindAppend"], info["userMetadata"]) == (
        "WRITE", 4, True, '{"ingest":{}}')
    assert info["operationMetrics"] == {"numFiles": "1", "numOutputRows": "7", "numOutputBytes": "9000"}
    assert actions[1]["add"]["path"] == "new.parquet" and len(actions) == 2
    checksum = json.loads((folder / f"{5:020d}.crc").read_text())
    assert checksum["txnId"] == info["txnId"]
    assert (checksum["tableSizeBytes"], checksum["numFiles"]) == (9100, 2)
    assert checksum["setTransactions"] == previous["setTransactions"]
    assert [f["path"] for f in checksum["allFiles"]] == ["old.parquet", "new.parquet"]
    assert not checksum["allFiles"][1]["dataChange"]
    assert checksum["fileSizeHistogram"]["fileCounts"] == [1, 1, 0]
    assert checksum["fileSizeHistogram"]["totalBytes"] == [100, 9000, 0]


def test_no_checksum_where_the_previous_one_is_missing_or_holds_more(tmp_path: Path) -> None:
    folder = tmp_path / "_delta_log"
    folder.mkdir()
    assert local_log.append_files(tmp_path, 0, [_add("a.parquet", 10, 1)], user_metadata="{}") == 1
    (folder / f"{1:020d}.crc").write_text(json.dumps({"tableSizeBytes": 10, "numFiles": 1,
                                                      "numDeletedRecordsOpt": 0}))
    assert local_log.append_files(tmp_path, 1, [_add("b.parquet", 10, 1)], user_metadata="{}") == 2
    assert sorted(p.name for p in folder.iterdir() if p.suffix == ".crc") == [f"{1:020d}.crc"]


def test_commits_made_without_a_jvm_get_their_delta_checkpoint_every_ten_versions(tmp_path: Path) -> None:
    from pyspark.sql import types as T

    from ingestion.delta import log_checkpoints, rs_tables

    table = tmp_path / "t"
    schema = T.StructType([T.StructField("n", T.LongType())])
    assert rs_tables.create(str(table), schema, properties={"delta.checkpointInterval": "1000"})
    due = []
    for version in range(1, 12):
        assert local_log.append_files(table, version - 1, [_add(f"{version}.parquet", 10, 1)],
                                      user_metadata="{}") == version
        due.append(log_checkpoints.checkpoint_if_due(str(table), version, {"delta.checkpointInterval": "1000"}))
    assert due == [None] * 9 + [10, None]
    assert rs_tables.last_checkpoint(str(table)) == 10
    from deltalake import DeltaTable

    assert len(DeltaTable(str(table)).file_uris()) == 11  # the state, read from the checkpoint and one commit
