"""`ingest verify` for silver: the table must equal the fold of bronze (as of the bronze version its ledger records)
row for row; a difference is reported by key."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ingestion.config import PipelineConfig
from ingestion.silver import changes
from ingestion.silver import ledger as silver_ledger
from ingestion.silver.spec import SilverSpec

MAX_SHOWN = 20


@dataclass
class SilverAudit:
    pipeline: str
    path: str
    bronze_version: int | None  # the version silver's ledger records (None: no silver table yet)
    rows: int = 0
    expected_rows: int = 0
    missing: list[str] = field(default_factory=list)  # keys bronze's fold has and silver lacks (or holds otherwise)
    unexpected: list[str] = field(default_factory=list)  # keys silver holds that the fold does not (or otherwise)
    differing: int = 0  # rows that differ, both ways

    @property
    def ok(self) -> bool:
        return self.bronze_version is not None and self.differing == 0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def audit(spark: SparkSession, config: PipelineConfig) -> SilverAudit:
    spec = SilverSpec.of(config)
    at = silver_ledger.position(spark, spec.path)
    if at is None:
        return SilverAudit(spec.pipeline, spec.path, None)
    bronze = spark.read.format("delta").option("versionAsOf", at.bronze_version).load(spec.bronze_path)
    expected, _ = changes.fold(bronze, spec)
    actual = spark.read.format("delta").load(spec.path)
    columns = [c for c in expected.columns if c in actual.columns]
    expected = expected.select(*columns)
    actual = actual.select(*[F.col(c).cast(expected.schema[c].dataType).alias(c) for c in columns])
    missing, unexpected = expected.exceptAll(actual), actual.exceptAll(expected)
    return SilverAudit(spec.pipeline, spec.path, at.bronze_version, rows=actual.count(),
                       expected_rows=expected.count(), missing=_keys(missing, spec), unexpected=_keys(unexpected, spec),
                       differing=missing.count() + unexpected.count())


def _keys(rows: DataFrame, spec: SilverSpec) -> list[str]:
    found = rows.select(*[F.col(p).alias(p.replace(".", "_")) for p in spec.key]).distinct().limit(MAX_SHOWN)
    return [", ".join(f"{p}={v!r}" for p, v in zip(spec.key, r, strict=True)) for r in found.collect()]


def render(result: SilverAudit) -> str:
    if result.bronze_version is None:
        return f"silver {result.path}: no table yet (ingest run {result.pipeline} or ingest silver rebuild)"
    head = (f"silver {result.path}: {result.rows:,} rows at bronze version {result.bronze_version}, "
            f"{result.expected_rows:,} expected from bronze")
    if result.ok:
        return f"{head}: OK, equal to bronze's fold"
    lines = [f"{head}: {result.differing:,} rows differ"]
    if result.missing:
        lines.append(f"  as bronze has them, missing or different in silver: {'; '.join(result.missing)}")
    if result.unexpected:
        lines.append(f"  in silver, not as bronze has them: {'; '.join(result.unexpected)}")
    lines.append(f"  rebuild it: ingest silver rebuild {result.pipeline}")
    return "\n".join(lines)
