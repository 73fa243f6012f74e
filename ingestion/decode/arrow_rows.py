"""Kafka records held in Arrow, decoded by the driver: bronze rows, quarantine rows and the per-partition summary.

The twins, in Arrow, of `bronze.bronze_rows`, `bronze.quarantine_rows` and `bronze.batch_stats`: the same decoder
(`python_decoder.batch_decoder`, the `mapInArrow` function of the spec's format) run in this process on one batch of
the rows Spark's Kafka source makes. The driver-side write path decodes whole small batches this way, and the Spark
path the few records its JVM decoder could not vouch for; both land them exactly as Spark's Python workers would.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingestion.columns import METADATA_COLUMNS, QUARANTINE_COLUMNS
from ingestion.decode import bronze, expectations, parallel, python_decoder
from ingestion.decode.expectations import NO_RULES, Counts, Rules
from ingestion.decode.spec import PAYLOAD, DecodeSpec, UnknownSchemaError
from ingestion.runtime.arrow_types import to_arrow_schema

_SOURCES = {**bronze.SOURCES, "_kafka_key": "_key"}
_QUARANTINE_SOURCES = {**bronze.SOURCES, "_kafka_key": "key"}
_BATCH_COLUMNS = ("_batch_id", "_ingested_at")


@dataclass(frozen=True)
class DecodedRecords:
    """One batch of records decoded by the driver."""

    bronze: pa.Table  # the rows for bronze (decoded payloads and tombstones)
    quarantine: pa.Table  # the records that failed, raw, with the reason
    stats: list[dict[str, Any]]  # per topic partition, `bronze.batch_stats`' form, failures included
    counts: Counts | None = None  # the expectations' counts, when the pipeline has rules
    rule_failure: str | None = None  # the line of the first row that broke a `fail` rule

    def first_failure(self) -> str | None:
        """The first record that failed to decode (by topic, partition, offset) and why, or None (a row a rule
        refused is not a failure to decode)."""
        rows = [r for r in self.quarantine.select(["_kafka_topic", "_kafka_partition", "_kafka_offset",
                                                   "_error_class", "_error_message"]).to_pylist()
                if r["_error_class"] != expectations.EXPECTATION_FAILED]
        if not rows:
            return None
        first = min(rows, key=lambda r: (r["_kafka_topic"], r["_kafka_partition"], r["_kafka_offset"]))
        return (f"record {first['_kafka_topic']}/{first['_kafka_partition']}@{first['_kafka_offset']}: "
                f"{first['_error_class']}: {first['_error_message']}")

    @property
    def unknown_ids(self) -> set[int]:
        """Schema ids no version of the subject had when the batch was decoded (UnknownSchemaError)."""
        return {int(i) for s in self.stats for i in s["unknown_ids"]}

    def unknown_records(self) -> dict[int, bytes]:
        """A record value of each unknown schema id, in the order they first appear (`bronze.unknown_records`'
        twin, for every format)."""
        rows = self.quarantine.filter(pc.equal(self.quarantine.column("_error_class"), UnknownSchemaError.__name__))
        rows = rows.sort_by([("_kafka_timestamp", "ascending"), ("_kafka_partition", "ascending"),
                             ("_kafka_offset", "ascending")])
        found: dict[int, bytes] = {}
        for i, value in zip(rows.column("_schema_id").to_pylist(), rows.column("_kafka_value").to_pylist(),
                            strict=True):
            if i is not None and value is not None:
                found.setdefault(int(i), value)
        return found


class RecordDecoder:
    """The decoder of one spec and the Arrow schemas of its two tables, made once per schema version."""

    def __init__(self, spec: DecodeSpec, rules: Rules = NO_RULES) -> None:
        self.spec = spec
        self.rules = rules
        self.decoder = python_decoder.batch_decoder(spec)
        bronze_schema, quarantine_schema = bronze.table_schemas(spec)
        self.bronze_schema = to_arrow_schema(bronze_schema)
        self.quarantine_schema = to_arrow_schema(quarantine_schema)

    def begin(self, source: pa.RecordBatch) -> None:
        """Start the decode workers on `source`, the next batch, ahead of its `decode` (`parallel.begin`)."""
        parallel.begin(self.spec, source)

    def decode(self, source: pa.RecordBatch, *, batch_id: int, ingested_at: dt.datetime) -> DecodedRecords:
        """Kafka source rows (`columns.KAFKA_SOURCE_SCHEMA` in Arrow) decoded; a DecodeError (sink.onError: fail)
        names the first record that failed."""
        decoded = parallel.decode(self.decoder, self.spec, source)  # a large batch on every core
        bronze_rows = table_rows(decoded, self.bronze_schema, _SOURCES, METADATA_COLUMNS, batch_id, ingested_at,
                                 failed=False)
        counts, failure = None, None
        if self.rules:
            verdict = expectations.evaluate(self.rules, bronze_rows)
            counts, failure = verdict.counts(), expectations.first_failure(self.rules, verdict, bronze_rows)
            flagged = verdict.flagged
            if flagged.any():
                decoded = _flagged(decoded, source, flagged, verdict.messages())
                bronze_rows = bronze_rows.filter(pa.array(~flagged))
        return DecodedRecords(
            bronze_rows,
            table_rows(decoded, self.quarantine_schema, _QUARANTINE_SOURCES, QUARANTINE_COLUMNS, batch_id,
                       ingested_at, failed=True),
            partition_stats(decoded), counts, failure)


def _flagged(decoded: pa.RecordBatch, source: pa.RecordBatch, flagged: np.ndarray,
             messages: list[str | None]) -> pa.RecordBatch:
    """Decoder rows with those of bronze's rows (in order, the rows without an error) that `flagged` selects made
    failures: `_error_class` ExpectationFailed, `_error_message` the rules they broke, `_raw_value` their value
    (the decoder keeps it for failures only; its rows are the source's, one for one)."""
    ok = np.flatnonzero(pc.is_null(decoded.column("_error_class")).to_numpy(zero_copy_only=False))
    mask = np.zeros(decoded.num_rows, dtype=bool)
    mask[ok[flagged]] = True
    classes = decoded.column("_error_class").to_pylist()
    texts = decoded.column("_error_message").to_pylist()
    for row, message in zip(ok[flagged], (m for m, f in zip(messages, flagged, strict=True) if f), strict=True):
        classes[row], texts[row] = expectations.EXPECTATION_FAILED, message
    arrays = dict(zip(decoded.schema.names, decoded.columns, strict=True))
    arrays["_error_class"] = pa.array(classes, pa.string())
    arrays["_error_message"] = pa.array(texts, pa.string())
    arrays["_raw_value"] = pc.if_else(pa.array(mask), source.column("value"), decoded.column("_raw_value"))
    return pa.RecordBatch.from_arrays(list(arrays.values()), names=list(arrays))


def table_rows(decoded: pa.RecordBatch, schema: pa.Schema, sources: dict[str, str], names: Iterable[str],
               batch_id: int, ingested_at: dt.datetime, *, failed: bool) -> pa.Table:
    """Bronze's rows (`failed` False: the payload's fields, then the metadata columns) or quarantine's (`failed`
    True) of decoder rows held in Arrow, as a table of `schema` (`bronze.table_schemas`', in Arrow)."""
    errors = pc.is_null(decoded.column("_error_class"))
    rows = decoded.filter(pc.invert(errors) if failed else errors)
    columns = [] if failed else list(rows.column(PAYLOAD).flatten())
    columns += [rows.column(sources[name]) for name in names if name not in _BATCH_COLUMNS]
    n = rows.num_rows
    columns += [pa.array([batch_id] * n, pa.int64()),
                pa.array([ingested_at.astimezone(dt.UTC)] * n, schema.field("_ingested_at").type)]
    return pa.Table.from_arrays([c.cast(f.type) for c, f in zip(columns, schema, strict=True)], schema=schema)


def partition_stats(decoded: pa.RecordBatch) -> list[dict[str, Any]]:
    """`bronze.batch_stats` of decoder rows held in Arrow: Arrow's group-by per (topic, partition), over all the
    rows, the failed ones and those of an unknown schema id (no Python per record)."""
    keys = ["topic", "partition"]
    rows = pa.table({"topic": decoded.column("topic"), "partition": decoded.column("partition"),
                     "offset": decoded.column("offset"), "schema_id": decoded.column("_schema_id"),
                     "bytes": decoded.column("_value_bytes").cast(pa.int64()),
                     "micros": pc.cast(decoded.column("timestamp"), pa.int64()),  # microseconds
                     "error": decoded.column("_error_class")})
    every = rows.group_by(keys, use_threads=False).aggregate([
        ("offset", "min"), ("offset", "max"), ("offset", "count"), ("micros", "max"), ("bytes", "sum"),
        ("schema_id", "distinct")]).to_pylist()
    failed = {(r["topic"], r["partition"]): r for r in rows.filter(pc.is_valid(rows.column("error"))).group_by(
        keys, use_threads=False).aggregate([("offset", "min"), ("offset", "max"), ("offset", "count")]).to_pylist()}
    unknown = {(r["topic"], r["partition"]): r["schema_id_distinct"] for r in rows.filter(
        pc.equal(rows.column("error"), UnknownSchemaError.__name__)).group_by(keys, use_threads=False).aggregate(
        [("schema_id", "distinct")]).to_pylist()}
    out = []
    for r in every:
        key = (r["topic"], r["partition"])
        bad = failed.get(key)
        out.append({
            "topic": r["topic"], "partition": r["partition"], "first": r["offset_min"], "last": r["offset_max"],
            "count": r["offset_count"], "failed_first": bad["offset_min"] if bad else None,
            "failed_last": bad["offset_max"] if bad else None, "failed": bad["offset_count"] if bad else 0,
            "max_timestamp": r["micros_max"], "bytes": r["bytes_sum"] or 0,
            "schema_ids": sorted(i for i in r["schema_id_distinct"] if i is not None),
            "unknown_ids": sorted(i for i in unknown.get(key, ()) if i is not None)})
    return bronze.by_partition(out)
