"""What a pipeline needs before its first batch: its schemas (resolved against the table's columns) and its
tables, created with the schemas of the rows the decoder produces. Used by `run`, `onboard`, `replay` and the
quarantine re-decode alike."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from ingestion import kafka
from ingestion.columns import METADATA_COLUMNS
from ingestion.config import PipelineConfig
from ingestion.decode import bronze, expectations
from ingestion.decode.resolver import SchemaResolver
from ingestion.decode.spec import DecodeSpec
from ingestion.delta import catalog, tables
from ingestion.delta.reader import JvmFreeReadError
from ingestion.delta.rs_tables import TableState
from ingestion.delta.tables import TablePlan
from ingestion.errors import SchemaError
from ingestion.schema import protobuf_schemas
from ingestion.silver.spec import SilverSpec
from ingestion.stream.context import PipelineContext

log = logging.getLogger(__name__)


# How many of each partition's earliest records name a Protobuf table's message when its file leaves it open.
SAMPLE_PER_PARTITION = 5


def resolver(spark: SparkSession | None, ctx: PipelineContext, also: list[str] | None = None,
             table: TableState | None = None) -> SchemaResolver:
    """The pipeline's schemas (registry or schemas/ folder) for the topics the context reads (and `also` these),
    checked against the table's current columns (`table`, as the caller read it, else read with delta-rs, or with
    `spark` where delta-rs cannot); a SchemaError names the pipeline file and the subject(s)."""
    config = ctx.config
    topics = tuple(sorted(set(ctx.topics) | set(also or ())))
    payload, message = bronze_now(spark, config, table)
    try:
        return SchemaResolver(config, ctx.schemas, table_payload=payload, topics=topics, table_message=message,
                              sample=earliest_records(ctx))
    except SchemaError as exc:
        subjects = config.value_subjects(topics)
        where = (f"key 'value.schemaFile' ({config.value.schema_file!r})" if config.value.schema_file else
                 f"key 'value.subject' ({subjects[0]!r})" if len(subjects) == 1 else
                 f"subjects {subjects} of {config.reads}")
        raise SchemaError(f"{config.file}: {where}: {exc}") from None


def bronze_now(spark: SparkSession | None, config: PipelineConfig,
               state: TableState | None = None) -> tuple[T.StructType | None, str]:
    """Bronze's payload columns now (None without a table) and the Protobuf message it records ("" when none);
    from `state` when the caller read it already."""
    state = state or tables.table_state(spark, config, config.table_path)
    if state.schema is None:
        return None, ""
    payload = T.StructType([f for f in state.schema.fields if f.name not in METADATA_COLUMNS])
    return payload, state.properties.get(protobuf_schemas.TABLE_PROPERTY, "")


def earliest_records(ctx: PipelineContext) -> Callable[[], list[bytes]]:
    """The values of the earliest records of the topics the context reads (a few per partition, with the
    pipeline's own client settings), fetched when called: a new Protobuf table's message is the one they name
    when its file leaves it open (`decode.protobuf_message`)."""
    return lambda: kafka.earliest_values(ctx.kafka.client, ctx.partitions, per_partition=SAMPLE_PER_PARTITION,
                                         timeout=min(ctx.kafka.timeout, 10.0))


def bronze_properties(spec: DecodeSpec) -> dict[str, str]:
    """What bronze records of its rows when it is created: the Protobuf message it holds."""
    return {protobuf_schemas.TABLE_PROPERTY: spec.message_name} if spec.value_format == "protobuf" else {}


def table_properties(config: PipelineConfig) -> dict[str, str] | None:
    """Bronze's properties as delta-rs reads them (no JVM), None when it cannot."""
    try:
        return dict(tables.table_state(None, config, config.table_path).properties)
    except JvmFreeReadError:
        return None


def plans(spark: SparkSession | None, config: PipelineConfig, spec: DecodeSpec,
          states: Mapping[str, TableState] | None = None) -> list[TablePlan]:
    """Bronze's and quarantine's plans for the rows of this spec (`states`: the tables as the caller read them)."""
    return tables.plans(spark, config, *bronze.table_schemas(spec), bronze_properties(spec), states)


def check_rules(config: PipelineConfig, spec: DecodeSpec) -> expectations.Rules:
    """The pipeline's expectations compiled against bronze's columns of `spec`: a ConfigError names the file, the
    rule and the reason for an expression that does not parse, is not a condition or names an unknown column."""
    return expectations.compile_rules(config, bronze.table_schemas(spec)[0])


def check(ctx: PipelineContext) -> PipelineContext:
    """What `onboard --dry-run` checks, made by a run before it creates anything (a table, a checkpoint, a catalog
    entry, an MLflow run): the subjects or schema file resolve to columns the table can take, the expectations
    compile against bronze's columns, `sink.partitionBy` names bronze columns, the tables' retention settings hold,
    and the `silver:` section's key and ordering name bronze columns. Returns the context with the schemas and the
    tables' state it read (the run goes on with them: `prepare`), or as it was when only Spark can read a table
    (its checks then come at the query's start). One table's: a routed pipeline's are its routes' (`shape`)."""
    try:
        states = tables.table_states(None, ctx.config)  # read once: the checks and `prepare` take them
        schemas = resolver(None, ctx, table=states[ctx.config.table_path])
        check_rules(ctx.config, schemas.spec)
        found = plans(None, ctx.config, schemas.spec, states)
    except JvmFreeReadError as exc:
        log.debug("%s: %s; the tables are checked with Spark", ctx.name, exc)
        return ctx
    if ctx.config.silver is not None:
        SilverSpec.of(ctx.config).check(found[0].schema)
    return replace(ctx, checked=schemas, tables=states)


def prepare(ctx: PipelineContext) -> SchemaResolver | None:
    """Without a JVM, what a run needs before its first batch and can have before its session exists: the
    schemas (as the run's checks resolved them, `ctx.checked`), and the tables (created with delta-rs). Run while
    the JVM boots; None when only Spark can do it (a table delta-rs cannot read or make), which the query's start
    then does with the session. One table's: a routed pipeline's tables are made as routes come (`shape`)."""
    try:
        schemas = ctx.checked or resolver(None, ctx)
        made = make_tables(None, ctx.config, schemas.spec, ctx.tables if ctx.checked is not None else None)
    except JvmFreeReadError as exc:
        log.debug("%s: %s; the tables are checked with Spark", ctx.name, exc)
        return None
    return schemas if made else None


def make_tables(spark: SparkSession | None, config: PipelineConfig, spec: DecodeSpec,
                states: Mapping[str, TableState] | None = None) -> bool:
    """Create the tables that do not exist yet (as `states` say, else as read now): with delta-rs, or with `spark`
    (when given) where delta-rs refuses; whether both exist now. Catalog names are `ensure_tables`' work."""
    schemas = bronze.table_schemas(spec)
    return all(p.exists or p.made for p in tables.ensure_tables(spark, config, *schemas, bronze_properties(spec),
                                                                 states))


def ensure_tables(spark: SparkSession, config: PipelineConfig, spec: DecodeSpec, made: bool = False,
                  states: Mapping[str, TableState] | None = None) -> list[TablePlan]:
    """Create the tables that do not exist yet (unless `made`: `prepare` made them; `states`: as the caller read
    them), and register them under `sink.catalogTable` when they are not; the plans (with `exists` as it was
    before; none when `made`)."""
    for name, path in catalog.pipeline_names(config):  # a name taken elsewhere stops it before anything is made
        catalog.check(spark, name, path, config.file)
    found = [] if made else tables.ensure_tables(spark, config, *bronze.table_schemas(spec), bronze_properties(spec),
                                                 states)
    for done in catalog.register_pipeline(spark, config):
        if done.state == "registered":
            log.info("%s: registered %s in the catalog (%s)", config.name, done.name, done.path)
    return found


def learn_schemas(spark: SparkSession, config: PipelineConfig, schemas: SchemaResolver, decoded: DataFrame) -> bool:
    """connect-json (`replay`, the quarantine's re-decode): learn the schemas of the decoded records the table
    cannot hold yet, as a stream's batch does, and widen bronze where they need it; True when the spec changed
    (decode again). Other formats: False, nothing read (their versions come from the registry)."""
    if config.value.format != "connect-json":
        return False
    stats = bronze.batch_stats(decoded)
    unknown = {int(i) for s in stats for i in s["unknown_ids"]}
    if not unknown or not schemas.refresh(unknown, {s["topic"] for s in stats if s["unknown_ids"]},
                                          bronze.unknown_records(decoded, schemas.spec)):
        return False
    widen_table(spark, config, schemas)
    return True


def widen_table(spark: SparkSession, config: PipelineConfig, schemas: SchemaResolver,
                table: TableState | None = None) -> list[str]:
    """Widen bronze's columns where the reader schema widened them (sink.typeWidening); the columns widened.
    `table`: bronze as the caller read it (else read now)."""
    widened = schemas.widened_columns(bronze_now(spark, config, table)[0])
    if widened:
        tables.widen_columns(spark, config.table_path, widened)
        log.info("%s: widened bronze columns %s (Delta type widening) for schema version %s", config.name,
                 ", ".join(f"{name} to {kind.simpleString()}" for name, kind in widened),
                 max(schemas.spec.writer_schemas))
    return [name for name, _ in widened]
