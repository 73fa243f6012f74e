"""ingest onboard: check a pipeline against Kafka and its registry, then create its tables (or, dry, say what)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ingestion.cli.common import all_valid, load, spark_session
from ingestion.errors import UsageError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def onboard_pipelines(args: argparse.Namespace) -> int:
    from ingestion.ops.onboard import check_kafka, onboard
    from ingestion.runtime import metastore
    from ingestion.schema.registry import check_registry

    if args.all == bool(args.pipeline):
        raise UsageError("name one pipeline, or pass --all")
    configs = all_valid() if args.all else [load(args.pipeline)]
    contexts = []
    for config in configs:  # Kafka and the registry first: a refusal is told in seconds, before a JVM boots
        contexts.append(check_kafka(config, create_topic=args.create_topic))
        check_registry(config, subject_may_be_missing=args.register_schemas)
    # A dry run starts nothing: without the local catalog's Derby server running, catalog names are not checked.
    unchecked = args.dry_run and any(c.catalog_names is not None and not metastore.uses_external(c.spark)
                                     for c in configs) and metastore.running() is None
    sessions: list[SparkSession] = []

    def session() -> SparkSession:  # only when a step needs a JVM (catalog names, what delta-rs cannot do)
        if not sessions:
            sessions.append(spark_session("ingest-onboard", configs, catalog=False if unchecked else None))
        return sessions[0]

    for ctx in contexts:
        report = onboard(session, ctx, dry_run=args.dry_run, create_topic=args.create_topic,
                         register_schemas=args.register_schemas)
        print("\n".join(report.lines))
    if unchecked:
        print("catalog names not checked against the local catalog: its Derby server is not running, and a dry run "
              "starts nothing (`ingest metastore start` first to have them checked)")
    return 0
