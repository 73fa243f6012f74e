"""Which versions of a table can still be read and restored: pure functions of its commit history, so both
readers (delta-rs and Spark) answer alike.

Delta refuses time travel (`VERSION AS OF`, RESTORE) to a version committed longer ago than the table's
`delta.deletedFileRetentionDuration`, since VACUUM may have deleted its files; a VACUUM run with a shorter
retention (its safety check off) deletes files of even newer versions: those whose files a later commit removed
before the VACUUM's cutoff. After log cleanup, versions older than the log's oldest commit are gone too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ingestion import retention
from ingestion.units import duration_seconds

# Operations that remove data files (the others, WRITE appends, CREATE, SET TBLPROPERTIES, VACUUM, remove none).
REMOVING = ("OPTIMIZE", "RESTORE", "DELETE", "MERGE", "UPDATE", "REORG", "TRUNCATE", "REPLACE TABLE")


@dataclass(frozen=True)
class Commit:
    version: int
    millis: int  # when it was committed, epoch milliseconds
    operation: str
    parameters: Mapping[str, Any]


def oldest_restorable(commits: Sequence[Commit], properties: Mapping[str, str], now_millis: int) -> int | None:
    """The oldest version that time travel and rewind still reach, None without commits."""
    if not commits:
        return None
    ordered = sorted(commits, key=lambda c: c.version)
    window = duration_seconds(properties.get(retention.DELETED_FILE_RETENTION)
                               or retention.DEFAULTS[retention.DELETED_FILE_RETENTION]) or 0.0
    cutoff = now_millis - window * 1000
    oldest = next((c.version for c in ordered if c.millis >= cutoff), ordered[-1].version)
    for vacuum in (c for c in ordered if c.operation == "VACUUM START"):
        kept = vacuum.parameters.get("specifiedRetentionMillis")
        kept = vacuum.parameters.get("defaultRetentionMillis") if kept in (None, "", "null") else kept
        if kept in (None, "", "null"):
            continue
        removed_before = vacuum.millis - int(kept)
        broken = [c.version for c in ordered if c.version < vacuum.version and c.operation in REMOVING
                  and c.millis < removed_before]
        if broken:  # the state before each of them lost a file
            oldest = max(oldest, max(broken))
    return max(oldest, ordered[0].version)
