"""BatchRecord <-> Delta userMetadata, and where a stream resumes from the recorded ranges."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from ingestion.delta.ledger import METADATA_KEY, BatchRecord, PartitionRange, next_offsets


def record(batch_id: int, *ranges: PartitionRange, kind: str = "stream") -> BatchRecord:
    return BatchRecord(pipeline="orders", app_id="app-1", batch_id=batch_id, kind=kind,
                       rows=sum(r.count for r in ranges), schema_ids=(1, 2), ranges=ranges)


def test_to_user_metadata_document() -> None:
    rec = record(3, PartitionRange("orders", 0, 10, 19, 10), PartitionRange("orders", 1, 5, 5, 1))
    assert json.loads(rec.to_user_metadata()) == {METADATA_KEY: {
        "pipeline": "orders", "app_id": "app-1", "batch_id": 3, "kind": "stream", "rows": 11,
        "schema_ids": [1, 2],
        "ranges": [{"topic": "orders", "partition": 0, "first": 10, "last": 19, "count": 10},
                   {"topic": "orders", "partition": 1, "first": 5, "last": 5, "count": 1}],
        "quarantined": 0,
    }}
    assert METADATA_KEY == "ingest"


def test_to_user_metadata_leaves_out_version_and_time() -> None:
    rec = BatchRecord(pipeline="p", app_id="a", batch_id=0, kind="replay", rows=0, schema_ids=(), ranges=(),
                      version=4, committed_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    assert rec.to_user_metadata() == ('{"ingest":{"pipeline":"p","app_id":"a","batch_id":0,"kind":"replay",'
                                      '"rows":0,"schema_ids":[],"ranges":[],"quarantined":0}}')


def test_roundtrip() -> None:
    rec = record(7, PartitionRange("orders", 0, 0, 99, 100), PartitionRange("returns", 3, 40, 41, 2), kind="rewind")
    when = dt.datetime(2026, 2, 3, 4, 5, 6, tzinfo=dt.UTC)
    back = BatchRecord.from_user_metadata(rec.to_user_metadata(), version=12, committed_at=when)
    assert back == rec
    assert back is not None
    assert back.version == 12
    assert back.committed_at == when
    assert back.schema_ids == (1, 2)
    assert back.ranges == (PartitionRange("orders", 0, 0, 99, 100), PartitionRange("returns", 3, 40, 41, 2))
    assert isinstance(back.ranges, tuple)
    assert isinstance(back.schema_ids, tuple)


def test_roundtrip_without_version() -> None:
    rec = record(0)
    back = BatchRecord.from_user_metadata(rec.to_user_metadata())
    assert back == rec
    assert back is not None
    assert back.version is None
    assert back.committed_at is None


@pytest.mark.parametrize("text", [None, "", "not json", "{", '{"other": {"pipeline": "x"}}', "[1, 2]", "42",
                                  '"ingest"', "null"])
def test_from_user_metadata_not_ours(text: str | None) -> None:
    assert BatchRecord.from_user_metadata(text) is None


def test_next_offsets_last_plus_one_per_partition() -> None:
    records = [
        record(0, PartitionRange("orders", 0, 0, 9, 10), PartitionRange("orders", 1, 0, 4, 5)),
        record(1, PartitionRange("orders", 0, 10, 19, 10), PartitionRange("returns", 0, 100, 100, 1)),
        # A replay of older offsets does not move the resume point back.
        record(2, PartitionRange("orders", 0, 3, 5, 3), PartitionRange("orders", 1, 5, 7, 3), kind="replay"),
    ]
    assert next_offsets(records) == {"orders": {"0": 20, "1": 8}, "returns": {"0": 101}}


def test_next_offsets_order_does_not_matter() -> None:
    a = record(0, PartitionRange("t", 2, 50, 59, 10))
    b = record(1, PartitionRange("t", 2, 0, 49, 50))
    assert next_offsets([a, b]) == {"t": {"2": 60}}
    assert next_offsets([b, a]) == {"t": {"2": 60}}


def test_next_offsets_empty() -> None:
    assert next_offsets([]) == {}
    assert next_offsets([record(0)]) == {}


@pytest.mark.parametrize("text", ['{"ingest": "manual backfill"}', '{"ingest": {"note": "by hand"}}'])
def test_from_user_metadata_foreign_ingest_key(text: str) -> None:
    assert BatchRecord.from_user_metadata(text) is None


def test_in_effect_drops_what_a_later_rewind_undid_and_keeps_what_came_after_it() -> None:
    from dataclasses import replace

    from ingestion.delta.ledger import in_effect

    def at(version: int, batch_id: int, kind: str = "stream") -> BatchRecord:
        return replace(record(batch_id, PartitionRange("t", 0, batch_id, batch_id, 1), kind=kind), version=version)

    # batches 0-3 at versions 1-4, a rewind to version 2 (its batch id), batch 2 again at 6, a rewind to 1 at 7
    records = [at(1, 0), at(2, 1), at(3, 2), at(4, 3), at(5, 2, "rewind"), at(6, 2), at(7, 1, "rewind")]
    assert [r.version for r in in_effect(records[:6])] == [1, 2, 5, 6]
    assert [r.version for r in in_effect(reversed(records))] == [1, 7]
