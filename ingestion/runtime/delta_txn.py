"""Delta's transaction API, for writes that decide whether to commit after their files are written.

A DataFrame append (`df.write.format("delta")`) writes the files and commits them in one call, so everything the
commit says (the ledger in `userMetadata`) must be known before the data is read. `DeltaTxn` splits the two, the way
Delta's own streaming sink does: `write` runs one Spark job that writes the files (with Delta's statistics and the
table's constraints), the caller then looks at what was written, and `commit` adds the files together with the
`SetTransaction(app id, batch id)` and the ledger record in one atomic commit, or `discard` deletes them.

These are Delta's internal (JVM) classes, reached through py4j (docs/architecture.md#internal-deltaspark-calls says
why each stays). `probe` checks once per process that they have the expected shape; where they do not (another
Delta version), callers keep to the DataFrame writer. The module also reads a table's latest version and its log
checkpoints through Delta's log handle, where the public API would plan and run a query.
"""

from __future__ import annotations

import json
import time
from typing import Any

from py4j.protocol import Py4JError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from ingestion.errors import one_line
from ingestion.runtime import hadoop
from ingestion.runtime.gateway import java, java_list

_PROBED: dict[int, str | None] = {}


def _none(jvm: Any) -> Any:
    return java(jvm, "scala.Option").empty()


_CONVERTERS = "scala.jdk.javaapi.CollectionConverters"


def probe(spark: SparkSession) -> str | None:
    """Why Delta's transaction API cannot be used from here, or None when it can (checked once per JVM)."""
    key = id(spark.sparkContext)
    if key not in _PROBED:
        jvm: Any = spark._jvm
        try:
            _write_operation(jvm, "{}")
            java(jvm, "org.apache.spark.sql.delta.actions.SetTransaction")("probe", 0, _none(jvm))
            _PROBED[key] = None
        except Py4JError as exc:
            _PROBED[key] = f"Delta's transaction API differs from delta-spark 4.4 ({one_line(exc)})"
    return _PROBED[key]


def delta_log(spark: SparkSession, path: str) -> Any:
    """Delta's log handle of the table at `path` (cached by Delta per path)."""
    jvm: Any = spark._jvm
    return java(jvm, "org.apache.spark.sql.delta.DeltaLog").forTable(spark._jsparkSession, path)


def latest_snapshot(spark: SparkSession, path: str) -> Any:
    """The table's latest snapshot, the log listed again (no Spark job)."""
    none = _none(spark._jvm)
    return delta_log(spark, path).update(False, none, none)


def is_table(spark: SparkSession, path: str) -> bool:
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, path))


def table_version(spark: SparkSession, path: str) -> int | None:
    """The table's latest version, or None when there is no table yet."""
    from delta.tables import DeltaTable

    if not is_table(spark, path):
        return None
    try:
        # Delta's own log handle lists the log; history(1) would plan and run a query, every batch.
        return int(latest_snapshot(spark, path).version())
    except Py4JError:  # an internal API: if its signature changes, fall back to the public one
        latest = DeltaTable.forPath(spark, path).history(1).select("version").first()
        return None if latest is None else int(latest[0])


def table_property(spark: SparkSession, path: str, key: str) -> str | None:
    """A property of the table's latest version, None when it is not set."""
    value = latest_snapshot(spark, path).metadata().configuration().get(key)
    return str(value.get()) if value.isDefined() else None


def last_checkpoint_version(spark: SparkSession, path: str) -> int:
    """The version of the table's newest Delta log checkpoint as this process knows it, -1 when it has none."""
    return int(delta_log(spark, path).unsafeVolatileSnapshot().checkpointProvider().version())


def written_version(spark: SparkSession, path: str) -> int:
    """The version the latest commit in this process left (no listing of the log)."""
    return int(delta_log(spark, path).unsafeVolatileSnapshot().version())


def write_checkpoint(spark: SparkSession, path: str) -> int:
    """Write a Delta log checkpoint of the state the latest commit in this process left; its version."""
    table_log = delta_log(spark, path)
    snapshot = table_log.unsafeVolatileSnapshot()
    table_log.checkpoint(snapshot, _none(spark._jvm))
    return int(snapshot.version())


