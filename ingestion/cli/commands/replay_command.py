"""Going back over what was ingested: ingest replay (a Kafka range read again, only its missing records
written) and ingest rewind (bronze and quarantine restored to an earlier version)."""

from __future__ import annotations

import argparse

from ingestion.cli.common import load, spark_session


def replay_range(args: argparse.Namespace) -> int:
    from ingestion import positions
    from ingestion.ops import replay
    from ingestion.stream import context

    start, end = positions.replay_range(args.start, args.end)  # each read by argparse; together: before Kafka
    config = load(args.pipeline)
    ctx = context.resolve(config)
    replay.check_positions(ctx, args.topic, start, end)  # a wrong topic or position: before a JVM
    spark = spark_session(f"ingest-{config.name}", [config])
    r = replay.replay(spark, ctx, start=start, end=end, topic=args.topic)
    where = (f"bronze version {r.bronze_version}" if config.routing is None else
             "route tables: " + (", ".join(f"{t} {n}" for t, n in r.tables.items()) or "none written"))
    print(f"{r.read} records read, {r.already_present} already present, {r.written} written to "
          f"{'bronze' if config.routing is None else 'route tables'}, {r.quarantined} quarantined ({where})")
    return 0


def rewind_tables(args: argparse.Namespace) -> int:
    from ingestion.ops import rewind
    from ingestion.stream.lock import WriterLock

    config = load(args.pipeline)
    rewind.check_target(config, args.to_version)  # a routed pipeline's --to-version: before a JVM
    WriterLock(config.name, config.checkpoint_path, settings=config.spark).probe()  # a running pipeline: likewise
    rewind.check_version(config, args.to_version)  # a version the table does not have: likewise
    spark = spark_session(f"ingest-{config.name}", [config])
    r = rewind.rewind(spark, config, to_version=args.to_version, to_timestamp=args.to_timestamp)
    print(rewind.render(r, args.pipeline))
    return 0
