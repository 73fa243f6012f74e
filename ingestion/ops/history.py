"""`ingest history`: the table's versions with the Kafka offsets each one holds, from the ledger."""

from __future__ import annotations

import json
from dataclasses import asdict

from ingestion.config import PipelineConfig
from ingestion.delta import routed
from ingestion.delta.ledger import START_BATCH_ID, BatchKind, BatchRecord
from ingestion.ops.readers import Source, as_reader


def history(source: Source, config: PipelineConfig) -> list[BatchRecord]:
    """Every commit of bronze that records offsets, oldest first (read through a TableReader, or a SparkSession to
    read with Spark)."""
    return as_reader(source).history(config.table_path)


def by_table(source: Source, config: PipelineConfig) -> dict[str, list[BatchRecord]]:
    """A routed pipeline's commits that record offsets, per table (each route table, then quarantine), oldest
    first: each table has versions of its own (docs/routing.md)."""
    reader = as_reader(source)
    tables = {**routed.route_tables(config), "quarantine": config.quarantine_path}
    return {name: reader.history(path) for name, path in tables.items()}


def restorable(source: Source, config: PipelineConfig) -> str:
    """The line under the history: the oldest version that time travel and rewind still reach."""
    layout = as_reader(source).layout(config.table_path)
    if layout is None:
        return "no table yet"
    return (f"oldest version still restorable (VERSION AS OF, rewind): {layout.oldest_restorable} (vacuum retention "
            f"{config.maintenance.vacuum_retention})")


def to_json(records: list[BatchRecord]) -> str:
    return json.dumps([asdict(r) for r in records], default=str, indent=2)


def render(records: list[BatchRecord]) -> str:
    lines = [f"{'version':>7}  {'committed at':19}  {'kind':8} {'batch':>5} {'rows':>7} {'quar.':>5} {'schemas':>7}  "
             "offsets (partition:first-last)"]
    several = len({x.topic for r in records for x in r.ranges}) > 1
    for r in records:
        spans = ", ".join(f"{x.topic + '/' if several else ''}{x.partition}:{x.first}-{x.last}" for x in r.ranges)
        batch = "start" if r.kind == BatchKind.STREAM and r.batch_id == START_BATCH_ID else str(r.batch_id)
        if r.as_of is not None:
            spans = f"maintenance: no offsets of its own (ledger coverage as of version {r.as_of} recorded)"
        elif r.kind == BatchKind.REWIND:  # its batch id is the version it restored; its ranges, what that one held
            batch, spans = "-", f"back to version {r.batch_id}, which holds {spans or 'no offsets'}"
        when = r.committed_at.strftime("%Y-%m-%d %H:%M:%S") if r.committed_at else "-"
        schemas = ",".join(str(i) for i in r.schema_ids) or "-"
        lines.append(f"{r.version:>7}  {when:19}  {r.kind:8} {batch:>5} {r.rows:>7} {r.quarantined:>5} "
                     f"{schemas:>7}  {spans}")
    return "\n".join(lines)
