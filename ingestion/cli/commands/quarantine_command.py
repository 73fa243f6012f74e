"""ingest quarantine list, show and reprocess: the records that could not be decoded."""

from __future__ import annotations

import argparse

from ingestion.cli.common import load, read_only, spark_session


def quarantine_list(args: argparse.Namespace) -> int:
    from ingestion.ops import quarantine

    config = load(args.pipeline)
    found = read_only(args, lambda reader: quarantine.groups(reader, config), config)
    print(quarantine.render_groups(found, config.quarantine_path))
    return 0


def quarantine_show(args: argparse.Namespace) -> int:
    from ingestion.ops import quarantine

    config = load(args.pipeline)
    found, present = read_only(args, lambda reader: (
        quarantine.records(reader, config, limit=args.limit, error_class=args.error_class),
        quarantine.groups(reader, config) if args.error_class else []), config)
    if args.error_class and not found:
        classes = sorted({g.error_class for g in present})
        print(f"no quarantined records of error class {args.error_class!r}; "
              + (f"the classes quarantined now: {', '.join(classes)}" if classes else "the quarantine is empty"))
        return 1 if classes else 0
    print(quarantine.render_records(found))
    return 0


def quarantine_reprocess(args: argparse.Namespace) -> int:
    from ingestion.ops import quarantine
    from ingestion.stream import context

    config = load(args.pipeline)
    ctx = context.resolve(config)
    spark = spark_session(f"ingest-{ctx.name}", [ctx.config])
    r = quarantine.redecode(spark, ctx)
    print(quarantine.render_redecode(r))
    return 0
