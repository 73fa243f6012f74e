"""`ingest onboard`: check everything a pipeline needs and create what is missing, or say what it would do.

Idempotent: a second run finds everything in place, changes nothing and says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from ingestion import kafka
from ingestion.config import PipelineConfig, duration_seconds
from ingestion.decode.resolver import SchemaResolver
from ingestion.delta import catalog, reads
from ingestion.errors import IngestionError, TopicNotFoundError
from ingestion.paths import schemas_dir
from ingestion.schema.registry import FolderSource, registry_client, registry_failure, source_for
from ingestion.stream import setup


@dataclass
class OnboardReport:
    lines: list[str] = field(default_factory=list)
    changes: int = 0

    def say(self, line: str, *, change: bool = False) -> None:
        self.lines.append(line)
        self.changes += int(change)


def onboard(spark: SparkSession, config: PipelineConfig, *, dry_run: bool = False, create_topic: bool = False,
            register_schemas: bool = False) -> OnboardReport:
    report = OnboardReport()
    report.say(f"config {config.file}: valid (pipeline {config.name!r}, {config.reads})")
    topics = _topics(config, report, dry_run=dry_run, create=create_topic)
    source = source_for(config)
    subjects = config.value_subjects(topics)
    if register_schemas:
        for subject in subjects:
            _register(config, subject, report, dry_run=dry_run)
        if dry_run:  # resolve from the files that would have been registered
            source = FolderSource()
    schemas = SchemaResolver(config, source, table_payload=reads.payload_columns(spark, config),
                             topics=tuple(topics))
    where = config.value.registry.get("url", "") or str(schemas_dir())
    writers = schemas.spec.writer_schemas
    reader_id = max(i for i, text in writers.items() if text == schemas.spec.reader_schema)
    shown = ", ".join(repr(s) for s in subjects)
    report.say(f"subject{'s' if len(subjects) > 1 else ''} {shown} at {where}: schema ids {sorted(writers)}; the "
               f"table follows id {reader_id}")
    # Before the tables are created, which registers them too (setup.ensure_tables).
    named = [(name, path, catalog.check(spark, name, path, config.file).state)
             for name, path in catalog.pipeline_names(config)]
    for plan in setup.plans(spark, config, schemas.spec):
        report.say(f"table {plan.path}:\n" + _indent(plan.schema.treeString()))
        extras = (f" partitioned by {list(plan.partition_by)}" if plan.partition_by else "") + (
            f" with properties {plan.properties}" if plan.properties else "")
        if plan.exists:
            report.say(f"  exists, left as it is{extras}")
        elif dry_run:
            report.say(f"  would be created{extras}", change=True)
        else:
            setup.ensure_tables(spark, config, schemas.spec)
            report.say(f"  created{extras}", change=True)
    for name, path, state in named:
        if state == "exists":
            report.say(f"catalog table {name}: registered for {path}, left as it is")
        elif dry_run:
            report.say(f"catalog table {name}: would be registered for {path}", change=True)
        else:
            catalog.register(spark, name, path, config.file)
            report.say(f"catalog table {name}: registered for {path}", change=True)
    if not report.changes:
        report.say("everything is in place: nothing to change")
    elif dry_run:
        report.say(f"dry run: {report.changes} change(s) not made")
    return report


def check_kafka(config: PipelineConfig, *, create_topic: bool = False) -> None:
    """What onboarding needs of Kafka, asked before a Spark session starts: the brokers answer and accept the
    login, and the topics may be read and the consumer group used (`kafka.check_pipeline`); a missing topic is fine
    when it is to be created. A KafkaAccessError names what Kafka refused and what to grant."""
    group = config.consumer_group if config.metrics.commit_offsets else None
    try:
        kafka.check_pipeline(config, group=group, missing_ok=create_topic)
    except TopicNotFoundError as exc:
        raise _missing(config, exc) from None


def _missing(config: PipelineConfig, exc: TopicNotFoundError) -> TopicNotFoundError:
    """Kafka's answer (with the closest existing topics) and how onboard would create the topic."""
    wanted = config.topic_settings
    said = str(exc).split("; create it")[0]
    return TopicNotFoundError(f"{said}; create it, or pass --create-topic ({wanted.partitions} partitions, "
                              f"replication {wanted.replication_factor} from topicSettings)")


def _topics(config: PipelineConfig, report: OnboardReport, *, dry_run: bool, create: bool) -> list[str]:
    """The topics the pipeline reads now, each reported, the missing named ones created with --create-topic."""
    settings = config.kafka_client_settings()
    if config.topic_pattern:
        found = kafka.matching_topics(settings, config.topic_pattern,
                                      duration_seconds(config.source.broker_timeout) or 15.0)
        shown = ", ".join(f"{t} ({len(p)} partitions)" for t, p in found.items()) or "none yet"
        report.say(f"topics matching {config.topic_pattern!r}: {shown}; topics created later are read from their "
                   "start" + ("; --create-topic creates nothing for a pattern" if create else ""))
        return list(found)
    for topic in config.topics:
        _topic(config, topic, report, dry_run=dry_run, create=create)
    return list(config.topics)


def _topic(config: PipelineConfig, topic: str, report: OnboardReport, *, dry_run: bool, create: bool) -> None:
    settings = config.kafka_client_settings()
    try:
        found = kafka.partitions(settings, topic)
        report.say(f"topic {topic!r}: exists with {len(found)} partitions")
        return
    except TopicNotFoundError as exc:
        missing = exc
    wanted = config.topic_settings
    if not create:
        raise _missing(config, missing)
    if dry_run:
        report.say(f"topic {topic!r}: would be created with {wanted.partitions} partitions, replication "
                   f"{wanted.replication_factor}", change=True)
        return
    kafka.create_topic(settings, topic, wanted.partitions, wanted.replication_factor)
    report.say(f"topic {topic!r}: created with {wanted.partitions} partitions, replication "
               f"{wanted.replication_factor}", change=True)


def _register(config: PipelineConfig, subject: str, report: OnboardReport, *, dry_run: bool) -> None:
    """Register the schema files of the subject (schemas/<subject>/) in the registry, oldest first (as their
    versions)."""
    from confluent_kafka.schema_registry import Schema

    if not config.value.registry:
        raise IngestionError("--register-schemas needs value.registry in the pipeline config")
    client = registry_client(config.value.registry)
    known = set(source_for(config).versions(subject).values()) if _has_subject(client, config, subject) else set()
    folder = schemas_dir() / subject
    for file in sorted(folder.glob("*.avsc"), key=lambda f: int(f.stem)):
        text = json.dumps(json.loads(file.read_text()), sort_keys=True, separators=(",", ":"))
        if text in known:
            report.say(f"schema {file}: already registered under {subject!r}")
        elif dry_run:
            report.say(f"schema {file}: would be registered under {subject!r}", change=True)
        else:
            try:
                schema_id = client.register_schema(subject, Schema(file.read_text(), "AVRO"))
            except Exception as exc:
                failure = registry_failure(exc, config.value.registry, subject)
                if failure is not None:
                    raise failure from None
                raise
            report.say(f"schema {file}: registered under {subject!r} as id {schema_id}", change=True)


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
