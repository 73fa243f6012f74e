"""The exactly-once writer, called by `foreachBatch` once per micro-batch.

Every commit carries `txnAppId` (bronze: the checkpoint's id; quarantine: the same with `.quarantine`),
`txnVersion = batch id`, and the batch's offset ranges (the ledger) as the commit's `userMetadata`. A batch is
written one of two ways:

- **One pass** (most batches): one Spark job decodes the records with Spark's from_avro, verifies them, summarizes
  their offsets per partition (an observed aggregate) and writes the bronze files through Delta's transaction
  API (commit.py). If the JVM verified every record and the files hold them all, the files commit together with
  the SetTransaction and the ledger. Otherwise the files are deleted uncommitted and the batch is settled instead
  (and so is the next one, until a batch has nothing for the Python decoder).
- **Settled**: decode once into a cache (the JVM where it can verify, the Python decoder for the rest, see
  fastpath.py), summarize the offset ranges, append the records that failed to the quarantine table, then the
  rest to bronze. Quarantine commits first: a bronze commit, whose ranges say where a lost checkpoint resumes,
  then always implies its quarantine rows are committed too. (A one-pass batch has no quarantine rows.)

When Spark replays a batch after a crash between the Delta commits and its own checkpoint, the batch id is the
same, so Delta sees a (txnAppId, txnVersion) it already holds and writes nothing; the writer logs the skip.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from ingestion import bronze, commit, dictionaries, fastpath, ledger, sessions
from ingestion.config import PipelineConfig
from ingestion.decode import DecodeSpec
from ingestion.errors import ConfigError, DecodeError
from ingestion.ledger import BatchRecord, PartitionRange
from ingestion.registry import SchemaResolver

log = logging.getLogger(__name__)

# Test-only fault injection: INGEST_TEST_FAULT="<point>:<batch id>" makes the writer write the file named by
# INGEST_TEST_FAULT_FILE and then hang at that point, so a test can SIGKILL the process exactly there.
FAULT_ENV = "INGEST_TEST_FAULT"
FAULT_FILE_ENV = "INGEST_TEST_FAULT_FILE"


@dataclass(frozen=True)
class BatchResult:
    batch_id: int
    rows: int
    quarantined: int
    bytes: int  # value bytes consumed
    version: int | None  # bronze table version after the batch
    committed: bool  # False when Delta skipped the write because this (app id, batch id) was already committed
    ranges: tuple[PartitionRange, ...]
    max_timestamp: dt.datetime | None
    seconds: float
    one_pass: bool = False  # written in one Spark job (see BronzeWriter._one_pass), not through the cache


class DeltaAppend:
    """Idempotent appends to one Delta table, remembering the version its last append left."""

    def __init__(self, path: str, app_id: str) -> None:
        self.path = path
        self.app_id = app_id
        self.version: int | None = None

    def append(self, spark: SparkSession, rows: DataFrame, record: BatchRecord, merge_schema: bool = False) -> bool:
        """Append with (app id, batch id) as Delta txn; False when Delta skipped it as already committed."""
        before = self.version if self.version is not None else ledger.table_version(spark, self.path)
        (_right_sized(rows).write.format("delta").mode("append")
         .option("txnAppId", self.app_id).option("txnVersion", record.batch_id)
         .option("userMetadata", record.to_user_metadata())
         .option("mergeSchema", str(merge_schema).lower())
         .save(self.path))
        self.version = ledger.table_version(spark, self.path)
        return self.version != before


class BronzeWriter:
    """`foreachBatch` function of one pipeline."""

    def __init__(self, *, config: PipelineConfig, app_id: str, resolver: SchemaResolver,
                 on_batch: Callable[[BatchResult], None] | None = None) -> None:
        self.config = config
        self.app_id = app_id
        self.resolver = resolver
        self.on_batch = on_batch
        self.bronze = DeltaAppend(config.table_path, app_id)
        self.quarantine = DeltaAppend(config.quarantine_path, f"{app_id}.quarantine")
        self._path_for: DecodeSpec | None = None  # the spec `_jvm` was decided for
        self._jvm = False
        self._one_pass_next = True
        self._probe_logged = False
        self._dictionaries_for: DecodeSpec | None = None  # the spec Parquet's dictionaries were tuned for

    def __call__(self, kafka_rows: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        spark = kafka_rows.sparkSession
        ingested_at = dt.datetime.now(dt.UTC)
        result = None
        if self._one_pass_usable(spark):
            result = self._one_pass(kafka_rows, batch_id, ingested_at, started)
        if result is None:
            result = self._settled(kafka_rows, batch_id, ingested_at, started)
        if result is None:
            return
        _log_result(self.config.name, result)
        if self.on_batch is not None:
            self.on_batch(result)

    def _one_pass(self, kafka_rows: DataFrame, batch_id: int, ingested_at: dt.datetime,
                  started: float) -> BatchResult | None:
        """The batch in one Spark job: decode, verify, summarize and write the bronze files; then, if every record
        was verified by the JVM and the files hold every record, commit them with the ledger record. None when the
        batch needs the settled path (records to decode in Python or to quarantine, a schema change, a replay)."""
        spark = kafka_rows.sparkSession
        txn = commit.DeltaTxn(spark, self.config.table_path)
        observation = Observation()
        observed = _observed(spark)
        decoded = fastpath.decode(kafka_rows, self.resolver.spec).observe(observation, *observed.values())
        # The observation sits between the decode and bronze's filter: Spark cannot push the filter below it,
        # so from_avro runs once per record.
        rows = bronze.bronze_rows(decoded, batch_id=batch_id, ingested_at=ingested_at)
        reason = txn.incompatible(rows.schema)
        if reason is not None:
            log.debug("batch %d: not in one pass: %s", batch_id, reason)
            return None
        if txn.committed_version(self.bronze.app_id) >= batch_id:
            return None  # a batch Spark replays after a crash: the settled path reports Delta's skip
        files = txn.write(_right_sized(rows))
        seen = _observed_values(observation, observed)
        records, unverified = int(seen["records"]), int(seen["unverified"])
        if unverified or not records:
            txn.discard(files)
            self._one_pass_next = False
            if unverified:
                log.info("%s batch %d: %d of %d records not verified by the JVM; writing the batch again with "
                         "the Python decoder", self.config.name, batch_id, unverified, records)
            return None
        log.debug("batch %d: decoded and written in %.2fs", batch_id, time.monotonic() - started)
        in_files = txn.written_records(files)
        if in_files != records:
            txn.discard(files)
            log.warning("%s batch %d: %d records read, %d in the written files: writing the batch again",
                        self.config.name, batch_id, records, in_files)
            return None
        stats = bronze.observed_stats(seen["partitions"])
        record, _ = self._records(stats, batch_id)
        _fault_point("before_commit", batch_id)
        self.bronze.version = txn.commit(files, app_id=self.bronze.app_id, txn_version=batch_id,
                                         user_metadata=record.to_user_metadata())
        _fault_point("after_commit", batch_id)
        if records >= dictionaries.MIN_VALUES and self._dictionaries_for is not self.resolver.spec:
            self._dictionaries_for = self.resolver.spec
            self._tune_dictionaries(txn, txn.file_paths(files), batch_id)
        return BatchResult(batch_id, record.rows, 0, int(seen["bytes"]), self.bronze.version, True, record.ranges,
                           max(s["max_timestamp"] for s in stats), time.monotonic() - started, one_pass=True)

    def _tune_dictionaries(self, txn: commit.DeltaTxn, paths: list[str], batch_id: int) -> None:
        """Turn Parquet's dictionary off for the columns it gave up in this batch's files (see `dictionaries`),
        once per run and schema version: the first large batch decides, later ones do not read footers again.
        The batch is committed already: a failure here costs only the tuning."""
        try:
            learnt = dictionaries.learn(txn.spark, self.config.table_path, txn.properties(), paths)
        except Exception as exc:  # noqa: BLE001 - an optimization; the batch stands whatever happens here
            log.warning("%s batch %d: could not tune Parquet dictionaries: %s", self.config.name, batch_id,
                        str(exc).splitlines()[0])
            return
        if learnt:
            log.info("%s batch %d: Parquet wrote %d columns without their dictionary (%s); later batches do not "
                     "build one (table property %s<column> = false)", self.config.name, batch_id, len(learnt),
                     ", ".join(learnt), dictionaries.PREFIX)

    def _settled(self, kafka_rows: DataFrame, batch_id: int, ingested_at: dt.datetime,
                 started: float) -> BatchResult | None:
        """The batch decoded once into a cache, summarized, unverified records decoded in Python, then the
        quarantine append and the bronze append. None for a batch without records."""
        spark = kafka_rows.sparkSession
        decoded = self._decode(kafka_rows)
        cached = [decoded]  # what to unpersist at the end
        try:
            stats = bronze.batch_stats(decoded)
            unknown = {int(i) for s in stats for i in s["unknown_ids"]}
            if unknown and self.resolver.refresh(unknown):
                # New schema ids that are versions of the subject: decode the batch again with them. This costs
                # a second pass only in the batch where a version first appears.
                decoded.unpersist()
                decoded = self._decode(kafka_rows)
                cached = [decoded]
                stats = bronze.batch_stats(decoded)
            pending = sum(s["failed"] for s in stats)
            # The next batch tries the one-pass write again once a batch had nothing for the Python decoder.
            self._one_pass_next = not pending
            if pending and self.jvm_path(spark):
                log.debug("batch %d: %d records not verified by the JVM go to the Python decoder", batch_id, pending)
                decoded, python = fastpath.settle(decoded, self.resolver.spec, kafka_rows.schema)
                cached.append(python)
                stats = bronze.batch_stats(decoded)
            log.debug("batch %d: decoded and summarized in %.2fs", batch_id, time.monotonic() - started)
            if not stats:
                return None
            if self.config.sink.on_error == "fail" and any(s["failed"] for s in stats):
                raise _first_failure(decoded)
            record, failed = self._records(stats, batch_id)
            _fault_point("before_commit", batch_id)
            if failed is not None:
                self.quarantine.append(
                    spark, bronze.quarantine_rows(decoded, batch_id=batch_id, ingested_at=ingested_at), failed)
            committed = self.bronze.append(
                spark, bronze.bronze_rows(decoded, batch_id=batch_id, ingested_at=ingested_at), record,
                merge_schema=True)  # additive schema versions add columns; the resolver adopts no other kind
            log.debug("batch %d: written in %.2fs", batch_id, time.monotonic() - started)
            _fault_point("after_commit", batch_id)
        finally:
            for frame in cached:
                frame.unpersist()
        return BatchResult(batch_id, record.rows, record.quarantined, sum(s["bytes"] for s in stats),
                           self.bronze.version, committed, record.ranges, max(s["max_timestamp"] for s in stats),
                           time.monotonic() - started)

    def _one_pass_usable(self, spark: SparkSession) -> bool:
        """Whether this batch tries the one-pass write: records decode in the JVM, the last batch had nothing
        for the Python decoder, and Delta's transaction API is the expected one (logged once when not)."""
        if not (self.jvm_path(spark) and self._one_pass_next):
            return False
        reason = commit.probe(spark)
        if reason is not None and not self._probe_logged:
            log.warning("%s: every batch goes through the cache: %s", self.config.name, reason)
            self._probe_logged = True
        return reason is None

    def _decode(self, kafka_rows: DataFrame) -> DataFrame:
        """The batch decoded (JVM path: unverified rows still to settle), persisted for the passes that follow."""
        spec = self.resolver.spec
        if self.jvm_path(kafka_rows.sparkSession):
            rows = fastpath.decode(kafka_rows, spec)
        else:
            rows = bronze.decode(kafka_rows, spec)
        return rows.persist(StorageLevel.MEMORY_AND_DISK)

    def jvm_path(self, spark: SparkSession) -> bool:
        """Whether records are decoded by Spark's from_avro first (decided once per schema version)."""
        spec = self.resolver.spec
        if self._path_for is spec:
            return self._jvm
        choice = self.config.value.decoder
        reason = "value.decoder is python" if choice == "python" else fastpath.unusable(spark, spec)
        if reason and choice == "jvm":
            raise ConfigError(f"pipeline {self.config.name!r}: value.decoder is jvm, but {reason}")
        if reason:
            log.info("%s: decoding every record in Python: %s", self.config.name, reason)
        else:
            log.info("%s: decoding with Spark's from_avro, unverified records in Python", self.config.name)
        self._path_for, self._jvm = spec, reason is None
        return self._jvm

    def _records(self, stats: list[Any], batch_id: int) -> tuple[BatchRecord, BatchRecord | None]:
        """The ledger records of the bronze commit and, when records failed, of the quarantine commit."""
        return ledger.batch_records(stats, pipeline=self.config.name, batch_id=batch_id,
                                    kind="stream", app_id=self.bronze.app_id,
                                    quarantine_app_id=self.quarantine.app_id)


