"""The settled write: the batch decoded once into a cache, then quarantine and bronze appended.

Records are decoded once (the JVM where it can verify them, the Python decoder for the rest), the offset ranges
summarized, the records that failed appended to the quarantine table, then the rest to bronze. Quarantine commits
first: a bronze commit, whose ranges say where a lost checkpoint resumes, then always implies its quarantine rows
are committed too.
"""

from __future__ import annotations

import datetime as dt
import logging
import time

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ingestion import faults
from ingestion.decode import bronze, jvm_decoder
from ingestion.decode.python_decoder import decode_in_python
from ingestion.errors import DecodeError
from ingestion.stream import setup
from ingestion.stream.batch import BatchResult, DecoderChoice, Targets

log = logging.getLogger(__name__)


class SettledWrite:
    """The settled strategy of one pipeline's writer."""

    def __init__(self, targets: Targets, decoder: DecoderChoice) -> None:
        self.targets = targets
        self.decoder = decoder
        self.had_python_records = False  # the last batch had records for the Python decoder

    def write(self, kafka_rows: DataFrame, batch_id: int, ingested_at: dt.datetime,
              started: float) -> BatchResult | None:
        """The batch decoded once into a cache, summarized, unverified records decoded in Python, then the
        quarantine append and the bronze append. None for a batch without records."""
        spark = kafka_rows.sparkSession
        config, resolver = self.targets.config, self.targets.resolver
        decoded = self._decode(kafka_rows)
        cached = [decoded]  # what to unpersist at the end
        try:
            stats = bronze.batch_stats(decoded)
            unknown = {int(i) for s in stats for i in s["unknown_ids"]}
            if unknown and resolver.refresh(unknown, {s["topic"] for s in stats if s["unknown_ids"]}):
                # New schema ids that are versions of the subject: decode the batch again with them. This costs
                # a second pass only in the batch where a version first appears.
                setup.widen_table(spark, config, resolver)
                decoded.unpersist()
                decoded = self._decode(kafka_rows)
                cached = [decoded]
                stats = bronze.batch_stats(decoded)
            pending = sum(s["failed"] for s in stats)
            self.had_python_records = bool(pending)
            if pending and self.decoder.jvm(spark):
                log.debug("batch %d: %d records not verified by the JVM go to the Python decoder", batch_id, pending)
                decoded, python = jvm_decoder.settle_in_python(decoded, resolver.spec, kafka_rows.schema)
                cached.append(python)
                stats = bronze.batch_stats(decoded)
            log.debug("batch %d: decoded and summarized in %.2fs", batch_id, time.monotonic() - started)
            if not stats:
                return None
            if config.sink.on_error == "fail" and any(s["failed"] for s in stats):
                raise _first_failure(decoded)
            record, failed = self.targets.records(stats, batch_id)
            faults.reached(faults.FaultPoint.BEFORE_COMMIT, batch_id)
            if failed is not None:
                self.targets.quarantine.append(
                    spark, bronze.quarantine_rows(decoded, batch_id=batch_id, ingested_at=ingested_at), failed)
            committed = self.targets.bronze.append(
                spark, bronze.bronze_rows(decoded, batch_id=batch_id, ingested_at=ingested_at), record,
                merge_schema=True)  # additive schema versions add columns; the resolver adopts no other kind
            log.debug("batch %d: written in %.2fs", batch_id, time.monotonic() - started)
            faults.reached(faults.FaultPoint.AFTER_COMMIT, batch_id)
        finally:
            for frame in cached:
                frame.unpersist()
        return BatchResult(batch_id, record.rows, record.quarantined, sum(s["bytes"] for s in stats),
                           self.targets.bronze.version, committed, record.ranges,
                           max(s["max_timestamp"] for s in stats), time.monotonic() - started)

    def _decode(self, kafka_rows: DataFrame) -> DataFrame:
        """The batch decoded (JVM path: unverified rows still to settle), persisted for the passes that follow."""
        spec = self.targets.spec
        if self.decoder.jvm(kafka_rows.sparkSession):
            rows = jvm_decoder.decode_in_jvm(kafka_rows, spec)
        else:
            rows = decode_in_python(kafka_rows, spec)
        return rows.persist(StorageLevel.MEMORY_AND_DISK)


def _first_failure(decoded: DataFrame) -> DecodeError:
    bad = (decoded.where(F.col("_error_class").isNotNull()).orderBy("partition", "offset")
           .select("topic", "partition", "offset", "_error_class", "_error_message").first())
    assert bad is not None
    return DecodeError(f"cannot decode record {bad['topic']}/{bad['partition']}@{bad['offset']}: "
                       f"{bad['_error_class']}: {bad['_error_message']} (sink.onError: fail)")
