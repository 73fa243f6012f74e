"""The one-pass write: most batches in one Spark job.

The job decodes the records with Spark's from_avro, verifies them, summarizes their offsets per partition (an
observed aggregate) and writes the bronze files through Delta's transaction API (`runtime.delta_txn`). If the JVM
verified every record and the files hold them all, the files commit together with the SetTransaction and the
ledger record. Otherwise the files are deleted uncommitted and the batch goes to the settled write instead.
"""

from __future__ import annotations

import datetime as dt
import logging
import time

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from ingestion import faults
from ingestion.decode import bronze, jvm_decoder
from ingestion.decode.spec import DecodeSpec
from ingestion.delta import dictionaries
from ingestion.delta.append import right_sized
from ingestion.errors import one_line
from ingestion.runtime import delta_txn, helper, session_cache
from ingestion.stream.batch import BatchResult, Targets

log = logging.getLogger(__name__)


class OnePassWrite:
    """The one-pass strategy of one pipeline's writer."""

    def __init__(self, targets: Targets) -> None:
        self.targets = targets
        self.needs_python = False  # the last attempt found records the JVM did not verify (or none at all)
        self._probe_logged = False
        self._dictionaries_for: DecodeSpec | None = None  # the spec Parquet's dictionaries were tuned for

    def usable(self, spark: SparkSession) -> bool:
        """Whether Delta's transaction API is the expected one (logged once when not)."""
        reason = delta_txn.probe(spark)
        if reason is not None and not self._probe_logged:
            log.warning("%s: every batch goes through the cache: %s", self.targets.config.name, reason)
            self._probe_logged = True
        return reason is None

    def write(self, kafka_rows: DataFrame, batch_id: int, ingested_at: dt.datetime,
              started: float) -> BatchResult | None:
        """The batch in one Spark job: decode, verify, summarize and write the bronze files; then, if every record
        was verified by the JVM and the files hold every record, commit them with the ledger record. None when the
        batch needs the settled write (records to decode in Python or to quarantine, a schema change, a replay)."""
        spark = kafka_rows.sparkSession
        config, bronze_target = self.targets.config, self.targets.bronze
        self.needs_python = False
        marks = [("start", started)]
        txn = delta_txn.DeltaTxn(spark, config.table_path)
        marks.append(("txn", time.monotonic()))
        observation = Observation()
        observed = _observed(spark)
        decoded = jvm_decoder.decode_in_jvm(kafka_rows, self.targets.spec).observe(observation, *observed.values())
        # The observation sits between the decode and bronze's filter: Spark cannot push the filter below it,
        # so from_avro runs once per record.
        rows = bronze.bronze_rows(decoded, batch_id=batch_id, ingested_at=ingested_at)
        marks.append(("plan", time.monotonic()))
        reason = txn.incompatible(rows.schema)
        if reason is not None:
            log.debug("%s batch %d: not in one pass: %s", config.name, batch_id, reason)
            return None
        if txn.committed_version(bronze_target.app_id) >= batch_id:
            return None  # a batch Spark replays after a crash: the settled write reports Delta's skip
        marks.append(("checks", time.monotonic()))
        files = txn.write(right_sized(rows))
        marks.append(("write", time.monotonic()))
        seen = helper.observed_values(observation, observed)
        records, unverified = int(seen["records"]), int(seen["unverified"])
        if unverified or not records:
            txn.discard(files)
            self.needs_python = True
            if unverified:
                log.info("%s batch %d: %d of %d records not verified by the JVM; writing the batch again with "
                         "the Python decoder", config.name, batch_id, unverified, records)
            return None
        log.debug("%s batch %d: decoded and written in %.2fs", config.name, batch_id, time.monotonic() - started)
        in_files = txn.written_records(files)
        if in_files != records:
            txn.discard(files)
            log.warning("%s batch %d: %d records read, %d in the written files: writing the batch again",
                        config.name, batch_id, records, in_files)
            return None
        marks.append(("counted", time.monotonic()))
        stats = bronze.observed_stats(seen["partitions"])
        record, _ = self.targets.records(stats, batch_id)
        faults.reached(faults.FaultPoint.BEFORE_COMMIT, batch_id)
        bronze_target.version = txn.commit(files, app_id=bronze_target.app_id, txn_version=batch_id,
                                           user_metadata=record.to_user_metadata())
        faults.reached(faults.FaultPoint.AFTER_COMMIT, batch_id)
        marks.append(("commit", time.monotonic()))
        log.debug("%s batch %d: one pass %s", config.name, batch_id,
                  ", ".join(f"{name} {1000 * (at - marks[i][1]):.0f} ms" for i, (name, at) in enumerate(marks[1:])))
        if records >= dictionaries.MIN_VALUES * len(files) and self._dictionaries_for is not self.targets.spec:
            self._dictionaries_for = self.targets.spec
            self._tune_dictionaries(txn, txn.file_paths(files), batch_id)
        return BatchResult(batch_id, record.rows, 0, int(seen["bytes"]), bronze_target.version, True, record.ranges,
                           max(s["max_timestamp"] for s in stats), time.monotonic() - started, one_pass=True)

    def _tune_dictionaries(self, txn: delta_txn.DeltaTxn, paths: list[str], batch_id: int) -> None:
        """Turn Parquet's dictionary off for the columns it gave up in this batch's files (see `dictionaries`),
        once per run and schema version: the first batch whose files hold MIN_VALUES records each (on average)
        decides, later ones do not read footers again.
        The batch is committed already: a failure here costs only the tuning."""
        name = self.targets.config.name
        try:
            learnt = dictionaries.learn(txn.spark, self.targets.config.table_path, txn.properties(), paths)
        except Exception as exc:  # noqa: BLE001 - an optimization; the batch stands whatever happens here
            log.warning("%s batch %d: could not tune Parquet dictionaries: %s", name, batch_id,
                        one_line(exc))
            return
        if learnt:
            log.info("%s batch %d: Parquet wrote %d columns without their dictionary (%s); later batches do not "
                     "build one (table property %s<column> = false)", name, batch_id, len(learnt),
                     ", ".join(learnt), dictionaries.PREFIX)


def _observed(spark: SparkSession) -> dict[str, Column]:
    """What the one-pass write observes of its rows, by name: built once per session (a Column is only an
    expression, and building these takes py4j round trips)."""
    def build() -> dict[str, Column]:
        metrics = {"records": F.count(F.lit(1)), "unverified": F.count("_error_class"),
                   "bytes": F.coalesce(F.sum("_value_bytes"), F.lit(0)),
                   "partitions": helper.partition_summary(spark)}
        return {name: column.alias(name) for name, column in metrics.items()}

    return session_cache.once(spark, "one-pass observed", build)