def _observed(spark: SparkSession) -> dict[str, Column]:
    """What the one-pass write observes of its rows, by name: built once per session (a Column is only an
    expression, and building these takes ~20 py4j round trips)."""
    def build() -> dict[str, Column]:
        metrics = {"records": F.count(F.lit(1)), "unverified": F.count("_error_class"),
                   "bytes": F.coalesce(F.sum("_value_bytes"), F.lit(0)),
                   "partitions": bronze.observed_summary(spark)}
        return {name: column.alias(name) for name, column in metrics.items()}

    return sessions.once(spark, "one-pass observed", build)


def _observed_values(observation: Observation, names: Iterable[str]) -> dict[str, Any]:
    """The observed values of `names`, once the write has run: what `observation.get` returns, without iterating
    a Java map through py4j (its end costs a JVM exception that PySpark converts, ~60 round trips per batch)."""
    values = observation._jo.getAsJava() if observation._jo is not None else None  # waits for the write's job
    if values is None:
        return observation.get  # raises PySpark's own error: nothing was observed
    return {name: values.get(name) for name in names}


def _right_sized(rows: DataFrame) -> DataFrame:
    """At most one file per core per batch instead of one per Kafka partition (measured on the benchmark,
    6 partitions on 2 cores: 2.7 s -> 2.1 s per batch, and a third of the files for readers)."""
    return rows.coalesce(rows.sparkSession.sparkContext.defaultParallelism)


