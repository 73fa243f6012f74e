"""ingest silver run, rebuild and status: a pipeline's current-state table, outside `ingest run`."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from ingestion.cli.common import pipeline_session


def silver_run(args: argparse.Namespace) -> int:
    follower = _silver(args)
    follower.prepare()
    steps = _locked(follower, follower.drain)
    at = follower.current()
    print(f"silver {follower.spec.path}: {steps} step(s), at bronze version "
          f"{at.bronze_version if at else 'none (bronze has no table yet)'}")
    return 0


def silver_rebuild(args: argparse.Namespace) -> int:
    follower = _silver(args)
    follower.prepare()

    def rebuild() -> Any:
        if args.from_version is not None:
            follower.restore(args.from_version)
        else:
            follower.rebuild(reason="ingest silver rebuild")
        follower.drain()
        return follower.current()

    at = _locked(follower, rebuild)
    print(f"silver {follower.spec.path}: rebuilt, at bronze version {at.bronze_version} (epoch {at.epoch})")
    return 0


def silver_status(args: argparse.Namespace) -> int:
    from ingestion.silver import ledger

    follower = _silver(args)
    found = ledger.records(follower.session, follower.spec.path, limit=50)
    at = follower.current()
    lag = follower.lag()
    rows = follower.table.read().count() if follower.table.exists() else 0
    cross = sum(r.cross_partition_keys for _, r in found)
    out = {"pipeline": follower.spec.pipeline, "table": follower.spec.path, "mode": follower.spec.mode,
           "bronze_version": at.bronze_version if at else None, "epoch": at.epoch if at else None, "rows": rows,
           "lag_versions": lag.versions, "lag_seconds": round(lag.seconds, 1),
           "cross_partition_keys": cross,
           "steps": [{"version": v, **{k: str(x) if k == "kind" else x for k, x in vars(r).items()}}
                     for v, r in found[:10]]}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    if at is None:
        print(f"silver {follower.spec.path}: no table yet (ingest run {follower.spec.pipeline})")
        return 0
    print(f"silver {follower.spec.path} ({follower.spec.mode}): {rows:,} rows at bronze version {at.bronze_version} "
          f"(epoch {at.epoch}), lag {lag.versions} bronze versions ({lag.seconds:.0f}s)")
    if cross:
        print(f"  {cross} keys had changes in two or more Kafka partitions in the last steps: Kafka orders none of "
              f"them (set silver.sequenceBy to a field that does)")
    for version, r in found[:10]:
        print(f"  version {version}: {r.kind} bronze {r.bronze_from + 1}-{r.bronze_version}, {r.changes:,} changes, "
              f"{r.inserted:,} inserted, {r.updated:,} updated, {r.deleted:,} deleted")
    return 0


def _silver(args: argparse.Namespace) -> Any:
    """The pipeline's silver follower, under the pipeline's writer lock (no run of it may write meanwhile)."""
    from ingestion.errors import ConfigError
    from ingestion.silver.follower import SilverFollower

    config, spark = pipeline_session(args.pipeline)
    if config.silver is None:
        raise ConfigError(f"{config.file}: pipeline {config.name!r} has no 'silver' section (docs/cdc.md)")
    return SilverFollower(spark, config)


def _locked(follower: Any, work: Callable[[], Any]) -> Any:
    from ingestion.stream.lock import WriterLock

    lock = WriterLock(follower.config.name, follower.config.checkpoint_path, follower.session,
                      follower.config.spark)
    lock.acquire()
    try:
        return work()
    finally:
        lock.release()
