"""A commit of data files written by this process to a local table's log, without Spark or delta-rs: the start
batch's (stream/early.py), written before the JVM exists.

A Delta commit on a local file system is a file `_delta_log/<version>.json` that appears whole and only once:
written under a temporary name, then linked to its name (a link fails when the name exists, so of two writers
one wins, as Hadoop's local log store does). Beside it goes the version's checksum file (`.crc`), derived from
the previous version's the way Spark's Delta computes it incrementally: without one, the first Spark
transaction on the table rebuilds the table's state with Spark jobs (seconds in a new JVM). No checksum is
written when the previous one is missing or holds what an append could change in ways not derived here
(deletion vectors, in-commit timestamps); Spark's Delta then computes the next one itself.
"""

from __future__ import annotations

import bisect
import json
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ingestion.errors import IngestionError

ENGINE = "ingest (direct)"
# What a checksum holds that an append of files without deletion vectors changes as `_next_checksum` derives it.
_KNOWN_CHECKSUM_KEYS = frozenset({
    "txnId", "tableSizeBytes", "numFiles", "numMetadata", "numProtocol", "setTransactions", "domainMetadata",
    "metadata", "protocol", "allFiles", "fileSizeHistogram"})


class CommitConflict(IngestionError):
    """Another writer committed the version this commit was for."""


def append_files(table_dir: Path, read_version: int, adds: Sequence[Mapping[str, Any]], *,
                 user_metadata: str) -> int:
    """Commit `adds` (Delta `add` actions of files already in the table's folder) as version `read_version + 1`,
    recorded as an append (`WRITE`, mode Append) carrying `user_metadata`; the version committed. CommitConflict
    when that version exists (nothing is written then)."""
    folder = table_dir / "_delta_log"
    version = read_version + 1
    txn_id = str(uuid.uuid4())
    info = {"timestamp": int(time.time() * 1000), "operation": "WRITE",
            "operationParameters": {"mode": "Append", "partitionBy": "[]"}, "readVersion": read_version,
            "isolationLevel": "Serializable", "isBlindAppend": True,
            "operationMetrics": {"numFiles": str(len(adds)), "numOutputRows": str(sum(_records(a) for a in adds)),
                                 "numOutputBytes": str(sum(int(a["size"]) for a in adds))},
            "userMetadata": user_metadata, "engineInfo": ENGINE, "txnId": txn_id}
    lines = [json.dumps({"commitInfo": info}, separators=(",", ":"))]
    lines += [json.dumps({"add": dict(a)}, separators=(",", ":")) for a in adds]
    if not _put_if_absent(folder / f"{version:020d}.json", "\n".join(lines) + "\n"):
        raise CommitConflict(f"{table_dir}: version {version} was committed by another writer")
    checksum = _next_checksum(folder / f"{read_version:020d}.crc", adds, txn_id)
    if checksum is not None:
        _put_if_absent(folder / f"{version:020d}.crc", json.dumps(checksum, separators=(",", ":")))
    return version


def _records(add: Mapping[str, Any]) -> int:
    return int(json.loads(add.get("stats") or "{}").get("numRecords", 0))


def _put_if_absent(path: Path, text: str) -> bool:
    """Write `path` whole, unless it exists; whether it was written."""
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with open(temporary, "x") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    try:
        os.link(temporary, path)
    except FileExistsError:
        return False
    finally:
        temporary.unlink()
    return True


def _next_checksum(previous: Path, adds: Sequence[Mapping[str, Any]], txn_id: str) -> dict[str, Any] | None:
    """The checksum of the version that adds `adds` to the one `previous` describes, or None (see the module)."""
    try:
        body: dict[str, Any] = json.loads(previous.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(body, dict) or set(body) - _KNOWN_CHECKSUM_KEYS:
        return None
    sizes = [int(a["size"]) for a in adds]
    body["txnId"] = txn_id
    body["tableSizeBytes"] = int(body["tableSizeBytes"]) + sum(sizes)
    body["numFiles"] = int(body["numFiles"]) + len(adds)
    if "allFiles" in body:
        body["allFiles"] = list(body["allFiles"]) + [{**a, "dataChange": False} for a in adds]
    histogram = body.get("fileSizeHistogram")
    if histogram is not None:
        bounds = histogram["sortedBinBoundaries"]
        for size in sizes:
            at = bisect.bisect_right(bounds, size) - 1
            histogram["fileCounts"][at] += 1
            histogram["totalBytes"][at] += size
    return body
