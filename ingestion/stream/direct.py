"""The direct write: a small batch fetched, decoded and written by the driver, without a Spark job.

Every Spark job costs the driver a plan, a stage, a task and Delta's write planning, about 0.3 s however few its
records (docs/performance.md). For a batch whose plan holds at most `sink.directWriteMaxOffsets` offsets, this
strategy reads the offset ranges from the plan (`runtime.batch_plan`), fetches exactly those records with the
pipeline's own consumer (`kafka.fetch`), decodes them with the Python decoder, writes one Parquet file
(`delta.arrow_files`) and commits it through Delta's transaction API in the same commit as the batch's
`SetTransaction(txnAppId, batch id)` and ledger record, as the other strategies do. Spark's checkpoint then
records the batch as usual. Anything this path does not handle (records to quarantine, a schema change, a
partitioned or constrained table, a table in object storage, records that do not arrive) gives the batch back,
before anything is committed, to the Spark strategies.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema

from ingestion import faults, storage
from ingestion.decode import bronze, python_decoder
from ingestion.decode.spec import DecodeSpec
from ingestion.delta import arrow_files
from ingestion.errors import DecodeError
from ingestion.kafka.fetch import RangeFetcher
from ingestion.runtime import batch_plan, delta_txn
from ingestion.stream.batch import BatchResult, Targets

log = logging.getLogger(__name__)

FETCH_TIMEOUT = 5.0  # seconds for the records of a planned batch to arrive before it is written the usual way


class Empty:
    """A batch that holds no record to write."""


EMPTY = Empty()


class DirectWrite:
    """The direct strategy of one pipeline's writer."""

    def __init__(self, targets: Targets, kafka_client: Mapping[str, Any] | None) -> None:
        self.targets = targets
        config = targets.config
        self.max_offsets = config.sink.direct_write_max_offsets if kafka_client is not None else 0
        self.table_dir = storage.local_folder(config.table_path)
        self.fetcher = RangeFetcher(kafka_client, config.consumer_group) if kafka_client is not None else None
        self._decoder: tuple[DecodeSpec, python_decoder.BatchDecoder, pa.Schema] | None = None
        self._refused: str | None = None  # the table's reason, logged once

    def write(self, kafka_rows: DataFrame, batch_id: int, ingested_at: dt.datetime,
              started: float) -> BatchResult | Empty | None:
        """The batch written without a Spark job; EMPTY when it holds no record (nothing to write: no offsets, or
        transaction markers and aborted records only); None (nothing done) when it is not one this path writes."""
        if not self.max_offsets or self.table_dir is None or self.fetcher is None:
            return None
        spans = batch_plan.kafka_offset_ranges(kafka_rows)
        if spans == []:  # Spark plans no input partition for a batch without offsets (a new query's first, say)
            return EMPTY
        if not spans or sum(s.size for s in spans) > self.max_offsets:
            return None
        config, target = self.targets.config, self.targets.bronze
        marks = [("start", started)]
        txn = delta_txn.DeltaTxn(kafka_rows.sparkSession, config.table_path)
        spec, decoder, schema = self._decoder_for(self.targets.spec)
        if not self._accepts(txn, spec):
            return None
        if txn.committed_version(target.app_id) >= batch_id:
            return None  # a batch Spark replays after a crash: the settled write reports Delta's skip
        marks.append(("txn", time.monotonic()))
        source = self.fetcher.fetch(spans, FETCH_TIMEOUT)
        if source is None:
            log.info("%s batch %d: its records did not arrive in %.0fs; written with Spark", config.name, batch_id,
                     FETCH_TIMEOUT)
            return None
        if not source.num_rows:  # transaction markers only: what Spark's source would read is nothing too
            return EMPTY
        marks.append(("fetch", time.monotonic()))
        written = write_records(source, decoder, schema, self.table_dir, txn.properties(), batch_id=batch_id,
                                ingested_at=ingested_at)
        if written is None:
            return None
        add, stats = written
        marks.append(("write", time.monotonic()))
        record, _ = self.targets.records(stats, batch_id)
        faults.reached(faults.FaultPoint.BEFORE_COMMIT, batch_id)
        # A failed commit leaves the file where it is, as the one-pass write leaves its files: after some failures
        # (an answer lost on the way back from the JVM) it cannot be told whether the commit holds it, and a file
        # no commit names is read by no one (VACUUM removes it).
        target.version = txn.commit(txn.add_actions([add]), app_id=target.app_id, txn_version=batch_id,
                                    user_metadata=record.to_user_metadata())
        faults.reached(faults.FaultPoint.AFTER_COMMIT, batch_id)
        marks.append(("commit", time.monotonic()))
        log.debug("%s batch %d: direct %s", config.name, batch_id,
                  ", ".join(f"{name} {1000 * (at - marks[i][1]):.0f} ms" for i, (name, at) in enumerate(marks[1:])))
        return BatchResult(batch_id, record.rows, 0, sum(s["bytes"] for s in stats), target.version, True,
                           record.ranges, max(s["max_timestamp"] for s in stats), time.monotonic() - started,
                           direct=True)

    def _decoder_for(self, spec: DecodeSpec) -> tuple[DecodeSpec, python_decoder.BatchDecoder, pa.Schema]:
        """The Python decoder and bronze's Arrow schema of the current spec, made once per schema version."""
        if self._decoder is None or self._decoder[0] is not spec:
            self._decoder = (spec, *decoder_for(spec))
        return self._decoder

    def _accepts(self, txn: delta_txn.DeltaTxn, spec: DecodeSpec) -> bool:
        reason = txn.outside_files_refusal() or txn.incompatible(bronze.table_schemas(spec)[0])
        if reason is not None and reason != self._refused:
            log.info("%s: batches are written with Spark, never directly: %s", self.targets.config.name, reason)
        self._refused = reason
        return reason is None

    def close(self) -> None:
        if self.fetcher is not None:
            self.fetcher.close()


