"""`ingest onboard`: check everything a pipeline needs and create what is missing, or say what it would do.

Idempotent: a second run finds everything in place, changes nothing and says so.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from pyspark.sql import SparkSession

from ingestion import kafka
from ingestion.config import PipelineConfig
from ingestion.decode.resolver import SchemaResolver
from ingestion.decode.spec import same_schema
from ingestion.delta import catalog, rs_reads, tables
from ingestion.delta.reader import JvmFreeReadError
from ingestion.errors import IngestionError, TopicNotFoundError
from ingestion.paths import schemas_dir
from ingestion.schema import json_schemas
from ingestion.schema.files import read_proto, suffix_of
from ingestion.schema.registry import FolderSource, registry_client, registry_failure, source_for
from ingestion.stream import handover, setup
from ingestion.stream.context import PipelineContext, resolve


class State(StrEnum):
    """What onboard found or did for one thing it checks."""

    FOUND = "found"  # in place (or a fact reported), nothing to do
    CHANGED = "changed"  # created or registered now
    WOULD_CHANGE = "would change"  # a dry run's change, not made


@dataclass(frozen=True)
class Step:
    """One thing onboard checked: what (`topic`, `table`, `catalog`, `schema`, `config`, `subject`), its name,
    the state, and the line shown for it."""

    what: str
    name: str
    state: State
    line: str


@dataclass
class OnboardReport:
    steps: list[Step] = field(default_factory=list)

    def say(self, what: str, name: str, line: str, state: State = State.FOUND) -> None:
        self.steps.append(Step(what, name, state, line))

    @property
    def changes(self) -> int:
        return sum(1 for s in self.steps if s.state is not State.FOUND)

    @property
    def lines(self) -> list[str]:
        return [s.line for s in self.steps]


def onboard(spark: SparkSession | Callable[[], SparkSession], target: PipelineConfig | PipelineContext, *,
            dry_run: bool = False, create_topic: bool = False, register_schemas: bool = False) -> OnboardReport:
    """Check and create what the pipeline needs. `spark`: a session, or a function that makes one, called only
    when a step needs a JVM (catalog names, a table delta-rs cannot read or make): tables are read and made with
    delta-rs (`delta.rs_tables`), so a pipeline without catalog names is onboarded without a JVM. A dry run never
    makes one: catalog names are reported unchecked, and a table delta-rs cannot read is an IngestionError."""
    session = _Session(spark, dry_run=dry_run)
    ctx = target if isinstance(target, PipelineContext) else check_kafka(target, create_topic=create_topic)
    config = ctx.config
    report = OnboardReport()
    report.say("config", str(config.file), f"config {config.file}: valid (pipeline {config.name!r}, {config.reads})")
    topics = _topics(ctx, report, dry_run=dry_run, create=create_topic)
    if config.source.start_from_group:
        _group_start(ctx, report)
    if config.routing is not None:  # each route's schemas and table come with its first record
        where = config.route_path(config.routing.table.format(pipeline=config.name, route="<route>"))
        report.say("routing", config.name, f"routing by {config.routing.by}: a table per route at {where} (and "
                   f"{config.quarantine_path} for records without a route), each made when its route's first record "
                   "comes (docs/routing.md)")
        if not report.changes:
            report.say("summary", config.name, "everything is in place: nothing to change")
        return report
    source = ctx.schemas
    subjects = config.value_subjects(topics)
    if register_schemas:
        for subject in subjects:
            _register(config, subject, report, dry_run=dry_run)
        if dry_run:  # resolve from the files that would have been registered
            source = FolderSource(suffix_of(config.value.format))
    payload, recorded = session.either(lambda spark: setup.bronze_now(spark, config))
    schemas = SchemaResolver(config, source, table_payload=payload, topics=tuple(topics), table_message=recorded,
                             sample=setup.earliest_records(ctx))
    where = config.value.registry.get("url", "") or str(schemas_dir())
    writers = schemas.spec.writer_schemas
    shown = ", ".join(repr(s) for s in subjects)
    message = f" (Protobuf message {schemas.spec.message_name})" if schemas.spec.message_name else ""
    if config.value.schema_file:  # json, connect-json: one schema file, no subject
        report.say("schema", config.value.schema_file, f"schema file {config.value.schema_file} "
                   f"(value.format {config.value.format}): the table's columns")
    else:
        follows = f"id {max(schemas.spec.reader_ids)}" if schemas.spec.reader_ids else "the merge of them"
        report.say("subject", ", ".join(subjects), f"subject{'s' if len(subjects) > 1 else ''} {shown} at {where}: "
                   f"schema ids {sorted(writers)}; the table follows {follows}{message}")
    rules = setup.check_rules(config, schemas.spec)
    if rules:
        report.say("expectations", config.name, f"expectations: {len(rules.rules)} rule(s) compile against the "
                   f"table's columns ({', '.join(f'{r.name}: {r.on_violation}' for r in rules.rules)})")
    # Before the tables are created, which registers them too (setup.ensure_tables). Asking the catalog takes a
    # JVM (Spark's catalog client), which a dry run does not start.
    named = [(name, path, "unchecked" if dry_run else catalog.check(session.get(), name, path, config.file).state)
             for name, path in catalog.pipeline_names(config)]
    found = session.either(lambda spark: setup.plans(spark, config, schemas.spec))
    for plan in found:
        extras = (f" partitioned by {list(plan.partition_by)}" if plan.partition_by else "") + (
            f" with properties {plan.properties}" if plan.properties else "")
        shown = f"table {plan.path}:\n" + _indent(plan.schema.treeString())
        if plan.exists:
            report.say("table", plan.path, f"{shown}\n  exists, left as it is{extras}")
        elif dry_run:
            report.say("table", plan.path, f"{shown}\n  would be created{extras}", State.WOULD_CHANGE)
        else:
            _create(session, config, schemas)
            report.say("table", plan.path, f"{shown}\n  created{extras}", State.CHANGED)
    if config.silver is not None:
        _silver(session, config, found[0].schema, report, ctx.partitions)  # bronze's columns, made now or found
    for name, path, state in named:
        if state == "exists":
            report.say("catalog", name, f"catalog table {name}: registered for {path}, left as it is")
        elif dry_run:
            report.say("catalog", name, f"catalog table {name}: would be registered for {path} (not checked "
                       "against the catalog: a dry run starts no JVM)", State.WOULD_CHANGE)
        else:
            catalog.register(session.get(), name, path, config.file)
            report.say("catalog", name, f"catalog table {name}: registered for {path}", State.CHANGED)
    if not report.changes:
        report.say("summary", config.name, "everything is in place: nothing to change")
    elif dry_run:
        report.say("summary", config.name, f"dry run: {report.changes} change(s) not made")
    return report


R = TypeVar("R")


class _Session:
    """A session made the first time a step needs one (never in a dry run)."""

    def __init__(self, spark: SparkSession | Callable[[], SparkSession], *, dry_run: bool = False) -> None:
        self._made = None if callable(spark) else spark
        self._make = spark if callable(spark) else None
        self._dry_run = dry_run

    def get(self) -> SparkSession:
        if self._made is None:
            assert self._make is not None
            self._made = self._make()
        return self._made

    def either(self, read: Callable[[SparkSession | None], R]) -> R:
        """`read` through delta-rs (given no session), else through Spark where delta-rs cannot."""
        try:
            return read(self._made)
        except JvmFreeReadError as exc:
            if self._dry_run and self._made is None:
                raise IngestionError(f"{exc}; a dry run starts no JVM to read it with Spark (`ingest onboard` "
                                     "without --dry-run does)") from None
            return read(self.get())


def _create(session: _Session, config: PipelineConfig, schemas: SchemaResolver) -> None:
    """The pipeline's tables (and catalog names): delta-rs makes what it can, a JVM only what it cannot."""
    if catalog.pipeline_names(config) or not session.either(
            lambda spark: setup.make_tables(spark, config, schemas.spec)):
        setup.ensure_tables(session.get(), config, schemas.spec)


