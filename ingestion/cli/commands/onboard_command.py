"""ingest onboard: check a pipeline against Kafka and its registry, then create its tables (or, dry, say what)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ingestion.cli.common import load_to_write, one_or_all, spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def onboard_pipelines(args: argparse.Namespace) -> int:
    from ingestion.ops.onboard import check_kafka, onboard
    from ingestion.schema.registry import check_registry

    configs = one_or_all(args, load_to_write)
    contexts = []
    for config in configs:  # Kafka and the registry first: a refusal is told in seconds, before a JVM boots
        contexts.append(check_kafka(config, create_topic=args.create_topic))
        check_registry(config, subject_may_be_missing=args.register_schemas)
    sessions: list[SparkSession] = []

    # Made only when a step needs a JVM (catalog names, what delta-rs cannot do); never in a dry run.
    def session() -> SparkSession:
        if not sessions:
            sessions.append(spark_session("ingest-onboard", configs))
        return sessions[0]

    for ctx in contexts:
        report = onboard(session, ctx, dry_run=args.dry_run, create_topic=args.create_topic,
                         register_schemas=args.register_schemas)
        print("\n".join(report.lines))
    return 0
