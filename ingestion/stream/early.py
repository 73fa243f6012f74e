"""The start batch: a new checkpoint's first records written by the driver while the JVM boots.

A run's JVM and Spark session take seconds before the query's first batch (docs/performance.md). A pipeline whose
checkpoint has no batches yet (a new pipeline, or a lost checkpoint) starts where the table's ledger says, or at the
start of each partition (`startingOffsets: earliest`); this module writes that first stretch, up to
`sink.directWriteMaxOffsets` offsets, as the direct write does (`stream.direct`: fetched by the pipeline's own
consumer, decoded in Python, one Parquet file), committed to the local table's log without Spark
(`delta.local_log`), with its ledger record. The query then starts, as for any checkpoint without batches, from the
offsets the table records (`pipeline._resume_from_table`): nothing is read twice and nothing skipped. The batch is
numbered `ledger.START_BATCH_ID` in `_batch_id` and the ledger; it commits no `SetTransaction`, as the query's
batches do: its exactly-once guard is the ledger, read at the version the commit follows (a commit of that
version by another writer fails it), under the pipeline's writer lock, taken here and handed to the query's
start.

Nothing is written, and the run goes on as before, when the table or the start is one this path does not handle:
a table in object storage, partitioned, constrained, with table features or another schema; a start from a
consumer group, a timestamp, `latest` or named offsets; records to quarantine; records that do not arrive in time.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import types as T

from ingestion import faults, kafka, storage
from ingestion.config import PipelineConfig
from ingestion.decode import bronze
from ingestion.decode.resolver import SchemaResolver
from ingestion.delta import ledger, local_log, rs_reads
from ingestion.delta.ledger import START_BATCH_ID, BatchKind
from ingestion.errors import one_line
from ingestion.kafka.fetch import RangeFetcher
from ingestion.runtime import delta_txn
from ingestion.stream import checkpoint, setup
from ingestion.stream.batch import BatchResult, log_result
from ingestion.stream.context import PipelineContext
from ingestion.stream.direct import decoder_for, write_records
from ingestion.stream.lock import WriterLock

log = logging.getLogger(__name__)

FETCH_TIMEOUT = 3.0  # seconds for the records to arrive; beyond it the query's first batch reads them


@dataclass(frozen=True)
class Span:
    topic: str
    partition: int
    start: int
    until: int


@dataclass(frozen=True)
class StartBatch:
    """The start batch written: its result, where it ended and what was left behind it, per topic and partition."""

    result: BatchResult
    lags: dict[str, dict[int, int]]  # records after it when it was planned

    @property
    def ends(self) -> dict[str, dict[str, int]]:
        """The next offset per partition, as Spark's source offsets name them."""
        return ledger.offsets_after(self.result.ranges)


def write(ctx: PipelineContext, schemas: SchemaResolver) -> StartBatch | None:
    """Write the start batch of the pipeline, when it has one (see the module); the writer lock it took is kept in
    `ctx.lock` for the query's start either way, once taken."""
    config = ctx.config
    if not _may_write(config):
        return None
    started = time.monotonic()
    if ctx.lock is None:
        lock = WriterLock(config.name, config.checkpoint_path)
        lock.acquire()
        ctx.lock = lock
    try:
        return _write(ctx, schemas, _limit(config), started)
    except Exception as exc:  # nothing committed: the query's first batch does it, or says why
        log.info("%s: no start batch: %s", config.name, one_line(exc))
        log.debug("%s: start batch failure", config.name, exc_info=True)
        return None


def _limit(config: PipelineConfig) -> int:
    return min(config.sink.direct_write_max_offsets, config.source.max_offsets_per_trigger or 2**62)


def _may_write(config: PipelineConfig) -> bool:
    """Whether the pipeline's settings and its checkpoint allow a start batch (its table is checked later).
    (Silver: bronze's change feed is turned on with the session, before bronze's first write.)"""
    checkpoint_dir = storage.local_folder(config.checkpoint_path)
    return _limit(config) > 0 and storage.local_folder(config.table_path) is not None and checkpoint_dir is not None \
        and config.silver is None and not checkpoint.local_has_progress(checkpoint_dir)


def fits(ctx: PipelineContext) -> bool:
    """Whether all the pipeline has to read now fits one start batch (an available-now run may then need no
    JVM): read with delta-rs and one Kafka consumer."""
    if not _may_write(ctx.config):
        return False
    recorded = rs_reads.recorded_offsets(ctx.config)
    if recorded is None:
        return False
    spans, _ = _spans(ctx, recorded, 2**62)
    return 0 < sum(s.until - s.start for s in spans) <= _limit(ctx.config)


def prepare(ctx: PipelineContext) -> None:
    """`setup.prepare` (schemas and tables, no JVM), then the start batch (`write`) into `ctx.start_batch`."""
    schemas = ctx.prepared or setup.prepare(ctx)
    if schemas is not None and ctx.start_batch is None:
        ctx.start_batch = write(ctx, schemas)


def prepare_all(contexts: Sequence[PipelineContext], session_ready: threading.Event) -> None:
    """`setup.prepare` of each pipeline, and their start batches until the session is ready (the queries' first
    batches write the others' records)."""
    for ctx in contexts:
        schemas = ctx.prepared or setup.prepare(ctx)
        if schemas is not None and ctx.start_batch is None and not session_ready.is_set():
            ctx.start_batch = write(ctx, schemas)


