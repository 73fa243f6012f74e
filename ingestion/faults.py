"""Test-only fault injection, in one place and inert unless a test sets it.

`INGEST_TEST_FAULT="<point>:<batch id>"` makes the process write the file named by `INGEST_TEST_FAULT_FILE` when it
reaches that point of that batch, then hang there, so a test can SIGKILL it exactly there. Points:
`before_commit` (the batch's files may be written, nothing committed) and `after_commit` (Delta has committed,
Spark's checkpoint has not); `files_written` (the driver-side path: a data file of the batch is in the table's
folder, delta-rs has not committed it); `quarantine_committed` (the batch's quarantine commit is made, bronze's
is not); `silver_between_commits` (a silver step has committed its delete markers,
not its rows; the id is the bronze version the step merges up to); `between_tables` (a routed batch: one route
table has committed, the next has not). `<point>:*` stops at the point's first
occurrence. Replay's and a shadow's commits reach `before_commit`, `quarantine_committed` and `after_commit`
as batch -2 (a shadow's start writes as a replay) and -5 (its promote); `quarantine reprocess` (batch -1)
reaches `before_commit`, `bronze_committed` (its bronze append is made, quarantine's MERGE is not) and
`after_commit`.
"""

from __future__ import annotations

import logging
import os
import time
from enum import StrEnum
from pathlib import Path

log = logging.getLogger(__name__)

FAULT_ENV = "INGEST_TEST_FAULT"
FAULT_FILE_ENV = "INGEST_TEST_FAULT_FILE"


class FaultPoint(StrEnum):
    BEFORE_COMMIT = "before_commit"
    AFTER_COMMIT = "after_commit"
    FILES_WRITTEN = "files_written"
    QUARANTINE_COMMITTED = "quarantine_committed"
    SILVER_BETWEEN_COMMITS = "silver_between_commits"
    BETWEEN_TABLES = "between_tables"
    BRONZE_COMMITTED = "bronze_committed"


def armed(point: FaultPoint, batch_id: int) -> bool:
    """Whether a test asked for this point of this batch."""
    return os.environ.get(FAULT_ENV) in (f"{point}:{batch_id}", f"{point}:*")


def reached(point: FaultPoint, batch_id: int) -> None:
    """Hang here when a test asked for this point of this batch; return at once otherwise."""
    if not armed(point, batch_id):
        return
    marker = os.environ.get(FAULT_FILE_ENV)
    if marker:
        Path(marker).write_text(f"{point}:{batch_id}\n")
    log.warning("test fault point %s reached for batch %d: waiting to be killed", point, batch_id)
    while True:
        time.sleep(1)
