"""The start batch: a new checkpoint's first records, written by the driver-side path while the JVM boots.

A run's JVM and Spark session take seconds before the query's first batch (docs/performance.md). A pipeline whose
checkpoint has no batches yet (a new pipeline, or a lost checkpoint) starts where the table's ledger says, or at the
start of each partition (`startingOffsets: earliest`); this module writes that first stretch, up to
`sink.directWriteMaxOffsets` offsets (and `source.maxOffsetsPerTrigger`), shared among the partitions as Spark
shares a batch, through the driver-side path (`driver_write`: fetched by the pipeline's own consumer, decoded in
Python, quarantine and bronze committed by delta-rs with their SetTransaction and ledger record). It is numbered
`ledger.START_BATCH_ID` in `_batch_id` and the ledger; its txnAppId is the checkpoint's with `.start`, its
txnVersion the table version it follows, so no batch of the query can be taken for it. The query then starts, as
for any checkpoint without batches, from the offsets the table records (`launch.Facts.after`): nothing is read
twice and nothing skipped. It is written only under the pipeline's writer lock, from the ledger read under it.

Nothing is written, and the run goes on as before, when the start is not the table's offsets or the earliest ones
(a consumer group, a timestamp, `latest`, named offsets), for a silver pipeline's bronze (its change feed is turned
on with the session), or when the driver-side path declines (`driver_write`).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa

from ingestion.config import PipelineConfig
from ingestion.decode.resolver import SchemaResolver
from ingestion.delta import ledger
from ingestion.delta.ledger import START_BATCH_ID
from ingestion.errors import one_line
from ingestion.kafka.fetch import RangeFetcher
from ingestion.stream import checkpoint, shape
from ingestion.stream.batch import BatchResult, Targets, log_result
from ingestion.stream.context import PipelineContext
from ingestion.stream.driver_write import DriverWrite

log = logging.getLogger(__name__)

FETCH_TIMEOUT = 3.0  # seconds for the records to arrive; beyond it the query's first batch reads them
# The most offsets of each start batch after the first, in a run that needs no JVM: about a second and a half of the
# driver's decoding each (docs/performance.md#a-runs-fixed-cost).
LATER_OFFSETS = 50_000

Bounds = Mapping[str, Mapping[int, tuple[int, int]]]  # topic -> partition -> Kafka's (low, high) offsets
Recorded = Mapping[str, Mapping[str, int]]  # topic -> partition (as text) -> the next offset the table records


@dataclass(frozen=True)
class Span:
    topic: str
    partition: int
    start: int
    until: int


@dataclass(frozen=True)
class StartBatch:
    """The start batch written: its result, and what was left behind it per topic and partition."""

    result: BatchResult
    lags: dict[str, dict[int, int]]  # records after it when it was planned

    @property
    def ends(self) -> dict[str, dict[str, int]]:
        """The next offset per partition, as Spark's source offsets name them."""
        return ledger.offsets_after(self.result.ranges)


def limit(config: PipelineConfig) -> int:
    """The most offsets the first start batch takes (`sink.directWriteMaxOffsets`, maxOffsetsPerTrigger and
    `sink.startBatchMaxOffsets` when smaller)."""
    return min(config.sink.direct_write_max_offsets, config.source.max_offsets_per_trigger or 2**62,
               config.sink.start_batch_max_offsets)


def allowed(config: PipelineConfig, checkpoint_started: bool | None) -> bool:
    """Whether the pipeline's settings and its checkpoint allow a start batch: a checkpoint without batches whose
    files are reached without a JVM (the writer lock and the txnAppId are taken there before it), not a silver
    pipeline's bronze, not a routed pipeline (its tables are made by the query as routes come)."""
    return limit(config) > 0 and checkpoint.reachable_without_jvm(config.checkpoint_path, config.spark) \
        and config.silver is None and shape.of(config).start_batches and checkpoint_started is False


