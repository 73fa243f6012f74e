"""The Spark write path: a batch worth a Spark job, decoded and written in one pass, a bad record costing a record.

One Spark job decodes the batch (Spark's own decoder where it can vouch for a record: `from_avro`, the helper's
Protobuf and JSON decoders; the Python decoder in the workers when it cannot decode the format at all), writes the
bronze files of the records it decoded through Delta's transaction API (`runtime.delta_txn`), and observes, while
it writes, the per-partition offset summary and the records it did not write (`helper.pending_records`, bounded).
The driver decodes those few records with the Python decoder (`decode.arrow_rows`): their bronze rows are written
into the same transaction, the ones that fail are appended to quarantine (delta-rs, or Spark where delta-rs
refuses). Quarantine commits first, then bronze: its files, `SetTransaction(txnAppId, batch id)` and the ledger
record in one commit. Nothing is written twice.

Where Delta's transaction API cannot be used or the batch is not the ordinary case, the batch is written through
Delta's public DataFrame writer instead (`CachedWrite`: decoded once into a cache, quarantine appended, then
bronze): Delta's internal classes differ (another delta-spark), the table's schema differs from the rows' (column
mapping, a schema change made elsewhere), Spark replays a batch already committed (Delta reports the skip), a
record names a new schema version (the table evolves: the batch's files from the first pass are discarded, the
only case a batch is decoded twice), or the records to decode in Python exceed `PENDING_CHARS` (a batch of mostly
bad records: the driver never holds a batch).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import logging
import time
from typing import Any

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from ingestion.decode import bronze, expectations, jvm_decoder
from ingestion.decode.arrow_rows import DecodedRecords
from ingestion.decode.expectations import Counts, Rules
from ingestion.decode.spec import DecodeSpec, same_schema
from ingestion.delta import dictionaries
from ingestion.delta.commit import right_sized
from ingestion.delta.ledger import BatchRecord
from ingestion.delta.rs_append import Appended, RsWriteError
from ingestion.errors import one_line
from ingestion.kafka.fetch import SOURCE_ARROW_SCHEMA
from ingestion.runtime import delta_txn, helper, session_cache
from ingestion.stream import setup, stages
from ingestion.stream.batch import BatchResult, DecoderChoice, Targets

log = logging.getLogger(__name__)

# The most text (JSON of raw records) the records a job did not write may come to, per batch, for the driver to
# decode them; beyond it the batch is written through the cache (see the module).
PENDING_CHARS = 32 * 1024 * 1024


class SparkWrite:
    """The Spark path of one pipeline's writer."""

    def __init__(self, targets: Targets, decoder: DecoderChoice) -> None:
        self.targets = targets
        self.decoder = decoder
        self.cached = CachedWrite(targets, decoder)
        self._probe_logged = False
        self._dictionaries_for: DecodeSpec | None = None  # the spec Parquet's dictionaries were tuned for
        self._rules_checked: DecodeSpec | None = None  # the spec the rules were last compiled by Spark for

    def rules(self, spark: SparkSession) -> Rules:
        """The expectations, compiled by Spark too once per schema version (`expectations.check_in_spark`)."""
        rules = self.targets.rules
        if self._rules_checked is not self.targets.spec:  # (no rules: nothing to compile)
            expectations.check_in_spark(spark, rules, bronze.table_schemas(self.targets.spec)[0],
                                        self.targets.config.file)
            self._rules_checked = self.targets.spec
        return rules

    def write(self, kafka_rows: DataFrame, batch_id: int, ingested_at: dt.datetime,
              started: float) -> BatchResult | None:
        """Write the batch (see the module); None for a batch without records."""
        spark = kafka_rows.sparkSession
        if not self._usable(spark):
            return self.cached.write(kafka_rows, batch_id, ingested_at, started)
        config, bronze_target = self.targets.config, self.targets.bronze
        marks = [("start", started)]
        txn = delta_txn.DeltaTxn(spark, config.table_path)
        observation = Observation()
        observed = _observed(spark)
        rules = self.rules(spark)
        rows = self._rows(kafka_rows, observation, rules, batch_id, ingested_at)
        reason = txn.incompatible(rows.schema)
        if reason is None and txn.committed_version(bronze_target.app_id) >= batch_id:
            reason = "a batch Spark replays after a crash"  # the cached write reports Delta's skip
        if reason is not None:
            log.debug("%s batch %d: through the cache: %s", config.name, batch_id, reason)
            return self.cached.write(kafka_rows, batch_id, ingested_at, started)
        marks.append(("plan", time.monotonic()))
        files = txn.write(right_sized(rows))
        marks.append(("write", time.monotonic()))
        seen = helper.observed_values(observation, [*observed, *expectations.count_names(rules)])
        records, pending = int(seen["records"]), int(seen["pending"])
        if not records:
            txn.discard(files)
            return None
        try:
            written = self._pending(txn, files, seen, batch_id, ingested_at, pending)
        except BaseException:
            txn.discard(files)  # nothing committed: the batch fails (sink.onError: fail) or is redone
            raise
        if written is None:
            txn.discard(files)
            return self.cached.write(kafka_rows, batch_id, ingested_at, started)
        files, python_rows = written
        marks.append(("pending", time.monotonic()))
        counts = expectations.counts_of(seen, rules)
        if counts is not None and python_rows is not None and python_rows.counts is not None:
            counts = counts.add(python_rows.counts)
        stats = _merged(bronze.observed_stats(seen["partitions"]), python_rows, int(seen["bytes"]))
        decoded = stages.Decoded(stats, counts, value_bytes=int(seen["bytes"])) if python_rows is None else \
            stages.Decoded(stats, counts, python_rows.rule_failure, python_rows.first_failure, int(seen["bytes"]))

        def quarantine(failed: BatchRecord) -> None:
            assert python_rows is not None  # only the records decoded in Python fail
            self._quarantine(spark, python_rows, failed, batch_id)

        def to_bronze(record: BatchRecord) -> Appended:
            return Appended(txn.commit(files, app_id=bronze_target.app_id, txn_version=batch_id,
                                       user_metadata=record.to_user_metadata()), True)

        result = stages.finish(self.targets, decoded, stages.Commits(to_bronze, quarantine,
                                                                     lambda: txn.discard(files)),
                               batch_id=batch_id, started=started)
        bronze_target.version = result.version
        marks.append(("commit", time.monotonic()))
        log.debug("%s batch %d: spark %s", config.name, batch_id,
                  ", ".join(f"{name} {1000 * (at - marks[i][1]):.0f} ms" for i, (name, at) in enumerate(marks[1:])))
        if records >= dictionaries.MIN_VALUES * len(files) and self._dictionaries_for is not self.targets.spec:
            self._dictionaries_for = self.targets.spec
            self._tune_dictionaries(txn, txn.file_paths(files), batch_id)
        return result

    def plan_ahead(self, kafka_rows: DataFrame) -> None:
        """Beside the query's start, what its first batch would otherwise load and build cold before its job: the
        table's Delta log and snapshot (Delta caches them per path), the decode and bronze expressions (cached per
        session) and their analysis, over the query's own Kafka rows. Nothing is written; the transaction it
        opens is never committed."""
        spark = kafka_rows.sparkSession
        if not self._usable(spark):
            return
        txn = delta_txn.DeltaTxn(spark, self.targets.config.table_path)
        rows = self._rows(kafka_rows, "planned ahead", self.rules(spark), 0, dt.datetime.now(dt.UTC))
        txn.incompatible(rows.schema)
        txn.committed_version(self.targets.bronze.app_id)

    def _rows(self, kafka_rows: DataFrame, observation: Observation | str, rules: Rules, batch_id: int,
              ingested_at: dt.datetime) -> DataFrame:
        """The batch's bronze rows, decoded (Spark's decoder where it vouches for a record), the rules' flags and
        counts and `_observed`'s values observed under `observation`."""
        spark = kafka_rows.sparkSession
        decoded = self.decoder.decode(expectations.with_raw_value(kafka_rows, rules))
        # a row a blocking rule refuses is one the job does not write: the driver settles it
        decoded = expectations.flag_rows(decoded, rules, bronze.decoder_sources())
        counted = expectations.spark_counts(decoded, rules, unflagged=True)
        # The observation sits between the decode and bronze's filter: Spark cannot push the filter below it,
        # so each record is decoded once.
        return bronze.bronze_rows(decoded.observe(observation, *_observed(spark).values(), *counted),
                                  batch_id=batch_id, ingested_at=ingested_at)

    def _usable(self, spark: SparkSession) -> bool:
        """Whether Delta's transaction API is the expected one (logged once when not)."""
        reason = delta_txn.probe(spark)
        if reason is not None and not self._probe_logged:
            log.warning("%s: every batch is written through Delta's DataFrame writer: %s", self.targets.config.name,
                        reason)
            self._probe_logged = True
        return reason is None

    def _pending(self, txn: delta_txn.DeltaTxn, files: list[Any], seen: dict[str, Any], batch_id: int,
                 ingested_at: dt.datetime, pending: int) -> tuple[list[Any], DecodedRecords | None] | None:
        """The batch's files once the records the job did not write are decoded in Python and their bronze rows
        written into the transaction, with those records decoded; None when the batch is to be written through
        the cache instead (a new schema version, too many of them, a count that does not add up)."""
        config = self.targets.config
        in_files = txn.written_records(files)
        if in_files != int(seen["records"]) - pending:
            log.warning("%s batch %d: %d records decoded by the job, %d in the written files: writing the batch "
                        "through the cache", config.name, batch_id, int(seen["records"]) - pending, in_files)
            return None
        if not pending:
            return files, None
        text = seen["pending_rows"]
        if text is None:
            log.info("%s batch %d: %d records for the Python decoder, more than the driver takes at once: "
                     "writing the batch through the cache", config.name, batch_id, pending)
            return None
        source = pending_source(text)
        decoded = self.targets.record_decoder().decode(source, batch_id=batch_id, ingested_at=ingested_at)
        if decoded.unknown_ids:
            reader = self.targets.spec.reader_schema
            topics = {s["topic"] for s in decoded.stats if s["unknown_ids"]}
            if self.targets.resolver.refresh(decoded.unknown_ids, topics, decoded.unknown_records()):
                if not same_schema(self.targets.spec.reader_schema, reader):
                    return None  # the table evolves; the cached write decodes the batch with the new schemas
                decoded = self.targets.record_decoder().decode(source, batch_id=batch_id, ingested_at=ingested_at)
        log.info("%s batch %d: %d of %d records decoded in Python (%d to quarantine), in the same commit",
                 config.name, batch_id, pending, int(seen["records"]), decoded.quarantine.num_rows)
        if decoded.bronze.num_rows:
            frame = txn.spark.createDataFrame(decoded.bronze, schema=bronze.table_schemas(self.targets.spec)[0])
            files = files + txn.write(frame.coalesce(1))
        return files, decoded

    def _quarantine(self, spark: SparkSession, decoded: DecodedRecords, failed: Any, batch_id: int) -> None:
        """Append the batch's failed records to quarantine with its txn and ledger record: delta-rs, or Spark's
        writer where delta-rs refuses."""
        target = self.targets.quarantine
        try:
            self.targets.quarantine_rs.current()
            if self.targets.quarantine_rs.refusal(decoded.quarantine.schema) is None:
                self.targets.quarantine_rs.append(decoded.quarantine, app_id=target.app_id, txn_version=batch_id,
                                                  user_metadata=failed.to_user_metadata())
                return
        except RsWriteError as exc:
            log.debug("%s batch %d: quarantine through Spark: %s", self.targets.config.name, batch_id, exc)
        schema = bronze.table_schemas(self.targets.spec)[1]
        target.append(spark, spark.createDataFrame(decoded.quarantine, schema=schema), failed)

    def _tune_dictionaries(self, txn: delta_txn.DeltaTxn, paths: list[str], batch_id: int) -> None:
        """Turn Parquet's dictionary off for the columns it gave up in this batch's files (see `dictionaries`),
        once per run and schema version: the first batch whose files hold MIN_VALUES records each (on average)
        decides, later ones do not read footers again. The batch is committed already: a failure here costs only
        the tuning."""
        name = self.targets.config.name
        try:
            learnt = dictionaries.learn(txn.spark, self.targets.config.table_path, txn.properties(), paths)
        except Exception as exc:  # noqa: BLE001 - an optimization; the batch stands whatever happens here
            log.warning("%s batch %d: could not tune Parquet dictionaries: %s", name, batch_id, one_line(exc))
            return
        if learnt:
            log.info("%s batch %d: Parquet wrote %d columns without their dictionary (%s); later batches do not "
                     "build one (table property %s<column> = false)", name, batch_id, len(learnt),
                     ", ".join(learnt), dictionaries.PREFIX)


