"""The offsets a table holds, recorded in the same Delta commit as the data and read back from its history.

Each commit the pipeline makes carries `userMetadata` (Delta's commit-info field) with a JSON document:
`{"ingest": {"pipeline", "app_id", "batch_id", "kind", "rows", "schema_ids", "ranges": [{topic, partition,
first, last, count}]}}`. Because it is written in the same atomic commit as the rows, the table alone can say
which Kafka offsets each version holds, rebuild a lost checkpoint and be audited against Kafka.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any

from pyspark.sql import SparkSession

from ingestion.runtime import delta_txn

METADATA_KEY = "ingest"


class BatchKind(StrEnum):
    """What made a commit: the stream, a replay of a Kafka range, a rewind (RESTORE), a quarantine re-decode."""

    STREAM = "stream"
    REPLAY = "replay"
    REWIND = "rewind"
    REDECODE = "redecode"
    OPTIMIZE = "optimize"
    VACUUM = "vacuum"
    PROMOTE = "promote"  # a shadow's rows replacing the live table's over the same offsets (ops/shadow.py)


MAINTENANCE = (BatchKind.OPTIMIZE, BatchKind.VACUUM)


# The ledger's batch ids of commits that no stream batch made (stream batch ids start at 0).
REDECODE_BATCH_ID = -1
REPLAY_BATCH_ID = -2
MAINTENANCE_BATCH_ID = -3
START_BATCH_ID = -4  # a stream batch written before its query started (stream/early.py)
PROMOTE_BATCH_ID = -5  # a shadow's promote (ops/shadow.py)


@dataclass(frozen=True)
class PartitionRange:
    topic: str
    partition: int
    first: int
    last: int
    count: int


@dataclass(frozen=True)
class BatchRecord:
    """What one commit of the pipeline holds."""

    pipeline: str
    app_id: str
    batch_id: int
    kind: BatchKind
    rows: int  # rows this commit wrote to its table
    schema_ids: tuple[int, ...]
    ranges: tuple[PartitionRange, ...]  # Kafka offsets consumed by the batch (bronze + quarantine)
    quarantined: int = 0  # of those, records written to the quarantine table
    # Maintenance commits (optimize, vacuum) write no rows and consume no offsets; they carry the ledger's coverage
    # as of table version `as_of` instead, so offsets stay known after Delta's log cleanup deletes older commits.
    baseline: tuple[PartitionRange, ...] = ()
    as_of: int | None = None
    # Data-quality expectations (docs/expectations.md), on a stream batch's bronze commit: the rows the rules were
    # checked on, and per rule the rows that broke it.
    checked: int = 0
    violated: tuple[tuple[str, int], ...] = ()
    version: int | None = field(default=None, compare=False)
    committed_at: dt.datetime | None = field(default=None, compare=False)

    def to_user_metadata(self) -> str:
        body = asdict(self)
        body.pop("version")
        body.pop("committed_at")
        if self.as_of is None:  # a batch's document stays as it always was
            body.pop("baseline")
            body.pop("as_of")
        body.pop("checked")
        body.pop("violated")
        if self.checked or self.violated:
            body["expectations"] = {"checked": self.checked, "violated": dict(self.violated)}
        return json.dumps({METADATA_KEY: body}, separators=(",", ":"))

    @classmethod
    def from_user_metadata(cls, text: str | None, version: int | None = None,
                           committed_at: dt.datetime | None = None) -> BatchRecord | None:
        """The record in a commit's userMetadata, or None when the commit was not made by this pipeline."""
        if not text:
            return None
        try:
            body: dict[str, Any] = json.loads(text)[METADATA_KEY]
            return cls(
                pipeline=body["pipeline"], app_id=body["app_id"], batch_id=int(body["batch_id"]),
                kind=BatchKind(body["kind"]), rows=int(body["rows"]), schema_ids=tuple(body["schema_ids"]),
                ranges=tuple(PartitionRange(**r) for r in body["ranges"]),
                quarantined=int(body.get("quarantined", 0)),
                baseline=tuple(PartitionRange(**r) for r in body.get("baseline", ())),
                as_of=None if body.get("as_of") is None else int(body["as_of"]),
                checked=int(body.get("expectations", {}).get("checked", 0)),
                violated=tuple((str(k), int(v)) for k, v in body.get("expectations", {}).get("violated", {}).items()),
                version=version,
                committed_at=committed_at,
            )
        except (ValueError, KeyError, TypeError):  # another tool's userMetadata, or not JSON at all
            return None


