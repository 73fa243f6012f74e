"""One command's picture of a pipeline, resolved once before a JVM starts and handed down.

`resolve` asks the brokers once for the topics and partitions the pipeline reads (and, for commands that write,
whether it may read them and commit to its consumer group), reads the Kafka settings of both clients once (TLS
material converted once), registers the config's secrets for masking, and picks the schema source. `start`,
`run`, the schema resolver, the resume positions, the progress total, `status`, `verify`, `replay` and `onboard`
all take the context: within one command they see one topic set. A pattern's topic set grows only where Spark's
own listing shows a new topic, a batch of it reaching the writer (`PipelineContext.saw`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ingestion import kafka, security, storage
from ingestion.config import PipelineConfig
from ingestion.decode.resolver import SchemaResolver
from ingestion.delta.rs_tables import TableState
from ingestion.errors import ConfigError, TopicNotFoundError
from ingestion.kafka import KafkaSettings
from ingestion.schema.registry import SchemaSource, source_for

log = logging.getLogger(__name__)


@dataclass
class PipelineContext:
    """What one command knows of a pipeline: its config, both clients' Kafka settings, the topics and partitions
    it reads (from the command's one listing, grown by `saw`) and its schema source."""

    config: PipelineConfig
    kafka: KafkaSettings
    partitions: dict[str, list[int]]  # topic -> partitions, sorted by topic
    schemas: SchemaSource
    checked: SchemaResolver | None = None  # the schemas a run's checks resolved (`launch.check_can_start`)
    # bronze's and quarantine's state by path as those checks read them (once), for the tables `setup.prepare` makes
    tables: Mapping[str, TableState] | None = None

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def topics(self) -> list[str]:
        return list(self.partitions)

    @property
    def group(self) -> str | None:
        """The consumer group offsets are committed to, or None when they are not (metrics.commitOffsets)."""
        return self.config.consumer_group if self.config.metrics.commit_offsets else None

    def saw(self, found: Mapping[str, Iterable[int]]) -> list[str]:
        """Record the topics and partitions a batch held (Spark's own listing found them); the topics new to the
        context, each logged once."""
        # A new mapping replaces the old one whole, never changed in place: the lag thread iterates the one it took.
        known = self.partitions
        new = sorted(set(found) - set(known))
        grown = {t: sorted(set(known.get(t, ())) | {int(p) for p in parts}) for t, parts in found.items()}
        if any(grown[t] != known.get(t) for t in grown):
            self.partitions = dict(sorted({**known, **grown}.items()))
        if new:
            log.info("%s: now reading %s (new since the start: %s)", self.name, ", ".join(self.partitions),
                     ", ".join(new))
        return new

    def audited(self, recorded: Iterable[str]) -> tuple[list[str], list[str]]:
        """The topics `status` and `verify` report: (those on the brokers: read now, or recorded by the ledger and
        still the pipeline's; those recorded that a pattern matched once and the brokers no longer have, logged)."""
        topics = sorted(set(self.partitions) | {t for t in recorded if self.config.reads_topic(t)})
        gone = [t for t in topics if t not in self.partitions]
        for topic in gone:
            log.warning("%s: topic %r is in the table's ledger but no longer on the brokers", self.name, topic)
        return [t for t in topics if t in self.partitions], gone


def resolve(config: PipelineConfig, *, check: bool = False, missing_ok: bool = False) -> PipelineContext:
    """The context of `config`, from one metadata request to the brokers. `check`: also what a writer needs
    (each topic may be read, the consumer group used; `kafka.check_pipeline`), so a pipeline that cannot run
    creates nothing. `missing_ok`: named topics that do not exist are left out (onboard creates them)."""
    security.remember(config.secret_values())
    check_former_quarantine(config)
    settings = kafka.resolve_settings(config)
    try:
        found = kafka.pipeline_partitions(config, settings, missing_ok=missing_ok)
    except TopicNotFoundError as exc:
        raise exc.with_hint(f"create it, or run `ingest onboard {config.name} --create-topic`") from None
    context = PipelineContext(config, settings, found, source_for(config))
    if check:
        kafka.check_pipeline(config, settings, found, context.group)
    return context


def check_former_quarantine(config: PipelineConfig) -> None:
    """A pipeline with `sink.table` keeps its quarantine beside bronze (`<sink.table>_quarantine`); one whose
    quarantine table was made at the former default place (under the state folder) is stopped with what to set,
    so no quarantined record is left behind unseen by `verify` and `quarantine reprocess`."""
    former = config.former_quarantine_path
    if former is None or storage.is_object_store(former) or not (Path(former) / "_delta_log").is_dir():
        return
    if storage.is_object_store(config.quarantine_path) or not (Path(config.quarantine_path) / "_delta_log").is_dir():
        raise ConfigError(f"{config.file}: the quarantine table of a pipeline with sink.table is now kept beside "
                          f"bronze ({config.quarantine_path}), but this pipeline's is at {former}; set "
                          f"sink.quarantineTable: {former} to keep it there, or move it")


def known(config: PipelineConfig, partitions: Mapping[str, list[int]] | None = None) -> PipelineContext:
    """A context whose topics are given instead of listed (no request to the brokers): `partitions`, else the
    config's named topics with none known yet."""
    found = dict(partitions) if partitions is not None else {t: [] for t in config.topics}
    return PipelineContext(config, kafka.resolve_settings(config), found, source_for(config))


def of(target: PipelineConfig | PipelineContext, *, check: bool = False) -> PipelineContext:
    """`target` itself when it is a context, else the context resolved from the config (the public API takes
    either)."""
    return target if isinstance(target, PipelineContext) else resolve(target, check=check)
