"""Going back over what was ingested: ingest replay (a Kafka range read again, only its missing records
written) and ingest rewind (bronze and quarantine restored to an earlier version)."""

from __future__ import annotations

import argparse

from ingestion.cli.common import load, pipeline_session, refuse_routed, spark_session


def replay_range(args: argparse.Namespace) -> int:
    from ingestion.ops import replay
    from ingestion.stream import context

    config = load(args.pipeline)
    refuse_routed(config, "replay")
    ctx = context.resolve(config)
    replay.check_positions(ctx, args.topic, args.start, args.end)  # a wrong topic or position: before a JVM
    spark = spark_session(f"ingest-{config.name}", [config])
    r = replay.replay(spark, ctx, start=args.start, end=args.end, topic=args.topic)
    print(f"{r.read} records read, {r.already_present} already present, {r.written} written to bronze, "
          f"{r.quarantined} quarantined (bronze version {r.bronze_version})")
    return 0


def rewind_tables(args: argparse.Namespace) -> int:
    import datetime as dt

    from ingestion.ops import rewind

    refuse_routed(load(args.pipeline), "rewind")
    config, spark = pipeline_session(args.pipeline)
    when = dt.datetime.fromisoformat(args.to_timestamp) if args.to_timestamp else None
    r = rewind.rewind(spark, config, to_version=args.to_version, to_timestamp=when)
    print(rewind.render(r, args.pipeline))
    return 0
