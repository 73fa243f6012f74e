"""Keeping a silver table current: each step reads what bronze committed after the version silver records (Delta's
change feed of bronze) and merges it (`table.SilverTable`). Inside `ingest run` a thread steps after each bronze
commit (and at `silver.trigger`); `--available-now` drains it once bronze is done; `ingest silver run` does the same
alone.

A bronze version that did more than append (a `rewind`'s RESTORE, a DELETE, an overwrite) cannot be followed
change by change: silver is rebuilt from bronze as it now is, in a new epoch. So is a first step (no silver yet),
and a step whose versions the change feed no longer has (vacuumed, or from before the feed was on).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ingestion.config import PipelineConfig
from ingestion.delta import catalog, spark_tables, tables
from ingestion.delta.tables import CHANGE_FEED
from ingestion.errors import IngestionError, one_line
from ingestion.runtime import hadoop
from ingestion.runtime.delta_txn import is_table, table_property, table_version
from ingestion.silver import changes, rs_step
from ingestion.silver import ledger as silver_ledger
from ingestion.silver.ledger import SilverRecord, StepKind
from ingestion.silver.spec import SEQUENCE, SilverSpec
from ingestion.silver.table import SilverTable
from ingestion.units import duration_seconds

log = logging.getLogger(__name__)

# Bronze operations that only add rows (or none): anything else makes silver rebuild.
APPENDS = {"WRITE", "STREAMING UPDATE", "CREATE TABLE", "CREATE OR REPLACE TABLE", "OPTIMIZE", "VACUUM START",
           "VACUUM END", "SET TBLPROPERTIES", "UNSET TBLPROPERTIES", "ADD COLUMNS", "CHANGE COLUMN",
           "CHANGE COLUMNS", "UPGRADE PROTOCOL", "CONVERT", "ADD CONSTRAINT", "DROP CONSTRAINT", "COMPUTE STATS",
           "CREATE TABLE AS SELECT", "MANUAL UPDATE", "REPLACE COLUMNS"}


@dataclass(frozen=True)
class Lag:
    versions: int  # bronze versions silver has not merged
    seconds: float  # how long ago the oldest of them was committed (0 when none)
    step_seconds: float = 0.0  # how long the step just taken lasted
    slow_steps: int = 0  # steps so far that lasted longer than the trigger (silver fell behind at each)


class SilverFollower:
    """The silver table of one pipeline, kept from its bronze."""

    def __init__(self, spark: SparkSession, config: PipelineConfig, *, pool: str | None = None,
                 on_step: Callable[[SilverRecord, Lag], None] | None = None) -> None:
        self.config = config
        self.spec = SilverSpec.of(config)
        # Its own SQL settings: the txn settings of its MERGEs reach no other writer's commit.
        self.session = spark.newSession()
        self.table = SilverTable(self.session, self.spec)
        self.pool = pool
        self.on_step = on_step
        self.position: SilverRecord | None = None
        self.steps = 0
        self.error: BaseException | None = None
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._order_checked = False
        self.slow_steps = 0
        self._declined: set[str] = set()  # why steps went to Spark, said once each

    # -- before bronze's query starts ------------------------------------------------------------------------

    def prepare(self, partitions: Mapping[str, Iterable[int]] | None = None) -> None:
        """Check the silver section against bronze's columns, and turn on bronze's change feed if it is off (a
        metadata commit, so before bronze's query writes). With the topics' `partitions`, warn when the file sets
        Kafka's order over several of them (`spec.approximate`)."""
        warning = self.spec.approximate(partitions) if partitions is not None else None
        if warning:
            log.warning("%s", warning)
        path = self.spec.bronze_path
        if not is_table(self.session, path):
            return
        self.spec.check(self.session.read.format("delta").load(path).schema)
        if (table_property(self.session, path, CHANGE_FEED) or "").lower() != "true":
            tables.set_property(self.session, path, CHANGE_FEED, "true")
            log.info("%s: turned on bronze's change feed (%s) for silver", self.spec.pipeline, CHANGE_FEED)

    # -- steps -------------------------------------------------------------------------------------------------

    def current(self) -> SilverRecord | None:
        if self.position is None:
            self.position = silver_ledger.position(self.session, self.spec.path)
        return self.position

    def lag(self) -> Lag:
        bronze = table_version(self.session, self.spec.bronze_path)
        at = self.current()
        behind = (bronze or 0) - (at.bronze_version if at else -1)
        if bronze is None or behind <= 0:
            return Lag(0, 0.0)
        oldest = _committed_at(self.session, self.spec.bronze_path, bronze - behind + 1, behind)
        return Lag(behind, max(0.0, time.time() - oldest))

    def step(self) -> SilverRecord | None:
        """Merge what bronze committed since silver's version; None when there was nothing to merge."""
        bronze = table_version(self.session, self.spec.bronze_path)
        if bronze is None:
            return None
        at = self.current()
        if at is not None and bronze <= at.bronze_version:
            return None
        started = time.monotonic()
        if at is None:
            record = self.rebuild(bronze, reason="no silver table yet")
        else:
            why = self._not_appends(at.bronze_version, bronze) or self._order_changed()
            record = self.rebuild(bronze, reason=why, epoch=at.epoch + 1) if why else self._merge(at, bronze)
        self.position = record
        self.steps += 1
        took = time.monotonic() - started
        trigger = duration_seconds(self.spec.trigger) or 10.0
        if self._thread is not None and took > trigger:  # streaming: steps are due every trigger
            self.slow_steps += 1
            log.warning("%s silver step %d took %.1fs, longer than the %gs trigger: silver falls behind bronze and "
                        "its next step merges every version committed meanwhile (%d slow steps so far)",
                        self.spec.pipeline, self.steps, took, trigger, self.slow_steps)
        lag = replace(self.lag(), step_seconds=took, slow_steps=self.slow_steps)
        if record.kind is StepKind.REBUILD:
            log.info("%s silver step %d: rebuilt from bronze version %d: %d bronze rows folded into %d rows in "
                     "%.2fs, silver lag %d versions", self.spec.pipeline, self.steps, record.bronze_version,
                     record.changes, record.inserted, time.monotonic() - started, lag.versions)
        else:
            log.info("%s silver step %d: bronze versions %d-%d, %d changes on %d keys: %d inserted, %d updated, %d "
                     "deleted%s in %.2fs, silver lag %d versions", self.spec.pipeline, self.steps,
                     record.bronze_from + 1, record.bronze_version, record.changes, record.keys, record.inserted,
                     record.updated, record.deleted,
                     f"; {record.cross_partition_keys} keys in two or more Kafka partitions (no order between them)"
                     if record.cross_partition_keys else "", time.monotonic() - started, lag.versions)
        if self.on_step is not None:
            self.on_step(record, lag)
        return record

    def drain(self) -> int:
        """Step until silver holds every bronze version committed by now; the steps taken."""
        taken = 0
        while self.step() is not None:
            taken += 1
        return taken

    def rebuild(self, bronze_version: int | None = None, *, reason: str = "asked for",
                epoch: int | None = None) -> SilverRecord:
        """Recompute silver from bronze as of `bronze_version` (the latest by default), in a new epoch."""
        version = table_version(self.session, self.spec.bronze_path) if bronze_version is None else bronze_version
        if version is None:
            raise IngestionError(f"{self.spec.file}: pipeline {self.spec.pipeline!r} has no bronze table at "
                                 f"{self.spec.bronze_path} yet: run it first")
        at = self.current()
        if epoch is None:
            epoch = at.epoch + 1 if at is not None else 0
        log.info("%s: rebuilding silver %s from bronze version %d (%s)", self.spec.pipeline, self.spec.path,
                 version, reason)
        bronze = self.session.read.format("delta").option("versionAsOf", version).load(self.spec.bronze_path)
        record = SilverRecord(pipeline=self.spec.pipeline, kind=StepKind.REBUILD, epoch=epoch,
                              bronze_version=version, changes=bronze.count())
        record = self.table.rebuild(bronze, record)
        self.position = record
        self._register()
        return record

    def restore(self, bronze_version: int) -> SilverRecord:
        """Put back silver's own state as of bronze version `bronze_version` (its newest commit at or before it, as
        its ledger records), in a new epoch; `drain` then merges what bronze committed after it."""
        found = [(v, r) for v, r in silver_ledger.records(self.session, self.spec.path)
                 if r.bronze_version <= bronze_version and r.kind is not StepKind.EVOLVE]
        at = self.current()
        if not found or at is None:
            raise IngestionError(f"silver {self.spec.path} records no state at or before bronze version "
                                 f"{bronze_version}: rebuild it whole (ingest silver rebuild {self.spec.pipeline})")
        version, record = found[0]
        restored = SilverRecord(pipeline=self.spec.pipeline, kind=StepKind.REBUILD, epoch=at.epoch + 1,
                                bronze_version=record.bronze_version, bronze_from=record.bronze_version,
                                truncates=record.truncates)
        marks = [(v, r) for v, r in silver_ledger.records(self.session, self.spec.markers_path)
                 if r.bronze_version <= record.bronze_version]
        if marks:
            old = self.session.read.format("delta").option("versionAsOf", marks[0][0]).load(self.spec.markers_path)
            self.table.overwrite(self.spec.markers_path, old.localCheckpoint(), restored, "deletes")
        rows = self.session.read.format("delta").option("versionAsOf", version).load(self.spec.path)
        self.table.overwrite(self.spec.path, rows.localCheckpoint(), restored)
        self.table.markers_in_use = None
        self.position = restored
        log.info("%s: silver put back to its state at bronze version %d (its version %d)", self.spec.pipeline,
                 record.bronze_version, version)
        return restored

    def _merge(self, at: SilverRecord, bronze: int) -> SilverRecord:
        record = SilverRecord(pipeline=self.spec.pipeline, kind=StepKind.MERGE, epoch=at.epoch,
                              bronze_version=bronze, bronze_from=at.bronze_version, truncates=at.truncates)
        done = self._driver_step(record)
        if done is not None:
            return done
        try:
            feed = self._changes(at.bronze_version + 1, bronze)
        except AnalysisException as exc:
            return self.rebuild(bronze, reason=f"bronze's change feed cannot serve versions {at.bronze_version + 1}"
                                f"-{bronze}: {one_line(exc)}", epoch=at.epoch + 1)
        cut = changes.truncates_of(feed, self.spec)
        found = cut.count() if cut is not None else 0
        if found:  # rare, and the fold applies it to every key at once: the exact state in one rebuild
            return self.rebuild(bronze, reason=f"bronze versions {at.bronze_version + 1}-{bronze} hold {found} "
                                f"truncate(s)", epoch=at.epoch + 1)
        rows = changes.changes(feed, self.spec)
        if self.spec.refolds:
            as_of = self.session.read.format("delta").option("versionAsOf", bronze).load(self.spec.bronze_path)
            return self.table.refold(rows, as_of, record)
        return self.table.merge(rows, record)

    def _driver_step(self, record: SilverRecord) -> SilverRecord | None:
        """The step made by the driver (`rs_step`), or None when it is Spark's (said once per reason)."""
        try:
            done = rs_step.merge(self.spec, record, self.config.storage_options() or None)
        except rs_step.Declined as why:
            if str(why) not in self._declined:
                self._declined.add(str(why))
                log.info("%s: silver step over bronze versions %d-%d merged by Spark: %s", self.spec.pipeline,
                         record.bronze_from + 1, record.bronze_version, why)
            return None
        self.table.markers_in_use = None  # the driver may have appended markers
        return done.record if done.merged else self.table.record_only(done.record)

    def _changes(self, first: int, last: int) -> DataFrame:
        """The rows bronze versions first..last added, as bronze rows."""
        feed = (self.session.read.format("delta").option("readChangeFeed", "true")
                .option("startingVersion", first).option("endingVersion", last).load(self.spec.bronze_path))
        return feed.where(F.col("_change_type") == "insert").drop("_change_type", "_commit_version",
                                                                  "_commit_timestamp")

    def _order_changed(self) -> str | None:
        """Why silver must be rebuilt although bronze only appended: its `_sequence` column is not the one the
        section's order makes (a table made under another `sequenceBy`, or under Kafka's order before the Debezium
        connector's position became the default), so its rows would be compared with changes by another order.
        Asked once per follower."""
        if self._order_checked:
            return None
        self._order_checked = True
        bronze = self.session.read.format("delta").load(self.spec.bronze_path)
        wanted = _shape(changes.changes(bronze, self.spec).schema)
        held = _shape(self.table.read().schema)
        if wanted == held:
            return None
        return f"silver's order changed: its {SEQUENCE} column is {held}, the section orders by {wanted}"

    def _not_appends(self, after: int, upto: int) -> str | None:
        """Why bronze versions after..upto cannot be merged change by change (one did more than append), or None.
        Read from the versions' own commit files (no Spark job); from Delta's history when one cannot be read."""
        operations = self._operations(after, upto)
        if operations is None:
            rows = (spark_tables.history(self.session, self.spec.bronze_path, upto - after)
                    .select("version", "operation", "operationParameters").collect())
            operations = [(int(r["version"]), str(r["operation"]), dict(r["operationParameters"] or {}))
                          for r in rows if r["version"] > after]
        for version, operation, parameters in sorted(operations, key=lambda r: r[0]):
            mode = str(parameters.get("mode", ""))
            if operation not in APPENDS or mode.strip('"') == "Overwrite":
                return f"bronze version {version} is a {operation}{f' ({mode})' if mode else ''}"
        return None

    def _operations(self, after: int, upto: int) -> list[tuple[int, str, dict[str, Any]]] | None:
        """(version, operation, its parameters) of bronze versions after..upto, from their commit files' commitInfo;
        None when a file cannot be read or holds none (cleaned up, or written without commit info)."""
        log_path = f"{self.spec.bronze_path.rstrip('/')}/_delta_log"
        found = []
        for version in range(after + 1, upto + 1):
            try:
                text = hadoop.read_text(self.session, f"{log_path}/{version:020d}.json")
            except Exception:  # noqa: BLE001 (a file cleaned up or unreadable: Delta's history answers instead)
                return None
            info = next((action["commitInfo"] for action in map(json.loads, filter(None, text.splitlines()))
                         if "commitInfo" in action), None)
            if not isinstance(info, dict) or "operation" not in info:
                return None
            found.append((version, str(info["operation"]), dict(info.get("operationParameters") or {})))
        return found

    def _register(self) -> None:
        if self.spec.catalog_table:
            catalog.register(self.session, self.spec.catalog_table, self.spec.path, self.spec.file)

    # -- inside `ingest run` -----------------------------------------------------------------------------------

    def start(self) -> None:
        """Step in a thread: after each bronze commit (`notify`) and at least every `silver.trigger`."""
        self._thread = threading.Thread(target=self._loop, name=f"silver-{self.spec.pipeline}", daemon=True)
        self._thread.start()

    def notify(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        every = duration_seconds(self.spec.trigger) or 10.0
        if self.pool is not None:
            self.session.sparkContext.setLocalProperty("spark.scheduler.pool", self.pool)
        while not self._stopping.is_set():
            try:
                self.step()
            except Exception as exc:  # noqa: BLE001 (reported by the run, which stops the pipeline)
                self.error = exc
                log.error("%s: silver failed: %s", self.spec.pipeline, one_line(exc))
                return
            self._wake.wait(every)
            self._wake.clear()

    def stop(self, timeout: float = 600.0) -> None:
        """Let the step being merged finish, then end the thread."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None


def _shape(schema: T.StructType) -> str:
    """What a table's `_sequence` is, for comparing orders: none, a record of these fields, or a field's value."""
    if SEQUENCE not in schema.fieldNames():
        return "none (Kafka order)"
    kind = schema[SEQUENCE].dataType
    if isinstance(kind, T.StructType):
        return f"the connector's position ({', '.join(kind.fieldNames())})"
    return "a field's value"


def _committed_at(spark: SparkSession, path: str, version: int, newest: int) -> float:
    """When bronze committed `version`, one of its `newest` versions (seconds since the epoch)."""
    rows = (spark_tables.history(spark, path, newest).where(F.col("version") == version)
            .select("timestamp").collect())
    return rows[0]["timestamp"].timestamp() if rows else time.time()
