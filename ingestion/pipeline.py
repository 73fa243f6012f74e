"""Wiring one pipeline: Kafka source -> foreachBatch(BronzeWriter) -> checkpoint, with metrics per batch."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from importlib import metadata

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from ingestion import checkpoint, ledger, source
from ingestion.config import PipelineConfig
from ingestion.decode import DecodeSpec
from ingestion.errors import IngestionError
from ingestion.metrics import RunMetrics
from ingestion.paths import schemas_dir
from ingestion.schemas import canonical_json, load_subject
from ingestion.sink import BatchResult, BronzeWriter

log = logging.getLogger(__name__)

# How one of our errors raised on an executor or in foreachBatch appears in Spark's failure text.
_OUR_ERROR = re.compile(r"^\s*ingestion\.errors\.\w+: (.*)$")


def decode_spec(config: PipelineConfig) -> DecodeSpec:
    """The writer schemas (every version of the subject) and the reader schema (the newest), from `schemas/`."""
    subject = load_subject(schemas_dir(), config.value.subject)
    return DecodeSpec(writer_schemas=dict(subject.versions), reader_schema=canonical_json(subject.latest),
                      max_bytes=config.value.max_bytes, fail_fast=config.sink.on_error == "fail",
                      key_format=config.key.format)


@dataclass
class RunningPipeline:
    config: PipelineConfig
    query: StreamingQuery
    app_id: str
    metrics: RunMetrics | None
    batches: list[BatchResult]


def start(spark: SparkSession, config: PipelineConfig, *, available_now: bool = False,
          with_metrics: bool = True) -> RunningPipeline:
    """Start the streaming query of one pipeline and return at once."""
    spec = decode_spec(config)
    location = config.checkpoint_path
    resumed = checkpoint.has_progress(spark, location)
    app_id = checkpoint.app_id(spark, location, config.name)
    starting = None if resumed else _resume_from_table(spark, config)
    log.info("%s: %s checkpoint %s, txnAppId %s%s", config.name, "resuming" if resumed else "new", location,
             app_id, f", starting from the table's offsets {starting}" if starting else "")
    metrics = _start_metrics(config, app_id, available_now, starting) if with_metrics else None
    batches: list[BatchResult] = []

    def on_batch(result: BatchResult) -> None:
        batches.append(result)
        if metrics is not None and result.committed:
            metrics.log(result.batch_id, {
                "rows": result.rows, "quarantined_rows": result.quarantined,
                "rows_per_second": result.rows / max(result.seconds, 1e-9),
                "batch_duration_ms": result.seconds * 1000, "table_version": float(result.version or 0),
            })

    writer = BronzeWriter(config=config, app_id=app_id, spec=spec, on_batch=on_batch)
    stream = (source.read_stream(spark, config, starting).writeStream
              .queryName(config.name).foreachBatch(writer).option("checkpointLocation", location))
    stream = stream.trigger(availableNow=True) if available_now else stream.trigger(processingTime=config.sink.trigger)
    return RunningPipeline(config, stream.start(), app_id, metrics, batches)


def run(spark: SparkSession, config: PipelineConfig, *, available_now: bool = False) -> RunningPipeline:
    """Run a pipeline until it stops: caught up (available-now), failed, or interrupted."""
    running = start(spark, config, available_now=available_now)
    status = "FAILED"
    try:
        running.query.awaitTermination()
        status = "FINISHED"
    except StreamingQueryException as exc:
        raise IngestionError(f"pipeline {config.name!r} failed: {failure_reason(exc)}") from None
    except KeyboardInterrupt:
        running.query.stop()
        status = "KILLED"
    finally:
        if running.metrics is not None:
            running.metrics.finish(status)
    return running


def failure_reason(exc: Exception) -> str:
    """The line of a Spark failure that says why (a DecodeError names topic, partition and offset)."""
    lines = str(exc).splitlines()
    for line in lines:
        found = _OUR_ERROR.search(line)
        if found:
            return found.group(1)
    return lines[0] if lines else repr(exc)


def _resume_from_table(spark: SparkSession, config: PipelineConfig) -> str | None:
    """With no checkpoint progress but offsets recorded in the table, resume after them, not at startingOffsets:
    a lost checkpoint must cause neither duplicates nor a gap."""
    recorded = ledger.next_offsets(ledger.history(spark, config.table_path))
    if not recorded:
        return None
    from confluent_kafka.admin import AdminClient

    topics = AdminClient(config.kafka_client_settings()).list_topics(config.topic, timeout=30).topics
    partitions = topics[config.topic].partitions if config.topic in topics else {}
    known = recorded.get(config.topic, {})
    # Partitions the table has never seen start at the earliest offset (-2), as Spark's JSON form allows.
    return json.dumps({config.topic: {str(p): known.get(str(p), -2) for p in sorted(partitions)}})


def _start_metrics(config: PipelineConfig, app_id: str, available_now: bool, starting: str | None) -> RunMetrics:
    import pyspark

    params = {
        "pipeline": config.name, "topic": config.topic, "table": config.table_path,
        "checkpoint": config.checkpoint_path, "txn_app_id": app_id,
        "starting_offsets": starting or config.source.starting_offsets,
        "trigger": "availableNow" if available_now else config.sink.trigger,
        "spark_version": pyspark.__version__, "delta_version": metadata.version("delta-spark"),
        "confluent_kafka_version": metadata.version("confluent-kafka"),
    }
    return RunMetrics.start(config.experiment, config.name, params)
