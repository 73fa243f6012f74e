"""Build the admin benchmark's table: a pipeline's bronze and quarantine tables with --commits commits, each as a
batch of `ingest run` leaves it, in a minute instead of the hours that as many real micro-batches take.

The rows come from a staging pipeline that `ingest run` already filled from the same topic (every record decoded
or quarantined for real); the admin pipeline's tables were created by `ingest onboard` (Spark, ingest's table
properties). The rows are appended to them in --commits slices of offsets with delta-rs, each commit with the
txnAppId/txnVersion and the ledger record (`userMetadata`) that a batch of `ingest run` writes, and the
quarantined records of a slice in a quarantine commit of their own; then a Delta checkpoint, as the pipeline's
background checkpoints leave one. What the read-only commands read (the log's commits and their ledger, the data
files, the checkpoint) is what a long-running pipeline's table holds; only the commits' engineInfo says delta-rs.
Run by bench.py in its own process.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, QueryBuilder, Transaction, write_deltalake

from ingestion.config import load_pipeline
from ingestion.delta.ledger import BatchKind, BatchRecord, PartitionRange


def _read(path: str) -> pa.Table:
    table = pa.table(QueryBuilder().register("t", DeltaTable(path)).execute("SELECT * FROM t"))
    target = DeltaTable(path).schema().to_arrow()  # the table's own types, not the query engine's view types
    return table.select(target.names).cast(pa.schema(target))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", required=True, help="the staging pipeline's YAML (its tables hold the rows)")
    parser.add_argument("--admin", required=True, help="the admin pipeline's YAML (its tables exist, empty)")
    parser.add_argument("--commits", type=int, default=2000)
    args = parser.parse_args()
    stage, admin = load_pipeline(args.stage), load_pipeline(args.admin)
    rows = {"bronze": _read(stage.table_path), "quarantine": _read(stage.quarantine_path)}
    high = max(pc.max(t["_kafka_offset"]).as_py() or 0 for t in rows.values()) + 1
    step = max(1, high // args.commits)  # offsets per slice and partition: at least --commits slices
    sliced = {name: _by_slice(t, step) for name, t in rows.items()}
    keys = sorted(set(sliced["bronze"]) | set(sliced["quarantine"]))
    app_id, quarantine_app_id = f"{admin.name}-bench", f"{admin.name}-bench-quarantine"
    # Open tables, updated by each write: a path would replay the whole growing log on every commit.
    bronze, quarantine = DeltaTable(admin.table_path), DeltaTable(admin.quarantine_path)
    started = time.monotonic()
    for batch, key in enumerate(keys):
        good, bad = sliced["bronze"].get(key), sliced["quarantine"].get(key)
        failed = _ranges(bad)
        record = BatchRecord(pipeline=admin.name, app_id=app_id, batch_id=batch, kind=BatchKind.STREAM,
                             rows=good.num_rows if good is not None else 0, schema_ids=(1,),
                             ranges=_ranges(good, bad), quarantined=bad.num_rows if bad is not None else 0)
        if bad is not None:
            _append(quarantine, bad, BatchRecord(
                pipeline=admin.name, app_id=quarantine_app_id, batch_id=batch, kind=BatchKind.STREAM,
                rows=bad.num_rows, schema_ids=(1,), ranges=failed, quarantined=bad.num_rows))
        _append(bronze, good if good is not None else rows["bronze"].slice(0, 0), record)
        if batch % 100 == 99:  # as the pipeline's background checkpoints do (every 10 versions, once a minute)
            bronze.create_checkpoint()
        if batch % 500 == 0:
            print(f"{batch} of {len(keys)} commits, {time.monotonic() - started:.0f}s", flush=True)
    bronze.create_checkpoint()
    print(f"done: {len(keys)} commits in {time.monotonic() - started:.0f}s", flush=True)


def _by_slice(table: pa.Table, step: int) -> dict[int, pa.Table]:
    keys = pc.divide(table["_kafka_offset"], step).to_pylist()
    out: dict[int, list[int]] = {}
    for index, key in enumerate(keys):
        out.setdefault(key, []).append(index)
    return {key: table.take(indices) for key, indices in out.items()}


def _ranges(*tables: pa.Table | None) -> tuple[PartitionRange, ...]:
    spans: dict[tuple[str, int], list[int]] = {}
    for table in tables:
        if table is None:
            continue
        for topic, partition, offset in zip(table["_kafka_topic"].to_pylist(), table["_kafka_partition"].to_pylist(),
                                            table["_kafka_offset"].to_pylist(), strict=True):
            spans.setdefault((topic, partition), []).append(offset)
    return tuple(PartitionRange(t, p, min(o), max(o), len(o)) for (t, p), o in sorted(spans.items()))


def _append(table: DeltaTable, rows: Any, record: BatchRecord) -> None:
    write_deltalake(table, rows, mode="append", commit_properties=CommitProperties(
        custom_metadata={"userMetadata": record.to_user_metadata()},
        app_transactions=[Transaction(record.app_id, record.batch_id)]))


if __name__ == "__main__":
    main()