def pending_source(text: str) -> pa.RecordBatch:
    """The records `helper.pending_records` brought back (`_pending_record`'s JSON), as Kafka source rows."""
    found = json.loads(text)
    found.sort(key=lambda r: (r["topic"], r["partition"], r["offset"]))

    def raw(value: str | None) -> bytes | None:
        return None if value is None else base64.b64decode(value)

    columns: list[Any] = [
        [raw(r.get("key")) for r in found], [raw(r.get("value")) for r in found], [r["topic"] for r in found],
        [r["partition"] for r in found], [r["offset"] for r in found],
        pa.array([r.get("timestamp") for r in found], pa.int64()).cast(SOURCE_ARROW_SCHEMA.field("timestamp").type),
        [r.get("timestampType") for r in found],
        [None if r.get("headers") is None else [{"key": h.get("key"), "value": raw(h.get("value"))}
                                                  for h in r["headers"]] for r in found],
    ]
    return pa.RecordBatch.from_arrays(
        [c if isinstance(c, pa.Array) else pa.array(c, type=f.type) for c, f in zip(columns, SOURCE_ARROW_SCHEMA,
                                                                                     strict=True)],
        schema=SOURCE_ARROW_SCHEMA)


def _merged(observed: list[dict[str, Any]], python: DecodedRecords | None, value_bytes: int) -> list[dict[str, Any]]:
    """The batch's per-partition summary: the job's (every record, offsets and schema ids), with the failures of
    the records decoded in Python; `bytes` for the whole batch on its first partition."""
    failures = {(s["topic"], s["partition"]): s for s in (python.stats if python is not None else ())}
    for s in observed:
        found = failures.get((s["topic"], s["partition"]))
        if found is not None and found["failed"]:
            s.update(failed=found["failed"], failed_first=found["failed_first"], failed_last=found["failed_last"],
                     unknown_ids=found["unknown_ids"])
            s["schema_ids"] = sorted(set(s["schema_ids"]) | set(found["schema_ids"]))
    if observed:
        observed[0]["bytes"] = value_bytes
    return observed