def spans(config: PipelineConfig, recorded: Recorded, bounds: Bounds,
          most: int) -> tuple[list[Span], dict[str, dict[int, tuple[int, int]]]]:
    """The offsets of the start batch, at most `most` of them, shared among the partitions in proportion to what
    each holds (as maxOffsetsPerTrigger shares a batch), and each partition's (position, end offset); none when the
    start is not the table's offsets or the earliest ones, or records are gone from the log."""
    source = config.source
    if not recorded and (source.start_from_group or source.starting_timestamp is not None
                         or source.starting_offsets_by_timestamp
                         or source.starting_offsets.strip().lower() != "earliest"):
        return [], {}
    wanted: list[Span] = []
    positions: dict[str, dict[int, tuple[int, int]]] = {}
    for topic, parts in bounds.items():
        done = recorded.get(topic, {})
        for partition, (low, high) in sorted(parts.items()):
            position = done.get(str(partition), low)
            if position < low:
                return [], {}  # records gone from the log: the query's source reports it (failOnDataLoss)
            positions.setdefault(topic, {})[partition] = (position, high)
            if position < high:
                wanted.append(Span(topic, partition, position, high))
    total = sum(s.until - s.start for s in wanted)
    if total > most:  # shares rounded down, the offsets left over to the largest remainders: `most` in all
        shares = [((s.until - s.start) * most // total, (s.until - s.start) * most % total) for s in wanted]
        left = most - sum(share for share, _ in shares)
        extra = set(sorted(range(len(wanted)), key=lambda i: -shares[i][1])[:left])
        wanted = [Span(s.topic, s.partition, s.start, s.start + share + (i in extra))
                  for i, (s, (share, _)) in enumerate(zip(wanted, shares, strict=True))]
        wanted = [s for s in wanted if s.until > s.start]
    return wanted, positions


def fits(config: PipelineConfig, recorded: Recorded | None, bounds: Bounds, checkpoint_started: bool | None) -> bool:
    """Whether all the pipeline has to read now is for start batches alone (at most `sink.startBatchMaxOffsets`): an
    available-now run then needs no JVM."""
    if recorded is None or not allowed(config, checkpoint_started) or config.catalog_names is not None:
        return False  # (tables named in the catalog: the query's start registers them, through the JVM)
    found, _ = spans(config, recorded, bounds, 2**62)
    return 0 < sum(s.until - s.start for s in found) <= config.sink.start_batch_max_offsets


def write(ctx: PipelineContext, schemas: SchemaResolver, recorded: Recorded, bounds: Bounds, *,
          more: Callable[[], bool] = lambda: False) -> tuple[StartBatch, ...]:
    """Write the start batch from where `recorded` (read under the writer lock the caller holds) says the table
    ends, then, while `more()` says so (the JVM is still booting) and records are left before `bounds`, the next
    ones, each of up to `LATER_OFFSETS` offsets, `sink.startBatchMaxOffsets` in all; none when there is nothing to
    write or the driver-side path declined (the query's first batch reads those records)."""
    config = ctx.config
    app_id = checkpoint.app_id(config.checkpoint_path, config.name, config.spark)
    targets = Targets(config, schemas, app_id)
    fetcher = RangeFetcher(ctx.kafka.client, config.consumer_group)
    writer = DriverWrite(targets, fetcher)
    ahead = _Ahead(fetcher, lambda source: targets.record_decoder().begin(source))
    written: list[StartBatch] = []
    position = {t: dict(parts) for t, parts in recorded.items()}
    budget = config.sink.start_batch_max_offsets
    try:
        while budget > 0 and (not written or more()):
            most = min(limit(config) if not written else later(config), budget)
            left = budget  # the next batch's most, once this one's planned offsets are taken from what is left

            def next_most(planned: int, left: int = left) -> int:
                return min(later(config), left - planned) if more() else 0

            batch = _one(writer, config, targets, position, bounds, most, ahead, next_most)
            if batch is None:
                break
            written.append(batch)
            budget -= sum(r.last - r.first + 1 for r in batch.result.ranges)
            for topic, parts in batch.ends.items():
                position.setdefault(topic, {}).update(parts)
            if not any(n for parts in batch.lags.values() for n in parts.values()):
                break  # everything up to the bounds is in the table
    finally:
        ahead.close()  # before the fetcher it uses
        writer.close()
    return tuple(written)


class _Ahead:
    """The next start batch's records, fetched on a thread while this one is decoded and committed, and handed to
    the decode workers as they arrive (`begin`: they decode it while this batch commits). The fetcher is used by
    one thread at a time: the next fetch starts once this batch's records are in."""

    def __init__(self, fetcher: RangeFetcher, begin: Callable[[pa.RecordBatch], None]) -> None:
        self.fetcher = fetcher
        self.begin = begin
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="fetch-ahead")
        self._next: tuple[list[Span], Future[pa.RecordBatch | None]] | None = None

    def start(self, spans: list[Span]) -> None:
        self._next = (spans, self._pool.submit(self._fetch, spans))

    def _fetch(self, spans: list[Span]) -> pa.RecordBatch | None:
        source = self.fetcher.fetch(spans, FETCH_TIMEOUT)
        if source is not None and source.num_rows:
            try:
                self.begin(source)
            except Exception as exc:  # noqa: BLE001 - the batch's own decode does it all
                log.debug("decode not begun ahead: %s", exc)
        return source

    def take(self, spans: list[Span]) -> Future[pa.RecordBatch | None] | None:
        """The records of `spans` when they are the ones fetched ahead, else None (and what was fetched is
        dropped: a batch ended where it was not planned to, say at transaction markers)."""
        found, self._next = self._next, None
        if found is None:
            return None
        if found[0] != spans:
            found[1].exception()  # the fetcher is free again
            return None
        return found[1]

    def close(self) -> None:
        if self._next is not None:
            self._next[1].exception()  # wait for it: the fetcher closes next
            self._next = None
        self._pool.shutdown(wait=True)


def later(config: PipelineConfig) -> int:
    """The most offsets of a start batch after the first (`LATER_OFFSETS`, or maxOffsetsPerTrigger when smaller)."""
    return min(LATER_OFFSETS, config.source.max_offsets_per_trigger or 2**62) if limit(config) else 0


def _one(writer: DriverWrite, config: PipelineConfig, targets: Targets, recorded: Recorded, bounds: Bounds,
         most: int, ahead: _Ahead, next_most: Callable[[int], int]) -> StartBatch | None:
    started = time.monotonic()
    planned, positions = spans(config, recorded, bounds, most)
    if not planned:
        return None
    taken = ahead.take(planned)

    def fetch() -> pa.RecordBatch | None:
        """This batch's records (fetched ahead, or now), then the next batch's fetch started, when there is one."""
        assert writer.fetcher is not None
        source = taken.result() if taken is not None else writer.fetcher.fetch(planned, FETCH_TIMEOUT)
        following = next_most(sum(s.until - s.start for s in planned)) if source is not None else 0
        if following > 0:
            after = {t: dict(parts) for t, parts in recorded.items()}
            for s in planned:
                after.setdefault(s.topic, {})[str(s.partition)] = s.until
            upcoming, _ = spans(config, after, bounds, following)
            if upcoming:
                ahead.start(upcoming)
        return source

    try:
        version = targets.bronze_rs.current().version()
        written = writer.write(planned, START_BATCH_ID, dt.datetime.now(dt.UTC), started,
                               app_id=f"{targets.app_id}.start", txn_version=version, fetch=fetch)
    except Exception as exc:
        log.info("%s: no start batch: %s", config.name, one_line(exc))
        log.debug("%s: start batch failure", config.name, exc_info=True)
        return None
    if not isinstance(written, BatchResult) or not written.committed:
        log.debug("%s: no start batch: %s", config.name, written)
        return None
    ends = ledger.offsets_after(written.ranges)
    left = {t: {p: high - ends.get(t, {}).get(str(p), position) for p, (position, high) in parts.items()}
            for t, parts in positions.items()}
    log_result(config.name, written)
    return StartBatch(written, left)
