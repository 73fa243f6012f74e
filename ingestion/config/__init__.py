"""Typed, frozen pipeline configs read from YAML: unknown keys, wrong types and contradictions are rejected.

Every error names the file, the key (dotted path) and the offending value. `${VAR}` and `${VAR:-default}` are
replaced from the environment, so secrets stay out of files; `redacted()` hides them again for printing.

    model.py       the config types (frozen dataclasses, the YAML key of each field) and what follows from them
    coerce.py      YAML values to those types: wrong types, unknown and missing keys refused
    checks.py      what types cannot show: contradictions, values Spark or Kafka would refuse later (CHECKS)
    conditions.py  a SQL condition of the file is exactly one row-level condition (DuckDB's parse tree)
    loader.py      files, defaults files, ${VAR} interpolation, deprecated keys; load_pipeline, load_all

Inside the package imports go loader -> checks -> (coerce | model); outside it, only to `security` and the modules
below it (errors, paths, storage, retention, units), as docs/architecture.md#layer-rules and pyproject.toml's
import-linter contracts say. A new section is a dataclass in model.py (a field of PipelineConfig) and a check
function in checks.py's CHECKS.
"""

from __future__ import annotations

from ingestion.config.checks import check_retention
from ingestion.config.loader import (
    DEFAULTS_FILE,
    DEPRECATED_KEYS,
    check_siblings,
    inherited,
    list_pipelines,
    load_all,
    load_pipeline,
    no_pipelines,
    parse_pipeline,
)
from ingestion.config.model import (
    Expectation,
    KeyFormat,
    MaintenanceOptions,
    MetricsOptions,
    PipelineConfig,
    PrometheusOptions,
    RoutingOptions,
    SilverOptions,
    SinkOptions,
    SourceOptions,
    TopicOptions,
    ValueFormat,
    route_name,
)
from ingestion.units import duration_seconds  # stream.maintenance imports it from here

__all__ = [
    "DEFAULTS_FILE",
    "DEPRECATED_KEYS",
    "Expectation",
    "KeyFormat",
    "MaintenanceOptions",
    "MetricsOptions",
    "PipelineConfig",
    "PrometheusOptions",
    "RoutingOptions",
    "SilverOptions",
    "SinkOptions",
    "SourceOptions",
    "TopicOptions",
    "ValueFormat",
    "check_retention",
    "check_siblings",
    "duration_seconds",
    "inherited",
    "list_pipelines",
    "load_all",
    "load_pipeline",
    "no_pipelines",
    "parse_pipeline",
    "route_name",
]
