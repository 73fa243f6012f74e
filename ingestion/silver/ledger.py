"""Silver's ledger: each commit to a silver table (and to its delete markers) records, in its `userMetadata`, the
bronze version the table's state is the fold of. That is silver's checkpoint: a run resumes after it, `verify`
recomputes the state at it, and nothing else has to survive a crash."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any

from pyspark.sql import SparkSession

from ingestion.delta import rs_reads, spark_tables
from ingestion.runtime import delta_txn

METADATA_KEY = "ingest_silver"


class StepKind(StrEnum):
    MERGE = "merge"  # the changes of bronze versions (bronze_from, bronze_version] merged
    REBUILD = "rebuild"  # the state recomputed from bronze as of bronze_version
    EVOLVE = "evolve"  # columns added or widened; the state is unchanged


@dataclass(frozen=True)
class SilverRecord:
    pipeline: str
    kind: StepKind
    epoch: int  # a rebuild starts a new one (and new txnAppIds)
    bronze_version: int  # the table's state is the fold of bronze up to this version
    bronze_from: int = -1  # the version the step started after (-1: from nothing)
    changes: int = 0  # changes read from bronze
    keys: int = 0  # distinct keys they touched
    # What the step did to the table's rows: a MERGE's from its commit's operation metrics (`records`).
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    cross_partition_keys: int = 0  # keys whose changes came from two or more Kafka partitions (Kafka order only)
    keyless: int = 0  # changes without a key, left out
    # The truncates the state has applied (`truncates.Position`: topic, partition, offset, Kafka timestamp µs,
    # sequence as text, time µs): a change older than one of them that bronze receives later is dropped (or closed).
    truncates: tuple[tuple[Any, ...], ...] = ()

    def to_user_metadata(self) -> str:
        return json.dumps({METADATA_KEY: asdict(self)}, separators=(",", ":"))

    @classmethod
    def from_user_metadata(cls, text: str | None) -> SilverRecord | None:
        if not text:
            return None
        try:
            body: dict[str, Any] = json.loads(text)[METADATA_KEY]
            return cls(**{**body, "kind": StepKind(body["kind"]),
                          "truncates": tuple(tuple(t) for t in body.get("truncates", ()))})
        except (ValueError, KeyError, TypeError):
            return None


def records(spark: SparkSession, path: str, limit: int | None = None) -> list[tuple[int, SilverRecord]]:
    """(table version, record) of the table's silver commits, newest first (the newest `limit` commits only)."""
    if not delta_txn.is_table(spark, path):
        return []
    rows = spark_tables.history(spark, path, limit).select(
        "version", "userMetadata", "operationMetrics").collect()
    found = [(int(r["version"]), with_outcome(SilverRecord.from_user_metadata(r["userMetadata"]),
                                               r["operationMetrics"] or {})) for r in rows]
    return sorted(((v, r) for v, r in found if r is not None), key=lambda x: -x[0])


# A MERGE's counts in its commit's operation metrics: Delta Spark's names, then delta-rs's (the driver's step).
_OUTCOME = (("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted"),
            ("num_target_rows_inserted", "num_target_rows_updated", "num_target_rows_deleted"))


def with_outcome(record: SilverRecord | None, metrics: dict[str, str]) -> SilverRecord | None:
    """A MERGE's record with what it did, from its commit's operation metrics (the record itself is written
    before the MERGE runs), as either engine names them."""
    if record is None or record.kind is not StepKind.MERGE:
        return record
    for inserted, updated, deleted in _OUTCOME:
        if inserted in metrics:
            return replace(record, inserted=int(metrics.get(inserted, 0)), updated=int(metrics.get(updated, 0)),
                           deleted=int(metrics.get(deleted, 0)))
    return record


def position(spark: SparkSession, path: str) -> SilverRecord | None:
    """The newest record of the table: the bronze version its state stands at; None for no table (or none yet)."""
    found = records(spark, path, limit=20) or records(spark, path)
    return found[0][1] if found else None


def rs_records(path: str, storage_options: dict[str, str] | None = None,
               limit: int | None = 50) -> list[tuple[int, SilverRecord]] | None:
    """As `records` (the newest `limit` commits; None: all), read with delta-rs (no JVM): None when there is no
    table at `path`."""
    history = rs_reads.commits(path, storage_options, limit)
    if history is None:
        return None
    found = []
    for commit in history:
        metrics = {k: str(v) for k, v in (commit.get("operationMetrics") or {}).items()}
        record = with_outcome(SilverRecord.from_user_metadata(commit.get("userMetadata")), metrics)
        if record is not None:
            found.append((int(commit["version"]), record))
    return sorted(found, key=lambda x: -x[0])


def rs_caught_up(silver_path: str, bronze_path: str, storage_options: dict[str, str] | None = None) -> bool:
    """Whether silver holds every bronze version (read with delta-rs, no JVM): its newest step reached bronze's
    latest version."""
    found = rs_records(silver_path, storage_options, limit=20)
    if not found:
        return False
    bronze = rs_reads.DeltaRsReader(storage_options).version(bronze_path)
    return bronze is not None and found[0][1].bronze_version >= bronze
