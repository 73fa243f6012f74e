"""ingest silver run, rebuild and status: a pipeline's current-state table, outside `ingest run` (status read with
delta-rs, without a JVM)."""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable
from typing import Any

from ingestion.cli.common import pipeline_session

log = logging.getLogger("ingestion")


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
    from ingestion.cli.common import load
    from ingestion.delta.reader import JvmFreeReadError
    from ingestion.ops import silver_status as status

    config = load(args.pipeline)
    if config.routing is not None and config.routing.silver:  # a silver per route: each route table's
        states = {table: status.silver_state(route) for table, route in config.route_silvers().items()}
        print(json.dumps({t: s.to_json() for t, s in states.items()}, indent=2) if args.json else
              "\n".join(f"route table {t}: {status.render(s)}" for t, s in states.items()))
        return 0
    try:
        found = status.silver_state(config)
    except JvmFreeReadError as exc:
        log.warning("%s; reading silver with Spark instead", exc)
        found = _spark_state(args)
    print(json.dumps(found.to_json(), indent=2) if args.json else status.render(found))
    return 0


def _spark_state(args: argparse.Namespace) -> Any:
    """`silver status`'s answer read with Spark (where delta-rs cannot read a table)."""
    from ingestion.delta.reads import SparkReader
    from ingestion.ops.silver_status import SilverState
    from ingestion.silver import ledger
    from ingestion.silver.quarantined import counted

    follower = _silver(args)
    steps = ledger.records(follower.session, follower.spec.path, limit=50)
    at = follower.current()
    lag = follower.lag()
    rows = follower.table.read().count() if follower.table.exists() else 0
    return SilverState(follower.spec.pipeline, follower.spec.path, follower.spec.mode,
                       at.bronze_version if at else None, at.epoch if at else None, rows, lag.versions, lag.seconds,
                       sum(r.cross_partition_keys for _, r in steps), steps,
                       counted(SparkReader(follower.session), follower.config).count)


def _silver(args: argparse.Namespace) -> Any:
    """The pipeline's silver follower, under the pipeline's writer lock (no run of it may write meanwhile)."""
    from ingestion.errors import ConfigError
    from ingestion.silver.follower import SilverFollower

    config, spark = pipeline_session(args.pipeline)
    route = getattr(args, "route", None)
    if config.routing is not None:
        config = _route(config, route)
    elif route:
        raise ConfigError(f"{config.file}: --route is for a routed pipeline (routing:), got {route!r}")
    if config.silver is None:
        raise ConfigError(f"{config.file}: pipeline {config.name!r} has no 'silver' section (docs/cdc.md)")
    return SilverFollower(spark, config)


def _route(config: Any, route: str | None) -> Any:
    """The config of the route `--route` names (by its value or its table), whose silver section is the route's."""
    from ingestion.errors import ConfigError

    silvers = config.route_silvers()
    table = route if route in silvers else config.route_table(route) if route else None
    if table not in silvers:
        raise ConfigError(f"{config.file}: key 'routing.silver' keeps a silver per route: name one with --route "
                          f"(one of {sorted(config.routing.silver)}), got {route!r}")
    return silvers[table]


def _locked(follower: Any, work: Callable[[], Any]) -> Any:
    from ingestion.stream.lock import WriterLock

    lock = WriterLock(follower.config.name, follower.config.checkpoint_path, follower.session,
                      follower.config.spark)
    lock.acquire()
    try:
        return work()
    finally:
        lock.release()
