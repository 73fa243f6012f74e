"""Writing a silver table: one step merges the changes of some bronze versions, a rebuild writes the fold of bronze
as of a version. Every commit carries the bronze version it reached (`ledger`) and a Delta transaction id
(txnAppId `spec.txn_app_id(epoch)`, txnVersion = that bronze version): a step redone after a crash is skipped by
Delta, and MERGE takes the id from Delta's SQL settings (`spark.databricks.delta.write.txnAppId`/`txnVersion`),
set only in the follower's own session (`spark.newSession()`), so no other writer's commit carries them.

Upsert mode keeps one row per key; a delete removes the row and leaves a marker (key and order of the delete) in
a table of its own, `<silver>_deletes`, appended by each step, so a change older than the delete that arrives later
is not inserted (a change must pass every marker of its key). History mode keeps every change; a step recomputes
the intervals of the keys it touches. Both drop (or close) a
change ordered before a truncate the ledger records (`truncates`). With `ignoreNullUpdates` or `trackHistoryOn` a
key's row depends on more than its newest change: a step refolds the keys it touches from bronze (`refold`).
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ingestion import faults
from ingestion.delta import commit, spark_tables, tables
from ingestion.runtime.delta_txn import DeltaTxn, is_table, table_version
from ingestion.silver import changes, truncates
from ingestion.silver import ledger as silver_ledger
from ingestion.silver.changes import key_condition, newer
from ingestion.silver.ledger import SilverRecord, StepKind
from ingestion.silver.spec import DELETE, SEQUENCE, SilverSpec

log = logging.getLogger(__name__)

# Every this many versions, the markers table is rewritten whole (into one file) instead of appended to.
MARKERS_REWRITE_EVERY = 32
# A step's keys up to this many are broadcast to the join that finds their rows in history's silver.
_BROADCAST_KEYS = 200_000


def _committing(session: SparkSession, app_id: str, version: int, record: SilverRecord) -> AbstractContextManager[None]:
    """Delta DML inside the block commits with this transaction id and the record as its userMetadata."""
    return commit.committing(session, commit.Txn(app_id, version), record.to_user_metadata())


class SilverTable:
    """The silver table (and its markers) of one pipeline, written in the session given (its own)."""

    def __init__(self, session: SparkSession, spec: SilverSpec) -> None:
        self.session = session
        self.spec = spec
        self.markers_in_use: bool | None = None  # whether the markers table may hold rows (None: not looked yet)

    def exists(self) -> bool:
        return is_table(self.session, self.spec.path)

    def read(self) -> DataFrame:
        return self.session.read.format("delta").load(self.spec.path)

    # -- rebuild ---------------------------------------------------------------------------------------------

    def rebuild(self, bronze: DataFrame, record: SilverRecord) -> SilverRecord:
        """Replace the table's contents with the fold of `bronze` (bronze as of `record.bronze_version`)."""
        spec = self.spec
        cut = changes.truncates_of(bronze, spec)
        found = truncates.positions(cut) if cut is not None else ()
        rows, deletes = changes.fold_changes(changes.keyed(changes.changes(bronze, spec), spec), spec,
                                             cut if found else None)
        rows = rows.cache()
        try:
            count = rows.count()
            record = replace(record, inserted=count, truncates=found)
            if deletes is not None:
                self.overwrite(self.spec.markers_path, deletes, record, "deletes")
                self.markers_in_use = True
            self.overwrite(self.spec.path, rows, record)
        finally:
            rows.unpersist()
        return record

    def overwrite(self, path: str, rows: DataFrame, record: SilverRecord, table: str = "") -> None:
        commit.overwrite(rows, path, commit.Txn(self.spec.txn_app_id(record.epoch, table), record.bronze_version),
                         record.to_user_metadata())

    # -- one step ---------------------------------------------------------------------------------------------

    def merge(self, change_rows: DataFrame, record: SilverRecord) -> SilverRecord:
        """Merge the changes of bronze versions (record.bronze_from, record.bronze_version]."""
        if self.spec.history:
            return self._merge_history(change_rows, record)
        return self._merge_upsert(change_rows, record)

    def record_only(self, record: SilverRecord) -> SilverRecord:
        """A commit with no rows that moves the table's recorded bronze version (the versions held no change)."""
        txn = DeltaTxn(self.session, self.spec.path)
        app_id = self.spec.txn_app_id(record.epoch)
        if txn.committed_version(app_id) < record.bronze_version:
            txn.commit([], app_id=app_id, txn_version=record.bronze_version,
                       user_metadata=record.to_user_metadata())
        return record

    def truncated(self, change_rows: DataFrame, record: SilverRecord) -> DataFrame | None:
        """The truncates the state has applied (its ledger's), in the shape `truncates.of` gives."""
        sequence = change_rows.schema[SEQUENCE].dataType if SEQUENCE in change_rows.columns else None
        return truncates.frame(self.session, record.truncates, sequence)

    def _merge_upsert(self, change_rows: DataFrame, record: SilverRecord) -> SilverRecord:
        """One pass over the step's changes: their fold, with whether each key's marker stops it (`_marked`),
        computed once into the executors' memory (a local checkpoint); its counts, the markers and the rows are
        written from it, the rows' MERGE reading it as it is (no second copy of its source)."""
        spec = self.spec
        change_rows = truncates.surviving(change_rows, spec, self.truncated(change_rows, record))
        held = self._markers_now() if self._markers_in_use() else None
        # A local checkpoint, not a cache: Delta refuses a cached source unless it copies it first. Its blocks go
        # with the frame (Spark's cleaner).
        latest = self._marked(changes.latest(change_rows, spec), held).localCheckpoint()
        counts = latest.agg(F.count(F.lit(1)).alias("keys"), F.sum("_changes").alias("changes"),
                            F.sum(F.col(DELETE).cast("int")).alias("deletes"),
                            F.sum((F.col("_partitions") > 1).cast("int")).alias("cross")).first()
        assert counts is not None
        keys, deletes = int(counts["keys"]), int(counts["deletes"] or 0)
        record = replace(record, keys=keys, changes=int(counts["changes"] or 0),
                         cross_partition_keys=int(counts["cross"] or 0))
        if keys == 0:
            return self.record_only(record)
        if not spec.sequenced:
            record = replace(record, cross_partition_keys=record.cross_partition_keys + self._moved(latest))
        self._evolve(latest.drop(DELETE, "_partitions", "_changes", "_marked").schema, record)
        if deletes:
            self._append_markers(latest, held, record)
            faults.reached(faults.FaultPoint.SILVER_BETWEEN_COMMITS, record.bronze_version)
        return self._merge_rows(latest, record)

    def _marked(self, latest: DataFrame, held: DataFrame | None) -> DataFrame:
        """`latest` with `_marked`: the key's change is an upsert that does not pass each of the key's markers
        (`held`, the markers before this step; None: none), found by a join of the narrow upserts with them. Such
        a change is not inserted."""
        spec = self.spec
        if held is None:
            return latest.withColumn("_marked", F.lit(False))
        upserts = latest.where(~F.col(DELETE)).select(
            *[F.col(p).alias(f"_b{i}") for i, p in enumerate(spec.key)], *self._ordering()).alias("s")
        passes = F.coalesce(F.expr(newer(spec, "s", "m")), F.lit(False))
        on = F.expr(" AND ".join(f"m.{spec.marker_column(i)} = s._b{i}" for i in range(len(spec.key))))
        blocked = upserts.join(held.alias("m"), on & ~passes, "left_semi").select(
            *[f"_b{i}" for i in range(len(spec.key))]).alias("b")
        return (latest.alias("s").join(blocked, F.expr(" AND ".join(f"s.{p} = b._b{i}"
                                                                    for i, p in enumerate(spec.key))), "left")
                .select("s.*", F.col("b._b0").isNotNull().alias("_marked")))

    def _moved(self, latest: DataFrame) -> int:
        """Keys of the step whose row in silver came from another Kafka partition (Kafka order does not order
        them; the step's change wins as the later arrival)."""
        spec = self.spec
        silver = self.read().alias("t")
        return (latest.where(F.col("_partitions") == 1).alias("s")
                .join(silver, F.expr(key_condition(spec, "s", "t")))
                .where("s._kafka_topic <> t._kafka_topic OR s._kafka_partition <> t._kafka_partition").count())

    def _markers_in_use(self) -> bool:
        if self.markers_in_use is None:
            path = self.spec.markers_path
            self.markers_in_use = is_table(self.session, path) and bool(
                self.session.read.format("delta").load(path).limit(1).count())
        return self.markers_in_use

    def _markers_now(self) -> DataFrame:
        """The markers as they are before this step appends its own, pinned to that version (the rows' MERGE needs
        none of this step's: they are of keys whose newest change here is a delete)."""
        path = self.spec.markers_path
        return self.session.read.format("delta").option("versionAsOf", table_version(self.session, path)).load(path)

    def _ordering(self) -> list[str]:
        return [c for c in (SEQUENCE if self.spec.sequenced else None,
                            "_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp") if c]

    def _append_markers(self, latest: DataFrame, held: DataFrame | None, record: SilverRecord) -> None:
        """A marker (the key and the delete's ordering columns) for each key whose newest change of the step is a
        delete, appended: one small commit, no MERGE, no read of the markers already there. Committed before the
        rows, under the same bronze version (see the module's doc); a step redone after a crash finds it
        committed (Delta skips the repeated transaction).

        A key may so hold several markers (a delete, an insert, a later delete): a change is inserted only when it
        is newer than every one of them (`_marked`), which is newer than the newest. An old marker is harmless: it
        blocks only changes older than a delete already merged, which the fold never keeps either (the key's
        newest change is at least that delete). A rebuild writes the markers afresh, one per deleted key; every
        `MARKERS_REWRITE_EVERY`th version of the table is instead the markers before it (`held`) and the step's,
        rewritten into one file in the same one commit, so a long stream's steps do not read ever more files."""
        spec = self.spec
        path = spec.markers_path
        rows = latest.where(F.col(DELETE)).select(
            *[F.col(p).alias(spec.marker_column(i)) for i, p in enumerate(spec.key)], *self._ordering())
        if not is_table(self.session, path):
            commit.create_empty(rows, path)
        txn = commit.Txn(spec.txn_app_id(record.epoch, "deletes"), record.bronze_version)
        version = table_version(self.session, path)
        if held is not None and version is not None and (version + 1) % MARKERS_REWRITE_EVERY == 0:
            commit.overwrite(held.unionByName(rows).coalesce(1), path, txn, record.to_user_metadata())
        else:
            commit.append(rows.coalesce(1), path, txn, record.to_user_metadata())
        self.markers_in_use = True

    def _merge_rows(self, latest: DataFrame, record: SilverRecord) -> SilverRecord:
        """The MERGE of the step's newest change per key (`latest`, cached, with `_marked`)."""
        spec = self.spec
        source = latest.alias("s")
        columns = self.read().columns
        assign: dict[str, Any] = {c: f"s.`{c}`" for c in columns}
        is_newer = newer(spec, "s", "t")
        with (_committing(self.session, spec.txn_app_id(record.epoch), record.bronze_version, record),
              spark_tables.checkpointed_source(self.session)):
            result = (spark_tables.merge(self.session, spec.path, source, key_condition(spec, "t", "s"))
                      .whenMatchedDelete(condition=f"s.{DELETE} AND {is_newer}")
                      .whenMatchedUpdate(condition=f"NOT s.{DELETE} AND {is_newer}", set=assign)
                      .whenNotMatchedInsert(condition=f"NOT s.{DELETE} AND NOT s._marked", values=assign)
                      .execute())
        return self._with_outcome(record, result)

    def _merge_history(self, change_rows: DataFrame, record: SilverRecord) -> SilverRecord:
        """The step's changes become rows; the intervals of the keys they touch are recomputed from those keys'
        rows in silver, read narrow (the key, the ordering columns, the interval: what `intervals` orders and
        what it may change), and the MERGE's source is what changes: the new rows, and the rows whose end or
        currency moves (the current row a newer change closes; more when a change arrives late)."""
        spec = self.spec
        new = changes.as_history(changes.keyed(change_rows, spec)).cache()
        try:
            counted = new.agg(F.count(F.lit(1)).alias("changes"),
                              F.count_distinct(*[F.col(p) for p in spec.key]).alias("keys")).first()
            assert counted is not None
            count, keys_count = int(counted["changes"]), int(counted["keys"])
            if count == 0:
                return self.record_only(record)
            self._evolve(new.schema, record)
            silver = self.read()
            coordinates = ["_kafka_topic", "_kafka_partition", "_kafka_offset"]
            keys = new.select(*[F.col(p).alias(f"_k{i}") for i, p in enumerate(spec.key)]).distinct()
            narrow = list(dict.fromkeys([*(p.split(".")[0] for p in spec.key),
                                         *([SEQUENCE] if spec.sequenced else []), *coordinates, "_kafka_timestamp",
                                         "_valid_from", "_deleted"]))
            touched = (silver.join(F.broadcast(keys) if keys_count <= _BROADCAST_KEYS else keys,
                                   F.expr(" AND ".join(f"{p} = _k{i}" for i, p in enumerate(spec.key))), "leftsemi")
                       .select(*narrow, F.col("_valid_to").alias("_was_to"), F.col("_is_current").alias("_was_current"),
                               F.lit(False).alias("_new")))
            fresh = new.join(touched.select(*coordinates), coordinates, "left_anti").withColumn("_new", F.lit(True))
            rows = changes.intervals(touched.unionByName(fresh, allowMissingColumns=True), spec,
                                     self.truncated(new, record))
            moved = F.col("_new") | ~(F.col("_was_to").eqNullSafe(F.col("_valid_to"))
                                      & F.col("_was_current").eqNullSafe(F.col("_is_current")))
            rows = rows.where(moved)
            on = key_condition(spec, "t", "s") + "".join(f" AND t.{c} = s.{c}" for c in coordinates)
            assign: dict[str, Any] = {c: f"s.`{c}`" for c in silver.columns}
            with _committing(self.session, spec.txn_app_id(record.epoch), record.bronze_version, record):
                result = (spark_tables.merge(self.session, spec.path, rows, on)
                          .whenMatchedUpdate(condition="NOT s._new", set=_assigned("_valid_to", "_is_current"))
                          .whenNotMatchedInsert(condition="s._new", values=assign)
                          .execute())
            return self._with_outcome(replace(record, keys=keys_count, changes=count), result)
        finally:
            new.unpersist()

    def refold(self, change_rows: DataFrame, bronze: DataFrame, record: SilverRecord) -> SilverRecord:
        """A step of a spec that `refolds`: the keys the changes touch, folded again from `bronze` (as of
        record.bronze_version), replace the rows (and markers) of those keys."""
        spec = self.spec
        keys = changes.keyed(change_rows, spec).select(
            *[F.col(p).alias(f"_k{i}") for i, p in enumerate(spec.key)]).distinct().cache()
        try:
            count = keys.count()
            if count == 0:
                return self.record_only(record)
            mine = changes.keyed(changes.changes(bronze, spec), spec).join(
                F.broadcast(keys), F.expr(" AND ".join(f"{p} = _k{i}" for i, p in enumerate(spec.key))), "leftsemi")
            rows, marks = changes.fold_changes(mine, spec, self.truncated(change_rows, record))
            self._evolve(rows.schema, record)
            if marks is not None:
                if not is_table(self.session, spec.markers_path):
                    commit.create_empty(marks, spec.markers_path)
                self._replace_keys(spec.markers_path, marks, keys, record, "deletes")
                self.markers_in_use = True
            result = self._replace_keys(spec.path, rows, keys, record)
            return self._with_outcome(replace(record, keys=count, changes=change_rows.count()), result)
        finally:
            keys.unpersist()

    def _replace_keys(self, path: str, rows: DataFrame, keys: DataFrame, record: SilverRecord,
                      table: str = "") -> DataFrame:
        """One MERGE: the rows of `path` whose key is one of `keys` (`_k0..`) are deleted, `rows` inserted; its
        counts (`execute()`'s)."""
        spec = self.spec
        target = [spec.marker_column(i) for i in range(len(spec.key))] if table else list(spec.key)
        source = rows.withColumn("_drop", F.lit(False)).unionByName(keys.withColumn("_drop", F.lit(True)),
                                                                    allowMissingColumns=True)
        on = "s._drop AND " + " AND ".join(f"t.{c} = s._k{i}" for i, c in enumerate(target))
        with _committing(self.session, spec.txn_app_id(record.epoch, table), record.bronze_version, record):
            return (spark_tables.merge(self.session, path, source, on)
                    .whenMatchedDelete()
                    .whenNotMatchedInsert(condition="NOT s._drop", values={c: f"s.`{c}`" for c in rows.columns})
                    .execute())

    def _with_outcome(self, record: SilverRecord, result: DataFrame | None = None) -> SilverRecord:
        """The record with what the MERGE did: the counts its `execute()` returned (`result`, a local row, no
        job), else (a MERGE Delta skipped as already committed returns none) its commit's operation metrics."""
        found: SilverRecord | None = None
        row = result.first() if result is not None else None
        if row is not None:
            found = silver_ledger.with_outcome(record, {"numTargetRowsInserted": str(row["num_inserted_rows"]),
                                                        "numTargetRowsUpdated": str(row["num_updated_rows"]),
                                                        "numTargetRowsDeleted": str(row["num_deleted_rows"])})
        else:
            rows = spark_tables.history(self.session, self.spec.path, 1).select("operationMetrics").collect()
            found = silver_ledger.with_outcome(record, dict(rows[0]["operationMetrics"] or {}) if rows else {})
        return found if found is not None else record

    def _evolve(self, schema: T.StructType, record: SilverRecord) -> None:
        """Add the columns (and nested fields) the changes have and the table lacks, and widen the ones bronze
        widened, in a commit of their own that keeps the recorded bronze version of the state before it."""
        table = self.read().schema
        if _covers(table, schema):
            return
        before = replace(record, kind=StepKind.EVOLVE, bronze_version=record.bronze_from, changes=0, keys=0)
        wanted = T.StructType([schema[name] for name in schema.fieldNames() if name not in table.fieldNames()])
        log.info("%s: silver gains or widens columns for bronze version %d: %s", self.spec.pipeline,
                 record.bronze_version, ", ".join(f.name for f in wanted.fields) or "nested fields")
        # Delta's type widening only when needed: delta-rs cannot read the feature yet
        tables.add_columns(self.session, self.spec.path, schema, before.to_user_metadata(),
                           widen=_widened(table, schema))


