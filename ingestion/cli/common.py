"""What several commands share: loading pipeline files (their secrets registered for masking first), a command's
Spark session, and the read-only commands' choice of reader (delta-rs, or Spark)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingestion.errors import IngestionError, UsageError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ingestion.config import PipelineConfig


def all_valid() -> list[PipelineConfig]:
    """Every pipeline file of conf/pipelines/; when any is bad, one line per bad file and an IngestionError (no
    pipeline runs: a typo must not leave a pipeline silently stopped)."""
    from ingestion.config import load_all, no_pipelines

    configs, errors = load_all()
    for config in configs:
        remember_secrets(config)
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    if errors:
        raise IngestionError(f"{len(errors)} pipeline file(s) are wrong (listed above); nothing was started")
    if not configs:
        raise IngestionError(no_pipelines())
    return configs


def one_or_all(args: argparse.Namespace, one: Callable[[str], PipelineConfig]) -> list[PipelineConfig]:
    """The pipelines of a command that takes `<pipeline>` or `--all`: `one(name)` (`load`, `load_to_write`), or
    every valid one (`all_valid`); a UsageError when neither or both are given."""
    if args.all and args.pipeline:
        raise UsageError(f"name one pipeline ({args.pipeline}) or pass --all, not both")
    if not args.all and not args.pipeline:
        raise UsageError("name one pipeline, or pass --all")
    return all_valid() if args.all else [one(args.pipeline)]


def load(name: str | Path) -> PipelineConfig:
    """The pipeline config by name or path, its secrets registered for masking before anything prints."""
    from ingestion.config import load_pipeline

    return remember_secrets(load_pipeline(name))


def load_to_write(name: str | Path) -> PipelineConfig:
    """`load`, for a command that makes or writes tables (run, onboard): refused, as `--all` refuses both files,
    when another file of conf/pipelines/ has its name, table, checkpoint or catalog table."""
    from ingestion.config import check_siblings

    return check_siblings(load(name))


def remember_secrets(config: PipelineConfig) -> PipelineConfig:
    from ingestion import security

    security.remember(config.secret_values())
    return config


def read_only(args: argparse.Namespace, answer: Callable[[Any], Any], config: PipelineConfig) -> Any:
    """A read-only command's answer through delta-rs (or through Spark when delta-rs cannot read a table), or
    through Spark with `--reader spark`."""
    from ingestion.delta.reads import SparkReader
    from ingestion.ops.readers import without_jvm

    def session() -> SparkSession:
        return spark_session(f"ingest-{config.name}", [config])

    if args.reader == "spark":
        return answer(SparkReader(session()))
    return without_jvm(answer, session, config.storage_options())


def spark_session(app_name: str, configs: Sequence[PipelineConfig], pools: Sequence[str] = (),
                  catalog: bool | None = None, record_classes: bool = False, streams: int = 1) -> SparkSession:
    """The Spark session of a command over these pipelines (`runtime.session.pipelines_session`)."""
    from ingestion.runtime.session import pipelines_session

    return pipelines_session(app_name, configs, pools, catalog, record_classes, streams)


def pipeline_session(name: str) -> tuple[PipelineConfig, SparkSession]:
    """The pipeline config by name or path and a Spark session for it."""
    config = load(name)
    return config, spark_session(f"ingest-{config.name}", [config])

