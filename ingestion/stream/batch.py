"""What the write paths share: the pipeline's tables (`Targets`, with the one Python decoder of their schemas), the
one choice of decoder for a Spark job (`DecoderChoice`) and a batch's outcome (`BatchResult`, `Empty`, `Declined`).
The stages every batch goes through after its decode are `stages`'."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from ingestion.config import PipelineConfig
from ingestion.decode import bronze as bronze_rows
from ingestion.decode import expectations, jvm_decoder
from ingestion.decode.arrow_rows import RecordDecoder
from ingestion.decode.expectations import Counts, Rules
from ingestion.decode.python_decoder import decode_in_python
from ingestion.decode.resolver import SchemaResolver
from ingestion.decode.spec import DecodeSpec, spec_format
from ingestion.delta import ledger
from ingestion.delta.append import DeltaAppend
from ingestion.delta.ledger import BatchKind, BatchRecord, PartitionRange
from ingestion.delta.rs_append import RsTable
from ingestion.errors import ConfigError
from ingestion.stream import setup

log = logging.getLogger(__name__)


class WritePath(StrEnum):
    """Which of the two write paths wrote a batch (docs/architecture.md#two-write-paths)."""

    SPARK = "spark"  # a Spark job decoded and wrote it (the few records the JVM could not vouch for, in Python)
    DRIVER = "driver"  # the driver fetched, decoded and committed it with delta-rs, without a Spark job


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
    path: WritePath = WritePath.SPARK
    # data-quality expectations: the rows checked, and per rule the rows that broke it (docs/expectations.md)
    checked: int = 0
    violated: Mapping[str, int] = field(default_factory=dict)
    # a routed pipeline's batch: per route table, the rows it committed and its version after the batch
    tables: Mapping[str, tuple[int, int | None]] = field(default_factory=dict)

    @classmethod
    def of(cls, record: BatchRecord, stats: Sequence[Mapping[str, Any]], *, version: int | None, committed: bool,
           started: float, path: WritePath = WritePath.SPARK, value_bytes: int | None = None,
           quarantine_only: bool = False) -> BatchResult:
        """A batch's outcome from its bronze commit's ledger record and its per-partition stats (`quarantine_only`:
        a batch that wrote quarantine only, `record` the quarantine commit's); `value_bytes`: the batch's, when the
        stats do not sum to it."""
        return cls(record.batch_id, 0 if quarantine_only else record.rows,
                   record.rows if quarantine_only else record.quarantined,
                   sum(s["bytes"] for s in stats) if value_bytes is None else value_bytes, version, committed,
                   record.ranges, max((s["max_timestamp"] for s in stats if s["max_timestamp"] is not None),
                                      default=None),
                   time.monotonic() - started, path, record.checked, dict(record.violated))

    @classmethod
    def skipped(cls, batch_id: int, version: int | None, ranges: Sequence[PartitionRange], started: float,
                path: WritePath) -> BatchResult:
        """A batch Delta holds already (its (app id, version) committed): nothing written, the table's version."""
        return cls(batch_id, 0, 0, 0, version, False, tuple(ranges), None, time.monotonic() - started, path)


@dataclass(frozen=True)
class Empty:
    """A batch that holds no record to write (no offsets, or transaction markers and aborted records only)."""


EMPTY = Empty()


@dataclass(frozen=True)
class Declined:
    """A batch the driver-side path does not write, and why; nothing of it was committed (the Spark path writes
    it)."""

    reason: str


@dataclass
class Targets:
    """One pipeline's tables as both paths write them: bronze under the checkpoint's app id, quarantine under the
    same id with `.quarantine`; Spark's appends (`DeltaAppend`) and delta-rs's (`RsTable`) of each."""

    config: PipelineConfig
    resolver: SchemaResolver
    app_id: str
    bronze: DeltaAppend = field(init=False)
    quarantine: DeltaAppend = field(init=False)
    bronze_rs: RsTable = field(init=False)
    quarantine_rs: RsTable = field(init=False)
    _rules: tuple[DecodeSpec, Rules] | None = field(default=None, init=False)
    _decoder: RecordDecoder | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.bronze = DeltaAppend(self.config.table_path, self.app_id)
        self.quarantine = DeltaAppend(self.config.quarantine_path, quarantine_app_id(self.app_id))
        options = self.config.storage_options() or None
        self.bronze_rs = RsTable(self.config.table_path, options)
        self.quarantine_rs = RsTable(self.config.quarantine_path, options)

    @property
    def spec(self) -> DecodeSpec:
        return self.resolver.spec

    @property
    def rules(self) -> Rules:
        """The pipeline's expectations compiled against bronze's columns of the current schemas (once per spec)."""
        spec = self.spec
        if self._rules is None or self._rules[0] is not spec:
            self._rules = (spec, expectations.compile_rules(self.config, bronze_rows.table_schemas(spec)[0]))
        return self._rules[1]

    def record_decoder(self) -> RecordDecoder:
        """The Python decoder of the current schemas and rules, made once per schema version: the driver-side
        path's, and the Spark path's for the records its job does not vouch for."""
        spec = self.spec
        if self._decoder is None or self._decoder.spec is not spec:
            self._decoder = RecordDecoder(spec, self.rules)
        return self._decoder

    def records(self, stats: list[Any], batch_id: int, app_id: str | None = None,
                counts: Counts | None = None) -> tuple[BatchRecord, BatchRecord | None]:
        """The ledger records of the bronze commit and, when records failed, of the quarantine commit (`app_id`:
        bronze's txnAppId when not the checkpoint's, as for the start batch; `counts`: the expectations')."""
        bronze_app = app_id or self.bronze.app_id
        return ledger.batch_records(stats, pipeline=self.config.name, batch_id=batch_id, kind=BatchKind.STREAM,
                                    app_id=bronze_app, quarantine_app_id=quarantine_app_id(bronze_app),
                                    checked=counts.checked if counts else 0,
                                    violated=counts.violated if counts else None)


def quarantine_app_id(app_id: str) -> str:
    """The quarantine table's txnAppId of a bronze txnAppId."""
    return f"{app_id}.quarantine"


class DecoderChoice:
    """Whether records are decoded by Spark's from_avro first (decided once per schema version, logged)."""

    def __init__(self, targets: Targets) -> None:
        self.targets = targets
        self._for: DecodeSpec | None = None  # the spec the choice was made for
        self._uses_jvm = False

    def jvm(self, spark: SparkSession) -> bool:
        spec = self.targets.spec
        if self._for is spec:
            return self._uses_jvm
        config = self.targets.config
        choice = config.value.decoder
        reason = "value.decoder is python" if choice == "python" else jvm_decoder.unusable(spark, spec)
        if reason and choice == "jvm":
            raise ConfigError(f"pipeline {config.name!r}: value.decoder is jvm, but {reason}")
        if reason:
            log.info("%s: decoding every record in Python: %s", config.name, reason)
        else:
            log.info("%s: decoding with %s, unverified records in Python", config.name, spec_format(spec).jvm_name)
        self._for, self._uses_jvm = spec, reason is None
        return self._uses_jvm

    def decode(self, kafka_rows: DataFrame) -> DataFrame:
        """Kafka's rows decoded by a Spark job: Spark's decoder where it vouches for a record (the rest marked for
        the Python decoder), or the Python decoder in the workers for every record."""
        spec = self.targets.spec
        if self.jvm(kafka_rows.sparkSession):
            return jvm_decoder.decode_in_jvm(kafka_rows, spec)
        return decode_in_python(kafka_rows, spec)


def decode_range(spark: SparkSession, config: PipelineConfig, schemas: SchemaResolver, kafka_rows: DataFrame, *,
                 with_rules: bool) -> DataFrame:
    """Kafka's rows of a range decoded by the Python decoder in Spark's workers, for the commands that re-ingest
    one (replay, quarantine reprocess, shadow start): with the expectations' verdict when `with_rules` (a row a
    blocking rule refuses fails, as the stream's batches do), and decoded again when a connect-json topic's records
    brought schemas the resolver learns (`setup.learn_schemas`, which widens bronze). Persisted (memory and
    disk): the caller unpersists it."""
    def decoded() -> DataFrame:
        rules = setup.check_rules(config, schemas.spec) if with_rules else expectations.NO_RULES
        rows = decode_in_python(expectations.with_raw_value(kafka_rows, rules), schemas.spec)
        return expectations.flag_rows(rows, rules, bronze_rows.decoder_sources()).select(*rows.columns)

    first = decoded().persist(StorageLevel.MEMORY_AND_DISK)  # connect-json's schema check reads it first
    if not setup.learn_schemas(spark, config, schemas, first):
        return first
    first.unpersist()
    return decoded().persist(StorageLevel.MEMORY_AND_DISK)


def log_result(pipeline: str, r: BatchResult) -> None:
    spans = ", ".join(f"{x.topic}/{x.partition} {x.first}-{x.last}" for x in r.ranges)
    if r.committed:
        log.info("%s batch %d: %d rows, %d quarantined in %.2fs (%.0f records/s, %s), table version %s, offsets %s",
                 pipeline, r.batch_id, r.rows, r.quarantined, r.seconds,
                 (r.rows + r.quarantined) / max(r.seconds, 1e-9), _path(r), r.version, spans)
    else:
        log.warning("%s batch %d: skipped by Delta, (txnAppId, txnVersion=%d) is already committed; "
                    "table version stays %s (offsets %s)", pipeline, r.batch_id, r.batch_id, r.version, spans)


def _path(r: BatchResult) -> str:
    if r.batch_id == ledger.START_BATCH_ID:
        return "the start batch, before the JVM"
    return "driver" if r.path is WritePath.DRIVER else "spark"
