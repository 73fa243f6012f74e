"""ingest shadow start, status, diff, promote and drop: a range re-ingested beside the live table under another
config, compared record by record, promoted in one commit per table, or dropped (docs/reprocessing.md)."""

from __future__ import annotations

import argparse
import json

from ingestion.cli.common import load, spark_session


def shadow_start(args: argparse.Namespace) -> int:
    from ingestion.ops import shadow

    config, other = load(args.pipeline), load(args.config)
    plan = shadow.plan_start(config, other, start=args.start, end=args.end, name=args.name)  # refusals: no JVM
    spark = spark_session(f"ingest-{config.name}-shadow", [config])
    s = shadow.start(spark, config, plan)
    where = s.table if not s.routed else ", ".join(sorted(s.routes.values())) or "no route table"
    print(f"shadow {s.name} of {config.name}: {s.covers} "
          f"({', '.join(map(str, s.spans))}) re-ingested with {s.config_file}{' (completed)' if plan.resumed else ''}: "
          f"{s.rows} rows in {where}, {s.quarantined} quarantined in {s.quarantine}; next: "
          f"ingest shadow diff {args.pipeline} --name {s.name}")
    return 0


def shadow_status(args: argparse.Namespace) -> int:
    from ingestion.ops import shadow

    config = load(args.pipeline)
    found = shadow.status(config)
    print(json.dumps({"pipeline": config.name, "shadows": found}, indent=2) if args.json
          else shadow.render_status(config, found))
    return 0


def shadow_diff(args: argparse.Namespace) -> int:
    from ingestion.ops import shadow_diff as compare

    config = load(args.pipeline)
    d = compare.diff(config, args.name)
    print(json.dumps(d.to_json(), indent=2) if args.json else compare.render(d))
    return 0


def shadow_promote(args: argparse.Namespace) -> int:
    from ingestion.ops import shadow

    config = load(args.pipeline)
    found = shadow.get(config, args.name)  # an unknown shadow, a stale one: before a JVM
    if found.state == shadow.READY:
        shadow.check_still_current(config, found)
    spark = spark_session(f"ingest-{config.name}-promote", [config])
    p = shadow.promote(spark, config, args.name)
    if p.shadow.routed:
        print(f"shadow {args.name} promoted: " + (", ".join(f"{t} version {v}" for t, v in sorted(p.tables.items()))
                                                   or "no route table changed")
              + f", quarantine version {p.quarantine_version}; {p.config_file} now holds {p.shadow.config_file} (the "
              f"old file is {p.backup}); each table's version before its promote reads the old rows"
              + "".join(f"; {t}'s silver rebuilt from version {v}" for t, v in sorted(p.silvers.items())))
        return 0
    print(f"shadow {args.name} promoted: bronze version {p.bronze_version}, quarantine version "
          f"{p.quarantine_version}; {p.config_file} now holds {p.shadow.config_file} (the old file is {p.backup}); "
          f"the version before the promote reads the old rows (VERSION AS OF {(p.shadow.promoted_version or 1) - 1})"
          + (f"; silver rebuilt from bronze version {p.silver}" if p.silver is not None else ""))
    return 0


def shadow_drop(args: argparse.Namespace) -> int:
    from ingestion.ops import shadow

    config = load(args.pipeline)
    paths = shadow.shadow_paths(config, shadow.get(config, args.name))
    s = shadow.drop(config, args.name)
    print(f"shadow {s.name} of {config.name} dropped: {', '.join([*paths, s.quarantine])} removed")
    return 0
