"""Reading a table's Delta log without a JVM, through delta-rs (`deltalake`): what read-only commands need answer in
a fraction of a second instead of after a Spark session boots.

delta-rs reads the tables this project writes (reader version 1, writer version 2, and writer version 7 with the
typeWidening feature when a column was widened). Where it cannot (a feature it does not support, a store it cannot
reach), `JvmFreeReadError` says why, and the caller falls back to Spark and says so once.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from ingestion.delta.ledger import BatchRecord
from ingestion.errors import IngestionError


class JvmFreeReadError(IngestionError):
    """delta-rs cannot read this table; the message says why."""


def history(path: str) -> list[BatchRecord] | None:
    """Every commit of the table that records offsets, oldest first, as `ledger.history` reads them with Spark;
    None when there is no Delta table at `path`."""
    try:
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise JvmFreeReadError(f"delta-rs is not installed: {exc}") from None
    try:
        table = DeltaTable(path)
        commits = table.history()
    except TableNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - an unsupported feature or store: the caller reads with Spark
        raise JvmFreeReadError(f"delta-rs cannot read {path}: {str(exc).splitlines()[0] if str(exc) else exc!r}") \
            from None
    records = []
    for commit in commits:
        when = _commit_file_millis(path, commit.get("version")) or commit.get("timestamp")
        committed_at = (dt.datetime.fromtimestamp(when / 1000, tz=dt.UTC).replace(tzinfo=None)
                        if isinstance(when, int) else None)
        record = BatchRecord.from_user_metadata(commit.get("userMetadata"), commit.get("version"), committed_at)
        if record is not None:
            records.append(record)
    return sorted(records, key=lambda r: r.version or 0)


def _commit_file_millis(path: str, version: object) -> int | None:
    """When the commit's file was written, in ms, as Spark's history and time travel by timestamp tell a version's
    time (the commit info's own timestamp is the writer's clock, a few ms earlier); None for a remote table."""
    if not isinstance(version, int) or "://" in path.removeprefix("file://"):
        return None
    log = Path(path.removeprefix("file://").removeprefix("file:")) / "_delta_log" / f"{version:020d}.json"
    try:
        return log.stat().st_mtime_ns // 1_000_000
    except OSError:
        return None
