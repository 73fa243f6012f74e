"""The checksum file (`_delta_log/<version>.crc`) of an append that delta-rs committed to a local table.

Spark's Delta writes a checksum with each of its commits, computed from the previous one; delta-rs writes none.
Spark's Delta, finding none for a table's latest version, learns the version's set transactions and its next
checksum by rebuilding the table's state with Spark jobs: a Spark commit that followed a delta-rs commit took
0.7 to 2.5 s instead of 0.03 s in a warm JVM (docs/architecture.md#two-write-paths). This is the one piece of Delta's
protocol the project writes itself, for that measured gap: the checksum of a commit that only added files and set
transactions, derived from the previous version's as Delta derives it for an append (sizes, file count, the
file-size histogram, the set transactions, the file list while it is short). Nothing is written when the previous
checksum is missing or holds something an append could change in ways not derived here; Spark's Delta then
computes the next one itself, as before. `tests/integration/test_driver_write.py` has Delta's `validateChecksum`
agree.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# What a checksum holds that an append of files (without deletion vectors) changes as `next_checksum` derives it.
_KNOWN_KEYS = frozenset({
    "txnId", "tableSizeBytes", "numFiles", "numMetadata", "numProtocol", "setTransactions", "domainMetadata",
    "metadata", "protocol", "allFiles", "fileSizeHistogram"})
# Spark's Delta keeps the file list in the checksum only while the table has few files
# (spark.databricks.delta.checksum.allFiles.threshold); past it the list is left out, which every reader allows.
ALL_FILES_LIMIT = 100


def write_after_append(log_folder: Path, version: int) -> bool:
    """Write the checksum of `version`, an append committed to the local table whose log is `log_folder`, derived
    from `version - 1`'s; whether it was written."""
    target = log_folder / f"{version:020d}.crc"
    if target.exists():
        return False
    try:
        actions = [json.loads(line) for line in (log_folder / f"{version:020d}.json").read_text().splitlines()
                   if line.strip()]
    except (OSError, ValueError):
        return False
    kinds = {name for action in actions for name in action}
    if kinds - {"commitInfo", "add", "txn"}:
        return False  # a schema change, removes, domains: Spark's Delta computes that checksum itself
    adds = [_without_nulls(a["add"]) for a in actions if "add" in a]
    transactions = [a["txn"] for a in actions if "txn" in a]
    body = next_checksum(log_folder / f"{version - 1:020d}.crc", adds, transactions)
    if body is None:
        return False
    try:
        with target.open("x") as out:  # never over one another writer made meanwhile
            json.dump(body, out, separators=(",", ":"))
    except FileExistsError:
        return False
    return True


def next_checksum(previous: Path, adds: Sequence[Mapping[str, Any]],
                  transactions: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any] | None:
    """The checksum of the version that adds `adds` and sets `transactions` on the one `previous` describes, or
    None (see the module)."""
    try:
        body: dict[str, Any] = json.loads(previous.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(body, dict) or set(body) - _KNOWN_KEYS:
        return None
    sizes = [int(a["size"]) for a in adds]
    body.pop("txnId", None)  # the commit's own id: delta-rs's commits carry none
    body["tableSizeBytes"] = int(body["tableSizeBytes"]) + sum(sizes)
    body["numFiles"] = int(body["numFiles"]) + len(adds)
    if transactions:
        if "setTransactions" not in body:
            return None
        kept = {t["appId"]: t for t in body["setTransactions"]}
        kept.update({t["appId"]: dict(t) for t in transactions})
        body["setTransactions"] = list(kept.values())
    if "allFiles" in body:
        if body["numFiles"] > ALL_FILES_LIMIT:
            del body["allFiles"]
        else:
            body["allFiles"] = list(body["allFiles"]) + [{**a, "dataChange": False} for a in adds]
    histogram = body.get("fileSizeHistogram")
    if histogram is not None:
        bounds = histogram["sortedBinBoundaries"]
        for size in sizes:
            at = bisect.bisect_right(bounds, size) - 1
            histogram["fileCounts"][at] += 1
            histogram["totalBytes"][at] += size
    return body


def _without_nulls(add: Mapping[str, Any]) -> dict[str, Any]:
    """An `add` action as Spark's Delta writes it: delta-rs spells absent optional fields as nulls."""
    return {key: value for key, value in add.items() if value is not None}