def _write(ctx: PipelineContext, schemas: SchemaResolver, limit: int, started: float) -> StartBatch | None:
    from deltalake import DeltaTable

    config = ctx.config
    table_dir = storage.local_folder(config.table_path)
    assert table_dir is not None
    table = DeltaTable(str(table_dir))
    version = table.version()
    schema = bronze.table_schemas(schemas.spec)[0]
    reason = _refusal(table, schema)
    if reason is not None:
        log.debug("%s: no start batch: %s", config.name, reason)
        return None
    recorded = rs_reads.recorded_offsets(config)
    if recorded is None:
        return None
    spans, positions = _spans(ctx, recorded, limit)
    if not spans:
        return None
    fetcher = RangeFetcher(ctx.kafka.client, config.consumer_group)
    try:
        source = fetcher.fetch(spans, FETCH_TIMEOUT)
    finally:
        fetcher.close()
    if source is None or not source.num_rows:
        log.debug("%s: no start batch: its records did not arrive in %.0fs", config.name, FETCH_TIMEOUT)
        return None
    decoder, arrow_schema = decoder_for(schemas.spec)
    properties = dict(table.metadata().configuration)
    written = write_records(source, decoder, arrow_schema, table_dir, properties, batch_id=START_BATCH_ID,
                            ingested_at=dt.datetime.now(dt.UTC))
    if written is None:
        log.debug("%s: no start batch: records to quarantine (the query's first batch writes them)", config.name)
        return None
    add, stats = written
    app_id = checkpoint.local_app_id(storage.local_folder(config.checkpoint_path), config.name)  # type: ignore[arg-type]
    record, _ = ledger.batch_records(stats, pipeline=config.name, batch_id=START_BATCH_ID, kind=BatchKind.STREAM,
                                     app_id=app_id, quarantine_app_id=f"{app_id}.quarantine")
    faults.reached(faults.FaultPoint.BEFORE_COMMIT, START_BATCH_ID)
    committed = local_log.append_files(table_dir, version, [add], user_metadata=record.to_user_metadata())
    faults.reached(faults.FaultPoint.AFTER_COMMIT, START_BATCH_ID)
    seconds = time.monotonic() - started
    result = BatchResult(START_BATCH_ID, record.rows, 0, sum(s["bytes"] for s in stats), committed, True,
                         record.ranges, max(s["max_timestamp"] for s in stats), seconds, direct=True)
    ends = ledger.offsets_after(result.ranges)
    left = {t: {p: high - ends.get(t, {}).get(str(p), position) for p, (position, high) in parts.items()}
            for t, parts in positions.items()}
    log_result(config.name, result)
    return StartBatch(result, left)


def _refusal(table: object, schema: T.StructType) -> str | None:
    """Why the start batch cannot be appended to this table (read by delta-rs), or None."""
    metadata, protocol = table.metadata(), table.protocol()  # type: ignore[attr-defined]
    properties = dict(metadata.configuration)
    mode = properties.get("delta.columnMapping.mode", "none")
    if mode != "none":
        return f"the table uses column mapping ({mode})"
    reason = delta_txn.files_refusal(
        partitioned=bool(metadata.partition_columns),
        protocol=(protocol.min_reader_version, protocol.min_writer_version),
        features=bool(protocol.reader_features or protocol.writer_features), properties=properties,
        schema=json.loads(table.schema().to_json()))  # type: ignore[attr-defined]
    if reason is not None:
        return reason
    found = T.StructType.fromJson(json.loads(table.schema().to_json()))  # type: ignore[attr-defined]
    return None if found.simpleString() == schema.simpleString() else "the rows' schema differs from the table's"


def _spans(ctx: PipelineContext, recorded: dict[str, dict[str, int]],
           limit: int) -> tuple[list[Span], dict[str, dict[int, tuple[int, int]]]]:
    """The offsets of the start batch, at most `limit` of them, shared among the partitions in proportion to what
    each holds (as maxOffsetsPerTrigger shares a batch), and each partition's (position, end offset) now; none
    when the start is not the table's offsets or the earliest ones."""
    source = ctx.config.source
    if not recorded and (source.start_from_group or source.starting_timestamp is not None
                         or source.starting_offsets_by_timestamp
                         or source.starting_offsets.strip().lower() != "earliest"):
        return [], {}
    marks = kafka.watermarks_of(ctx.kafka.client, ctx.partitions)
    wanted: list[Span] = []
    positions: dict[str, dict[int, tuple[int, int]]] = {}
    for topic, parts in marks.items():
        done = recorded.get(topic, {})
        for partition, (low, high) in sorted(parts.items()):
            position = done.get(str(partition), low)
            if position < low:
                return [], {}  # records gone from the log: the query's source reports it (failOnDataLoss)
            positions.setdefault(topic, {})[partition] = (position, high)
            if position < high:
                wanted.append(Span(topic, partition, position, high))
    total = sum(s.until - s.start for s in wanted)
    if total > limit:  # shares rounded down, the offsets left over to the largest remainders: `limit` in all
        shares = [((s.until - s.start) * limit // total, (s.until - s.start) * limit % total) for s in wanted]
        left = limit - sum(share for share, _ in shares)
        extra = set(sorted(range(len(wanted)), key=lambda i: -shares[i][1])[:left])
        wanted = [Span(s.topic, s.partition, s.start, s.start + share + (i in extra))
                  for i, (s, (share, _)) in enumerate(zip(wanted, shares, strict=True))]
        wanted = [s for s in wanted if s.until > s.start]
    return wanted, positions
