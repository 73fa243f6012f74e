"""ingest maintain: OPTIMIZE, VACUUM and checkpoint a pipeline's tables (or every pipeline's)."""

from __future__ import annotations

import argparse

from ingestion.cli.common import all_valid, load, spark_session
from ingestion.errors import UsageError


def maintain_tables(args: argparse.Namespace) -> int:
    from ingestion.ops.maintain import maintain

    if args.all == bool(args.pipeline):
        raise UsageError("name one pipeline, or pass --all")
    configs = all_valid() if args.all else [load(args.pipeline)]
    both = not args.optimize and not args.vacuum
    spark = spark_session("ingest-maintain", configs)
    for config in configs:
        report = maintain(spark, config, optimize=both or args.optimize, vacuum=both or args.vacuum,
                          dry_run=args.dry_run)
        print("\n".join(report.lines))
    return 0