def decoder_for(spec: DecodeSpec) -> tuple[python_decoder.BatchDecoder, pa.Schema]:
    """The Python decoder of a spec and bronze's Arrow schema of its rows."""
    return python_decoder.batch_decoder(spec), to_arrow_schema(bronze.table_schemas(spec)[0])


def write_records(source: pa.RecordBatch, decoder: python_decoder.BatchDecoder, schema: pa.Schema, table_dir: Path,
                  properties: Mapping[str, str], *, batch_id: int,
                  ingested_at: dt.datetime) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """Kafka records (Spark's source rows, in Arrow) decoded and written as one data file of the (local,
    unpartitioned) table: its `add` action and the per-partition summary (`bronze.batch_stats`' form); None, with
    nothing written, when a record fails to decode or belongs in quarantine (the Spark strategies write those)."""
    try:
        decoded = next(iter(decoder(iter([source]))))  # the mapInArrow function, on one batch
    except DecodeError:  # onError: fail; the Spark strategies stop the batch with the same error
        return None
    if decoded.column("_error_class").null_count != decoded.num_rows:
        return None  # records to quarantine, or of a schema version not resolved yet
    rows = bronze.bronze_batch(decoded, schema, batch_id=batch_id, ingested_at=ingested_at)
    return arrow_files.write_file(table_dir, rows, properties), _partition_stats(decoded)


def _partition_stats(decoded: pa.RecordBatch) -> list[dict[str, Any]]:
    """`bronze.batch_stats` of decoder rows held in Arrow that all land in bronze."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    columns = [decoded.column(name).to_pylist() for name in ("topic", "partition", "offset", "_schema_id",
                                                             "_value_bytes")]
    stamps = pc.cast(decoded.column("timestamp"), pa.int64()).to_pylist()  # microseconds
    for topic, partition, offset, schema_id, size, micros in zip(*columns, stamps, strict=True):
        s = out.setdefault((topic, partition), {
            "topic": topic, "partition": partition, "first": offset, "last": offset, "count": 0,
            "failed_first": None, "failed_last": None, "failed": 0, "max_timestamp": micros, "bytes": 0,
            "schema_ids": set(), "unknown_ids": []})
        s["first"], s["last"], s["count"] = min(s["first"], offset), max(s["last"], offset), s["count"] + 1
        s["max_timestamp"] = max(s["max_timestamp"], micros)
        s["bytes"] += size or 0
        if schema_id is not None:
            s["schema_ids"].add(schema_id)
    for s in out.values():
        s["schema_ids"] = sorted(s["schema_ids"])
    return bronze.by_partition(list(out.values()))
