"""What the two write strategies share: the pipeline's targets, the decoder choice, and a batch's result."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession

from ingestion.config import PipelineConfig
from ingestion.decode import jvm_decoder
from ingestion.decode.resolver import SchemaResolver
from ingestion.decode.spec import DecodeSpec, spec_format
from ingestion.delta import ledger
from ingestion.delta.append import DeltaAppend
from ingestion.delta.ledger import BatchKind, BatchRecord, PartitionRange
from ingestion.errors import ConfigError

log = logging.getLogger(__name__)


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
    one_pass: bool = False  # written in one Spark job (see one_pass.OnePassWrite), not through the cache
    direct: bool = False  # written without a Spark job (see direct.DirectWrite)


@dataclass
class Targets:
    """One pipeline's tables and schemas, as both strategies write them: bronze under the checkpoint's app id,
    quarantine under the same id with `.quarantine`."""

    config: PipelineConfig
    resolver: SchemaResolver
    app_id: str
    bronze: DeltaAppend = field(init=False)
    quarantine: DeltaAppend = field(init=False)

    def __post_init__(self) -> None:
        self.bronze = DeltaAppend(self.config.table_path, self.app_id)
        self.quarantine = DeltaAppend(self.config.quarantine_path, f"{self.app_id}.quarantine")

    @property
    def spec(self) -> DecodeSpec:
        return self.resolver.spec

    def records(self, stats: list[Any], batch_id: int) -> tuple[BatchRecord, BatchRecord | None]:
        """The ledger records of the bronze commit and, when records failed, of the quarantine commit."""
        return ledger.batch_records(stats, pipeline=self.config.name, batch_id=batch_id, kind=BatchKind.STREAM,
                                    app_id=self.bronze.app_id, quarantine_app_id=self.quarantine.app_id)


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


def log_result(pipeline: str, r: BatchResult) -> None:
    spans = ", ".join(f"{x.topic}/{x.partition} {x.first}-{x.last}" for x in r.ranges)
    if r.committed:
        log.info("%s batch %d: %d rows, %d quarantined in %.2fs (%.0f records/s%s), table version %s, offsets %s",
                 pipeline, r.batch_id, r.rows, r.quarantined, r.seconds,
                 (r.rows + r.quarantined) / max(r.seconds, 1e-9), _strategy(r), r.version,
                 spans)
    else:
        log.warning("%s batch %d: skipped by Delta, (txnAppId, txnVersion=%d) is already committed; "
                    "table version stays %s (offsets %s)", pipeline, r.batch_id, r.batch_id, r.version, spans)


def _strategy(r: BatchResult) -> str:
    if r.batch_id == ledger.START_BATCH_ID:
        return ", the start batch, before the JVM"
    return ", direct" if r.direct else ", one pass" if r.one_pass else ""
