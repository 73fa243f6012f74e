"""The driver-side write path: a small batch fetched, decoded and committed by the driver, without a Spark job.

A Spark job costs the driver a plan, a stage, a task and Delta's write planning, about 0.3 s however few its
records (docs/performance.md). A batch of at most `sink.directWriteMaxOffsets` offsets, and a new pipeline's first
records before its JVM is up (`start_batch`), are written here instead: the pipeline's own consumer fetches exactly
the batch's offset ranges (`kafka.fetch`), the Python decoder decodes them (`decode.arrow_rows`), and delta-rs
appends the records that failed to quarantine and the rest to bronze (`delta.rs_append`), each commit with its
`SetTransaction` and ledger record, quarantine first, as the Spark path commits them. On every store delta-rs
writes to, partitioned tables included.

A batch this path does not write is `Declined` with the reason, nothing committed, and the Spark path writes it:
a table delta-rs cannot append to as asked (a table feature it does not write, column mapping, another schema),
records of a schema id not resolved yet (a new version: the Spark path evolves the table), records that do not
arrive in time, or an offset no longer in the log (Spark's source then applies `failOnDataLoss`).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Sequence

import pyarrow as pa

from ingestion.delta.ledger import BatchRecord, PartitionRange
from ingestion.delta.rs_append import Appended, RsWriteError
from ingestion.kafka.fetch import RangeFetcher, Span
from ingestion.stream import stages
from ingestion.stream.batch import (
    EMPTY,
    BatchResult,
    Declined,
    Empty,
    Targets,
    WritePath,
    quarantine_app_id,
)

log = logging.getLogger(__name__)

FETCH_TIMEOUT = 5.0  # seconds for the records of a planned batch to arrive before Spark reads them instead


class DriverWrite:
    """The driver-side path of one pipeline (its consumer and decoder kept between batches)."""

    def __init__(self, targets: Targets, fetcher: RangeFetcher | None) -> None:
        self.targets = targets
        self.fetcher = fetcher
        self._declined: str | None = None  # the last reason, logged when it changes

    def write(self, spans: Sequence[Span], batch_id: int, ingested_at: dt.datetime, started: float, *,
              app_id: str | None = None, txn_version: int | None = None, fetch_timeout: float = FETCH_TIMEOUT,
              fetch: Callable[[], pa.RecordBatch | None] | None = None) -> BatchResult | Empty | Declined:
        """Write the records of `spans` as batch `batch_id`, committed with SetTransaction(app id, txn version):
        the checkpoint's app id and the batch id unless given (the start batch's are its own). `fetch`: how its
        records come, when not by the fetcher now (the start batches fetch the next batch's ahead)."""
        assert self.fetcher is not None
        checked = self._checks(spans, batch_id, started, app_id, txn_version)
        if checked is not None:
            return checked
        fetched = time.monotonic()
        source = fetch() if fetch is not None else self.fetcher.fetch(spans, fetch_timeout)
        if source is None:
            return self._decline(f"its records stopped arriving for {fetch_timeout:.0f}s")
        if not source.num_rows:  # transaction markers only: what Spark's source would read is nothing too
            return EMPTY
        return self._write(source, spans, batch_id, ingested_at, started, app_id, txn_version,
                           [("start", started), ("checks", fetched), ("fetch", time.monotonic())])

    def write_source(self, source: pa.RecordBatch, spans: Sequence[Span], batch_id: int, ingested_at: dt.datetime,
                     started: float) -> BatchResult | Declined:
        """Write records fetched already (a routed batch's records of this table) as batch `batch_id`."""
        checked = self._checks(spans, batch_id, started, None, None)
        if checked is not None:
            return checked
        return self._write(source, spans, batch_id, ingested_at, started, None, None,
                           [("start", started), ("checks", time.monotonic())])

    def _checks(self, spans: Sequence[Span], batch_id: int, started: float, app_id: str | None,
                txn_version: int | None) -> BatchResult | Declined | None:
        """Why the batch is not written here (declined, or committed already: Delta's skip), None to write it."""
        targets = self.targets
        bronze_app = app_id or targets.bronze.app_id
        version = batch_id if txn_version is None else txn_version
        decoder = targets.record_decoder()
        try:
            targets.bronze_rs.current()  # the log read once per batch
        except RsWriteError as exc:
            return self._decline(str(exc))
        refused = targets.bronze_rs.refusal(decoder.bronze_schema)
        if refused is not None:
            return self._decline(refused)
        if targets.bronze_rs.committed_version(bronze_app) >= version:
            return BatchResult.skipped(batch_id, targets.bronze_rs.table().version(), _planned(spans), started,
                                       WritePath.DRIVER)
        return None

    def _write(self, source: pa.RecordBatch, spans: Sequence[Span], batch_id: int, ingested_at: dt.datetime,
               started: float, app_id: str | None, txn_version: int | None,
               marks: list[tuple[str, float]]) -> BatchResult | Declined:
        """The decode stage in Python on the driver, then `stages.finish` with delta-rs's commits."""
        config, targets = self.targets.config, self.targets
        bronze_app = app_id or targets.bronze.app_id
        version = batch_id if txn_version is None else txn_version
        decoder = targets.record_decoder()
        decoded = decoder.decode(source, batch_id=batch_id, ingested_at=ingested_at)
        if decoded.unknown_ids:
            return self._decline(f"schema ids {sorted(decoded.unknown_ids)} are not known yet")
        marks.append(("decode", time.monotonic()))
        if decoded.quarantine.num_rows and decoded.rule_failure is None:
            try:
                targets.quarantine_rs.current()
            except RsWriteError as exc:
                return self._decline(f"quarantine: {exc}")
            if reason := targets.quarantine_rs.refusal(decoder.quarantine_schema):
                return self._decline(f"quarantine: {reason}")

        def quarantine(record: BatchRecord) -> None:
            targets.quarantine_rs.append(decoded.quarantine, app_id=quarantine_app_id(bronze_app),
                                         txn_version=version, user_metadata=record.to_user_metadata())

        def bronze(record: BatchRecord) -> Appended:
            return targets.bronze_rs.append(decoded.bronze, app_id=bronze_app, txn_version=version,
                                            user_metadata=record.to_user_metadata(), fault_id=batch_id)

        try:
            result = stages.finish(targets, stages.Decoded(decoded.stats, decoded.counts, decoded.rule_failure,
                                                           decoded.first_failure),
                                   stages.Commits(bronze, quarantine), batch_id=batch_id, started=started,
                                   path=WritePath.DRIVER, app_id=bronze_app)
        except RsWriteError as exc:
            # Nothing of bronze is committed; a quarantine commit that went before is skipped by its txn when the
            # Spark path writes the batch.
            return self._decline(str(exc))
        targets.bronze.version = result.version
        marks.append(("commit", time.monotonic()))
        log.debug("%s batch %d: driver %s", config.name, batch_id,
                  ", ".join(f"{name} {1000 * (at - marks[i][1]):.0f} ms" for i, (name, at) in enumerate(marks[1:])))
        self._declined = None
        return result

    def _decline(self, reason: str) -> Declined:
        if reason != self._declined:
            log.info("%s: a batch is written with Spark, not by the driver: %s", self.targets.config.name, reason)
        self._declined = reason
        return Declined(reason)

    def close(self) -> None:
        if self.fetcher is not None:
            self.fetcher.close()


def _planned(spans: Sequence[Span]) -> tuple[PartitionRange, ...]:
    """The planned offsets of a batch as ledger ranges (for the line of a batch Delta skips)."""
    return tuple(PartitionRange(s.topic, s.partition, s.start, s.until - 1, s.until - s.start)
                 for s in sorted(spans, key=lambda s: (s.topic, s.partition)) if s.until > s.start)