def _silver(session: _Session, config: PipelineConfig, bronze: Any, report: OnboardReport,
            partitions: dict[str, list[int]]) -> None:
    """The silver section checked against bronze's columns (a wrong key is refused here, not at the first run);
    its table is made by the first run, from bronze (docs/cdc.md). Kafka's order set over several partitions is
    said to be approximate (`SilverSpec.approximate`)."""
    from ingestion.silver.spec import SilverSpec

    spec = SilverSpec.of(config)
    spec.check(bronze)
    exists = session.either(lambda spark: tables.table_state(spark, config, spec.path)).exists
    how = (f"keyed by {list(spec.key)}, {spec.mode}, envelope {spec.envelope}, "
           f"ordered by {spec.ordering(bronze)}")
    report.say("silver", spec.path, f"silver {spec.path}: {how}; " +
               ("exists, left as it is" if exists else "made from bronze by the first run"))
    warning = spec.approximate(partitions)
    if warning:
        report.say("silver", spec.path, warning)


def check_kafka(config: PipelineConfig, *, create_topic: bool = False) -> PipelineContext:
    """What onboarding needs of Kafka, asked before a Spark session starts: the brokers answer and accept the
    login, and the topics may be read and the consumer group used (`kafka.check_pipeline`); a missing topic is fine
    when it is to be created. A KafkaAccessError names what Kafka refused and what to grant. The context onboard
    goes on with (one listing of the topics)."""
    try:
        return resolve(config, check=True, missing_ok=create_topic)
    except TopicNotFoundError as exc:
        wanted = config.topic_settings
        raise exc.with_hint(f"create it, or pass --create-topic ({wanted.partitions} partitions, replication "
                            f"{wanted.replication_factor} from topicSettings)") from None