def _observed(spark: SparkSession) -> dict[str, Column]:
    """What the Spark path observes of its decoded rows, by name: built once per session (a Column is only an
    expression, and building these takes py4j round trips)."""
    def build() -> dict[str, Column]:
        metrics = {"records": F.count(F.lit(1)), "pending": F.count("_error_class"),
                   "bytes": F.coalesce(F.sum("_value_bytes"), F.lit(0)),
                   "partitions": helper.partition_summary(spark),
                   "pending_rows": helper.pending_records(spark, F.when(F.col("_error_class").isNotNull(),
                                                                        F.expr(_PENDING_RECORD)), PENDING_CHARS)}
        return {name: column.alias(name) for name, column in metrics.items()}

    return session_cache.once(spark, "spark path observed", build)


# A record the job did not write, as the JSON of its Kafka source row (binary as base64, the timestamp in
# microseconds); evaluated only for those records (observed metrics allow no FILTER clause).
_PENDING_RECORD = ("to_json(named_struct('key', key, 'value', _raw_value, 'topic', topic, 'partition', `partition`, "
                   "'offset', `offset`, 'timestamp', unix_micros(`timestamp`), 'timestampType', timestampType, "
                   "'headers', headers))")


class CachedWrite:
    """The batch decoded once into a cache, then quarantine and bronze appended through Delta's DataFrame writer
    (each with its txnAppId/txnVersion and ledger record): the Spark path where its transaction API is not used
    (see the module). Quarantine commits first: a bronze commit, whose ranges say where a lost checkpoint resumes,
    then always implies its quarantine rows are committed too."""

    def __init__(self, targets: Targets, decoder: DecoderChoice) -> None:
        self.targets = targets
        self.decoder = decoder
        self._evolved_for: DecodeSpec | None = targets.spec  # the spec bronze's columns were last evolved for

    def write(self, kafka_rows: DataFrame, batch_id: int, ingested_at: dt.datetime,
              started: float) -> BatchResult | None:
        spark = kafka_rows.sparkSession
        config, resolver = self.targets.config, self.targets.resolver
        kafka_rows = expectations.with_raw_value(kafka_rows, self.targets.rules)
        decoded = self._decode(kafka_rows)
        cached = [decoded]  # what to unpersist at the end
        try:
            stats = bronze.batch_stats(decoded)
            unknown = {int(i) for s in stats for i in s["unknown_ids"]}
            if unknown and resolver.refresh(unknown, {s["topic"] for s in stats if s["unknown_ids"]},
                                            bronze.unknown_records(decoded, resolver.spec)):
                decoded.unpersist()
                decoded = self._decode(kafka_rows)
                cached = [decoded]
                stats = bronze.batch_stats(decoded)
            if resolver.spec is not self._evolved_for:  # a new version, learnt here or by the Spark path's pass
                setup.widen_table(spark, config, resolver)
                self._evolved_for = resolver.spec
            pending = sum(s["failed"] for s in stats)
            if pending and self.decoder.jvm(spark):
                decoded, python = jvm_decoder.settle_in_python(decoded, resolver.spec, kafka_rows.schema)
                cached.append(python)
                stats = bronze.batch_stats(decoded)
            if not stats:
                return None
            counts, rule_failure = None, None
            rules = self.targets.rules
            if rules:
                decoded = expectations.flag_rows(decoded, rules, bronze.decoder_sources()).persist(
                    StorageLevel.MEMORY_AND_DISK)
                cached.append(decoded)
                counts, rule_failure = self._rules_counted(decoded, rules)
                stats = bronze.batch_stats(decoded)
            rows = decoded

            def quarantine(failed: BatchRecord) -> None:
                self.targets.quarantine.append(
                    spark, bronze.quarantine_rows(rows, batch_id=batch_id, ingested_at=ingested_at), failed)

            def to_bronze(record: BatchRecord) -> Appended:  # additive schema versions add columns
                committed = self.targets.bronze.append(
                    spark, bronze.bronze_rows(rows, batch_id=batch_id, ingested_at=ingested_at), record,
                    merge_schema=True)
                assert self.targets.bronze.version is not None
                return Appended(self.targets.bronze.version, committed)

            return stages.finish(self.targets, stages.Decoded(stats, counts, rule_failure,
                                                              lambda: _first_failure(rows)),
                                 stages.Commits(to_bronze, quarantine), batch_id=batch_id, started=started)
        finally:
            for frame in cached:
                frame.unpersist()

    def _rules_counted(self, flagged: DataFrame, rules: Rules) -> tuple[Counts, str | None]:
        """The rules' counts over the batch's flagged rows, and the line of the first row a `fail` rule refuses
        (made by the driver's evaluation of that record, as the other paths make it), None when none does."""
        counts = expectations.counts_of(flagged.agg(*expectations.spark_counts(flagged, rules, unflagged=False))
                                        .first().asDict(), rules)  # type: ignore[union-attr]
        assert counts is not None  # (called with rules only)
        failing = [i for i, r in enumerate(rules.rules) if r.on_violation == "fail" and counts.violated[r.name]]
        if not failing:
            return counts, None
        refused = F.lit(False)
        for i in failing:
            refused = refused | F.col(expectations.RULE_COLUMN.format(i))
        first = (flagged.where(refused).orderBy("topic", "partition", "offset").limit(1)
                 .select(F.expr(_PENDING_RECORD).alias("r")).first())
        assert first is not None
        record = self.targets.record_decoder().decode(pending_source(f"[{first['r']}]"), batch_id=0,
                                                      ingested_at=dt.datetime.now(dt.UTC))
        return counts, record.rule_failure or (f"expectation {rules.rules[failing[0]].name!r} failed for a record "
                                               f"of the batch (onViolation: fail; nothing of the batch was committed)")

    def _decode(self, kafka_rows: DataFrame) -> DataFrame:
        """The batch decoded (JVM path: unverified rows still to settle), persisted for the passes that follow."""
        return self.decoder.decode(kafka_rows).persist(StorageLevel.MEMORY_AND_DISK)


def _first_failure(decoded: DataFrame) -> str | None:
    """The first record of the batch that failed to decode, as `stages.Decoded.first_failure` says it."""
    bad = (decoded.where(F.col("_error_class").isNotNull()
                         & (F.col("_error_class") != F.lit(expectations.EXPECTATION_FAILED)))
           .orderBy("topic", "partition", "offset")
           .select("topic", "partition", "offset", "_error_class", "_error_message").first())
    if bad is None:
        return None
    return f"record {bad['topic']}/{bad['partition']}@{bad['offset']}: {bad['_error_class']}: {bad['_error_message']}"
