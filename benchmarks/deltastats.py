"""What a Delta table holds, read straight from its log and Parquet files (no JVM): row counts and latencies.

The commit JSON files of `_delta_log/` list the data files each version added with their record counts; a file's
rows become visible when its commit file is written, so that file's modification time is the visibility time.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class DataFile:
    path: str
    records: int
    version: int
    visible_at: float  # epoch seconds: modification time of the commit file that added it


@dataclass(frozen=True)
class Commit:
    version: int
    visible_at: float
    timestamp_ms: int  # commitInfo.timestamp
    operation: str
    user_metadata: dict[str, Any] | None
    records_added: int


def read_log(table: Path) -> tuple[list[Commit], list[DataFile]]:
    """Commits (oldest first) and the live data files of the table."""
    log_dir = table / "_delta_log"
    commits: list[Commit] = []
    files: dict[str, DataFile] = {}
    if not log_dir.is_dir():
        return [], []
    for commit_file in sorted(log_dir.glob("*.json")):
        if not commit_file.stem.isdigit():
            continue
        version = int(commit_file.stem)
        visible_at = os.stat(commit_file).st_mtime
        info: dict[str, Any] = {}
        added = 0
        for line in commit_file.read_text().splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "commitInfo" in action:
                info = action["commitInfo"]
            elif "add" in action:
                add = action["add"]
                stats = json.loads(add.get("stats") or "{}")
                records = int(stats.get("numRecords", -1))
                files[add["path"]] = DataFile(add["path"], records, version, visible_at)
                added += max(records, 0)
            elif "remove" in action:
                files.pop(action["remove"]["path"], None)
        metadata = None
        if info.get("userMetadata"):
            try:
                metadata = json.loads(info["userMetadata"])
            except ValueError:
                metadata = None
        commits.append(Commit(version, visible_at, int(info.get("timestamp", 0)), str(info.get("operation", "")),
                              metadata, added))
    return commits, list(files.values())


def row_count(table: Path) -> int:
    """Rows in the table, from the per-file record counts; -1 when a file has no statistics."""
    _, files = read_log(table)
    if any(f.records < 0 for f in files):
        return -1
    return sum(f.records for f in files)


def _micros(column: Any) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.cast(pc.cast(column, pa.timestamp("us"), safe=False), pa.int64()).to_numpy(zero_copy_only=False)


def latencies(table: Path, since_epoch_s: float) -> dict[str, Any]:
    """Per row produced at or after `since_epoch_s`: Kafka timestamp -> `_ingested_at` (batch start on the
    driver) and Kafka timestamp -> commit visible in Delta. p50/p90/p99/max in milliseconds."""
    import numpy as np
    import pyarrow.parquet as pq

    _, files = read_log(table)
    ingested: list[Any] = []
    visible: list[Any] = []
    for f in files:
        data = pq.read_table(table / f.path, columns=["_kafka_timestamp", "_ingested_at"])
        kafka_us = _micros(data.column("_kafka_timestamp"))
        keep = kafka_us >= int(since_epoch_s * 1e6)
        kafka_us = kafka_us[keep]
        ingested.append(_micros(data.column("_ingested_at"))[keep] - kafka_us)
        visible.append(int(f.visible_at * 1e6) - kafka_us)
    if not ingested:
        return {"rows": 0}
    to_ingested = np.concatenate(ingested) / 1000.0
    to_visible = np.concatenate(visible) / 1000.0

    def summary(values: Any) -> dict[str, float]:
        if len(values) == 0:
            return {}
        p50, p90, p99 = np.percentile(values, [50, 90, 99])
        return {"p50_ms": round(float(p50), 1), "p90_ms": round(float(p90), 1), "p99_ms": round(float(p99), 1),
                "max_ms": round(float(values.max()), 1), "min_ms": round(float(values.min()), 1)}

    return {"rows": len(to_visible), "to_ingested_at": summary(to_ingested), "to_commit_visible": summary(to_visible)}