def _assigned(*columns: str) -> dict[str, Any]:
    return {c: f"s.{c}" for c in columns}


def _widened(table: T.DataType, rows: T.DataType) -> bool:
    """Whether a field both types have has another type in `rows` (a widened column)."""
    if isinstance(rows, T.StructType) and isinstance(table, T.StructType):
        names = set(table.fieldNames())
        return any(_widened(table[f.name].dataType, f.dataType) for f in rows.fields if f.name in names)
    if isinstance(rows, T.ArrayType) and isinstance(table, T.ArrayType):
        return _widened(table.elementType, rows.elementType)
    if isinstance(rows, T.MapType) and isinstance(table, T.MapType):
        return _widened(table.keyType, rows.keyType) or _widened(table.valueType, rows.valueType)
    return type(table) is not type(rows) and not isinstance(rows, T.NullType)


def _covers(table: T.DataType, rows: T.DataType) -> bool:
    """Whether a table of type `table` takes values of type `rows` as they are (same or more fields)."""
    if isinstance(rows, T.StructType):
        if not isinstance(table, T.StructType):
            return False
        names = set(table.fieldNames())
        return all(f.name in names and _covers(table[f.name].dataType, f.dataType) for f in rows.fields)
    if isinstance(rows, T.ArrayType):
        return isinstance(table, T.ArrayType) and _covers(table.elementType, rows.elementType)
    if isinstance(rows, T.MapType):
        return (isinstance(table, T.MapType) and _covers(table.keyType, rows.keyType)
                and _covers(table.valueType, rows.valueType))
    return table == rows or isinstance(rows, T.NullType)