def batch_records(stats: Sequence[Mapping[str, Any]], *, pipeline: str, batch_id: int, kind: BatchKind, app_id: str,
                  quarantine_app_id: str, checked: int = 0,
                  violated: Mapping[str, int] | None = None) -> tuple[BatchRecord, BatchRecord | None]:
    """The records of a bronze commit and, when some failed, of its quarantine commit, from the per-partition
    summary of `bronze.batch_stats`; the expectations' counts (`checked`, `violated` per rule) on bronze's."""
    ranges = tuple(sorted((PartitionRange(s["topic"], s["partition"], s["first"], s["last"], s["count"])
                           for s in stats), key=lambda r: (r.topic, r.partition)))
    failed_ranges = tuple(sorted(
        (PartitionRange(s["topic"], s["partition"], s["failed_first"], s["failed_last"], s["failed"])
         for s in stats if s["failed"]), key=lambda r: (r.topic, r.partition)))
    failed = sum(r.count for r in failed_ranges)
    schema_ids = tuple(sorted({i for s in stats for i in s["schema_ids"] if i is not None}))
    record = BatchRecord(pipeline=pipeline, app_id=app_id, batch_id=batch_id, kind=kind,
                         rows=sum(r.count for r in ranges) - failed, schema_ids=schema_ids, ranges=ranges,
                         quarantined=failed, checked=checked, violated=tuple((violated or {}).items()))
    if not failed:
        return record, None
    return record, replace(record, app_id=quarantine_app_id, rows=failed, ranges=failed_ranges, checked=0,
                           violated=())


is_table = delta_txn.is_table
table_version = delta_txn.table_version


def history(spark: SparkSession, path: str) -> list[BatchRecord]:
    """Every commit of the table that records offsets, oldest first."""
    from delta.tables import DeltaTable

    if not is_table(spark, path):
        return []
    rows = DeltaTable.forPath(spark, path).history().select("version", "timestamp", "userMetadata").collect()
    records = [BatchRecord.from_user_metadata(r["userMetadata"], r["version"], r["timestamp"]) for r in rows]
    return sorted((r for r in records if r is not None), key=lambda r: r.version or 0)


def next_offsets(records: list[BatchRecord]) -> dict[str, dict[str, int]]:
    """Per topic and partition, the offset after the last one recorded: where a stream resumes.

    Records are read in version order; a `rewind` record (written with a RESTORE) resets the position to the
    coverage it states, so commits undone by the restore no longer count. Maintenance records count only as the
    baseline `coverage` starts from."""
    return offsets_after(coverage(records))


def offsets_after(ranges: Iterable[PartitionRange]) -> dict[str, dict[str, int]]:
    """Per topic and partition, the offset after the range's last one, as Spark's source offsets name them."""
    out: dict[str, dict[str, int]] = {}
    for r in ranges:
        out.setdefault(r.topic, {})[str(r.partition)] = r.last + 1
    return out


def _after_baseline(records: list[BatchRecord]) -> tuple[dict[tuple[str, int], PartitionRange], list[BatchRecord]]:
    """The spans to start from and the records to add to them, in version order: the newest maintenance baseline
    and the records after its `as_of` version, so commits that Delta's log cleanup deleted are still counted; from
    nothing when no maintenance record is in the log. Maintenance records themselves consume no offsets."""
    ordered = sorted(records, key=lambda r: r.version if r.version is not None else -1)
    marks = [r for r in ordered if r.kind in MAINTENANCE and r.as_of is not None]
    if not marks:
        return {}, [r for r in ordered if r.kind not in MAINTENANCE]
    newest = marks[-1]
    as_of = newest.as_of if newest.as_of is not None else -1
    start = {(r.topic, r.partition): r for r in newest.baseline}
    return start, [r for r in ordered if r.kind not in MAINTENANCE and (r.version or 0) > as_of]


def in_effect(records: Iterable[BatchRecord]) -> list[BatchRecord]:
    """The records whose commits no later rewind undid (a rewind's record has the version it restored as its batch
    id), the rewinds' own included, in version order."""
    kept: list[BatchRecord] = []
    for r in sorted(records, key=lambda r: r.version if r.version is not None else -1):
        if r.kind == BatchKind.REWIND:
            kept = [x for x in kept if (x.version or 0) <= r.batch_id]
        kept.append(r)
    return kept


def coverage(records: list[BatchRecord]) -> tuple[PartitionRange, ...]:
    """Per partition, the span of offsets the records cover (first, last, total count), honouring rewinds and
    starting from the newest maintenance baseline (see `_after_baseline`)."""
    spans, remaining = _after_baseline(records)
    for record in remaining:
        if record.kind == BatchKind.REWIND:
            spans = {}
        for r in record.ranges:
            key = (r.topic, r.partition)
            old = spans.get(key)
            spans[key] = r if old is None else PartitionRange(r.topic, r.partition, min(old.first, r.first),
                                                               max(old.last, r.last), old.count + r.count)
    return tuple(spans[k] for k in sorted(spans))