class DeltaTxn:
    """One optimistic transaction on the Delta table at `path` (which must exist)."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        self.spark = spark
        jvm: Any = spark._jvm
        self._jvm = jvm
        # Delta finds its session through the calling JVM thread's active session, never the default one. A route
        # table's write runs on a thread of its own (stream/routing.py), whose JVM thread has none: where the
        # snapshot had to rebuild its state there (no checksum, as after a delta-rs commit: replay, rewind), the
        # batch failed with DELTA_SPARK_SESSION_NOT_SET.
        java(jvm, "org.apache.spark.sql.SparkSession").setActiveSession(spark._jsparkSession)
        self._log = delta_log(spark, path)
        self._txn = self._log.startTransaction()

    def committed_version(self, app_id: str) -> int:
        """The last txnVersion committed for `app_id`, -1 when none. The read is recorded for Delta's conflict
        check: a concurrent commit of the same app id makes this transaction's commit fail.

        Delta 4.4's `txnVersion` reconstructs the snapshot's whole state with a Spark job, every batch, since
        every commit makes a new snapshot (docs/performance.md#checksum-based-txn-lookup). Each commit also writes
        the table's set transactions into its checksum file (`.crc`, incrementally computed), which newer Delta
        versions read instead; so does this, and falls back to `txnVersion` when the checksum does not carry
        them (no `.crc`, too many app ids, or a set-transaction retention on the table)."""
        known = self._checksum_transactions()
        if known is None:
            return int(self._txn.txnVersion(app_id))
        self._txn.readTxn().addOne(app_id)  # what txnVersion records for the conflict check
        return known.get(app_id, -1)

    def _checksum_transactions(self) -> dict[str, int] | None:
        snapshot = self._txn.snapshot()
        retention = snapshot.metadata().configuration().get("delta.setTransactionRetentionDuration")
        checksum = snapshot.checksumOpt()
        if retention.isDefined() or not checksum.isDefined() or not checksum.get().setTransactions().isDefined():
            return None
        return {t.appId(): int(t.version())
                for t in java_list(java(self._jvm, _CONVERTERS).asJava(checksum.get().setTransactions().get()))}

    def incompatible(self, schema: T.StructType) -> str | None:
        """Why rows of `schema` cannot be appended as they are (the DataFrame writer evolves or maps the schema),
        or None when they can."""
        metadata = self._txn.metadata()
        mode = metadata.configuration().get("delta.columnMapping.mode")
        if mode.isDefined() and mode.get() != "none":
            return f"the table uses column mapping ({mode.get()})"
        table = T.StructType.fromJson(json.loads(metadata.schema().json()))
        if table.simpleString() != schema.simpleString():
            return "the rows' schema differs from the table's"
        return None

    def properties(self) -> dict[str, str]:
        """The table's properties as this transaction read them."""
        scala_map = self._txn.metadata().configuration()
        return dict(java(self._jvm, _CONVERTERS).asJava(scala_map))

    def write(self, rows: DataFrame) -> list[Any]:
        """Write the rows as data files of the table (one Spark job), not committed yet: the files' actions."""
        written = self._txn.writeFiles(rows._jdf)
        files, it = [], written.iterator()
        while it.hasNext():
            files.append(it.next())
        return files

    def written_records(self, files: list[Any]) -> int:
        """How many rows the written files hold: from the statistics Delta collected while writing them, or, where
        it collected none (`spark.databricks.delta.stats.collect` off), counted from the files' footers."""
        stats = [f.stats() for f in files]
        counts: list[int | None] = [json.loads(text).get("numRecords") if text else None for text in stats]
        if None not in counts:
            return sum(c or 0 for c in counts)
        return self.spark.read.parquet(*self.file_paths(files)).count() if files else 0

    def file_paths(self, files: list[Any]) -> list[str]:
        """Absolute paths of the written files."""
        return [path.toString() for path in self._hadoop_paths(files)]

    def _hadoop_paths(self, files: list[Any]) -> list[Any]:
        path, uri, data_path = java(self._jvm, "org.apache.hadoop.fs.Path"), java(self._jvm, "java.net.URI"), \
            self._log.dataPath()
        return [path(data_path, path(uri(f.path()))) for f in files]

    def commit(self, files: list[Any], *, app_id: str, txn_version: int, user_metadata: str) -> int:
        """Commit the files with SetTransaction(app_id, txn_version) and the userMetadata; the new table version."""
        jvm = self._jvm
        actions = java(jvm, "java.util.ArrayList")()
        for f in files:
            actions.add(f)
        now = java(jvm, "java.lang.Long")(int(time.time() * 1000))
        actions.add(java(jvm, "org.apache.spark.sql.delta.actions.SetTransaction")(app_id, txn_version,
                                                                                   java(jvm, "scala.Some")(now)))
        seq = java(jvm, _CONVERTERS).asScala(actions).toSeq()
        return int(self._txn.commit(seq, _write_operation(jvm, user_metadata)))

    def discard(self, files: list[Any]) -> None:
        """Delete written files that will not be committed (no reader sees them: they are not in the log)."""
        hadoop.delete_files(self.spark, self.file_paths(files))


def _write_operation(jvm: Any, user_metadata: str) -> Any:
    """DeltaOperations.Write(Append) with the userMetadata: what a DataFrame append records as its operation."""
    none = _none(jvm)
    append = java(jvm, "org.apache.spark.sql.SaveMode").Append
    return java(jvm, "org.apache.spark.sql.delta.DeltaOperations").Write(
        append, none, none, java(jvm, "scala.Some")(user_metadata), none, none, none, none, none)


def write_latest_checkpoint(spark: SparkSession, path: str) -> int:
    """Write a Delta log checkpoint of the table's latest version (the log listed again first); its version."""
    snapshot = latest_snapshot(spark, path)
    delta_log(spark, path).checkpoint(snapshot, _none(spark._jvm))
    return int(snapshot.version())
