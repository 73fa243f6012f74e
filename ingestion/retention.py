"""The retention settings a bronze table promises its time-travel window with, checked together.

Four settings decide what a table keeps: `maintenance.vacuumRetention` (what `ingest maintain` passes to VACUUM),
and the table properties `delta.deletedFileRetentionDuration`, `delta.logRetentionDuration` and
`delta.setTransactionRetentionDuration`. The table promises its *window*, the vacuum retention: every version
committed within it can be read (`VERSION AS OF`) and rewound to. A combination under which a promise could break
is refused, with the reason, before anything runs (docs/exactly-once.md#retention-and-the-promised-window):

* `delta.setTransactionRetentionDuration` set: Delta forgets a (txnAppId, txnVersion) after it, so a checkpoint
  resumed after a longer stop replays its last batch as new: a duplicate. Unset, Delta keeps one small record per
  app id (one per checkpoint) forever, in every log checkpoint, so log cleanup does not lose it.
* `delta.deletedFileRetentionDuration` shorter than the window: Delta refuses time travel beyond it, and a VACUUM
  by another Delta client (which defaults to it) deletes files the window needs. Longer: Delta's VACUUM refuses
  the shorter vacuum retention. Ingest creates tables with it equal to the window.
* `delta.logRetentionDuration` shorter than the window: log cleanup deletes commits the window needs.
* A window under `MIN_WINDOW` (1 hour): a VACUUM could delete the data files a running batch has written and not
  committed yet (Delta refuses such retentions for the same reason); `maintenance.allowShortRetention: true`
  allows it for tests and demos only.

Pure functions of the settings: no JVM, no table.
"""

from __future__ import annotations

from collections.abc import Mapping

from ingestion.units import duration_seconds

DELETED_FILE_RETENTION = "delta.deletedFileRetentionDuration"
LOG_RETENTION = "delta.logRetentionDuration"
SET_TRANSACTION_RETENTION = "delta.setTransactionRetentionDuration"
DEFAULTS = {DELETED_FILE_RETENTION: "interval 1 week", LOG_RETENTION: "interval 30 days"}  # Delta's own
MIN_WINDOW = 3600.0

def as_interval(window_seconds: float) -> str:
    """A table property value for a number of seconds ('interval 168 hours', 'interval 90 seconds')."""
    if window_seconds % 3600 == 0:
        return f"interval {int(window_seconds // 3600)} hours"
    return f"interval {round(window_seconds)} seconds"


def problems(window: str, properties: Mapping[str, str], *, allow_short: bool = False) -> list[tuple[str, str]]:
    """(key, reason) for each setting that breaks a promise with a vacuum retention of `window` and these table
    properties (absent ones take Delta's defaults); empty when the combination is safe."""
    found: list[tuple[str, str]] = []
    span = duration_seconds(window)
    if span is None or span <= 0:
        return [("maintenance.vacuumRetention", f"must be a duration such as '168 hours', got {window!r}")]
    if span < MIN_WINDOW and not allow_short:
        found.append(("maintenance.vacuumRetention",
                      f"{window!r} is under 1 hour: a VACUUM could delete the files a running batch has written "
                      "and not committed yet (set maintenance.allowShortRetention: true for tests only)"))
    txn = properties.get(SET_TRANSACTION_RETENTION)
    if txn:
        found.append((SET_TRANSACTION_RETENTION,
                      f"{txn!r} lets Delta forget a batch's (txnAppId, txnVersion): a checkpoint resumed after a "
                      "longer stop would write its last batch again, a duplicate; leave it unset (Delta then keeps "
                      "one record per checkpoint's app id)"))
    for key, what in ((DELETED_FILE_RETENTION, "Delta refuses time travel older than it, and a VACUUM run by "
                       "another Delta client (which uses it) would delete files"),
                      (LOG_RETENTION, "log cleanup would delete the commits")):
        value = properties.get(key) or DEFAULTS[key]
        held = duration_seconds(value)
        if held is None:
            found.append((key, f"must be an interval such as 'interval 7 days', got {value!r}"))
        elif held < span:
            found.append((key, f"{value!r} is shorter than maintenance.vacuumRetention {window!r}: {what} of "
                               "versions the table promises to keep readable and restorable"))
        elif key == DELETED_FILE_RETENTION and held > span:
            found.append((key, f"{value!r} is longer than maintenance.vacuumRetention {window!r}: Delta's VACUUM "
                               f"refuses a retention under it; make them equal"))
    return found
