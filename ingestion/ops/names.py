"""The short SQL names of pipelines' tables (for pipelines without `sink.catalogTable`), in a module of their own:
`ingest sql` answered without a JVM imports it without importing Spark."""

from __future__ import annotations

import re

from ingestion.config import PipelineConfig


def table_name(config: PipelineConfig, suffix: str = "") -> str:
    """The SQL name of a pipeline's table: its name with anything but letters, digits and _ turned into _."""
    return re.sub(r"\W", "_", config.name) + suffix
