"""`ingest history`: the table's versions with the Kafka offsets each one holds, from the ledger."""

from __future__ import annotations

import json
from dataclasses import asdict

from pyspark.sql import SparkSession

from ingestion.config import PipelineConfig
from ingestion.delta import ledger, log_reader
from ingestion.delta.ledger import BatchRecord


def history(spark: SparkSession, config: PipelineConfig) -> list[BatchRecord]:
    """Every commit of bronze that records offsets, oldest first (read with Spark)."""
    return ledger.history(spark, config.table_path)


def history_without_jvm(config: PipelineConfig) -> list[BatchRecord]:
    """The same, read from the Delta log with delta-rs (no JVM); JvmFreeReadError when delta-rs cannot."""
    return log_reader.history(config.table_path) or []


def to_json(records: list[BatchRecord]) -> str:
    return json.dumps([asdict(r) for r in records], default=str, indent=2)


def render(records: list[BatchRecord]) -> str:
    lines = [f"{'version':>7}  {'committed at':19}  {'kind':8} {'batch':>5} {'rows':>7} {'quar.':>5} {'schemas':>7}  "
             "offsets (partition:first-last)"]
    for r in records:
        spans = ", ".join(f"{x.partition}:{x.first}-{x.last}" for x in r.ranges)
        when = r.committed_at.strftime("%Y-%m-%d %H:%M:%S") if r.committed_at else "-"
        schemas = ",".join(str(i) for i in r.schema_ids) or "-"
        lines.append(f"{r.version:>7}  {when:19}  {r.kind:8} {r.batch_id:>5} {r.rows:>7} {r.quarantined:>5} "
                     f"{schemas:>7}  {spans}")
    return "\n".join(lines)
