"""Delta log checkpoints written on a background thread, so that no micro-batch waits for one.

Delta writes a checkpoint (the table's state in Parquet, where readers start instead of replaying every commit)
inside the commit of every `delta.checkpointInterval`-th version, 10 by default. That commit takes many times as
long as the others, so at a short trigger every 10th batch stalls and sets the p99 freshness
(docs/performance.md#background-delta-log-checkpoints).

Bronze tables that ingest creates therefore set `delta.checkpointInterval` to `INLINE_INTERVAL` (1000): Delta's
own checkpoint inside a commit becomes rare, and writers other than ingest still write one now and then. While a
pipeline runs, `BackgroundCheckpoints` writes one on a background thread, from the snapshot the last commit left,
once `EVERY` (10) versions and `MIN_SECONDS` (60; `RS_MIN_SECONDS`, 10, where delta-rs writes them) have passed
since the last. At the default 10-second trigger that is every 10 versions, as Delta would; at a 1-second trigger it
is once a minute through Spark's Delta, because a checkpoint still costs CPU that the batches beside it lose, and a
reader replays at most a minute of small commits. A table whose own interval is `EVERY` or less (one created
before, or one where `sink.tableProperties` sets `delta.checkpointInterval`) keeps Delta's checkpoints inside
commits only.

Tables with a legacy protocol (what ingest creates unless a column or a property needs table features), local or
in object storage, are checkpointed by delta-rs (`rs_tables.checkpoint`): the same checkpoint, written in
milliseconds without a Spark job, where Spark's Delta spends about a second of CPU rebuilding the state with Spark
jobs (docs/performance.md#delta-log-checkpoints-through-delta-rs). The others (table features) get Spark's Delta's.
In object storage this also keeps the driver-side path's appends short: each lists and replays the commits since
the newest checkpoint, and Spark's snapshot, which delta-rs's commits leave behind, is no checkpoint source there.
The first checkpoint a JVM writes is the slowest: it loads Delta's checkpoint code, and its CPU
slows the batches next to it; the backlog they leave set the p99 freshness. A streaming run of such a table
therefore writes one at start (`warm_up`), where it overlaps the JVM's own warm-up, unless the table's current
version has one already.

Spark's checkpoint jobs run in the Spark scheduler pool `POOL`. On a local master the session schedules FAIR with
the pools of data/fairscheduler.xml, where the batches' pool comes first: a checkpoint's task starts only on a core
that no batch task is waiting for (one already running finishes first; Spark does not preempt). Under FIFO a
checkpoint job submitted first keeps every free core until its tasks are all started, and with 2 cores a batch's 2
write tasks then run one after the other. Under Spark's default FIFO scheduling (other masters) the pool changes
nothing.

A checkpoint is an optimization that Delta can always do without: one that fails is logged and the next is tried
`EVERY` versions later; the batches and their commits do not depend on it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor

from pyspark.sql import SparkSession

from ingestion.delta import rs_tables
from ingestion.errors import one_line
from ingestion.runtime import delta_txn

log = logging.getLogger(__name__)

PROPERTY = "delta.checkpointInterval"
INLINE_INTERVAL = "1000"  # bronze's value: ingest writes the checkpoints in between
EVERY = 10  # Delta's default interval (the one a table without the property has), kept by the background thread
MIN_SECONDS = 60.0  # and at most one checkpoint a minute through Spark's Delta
RS_MIN_SECONDS = 10.0  # or every ten seconds through delta-rs (milliseconds of CPU; in object storage each append
# lists and replays the commits since the newest checkpoint: about 6 ms each on a local S3 server)
POOL = "delta-checkpoints"  # Spark scheduler pool of the checkpoint jobs (data/fairscheduler.xml on local masters)


class BackgroundCheckpoints:
    """Checkpoints of the Delta table at `path` every `every` versions and at most one per `min_seconds`, written
    by one background thread."""

    def __init__(self, spark: SparkSession, path: str, *, name: str, every: int = EVERY,
                 min_seconds: float = MIN_SECONDS, options: Mapping[str, str] | None = None) -> None:
        self.spark = spark
        self.path = path
        self.options = dict(options or {})  # delta-rs's storage options of a table in object storage
        self.name = name
        self.every = every
        self.min_seconds = min_seconds
        self._started_at: float | None = None  # when the last checkpoint of this object started
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"delta-checkpoint-{name}")
        self._running: Future[None] | None = None
        self._lock = threading.Lock()
        self.written: list[int] = []  # versions checkpointed by this object, oldest first
        # The table's newest checkpoint (-1: none), and the version the next is counted from: read on the thread,
        # because the JVM's first log handle of the table costs seconds in a new JVM (Delta's initialization),
        # which then goes by beside the query's start instead of before it.
        self._checkpointed, self._last = -1, 0
        self._by_rs = False  # whether delta-rs writes this table's checkpoints (read on the thread too)
        self._known = self._pool.submit(self._read_checkpointed)

    @classmethod
    def for_table(cls, spark: SparkSession, path: str, *, name: str, properties: Mapping[str, str] | None = None,
                  options: Mapping[str, str] | None = None) -> BackgroundCheckpoints | None:
        """Background checkpoints for the table at `path` when Delta itself checkpoints it less often than every
        `EVERY` versions (its `delta.checkpointInterval`, from `properties` when the caller read them, else from
        Delta in the JVM), else None."""
        interval = properties.get(PROPERTY) if properties is not None else \
            delta_txn.table_property(spark, path, PROPERTY)
        if int(interval or EVERY) <= EVERY:
            return None
        return cls(spark, path, name=name, options=options)

    def _read_checkpointed(self) -> None:
        try:
            found = rs_tables.last_checkpoint(self.path, self.options)  # _last_checkpoint, without the JVM
            self._checkpointed = found if found is not None else \
                delta_txn.last_checkpoint_version(self.spark, self.path)
        except Exception as exc:  # noqa: BLE001 - then the first checkpoint comes `every` versions from now
            log.warning("%s: could not read the newest Delta checkpoint of %s: %s", self.name, self.path,
                        one_line(exc))
        self._last = max(0, self._checkpointed)
        self._by_rs = rs_tables.checkpointed_by_rs(self.path, self.options)

    @property
    def checkpointed(self) -> int:
        """The table's newest checkpoint, -1 when it has none (once the thread has read it)."""
        self._known.result()
        return self._checkpointed

    @property
    def last(self) -> int:
        """The version the next checkpoint is counted from."""
        self._known.result()
        return self._last

    def committed(self, version: int) -> Future[None] | None:
        """A commit left the table at `version`: start a checkpoint when `every` versions and `min_seconds` have
        passed since the last one and none is being written; the checkpoint started, if one was."""
        now = time.monotonic()
        with self._lock:
            if version - self.last < self.every:
                return None
            gap = min(self.min_seconds, RS_MIN_SECONDS) if self._by_rs else self.min_seconds
            if self._started_at is not None and now - self._started_at < gap:
                return None
            return self._start(now, version)

    def warm_up(self) -> Future[None] | None:
        """Start a checkpoint of the table's current version now through Spark's Delta, unless the table has one,
        one is being written, or delta-rs writes this table's checkpoints (it needs no warming): the first of a
        JVM, written while the stream starts rather than beside its steady batches. The next one follows `every`
        versions and `min_seconds` later."""
        with self._lock:
            return self._start(time.monotonic(), None)

    def _start(self, now: float, version: int | None) -> Future[None] | None:
        """Submit `_write` unless a checkpoint is being written (the caller holds the lock)."""
        if self._running is not None and not self._running.done():
            return None
        self._started_at = now
        self._running = self._pool.submit(self._write, version)
        return self._running

    def _write(self, committed: int | None) -> None:
        """Checkpoint the version a commit left (`committed`), through delta-rs where it can; None: a warm-up, the
        latest version through Spark's Delta only."""
        started = time.monotonic()
        if committed is not None and committed > self._checkpointed:  # on the thread, after `_read_checkpointed`
            written = rs_tables.checkpoint(self.path, committed, self.options)
            if written is not None:
                self._last = self._checkpointed = written
                self.written.append(written)
                log.info("%s: Delta checkpoint at version %d written by delta-rs in %.2fs, beside the batches",
                         self.name, written, time.monotonic() - started)
                return
        elif committed is None and self._by_rs:
            self._started_at = None  # nothing to warm up: the first checkpoint comes `every` versions from now
            return
        version = delta_txn.written_version(self.spark, self.path)  # the state the latest commit here left
        if version <= self._checkpointed:
            return  # no commit since the last checkpoint
        context = self.spark.sparkContext  # local properties are this thread's: they tag the checkpoint's jobs
        context.setLocalProperty("spark.scheduler.pool", POOL)
        context.setJobDescription(f"{self.name}: Delta checkpoint at version {version}")
        try:
            version = delta_txn.write_checkpoint(self.spark, self.path)
        except Exception as exc:  # noqa: BLE001 - readers replay the log instead; the next one is tried later
            log.warning("%s: Delta checkpoint of %s at version %d failed (tried again %d versions later): %s",
                        self.name, self.path, version, self.every, one_line(exc))
            self._last = version
            return
        self._last = self._checkpointed = version
        self.written.append(version)
        log.info("%s: Delta checkpoint at version %d written in %.2fs, beside the batches", self.name, version,
                 time.monotonic() - started)

    def close(self, timeout: float = 120.0) -> None:
        """Wait for a checkpoint being written (a process that exits in the middle leaves a partial file that
        Delta ignores, but wastes the work), then stop the thread."""
        running = self._running
        if running is not None:
            try:
                running.result(timeout)
            except TimeoutError:
                log.warning("%s: a Delta checkpoint is still being written after %.0fs; not waiting", self.name,
                            timeout)
        self._pool.shutdown(wait=False)


def checkpoint_if_due(path: str, version: int, properties: Mapping[str, str],
                      options: Mapping[str, str] | None = None) -> int | None:
    """After commits made without a JVM (the start batches of a run that needs no JVM, which no Delta writer
    checkpoints inline): the checkpoint the table is due at `version` (`EVERY` versions since the last, or its own
    shorter `delta.checkpointInterval`), written through delta-rs; the version checkpointed, or None."""
    every = min(int(properties.get(PROPERTY) or EVERY), EVERY)
    last = rs_tables.last_checkpoint(path, options)
    if last is None or version - max(0, last) < every:
        return None
    return rs_tables.checkpoint(path, version, options)