def _first_failure(decoded: DataFrame) -> DecodeError:
    bad = (decoded.where(F.col("_error_class").isNotNull()).orderBy("partition", "offset")
           .select("topic", "partition", "offset", "_error_class", "_error_message").first())
    assert bad is not None
    return DecodeError(f"cannot decode record {bad['topic']}/{bad['partition']}@{bad['offset']}: "
                       f"{bad['_error_class']}: {bad['_error_message']} (on_error: fail)")


def _log_result(pipeline: str, r: BatchResult) -> None:
    spans = ", ".join(f"{x.topic}/{x.partition} {x.first}-{x.last}" for x in r.ranges)
    if r.committed:
        log.info("%s batch %d: %d rows, %d quarantined in %.2fs (%.0f records/s%s), table version %s, offsets %s",
                 pipeline, r.batch_id, r.rows, r.quarantined, r.seconds,
                 (r.rows + r.quarantined) / max(r.seconds, 1e-9), ", one pass" if r.one_pass else "", r.version,
                 spans)
    else:
        log.warning("%s batch %d: skipped by Delta, (txnAppId, txnVersion=%d) is already committed; "
                    "table version stays %s (offsets %s)", pipeline, r.batch_id, r.batch_id, r.version, spans)


def _fault_point(point: str, batch_id: int) -> None:
    if os.environ.get(FAULT_ENV) != f"{point}:{batch_id}":
        return
    marker = os.environ.get(FAULT_FILE_ENV)
    if marker:
        Path(marker).write_text(f"{point}:{batch_id}\n")
    log.warning("test fault point %s reached for batch %d: waiting to be killed", point, batch_id)
    while True:
        time.sleep(1)
