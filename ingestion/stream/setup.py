"""What a pipeline needs before its first batch: its schemas (resolved against the table's columns) and its
tables, created with the schemas of the rows the decoder produces. Used by `run`, `onboard`, `replay` and the
quarantine re-decode alike."""

from __future__ import annotations

import logging

from pyspark.sql import SparkSession

from ingestion.config import PipelineConfig
from ingestion.decode import bronze
from ingestion.decode.resolver import SchemaResolver
from ingestion.decode.spec import DecodeSpec
from ingestion.delta import catalog, reads, tables
from ingestion.delta.tables import TablePlan
from ingestion.errors import SchemaError
from ingestion.stream.context import PipelineContext

log = logging.getLogger(__name__)


def resolver(spark: SparkSession, ctx: PipelineContext, also: list[str] | None = None) -> SchemaResolver:
    """The pipeline's schemas (registry or schemas/ folder) for the topics the context reads (and `also` these),
    checked against the table's current columns; a SchemaError names the pipeline file and the subject(s)."""
    config = ctx.config
    topics = tuple(sorted(set(ctx.topics) | set(also or ())))
    try:
        return SchemaResolver(config, ctx.schemas, table_payload=reads.payload_columns(spark, config), topics=topics)
    except SchemaError as exc:
        subjects = config.value_subjects(topics)
        where = (f"key 'value.subject' ({subjects[0]!r})" if len(subjects) == 1 else
                 f"subjects {subjects} of {config.reads}")
        raise SchemaError(f"{config.file}: {where}: {exc}") from None


def plans(spark: SparkSession, config: PipelineConfig, spec: DecodeSpec) -> list[TablePlan]:
    """Bronze's and quarantine's plans for the rows of this spec."""
    return tables.plans(spark, config, *bronze.table_schemas(spark, spec))


def ensure_tables(spark: SparkSession, config: PipelineConfig, spec: DecodeSpec) -> list[TablePlan]:
    """Create the tables that do not exist yet, and register them under `sink.catalogTable` when they are not;
    the plans (with `exists` as it was before)."""
    for name, path in catalog.pipeline_names(config):  # a name taken elsewhere stops it before anything is made
        catalog.check(spark, name, path, config.file)
    found = tables.ensure_tables(spark, config, *bronze.table_schemas(spark, spec))
    for done in catalog.register_pipeline(spark, config):
        if done.state == "registered":
            log.info("%s: registered %s in the catalog (%s)", config.name, done.name, done.path)
    return found


def widen_table(spark: SparkSession, config: PipelineConfig, schemas: SchemaResolver) -> list[str]:
    """Widen bronze's columns where the reader schema widened them (sink.typeWidening); the columns widened."""
    widened = schemas.widened_columns(reads.payload_columns(spark, config))
    if widened:
        tables.widen_columns(spark, config.table_path, widened)
        log.info("%s: widened bronze columns %s (Delta type widening) for schema version %s", config.name,
                 ", ".join(f"{name} to {kind.simpleString()}" for name, kind in widened),
                 max(schemas.spec.writer_schemas))
    return [name for name, _ in widened]