def _topics(ctx: PipelineContext, report: OnboardReport, *, dry_run: bool, create: bool) -> list[str]:
    """The topics the pipeline reads now, each reported, the missing named ones created with --create-topic."""
    config = ctx.config
    if config.topic_pattern:
        shown = ", ".join(f"{t} ({len(p)} partitions)" for t, p in ctx.partitions.items()) or "none yet"
        report.say("topic", config.topic_pattern, f"topics matching {config.topic_pattern!r}: {shown}; topics "
                   "created later are read from their start" +
                   ("; --create-topic creates nothing for a pattern" if create else ""))
        return ctx.topics
    wanted = config.topic_settings
    how = f"{wanted.partitions} partitions, replication {wanted.replication_factor}"
    for topic in config.topics:
        if topic in ctx.partitions:
            report.say("topic", topic, f"topic {topic!r}: exists with {len(ctx.partitions[topic])} partitions")
        elif dry_run:  # the brokers check it (a replication above their count, a topic policy): nothing made
            kafka.create_topic(ctx.kafka.client, topic, wanted.partitions, wanted.replication_factor,
                               validate_only=True)
            report.say("topic", topic, f"topic {topic!r}: would be created with {how}", State.WOULD_CHANGE)
        else:
            kafka.create_topic(ctx.kafka.client, topic, wanted.partitions, wanted.replication_factor)
            report.say("topic", topic, f"topic {topic!r}: created with {how}", State.CHANGED)
    return list(config.topics)


def _group_start(ctx: PipelineContext, report: OnboardReport) -> None:
    """Where a first run taking over from source.startFromGroup would start each partition, or that the table's
    offsets win."""
    group = ctx.config.source.start_from_group
    recorded = rs_reads.recorded_offsets(ctx.config)
    if recorded:
        report.say("group", group, f"source.startFromGroup {group!r}: ignored, the table records offsets and the "
                   "next run resumes from them")
        return
    report.say("group", group, "\n".join(handover.plan(ctx, strict=False).lines()))


def _register(config: PipelineConfig, subject: str, report: OnboardReport, *, dry_run: bool) -> None:
    """Register the schema files of the subject (schemas/<subject>/) in the registry, oldest first (as their
    versions)."""
    from confluent_kafka.schema_registry import Schema

    if not config.value.registry:
        raise IngestionError("--register-schemas needs value.registry in the pipeline config")
    client = registry_client(config.value.registry)
    known = set(source_for(config).versions(subject).values()) if _has_subject(client, config, subject) else set()
    folder = schemas_dir() / subject
    # Only the versions (`<id>.proto`): a file they import beside them is not one (docs/protobuf.md#schemas).
    for file in sorted([f for suffix in ("*.avsc", "*.proto", "*.json") for f in folder.glob(suffix)
                        if f.stem.isdigit()], key=lambda f: int(f.stem)):
        protobuf = file.suffix == ".proto"  # registered as its text; imports of own files are not registered
        kind = {".proto": "PROTOBUF", ".json": "JSON"}.get(file.suffix, "AVRO")
        if kind == "JSON":
            text = json_schemas.read_file(file)
        else:
            text = read_proto(file, schemas_dir()) if protobuf else json.dumps(json.loads(file.read_text()),
                                                                                 sort_keys=True, separators=(",", ":"))
        if any(same_schema(text, version) for version in known):
            report.say("schema", str(file), f"schema {file}: already registered under {subject!r}")
        elif dry_run:
            report.say("schema", str(file), f"schema {file}: would be registered under {subject!r}",
                       State.WOULD_CHANGE)
        else:
            try:
                schema_id = client.register_schema(subject, Schema(file.read_text(), kind))
            except Exception as exc:
                failure = registry_failure(exc, config.value.registry, subject)
                if failure is not None:
                    raise failure from None
                raise
            report.say("schema", str(file), f"schema {file}: registered under {subject!r} as id {schema_id}",
                       State.CHANGED)


def _has_subject(client: object, config: PipelineConfig, subject: str) -> bool:
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    try:
        client.get_versions(subject)  # type: ignore[attr-defined]
        return True
    except Exception as exc:
        failure = registry_failure(exc, config.value.registry, subject)
        if failure is not None:
            raise failure from None
        if isinstance(exc, SchemaRegistryError) and exc.http_status_code == 404:
            return False
        raise


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())
