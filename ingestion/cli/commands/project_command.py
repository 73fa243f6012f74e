"""A project and its tools: ingest new (the folder layout), init (pipeline files from the broker and registry),
package (a spark-submit job), jars (the JVM's jars) and demo."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ingestion.cli.common import load
from ingestion.errors import IngestionError


def new_project(args: argparse.Namespace) -> int:
    from ingestion.ops import project

    folder = Path(args.folder)
    for placed in project.lay_out(folder):
        state = "made" if placed.made else "exists, left as it is"
        print(f"{placed.path}{'/' if placed.path.is_dir() else ''}: {state}")
    where = "" if folder.resolve() == Path.cwd() else f"cd {folder}; "
    print(f"next: {where}ingest kafka start (or set KAFKA_BOOTSTRAP_SERVERS in conf/defaults.yaml), then "
          "ingest init <topic> for each topic")
    return 0


def init_pipelines(args: argparse.Namespace) -> int:
    from ingestion.ops import init

    failed = 0
    drafts = []
    for topic in args.topic:
        try:
            drafts.append(init.draft(topic))
        except IngestionError as exc:
            failed += 1
            print(f"error: {exc}", file=sys.stderr)
    for draft in drafts:
        if args.dry_run:
            for path, text in (*draft.files, (draft.path, draft.text)):
                print(f"# {path}\n{text}")
    written = [] if args.dry_run else init.write(drafts)
    for draft in drafts:
        if not args.dry_run:
            for path in (*(path for path, _ in draft.files), draft.path):
                print(f"{path}: {'written' if path in written else 'exists, left as it is'}")
    if new := sum(draft.path in written for draft in drafts):
        print(f"next: ingest onboard <name> for each, or ingest onboard --all ({new} new)")
    return 1 if failed else 0


def package_job(args: argparse.Namespace) -> int:
    from ingestion.config import load_all
    from ingestion.ops import package

    configs = [load(name) for name in args.pipeline] if args.pipeline else load_all()[0]
    bundle = package.build(Path(args.out), [location for c in configs for location in c.locations],
                           spark_version=args.spark_version)
    print(f"{bundle.archive}: the ingestion package, for --py-files; for Spark {bundle.spark_line}")
    print(f"{bundle.entry}: the main file for spark-submit; {len(bundle.jars)} jars in {bundle.jars[0].parent}")
    pipeline = args.pipeline[0] if len(args.pipeline) == 1 else "PIPELINE.yaml"
    print("run a pipeline on the cluster (its Python packages on every node, docs/cluster.md):")
    print("  " + package.shell_line(bundle.submit_command(args.master, ["run", pipeline])))
    return 0


def resolve_jars(args: argparse.Namespace) -> int:
    from ingestion.runtime import jars

    for artifacts in (*jars.all_sets(), *((jars.DEBEZIUM_JARS,) if args.debezium else ())):
        print(f"{artifacts.name}: {len(jars.resolve(artifacts))} jars in {artifacts.folder(jars.jar_cache())}")
    print(f"helper: {jars.helper_jar()}")
    return 0


def demo(args: argparse.Namespace) -> int:
    from ingestion.dev.demo import run_demo

    return run_demo(records=args.records, keep_servers=args.keep_servers)
