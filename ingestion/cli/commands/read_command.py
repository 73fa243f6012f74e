"""The read-only commands: ingest status, history and verify (the tables against Kafka, silver against bronze's
fold, through delta-rs and DuckDB or Spark) and ingest report (a run's batches from MLflow)."""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
from dataclasses import asdict
from typing import Any

from ingestion.cli.common import all_valid, load, read_only, spark_session

log = logging.getLogger("ingestion")

# `ingest verify`'s exit code when the tables are exact but change records of a silver pipeline sit in quarantine
# (silver misses them): neither 0 (nothing to do) nor 1 (a violation), docs/cdc.md.
QUARANTINED_CHANGES = 3


def show_status(args: argparse.Namespace) -> int:
    """Each pipeline's status; where no broker answers, the tables' side alone (lag unknown), a line on stderr
    naming the pipelines and the address, and exit 1. Brokers that did not answer are not asked again for the
    next pipeline (each wait is `source.brokerTimeout`)."""
    from dataclasses import asdict

    from ingestion.errors import KafkaUnreachableError
    from ingestion.kafka.settings import bootstrap_servers
    from ingestion.ops import status
    from ingestion.stream import context

    configs = [load(args.pipeline)] if args.pipeline else all_valid()
    unreachable: dict[str, str] = {}  # bootstrap.servers -> why no broker answered there
    found = []
    for config in configs:
        servers = bootstrap_servers(config)
        answer = None
        if servers not in unreachable:
            try:
                answer = functools.partial(_status_of, ctx=context.resolve(config))
            except KafkaUnreachableError as exc:
                unreachable[servers] = str(exc)
        if answer is None:
            answer = functools.partial(status.offline_status, config=config, kafka_error=unreachable[servers])
        found.append(read_only(args, answer, config))
    if args.json:
        print(json.dumps([asdict(s) for s in found], indent=2))
    else:
        print("\n\n".join(status.render(s) for s in found))
    for reason in unreachable.values():
        names = ", ".join(s.pipeline for s in found if s.kafka_error == reason)
        print(f"error: {names}: lag unknown, the tables' side only: {reason}", file=sys.stderr)
    return 1 if unreachable else 0


def _status_of(reader: Any, *, ctx: Any) -> Any:
    from ingestion.ops import status

    return status.pipeline_status(reader, ctx)


def show_history(args: argparse.Namespace) -> int:
    from ingestion.ops import history

    config = load(args.pipeline)
    if config.routing is not None:  # a table per route, each with versions of its own
        tables = read_only(args, lambda reader: history.by_table(reader, config), config)
        if args.json:
            print(json.dumps({t: json.loads(history.to_json(r)) for t, r in tables.items()}, indent=2))
        else:
            print("\n\n".join(f"table {t}:\n{history.render(r)}" for t, r in tables.items()))
        return 0
    if args.json:
        print(history.to_json(read_only(args, lambda reader: history.history(reader, config), config)))
        return 0
    records, restorable = read_only(args, lambda reader: (history.history(reader, config),
                                                           history.restorable(reader, config)), config)
    print(history.render(records))
    print(restorable)
    return 0


def verify_pipeline(args: argparse.Namespace) -> int:
    from ingestion.ops import verify
    from ingestion.stream import context

    ctx = context.resolve(load(args.pipeline))
    result = read_only(args, lambda reader: verify.audit(reader, ctx), ctx.config)
    # the silver tables to check: the pipeline's, or those of a routed pipeline's routes that have a table
    silvers = {"": ctx.config} if ctx.config.silver is not None else _route_silvers(ctx.config)
    if not silvers:
        print(json.dumps(result.to_json(), indent=2) if args.json else verify.render(result))
        return 0 if result.ok else 1
    from ingestion.delta.reader import JvmFreeReadError
    from ingestion.silver import audit, quarantined

    found = {table: _silver_audit(args, config) for table, config in silvers.items()}
    try:
        held = quarantined.quarantined_changes(ctx.config)
    except JvmFreeReadError as exc:
        log.warning("%s; counting the quarantined change records with Spark", exc)
        held = read_only(args, lambda reader: quarantined.counted(reader, ctx.config), ctx.config)
    if args.json:
        shown = found[""].to_json() if "" in found else {t: a.to_json() for t, a in found.items()}
        print(json.dumps({**result.to_json(), "silver": shown, "quarantined_changes": asdict(held)}, indent=2))
    else:
        print(verify.render(result))
        for each in found.values():
            print(audit.render(each))
        print(f"silver {', '.join(a.path for a in found.values())}: {held.render(ctx.config.name)}")
    if not (result.ok and all(a.ok for a in found.values())):
        return 1
    return QUARANTINED_CHANGES if held.count else 0


def _route_silvers(config: Any) -> dict[str, Any]:
    """A routed pipeline's route silvers (`routing.silver`) whose route tables exist, by route table."""
    from ingestion.delta import routed

    made = routed.route_tables(config)
    return {table: route for table, route in config.route_silvers().items() if table in made}


def _silver_audit(args: argparse.Namespace, config: Any) -> Any:
    """Silver against bronze's fold: in DuckDB over delta-rs's reads (no JVM), else (`--reader spark`, or a table
    delta-rs cannot read, a fold DuckDB cannot compute: said in one line) with Spark."""
    from ingestion.delta.reader import JvmFreeReadError
    from ingestion.silver import audit, rs_audit
    from ingestion.silver.fold_sql import NotInDuckDB

    if args.reader != "spark":
        try:
            return rs_audit.audit(config)
        except (JvmFreeReadError, NotInDuckDB) as exc:
            log.warning("%s: silver's fold cannot be checked without a JVM (%s); checking it with Spark", config.name,
                        exc)
    return audit.audit(spark_session(f"ingest-{config.name}", [config]), config)


def write_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ingestion.ops import report
    from ingestion.paths import state_dir

    config = load(args.pipeline)
    output = Path(args.output) if args.output else state_dir() / "reports" / f"{config.name}.png"
    print(report.write_png(config, output, args.run))
    return 0
