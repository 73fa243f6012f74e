"""Land Kafka topics (Avro, Protobuf, JSON) in bronze Delta tables, exactly once, on Spark Structured Streaming.

The public API, for notebooks and orchestrators (Airflow, Dagster) that drive pipelines without the `ingest`
command. Everything else in the package is internal and may change between versions::

    from ingestion import get_session, load_pipeline, run_pipeline, verify

    config = load_pipeline("orders")                # conf/pipelines/orders.yaml, or a path
    spark = get_session("my-job", conf=config.spark)
    run_pipeline(spark, config, available_now=True)  # drain what Kafka holds now, exactly once (the same launch
                                                     # sequence as `ingest run`; spark=None boots its own JVM)
    assert verify(spark, config).ok

`get_session()` opens the persistent catalog (tables by name, `spark.table("bronze.orders")`; docs/catalog.md);
`get_session(catalog=False)` keeps Spark's in-memory one.

Imports are lazy: `import ingestion` starts no JVM and loads no Spark module.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ingestion.config import PipelineConfig, list_pipelines, load_pipeline
from ingestion.errors import ConfigError, IngestionError, KafkaAccessError, SchemaError

if TYPE_CHECKING:
    from ingestion.delta.ledger import BatchRecord
    from ingestion.ops.history import history
    from ingestion.ops.onboard import onboard
    from ingestion.ops.replay import replay
    from ingestion.ops.rewind import rewind
    from ingestion.ops.status import pipeline_status
    from ingestion.ops.verify import audit as verify
    from ingestion.runtime.session import get_catalog_session as get_session
    from ingestion.stream.launch import run as run_pipeline
    from ingestion.stream.launch import run_all as run_pipelines
    from ingestion.stream.launch import start as start_pipeline
    from ingestion.stream.pipeline import stop as stop_pipeline

__all__ = [
    "BatchRecord", "ConfigError", "IngestionError", "KafkaAccessError", "PipelineConfig", "SchemaError",
    "get_session", "history",
    "list_pipelines", "load_pipeline", "onboard", "pipeline_status", "replay", "rewind", "run_pipeline",
    "run_pipelines", "start_pipeline", "stop_pipeline", "verify",
]

# name -> (module, attribute), imported on first use
_LAZY = {
    "BatchRecord": ("ingestion.delta.ledger", "BatchRecord"),
    "get_session": ("ingestion.runtime.session", "get_catalog_session"),
    "history": ("ingestion.ops.history", "history"),
    "onboard": ("ingestion.ops.onboard", "onboard"),
    "pipeline_status": ("ingestion.ops.status", "pipeline_status"),
    "replay": ("ingestion.ops.replay", "replay"),
    "rewind": ("ingestion.ops.rewind", "rewind"),
    "run_pipeline": ("ingestion.stream.launch", "run"),
    "run_pipelines": ("ingestion.stream.launch", "run_all"),
    "start_pipeline": ("ingestion.stream.launch", "start"),
    "stop_pipeline": ("ingestion.stream.pipeline", "stop"),
    "verify": ("ingestion.ops.verify", "audit"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attribute = _LAZY[name]
        value = getattr(importlib.import_module(module), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ingestion' has no attribute {name!r}")
