"""`ingest silver status`: where a pipeline's silver table stands against bronze (the bronze version its ledger
records, its lag in versions and seconds, its rows and last steps), read with delta-rs: no JVM."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ingestion.config import PipelineConfig
from ingestion.delta.rs_reads import DeltaRsReader
from ingestion.errors import ConfigError
from ingestion.silver import ledger as silver_ledger
from ingestion.silver import rs_audit
from ingestion.silver.ledger import SilverRecord
from ingestion.silver.quarantined import quarantined_changes

SHOWN_STEPS = 10


@dataclass(frozen=True)
class SilverState:
    pipeline: str
    table: str
    mode: str
    bronze_version: int | None  # the bronze version silver's state is the fold of (None: no silver table yet)
    epoch: int | None
    rows: int
    lag_versions: int  # bronze versions silver has not merged
    lag_seconds: float  # how long ago the oldest of them was committed (0 when none)
    cross_partition_keys: int  # over the steps read: keys whose changes came from two or more Kafka partitions
    steps: list[tuple[int, SilverRecord]] = field(default_factory=list)  # (silver version, record), newest first
    quarantined: int = 0  # change records of the pipeline in quarantine: silver misses them

    def to_json(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "table": self.table, "mode": self.mode,
                "bronze_version": self.bronze_version, "epoch": self.epoch, "rows": self.rows,
                "lag_versions": self.lag_versions, "lag_seconds": round(self.lag_seconds, 1),
                "cross_partition_keys": self.cross_partition_keys, "quarantined": self.quarantined,
                "steps": [{"version": v, **{k: str(x) if k == "kind" else x for k, x in vars(r).items()}}
                          for v, r in self.steps[:SHOWN_STEPS]]}


def silver_state(config: PipelineConfig, now: float | None = None) -> SilverState:
    """Silver's state from its ledger and bronze's log, read with delta-rs (JvmFreeReadError when it cannot)."""
    if config.silver is None or config.silver_path is None:
        raise ConfigError(f"{config.file}: pipeline {config.name!r} has no 'silver' section (docs/cdc.md)")
    path, options = config.silver_path, config.storage_options() or None
    reader = DeltaRsReader(options)
    steps = silver_ledger.rs_records(path, options, limit=50) or []
    at = steps[0][1] if steps else rs_audit.position(path, options)
    bronze = reader.version(config.table_path)
    behind = (bronze or 0) - (at.bronze_version if at else -1)
    seconds = 0.0
    if bronze is not None and behind > 0:
        oldest = reader.committed_millis(config.table_path, bronze - behind + 1)
        seconds = 0.0 if oldest is None else max(0.0, (now or time.time()) - oldest / 1000)
    return SilverState(config.name, path, config.silver.mode, at.bronze_version if at else None,
                       at.epoch if at else None, reader.rows(path) or 0,
                       behind if bronze is not None and behind > 0 else 0, seconds,
                       sum(r.cross_partition_keys for _, r in steps), steps,
                       quarantined_changes(config).count)


def render(state: SilverState) -> str:
    if state.bronze_version is None:
        return f"silver {state.table}: no table yet (ingest run {state.pipeline})"
    lines = [f"silver {state.table} ({state.mode}): {state.rows:,} rows at bronze version {state.bronze_version} "
             f"(epoch {state.epoch}), lag {state.lag_versions} bronze versions ({state.lag_seconds:.0f}s)"]
    if state.quarantined:
        lines.append(f"  {state.quarantined:,} change record(s) in quarantine: silver misses them until they are "
                     f"re-decoded (ingest quarantine reprocess {state.pipeline}; ingest verify names their keys)")
    if state.cross_partition_keys:
        lines.append(f"  {state.cross_partition_keys} keys had changes in two or more Kafka partitions in the last "
                     "steps: Kafka orders none of them (set silver.sequenceBy to a field that does)")
    for version, r in state.steps[:SHOWN_STEPS]:
        lines.append(f"  version {version}: {r.kind} bronze {r.bronze_from + 1}-{r.bronze_version}, "
                     f"{r.changes:,} changes, {r.inserted:,} inserted, {r.updated:,} updated, {r.deleted:,} deleted")
    return "\n".join(lines)
