"""ingest maintain: OPTIMIZE, VACUUM and checkpoint a pipeline's tables (or every pipeline's)."""

from __future__ import annotations

import argparse

from ingestion.cli.common import load, one_or_all, spark_session


def maintain_tables(args: argparse.Namespace) -> int:
    from ingestion.ops.maintain import maintain

    configs = one_or_all(args, load)
    both = not args.optimize and not args.vacuum
    spark = spark_session("ingest-maintain", configs)
    for config in configs:
        report = maintain(spark, config, optimize=both or args.optimize, vacuum=both or args.vacuum,
                          dry_run=args.dry_run)
        print("\n".join(report.lines))
    return 0
