"""The pipeline config's types: frozen dataclasses, pure data, and what follows from them (paths, names).

Each field's key in the YAML file is its `key` metadata when the camelCase spelling differs from the Python name;
`coerce.build` reads that, so a new section is one dataclass here and one field of `PipelineConfig`.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ingestion import security, storage
from ingestion.paths import state_dir
from ingestion.units import duration_seconds, size_bytes

_SECRET = security.SECRET_KEY


def _key(name: str) -> dict[str, str]:
    """Field metadata: the key as written in the file, when it differs from the Python name."""
    return {"key": name}


@dataclass(frozen=True)
class SourceOptions:
    """Spark Kafka source options, under the names Spark documents."""

    starting_offsets: str = field(default="earliest", metadata=_key("startingOffsets"))
    starting_timestamp: int | None = field(default=None, metadata=_key("startingTimestamp"))
    starting_offsets_by_timestamp: str | None = field(default=None, metadata=_key("startingOffsetsByTimestamp"))
    max_offsets_per_trigger: int | None = field(default=None, metadata=_key("maxOffsetsPerTrigger"))
    fail_on_data_loss: bool = field(default=True, metadata=_key("failOnDataLoss"))
    min_partitions: int | None = field(default=None, metadata=_key("minPartitions"))
    # How long a command waits for the Kafka brokers to answer before it gives up (one line, exit 1).
    broker_timeout: str = field(default="15 seconds", metadata=_key("brokerTimeout"))
    # Take over from a consumer group: a new checkpoint of a table that records no offsets yet starts each
    # partition at this group's committed offset (partitions without one at startingOffsets).
    start_from_group: str = field(default="", metadata=_key("startFromGroup"))
    # Start from a group that still has members (another consumer still reading): refused unless true.
    start_from_active_group: bool = field(default=False, metadata=_key("startFromActiveGroup"))


@dataclass(frozen=True)
class ValueFormat:
    """How record values are encoded. `confluent`: magic byte 0, 4-byte big-endian schema id, Avro body.
    `avro`: the Avro body alone, written with the subject's newest version. `protobuf`: Confluent's Protobuf
    framing (magic byte, schema id, message indexes) and a Protobuf body (docs/protobuf.md). `jsonschema`:
    Confluent's JSON Schema framing (magic byte, schema id, JSON text); `json`: JSON text, its JSON Schema in
    `schemaFile`; `connect-json`: Kafka Connect's JsonConverter records with their embedded schema, the table's
    in `schemaFile` (docs/json.md)."""

    format: Literal["confluent", "avro", "protobuf", "jsonschema", "json", "connect-json"] = "confluent"
    subject: str = ""
    max_bytes: int = field(default=8 * 1024 * 1024, metadata=_key("maxBytes"))
    # auto: Spark's from_avro in the JVM for the records it can verify, Python (fastavro) for the rest;
    # jvm: the same, but refuse to start when the JVM path cannot be used; python: every record in Python.
    decoder: Literal["auto", "jvm", "python"] = "auto"
    # Schema Registry client settings (url, basic.auth.user.info, ssl.*); empty: the schemas/ folder.
    registry: Mapping[str, str] = field(default_factory=dict)
    # How each topic's subject is named when `subject` is not given, as Confluent's serializers name it:
    # TopicNameStrategy `<topic>-value`, RecordNameStrategy `<recordName>`, TopicRecordNameStrategy
    # `<topic>-<recordName>` (`recordName`: the record's full name, such as com.acme.Order).
    subject_name_strategy: Literal["TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy"] = field(
        default="TopicNameStrategy", metadata=_key("subjectNameStrategy"))
    record_name: str = field(default="", metadata=_key("recordName"))
    # format protobuf: the message the table holds (full name such as shop.v1.Order, or a unique simple name);
    # empty: the file's one message no other uses, else its first (docs/protobuf.md#which-message).
    message_name: str = field(default="", metadata=_key("messageName"))
    # format protobuf: a body with an unknown field (a number its message does not define, or a known one sent in
    # another wire type, which Protobuf reads as unknown and drops) is quarantined as UnknownFieldError.
    strict: bool = False
    # format json / connect-json: the table's schema file (a JSON Schema; a Kafka Connect schema for
    # connect-json), absolute or relative to the schemas folder.
    schema_file: str = field(default="", metadata=_key("schemaFile"))

    def subject_for(self, topic: str) -> str:
        """The subject whose versions wrote `topic`'s values: `subject` when given, else by the strategy."""
        if self.subject:
            return self.subject
        if self.subject_name_strategy == "RecordNameStrategy":
            return self.record_name
        if self.subject_name_strategy == "TopicRecordNameStrategy":
            return f"{topic}-{self.record_name}"
        return f"{topic}-value"


@dataclass(frozen=True)
class KeyFormat:
    """`none` (a null column), `bytes` (as is), `string` (UTF-8), `avro` (Confluent wire format, `subject`),
    `protobuf` (Confluent's Protobuf framing, `subject`, `messageName`)."""

    format: Literal["none", "bytes", "string", "avro", "protobuf"] = "bytes"
    subject: str = ""
    message_name: str = field(default="", metadata=_key("messageName"))

    def subject_for(self, topic: str) -> str:
        """The subject of `topic`'s Avro or Protobuf keys: `subject` when given, else `<topic>-key`
        (TopicNameStrategy)."""
        return self.subject or f"{topic}-key"


@dataclass(frozen=True)
class SinkOptions:
    # Where the tables and checkpoints of pipelines that name none go: <root>/tables/<name>,
    # <root>/tables/<name>_quarantine, <root>/checkpoints/<name> (default: the local state folder).
    root: str = ""
    table: str = ""
    checkpoint_location: str = field(default="", metadata=_key("checkpointLocation"))
    quarantine_table: str = field(default="", metadata=_key("quarantineTable"))
    partition_by: tuple[str, ...] = field(default=(), metadata=_key("partitionBy"))
    table_properties: Mapping[str, str] = field(default_factory=dict, metadata=_key("tableProperties"))
    trigger: str = "10 seconds"
    on_error: Literal["quarantine", "fail"] = field(default="quarantine", metadata=_key("onError"))
    # A new schema version that widens a column (int -> long, float -> double) widens bronze's column with Delta's
    # type widening (table feature typeWidening) and the stream goes on; false: such records are quarantined.
    type_widening: bool = field(default=True, metadata=_key("typeWidening"))
    # The tables' names in Spark's catalog (`db.table`; docs/catalog.md): bronze, and quarantine (by default the
    # same name with `_quarantine`). Empty: the tables are known by path only.
    catalog_table: str = field(default="", metadata=_key("catalogTable"))
    quarantine_catalog_table: str = field(default="", metadata=_key("quarantineCatalogTable"))
    # A batch of at most this many Kafka offsets is fetched, decoded and written by the driver without a Spark job
    # (docs/architecture.md#two-write-paths); 0: every batch is a Spark job.
    direct_write_max_offsets: int = field(default=1000, metadata=_key("directWriteMaxOffsets"))
    # The most offsets a run's start batches take in all: written by the driver while the JVM boots, and all of an
    # available-now run's backlog when it is at most this (no JVM then); 0: none
    # (docs/architecture.md#the-start-batch-the-first-records-before-the-jvm).
    start_batch_max_offsets: int = field(default=1_000_000, metadata=_key("startBatchMaxOffsets"))


def _namespace(name: str) -> str:
    """`db.` of a catalog name `db.table` (empty for a bare name)."""
    return name.rpartition(".")[0] + "." if "." in name else ""


@dataclass(frozen=True)
class TopicOptions:
    """How `ingest onboard --create-topic` creates the topic."""

    partitions: int = 3
    replication_factor: int = field(default=1, metadata=_key("replicationFactor"))


@dataclass(frozen=True)
class PrometheusOptions:
    """`ingest run`'s Prometheus endpoint (docs/operations.md#prometheus): off while `port` is 0."""

    port: int = 0
    host: str = "127.0.0.1"
    # How often the lag gauges are refreshed from Kafka's end offsets, batches or not.
    lag_interval: str = field(default="15 seconds", metadata=_key("lagInterval"))
    # A Pushgateway's URL: an `--available-now` run pushes its metrics there when it ends (empty: no push).
    pushgateway: str = ""


@dataclass(frozen=True)
class MetricsOptions:
    experiment: str = ""
    consumer_group: str = field(default="", metadata=_key("consumerGroup"))
    commit_offsets: bool = field(default=True, metadata=_key("commitOffsets"))
    prometheus: PrometheusOptions = field(default_factory=PrometheusOptions)


@dataclass(frozen=True)
class MaintenanceOptions:
    """`ingest maintain` and its optional schedule inside `ingest run` (docs/configuration.md#keys)."""

    # OPTIMIZE bin-packs small files into files of about this size (Delta's optimize.maxFileSize).
    target_file_size: str = field(default="128mb", metadata=_key("targetFileSize"))
    z_order_by: tuple[str, ...] = field(default=(), metadata=_key("zOrderBy"))
    # VACUUM's retention: the table's promised time-travel and rewind window (retention.py).
    vacuum_retention: str = field(default="168 hours", metadata=_key("vacuumRetention"))
    allow_short_retention: bool = field(default=False, metadata=_key("allowShortRetention"))
    # Inside `ingest run`: maintain after this many batches and/or this long since the last; neither: never.
    every_batches: int | None = field(default=None, metadata=_key("everyBatches"))
    every: str | None = None
    # Delta's auto compaction (delta.autoOptimize.autoCompact) after each commit, instead of or beside OPTIMIZE.
    auto_compact: bool = field(default=False, metadata=_key("autoCompact"))

    @property
    def target_bytes(self) -> int:
        return size_bytes(self.target_file_size) or 128 * 1024 * 1024

    @property
    def window_seconds(self) -> float:
        return duration_seconds(self.vacuum_retention) or 0.0


@dataclass(frozen=True)
class SilverOptions:
    """A current-state table kept from bronze (docs/cdc.md): one row per key (`upsert`) or per change (`history`)."""

    # Fields that identify a row: of the row itself (of `after`/`before` with the debezium envelope), dotted for
    # nested fields, or of the decoded Kafka key (`_kafka_key.id`). A tombstone's key comes from the Kafka key.
    key: tuple[str, ...] = ()
    mode: Literal["upsert", "history"] = "upsert"
    envelope: Literal["none", "debezium"] = "none"
    # `kafka`: Kafka order (offsets within a partition); or a field, e.g. source.lsn, ts_ms, updated_at. Unset (""):
    # the Debezium connector's own position with `envelope: debezium` (silver/order.py), else Kafka order.
    sequence_by: str = field(default="", metadata=_key("sequenceBy"))
    # A SQL condition on the bronze row that makes a change a delete (besides tombstones and debezium's `d`).
    delete_when: str = field(default="", metadata=_key("deleteWhen"))
    # Which of the row's own (top-level) fields silver keeps: only `columns`, or all but `exceptColumns`.
    columns: tuple[str, ...] = ()
    except_columns: tuple[str, ...] = field(default=(), metadata=_key("exceptColumns"))
    # History mode: a new row version only when one of these fields changes; other changes update it in place.
    track_history_on: tuple[str, ...] = field(default=(), metadata=_key("trackHistoryOn"))
    # A null in a change keeps the value the key's row holds (partial updates); a delete ends that.
    ignore_null_updates: bool = field(default=False, metadata=_key("ignoreNullUpdates"))
    # A SQL condition on the bronze row that makes it a truncate (debezium: op = 't' unless set).
    truncate_when: str = field(default="", metadata=_key("truncateWhen"))
    table: str = ""  # default: beside bronze, <sink.table>_silver
    catalog_table: str = field(default="", metadata=_key("catalogTable"))
    trigger: str = ""  # how often a streaming run merges what bronze committed since; default: sink.trigger
    # A step over at most this many new bronze rows is folded (DuckDB) and merged (delta-rs) by the driver,
    # without a Spark job (docs/cdc.md#two-engines-of-a-step); 0: every step is Spark's.
    direct_merge_max_changes: int = field(default=1_000_000, metadata=_key("directMergeMaxChanges"))


@dataclass(frozen=True)
class Expectation:
    """A data-quality rule on every bronze row (docs/expectations.md): a row violates it when `expect`, a Spark SQL
    boolean over the row's columns, is false or null. `warn`: the row lands and is counted; `quarantine`: the
    record goes to the quarantine table (`ExpectationFailed`) instead of bronze; `fail`: the batch stops, nothing
    of it committed."""

    name: str
    expect: str
    # `drop` is SDP's name (expect_or_drop) for what `quarantine` does here: the row leaves bronze, kept in quarantine
    on_violation: Literal["warn", "quarantine", "drop", "fail"] = field(default="warn", metadata=_key("onViolation"))

    def __post_init__(self) -> None:
        if self.on_violation == "drop":
            object.__setattr__(self, "on_violation", "quarantine")


ROUTE_PLACEHOLDERS = ("pipeline", "route")


def route_name(value: str) -> str:
    """A route's value as table names use it (`{route}`): lowercased, every character outside [a-z0-9_] `_`."""
    return re.sub(r"[^a-z0-9_]", "_", value.lower())


@dataclass(frozen=True)
class RoutingOptions:
    """One topic (or pattern) into a table per route (docs/routing.md): the route of a record is its record type's
    simple name (`recordName`), its topic, a top-level field of its value (or `_kafka_key`), or a header's value."""

    by: Literal["recordName", "topic", "field", "header"]
    route_field: str = field(default="", metadata=_key("field"))
    header: str = ""
    table: str = "{pipeline}_{route}"  # each route's table name
    tables: Mapping[str, str] = field(default_factory=dict)  # explicit table names of some routes
    # a current-state table over some routes' tables, by route value: each as a pipeline's `silver:` section
    silver: Mapping[str, SilverOptions] = field(default_factory=dict)

    def table_for(self, pipeline: str, value: str) -> str:
        """The table of a route value: `tables`' name for it (the value as read, or normalised), else `table`."""
        route = route_name(value)
        explicit = self.tables.get(value) or next((t for k, t in self.tables.items() if route_name(k) == route), "")
        return explicit or self.table.format(pipeline=pipeline, route=route)

    def silver_for(self, value: str) -> SilverOptions | None:
        """The `silver` section of a route value (given by the value as read, or normalised), if any."""
        return next((s for k, s in self.silver.items() if k == value or route_name(k) == route_name(value)), None)


@dataclass(frozen=True)
class PipelineConfig:
    """One pipeline: the topics it reads (exactly one of `topic`, `topics`, `topicPattern`) into one bronze table.

    After loading, `topics` holds the named topics (`topic: x` is `topics: [x]`) and `topic` the one topic of a
    pipeline that reads exactly one named topic, else "". A `topicPattern` pipeline's topics are those on the
    brokers matching it now (`kafka.pipeline_partitions`), as Spark's `subscribePattern` reads them.
    """

    name: str
    topic: str = ""
    topics: tuple[str, ...] = ()
    topic_pattern: str = field(default="", metadata=_key("topicPattern"))
    value: ValueFormat = field(default_factory=ValueFormat)
    kafka: Mapping[str, str] = field(default_factory=dict)
    source: SourceOptions = field(default_factory=SourceOptions)
    key: KeyFormat = field(default_factory=KeyFormat)
    sink: SinkOptions = field(default_factory=SinkOptions)
    metrics: MetricsOptions = field(default_factory=MetricsOptions)
    topic_settings: TopicOptions = field(default_factory=TopicOptions, metadata=_key("topicSettings"))
    spark: Mapping[str, str] = field(default_factory=dict)
    maintenance: MaintenanceOptions = field(default_factory=MaintenanceOptions)
    silver: SilverOptions | None = None
    expectations: tuple[Expectation, ...] = ()
    routing: RoutingOptions | None = None
    file: Path = field(default=Path("<memory>"), metadata={"internal": True})

    @property
    def reads(self) -> str:
        """What the pipeline reads, for messages: `topic 'a'`, `topics 'a', 'b'`, `topics matching 'x.*'`."""
        if self.topic_pattern:
            return f"topics matching {self.topic_pattern!r}"
        if len(self.topics) == 1:
            return f"topic {self.topics[0]!r}"
        return "topics " + ", ".join(repr(t) for t in self.topics)

    @property
    def subscription(self) -> str:
        """The topics as Spark's Kafka source is given them: `subscribePattern`'s pattern, or `subscribe`'s list."""
        return self.topic_pattern or ",".join(self.topics)

    def reads_topic(self, topic: str) -> bool:
        """Whether `topic` is one of the pipeline's: named, or matching `topicPattern` anywhere in its name, as
        Spark's subscribePattern finds topics (Regex.findFirstIn; anchor with ^...$ for whole names)."""
        if self.topic_pattern:
            return re.search(self.topic_pattern, topic) is not None
        return topic in self.topics

    def value_subjects(self, topics: typing.Iterable[str]) -> list[str]:
        """The value subjects of the given topics (one when `value.subject` is given)."""
        return sorted({self.value.subject_for(t) for t in topics} or ({self.value.subject} - {""}))

    @property
    def table_path(self) -> str:
        return self.sink.table or self._under_root("tables", self.name)

    @property
    def quarantine_path(self) -> str:
        """`sink.quarantineTable`, else beside bronze (`<sink.table>_quarantine`, on the same file system) when
        `sink.table` is set, else under the root."""
        if self.sink.quarantine_table:
            return self.sink.quarantine_table
        if self.sink.table:
            return f"{self.sink.table.rstrip('/')}_quarantine"
        return self._under_root("tables", f"{self.name}_quarantine")

    @property
    def former_quarantine_path(self) -> str | None:
        """Where the quarantine table of a pipeline with `sink.table` (and no `sink.quarantineTable`) was kept
        before it moved beside bronze; None when the default did not change."""
        if self.sink.quarantine_table or not self.sink.table:
            return None
        return self._under_root("tables", f"{self.name}_quarantine")

    @property
    def silver_path(self) -> str | None:
        """The current-state table: `silver.table`, else beside bronze (`<bronze>_silver`); None without `silver`."""
        if self.silver is None:
            return None
        return self.silver.table or f"{self.table_path.rstrip('/')}_silver"

    @property
    def catalog_names(self) -> tuple[str, str] | None:
        """Bronze's and quarantine's names in Spark's catalog, or None when the pipeline registers none."""
        if not self.sink.catalog_table:
            return None
        return self.sink.catalog_table, self.sink.quarantine_catalog_table or f"{self.sink.catalog_table}_quarantine"

    def route_table(self, value: str) -> str:
        """The table name of a route value (`routing.tables`, else `routing.table`'s template)."""
        assert self.routing is not None
        return self.routing.table_for(self.name, value)

    def route_path(self, table: str) -> str:
        """Where a route's table lives: where a pipeline of that name would put its bronze."""
        return self._under_root("tables", table)

    def routed(self, value: str, *, record: str = "", topics: tuple[str, ...] = ()) -> PipelineConfig:
        """The config of one route's table, as the writer of the route sees it: its own table (named for the route
        value, in `sink.catalogTable`'s namespace), the pipeline's quarantine table and checkpoint, no routing of
        its own. `record`: a `recordName` route's full record (or Protobuf message) name, whose subjects it reads;
        `topics`: the topics of a `topic` route."""
        assert self.routing is not None
        table = self.route_table(value)
        names = self.catalog_names
        sink = dataclasses.replace(
            self.sink, table=self.route_path(table), quarantine_table=self.quarantine_path,
            checkpoint_location=self.checkpoint_path,
            catalog_table=f"{_namespace(names[0])}{table}" if names else "",
            quarantine_catalog_table=names[1] if names else "")
        # The pipeline's name stays: its ledger records say which pipeline wrote the table (`delta.routed`).
        routed = dataclasses.replace(self, sink=sink, routing=None, silver=self.routing.silver_for(value))
        if record:
            protobuf = self.value.format == "protobuf"
            routed = dataclasses.replace(routed, value=dataclasses.replace(
                self.value, record_name=record, message_name=record if protobuf else self.value.message_name))
        if topics:
            routed = dataclasses.replace(routed, topics=topics, topic=topics[0] if len(topics) == 1 else "",
                                         topic_pattern="")
        return routed

    def route_silvers(self) -> dict[str, PipelineConfig]:
        """The routes with a silver table (`routing.silver`): route table name -> the route's config, whose silver
        section and paths (`table_path` the route's table, `silver_path` beside it) are the route's."""
        if self.routing is None:
            return {}
        return {self.route_table(value): self.routed(value) for value in sorted(self.routing.silver)}

    @property
    def checkpoint_path(self) -> str:
        return self.sink.checkpoint_location or self._under_root("checkpoints", self.name)

    def _under_root(self, folder: str, name: str) -> str:
        root = self.sink.root.rstrip("/")
        return f"{root}/{folder}/{name}" if root else str(state_dir() / folder / name)

    @property
    def locations(self) -> tuple[str, str, str]:
        """Where the pipeline's state lives: bronze, quarantine, checkpoint."""
        return self.table_path, self.quarantine_path, self.checkpoint_path

    def storage_options(self) -> dict[str, str]:
        """delta-rs storage options for the pipeline's tables, from the object-store settings of its `spark:`
        section (see `storage.delta_rs_options`); empty for local tables."""
        return storage.delta_rs_options(self.spark, self.table_path)

    @property
    def experiment(self) -> str:
        return self.metrics.experiment or f"ingest/{self.name}"

    @property
    def consumer_group(self) -> str:
        """The consumer group the processed offsets are committed to."""
        return self.metrics.consumer_group or f"ingest-{self.name}"

    def secret_values(self) -> list[str]:
        """The secret values this config holds (passwords, keys, JAAS lines, a registry URL's user info), for the
        one who loads it to register with `security.remember` before anything prints: pure, no global state."""
        return [v for settings in (self.kafka, self.spark, self.value.registry)
                for v in security.secret_values(settings)]

    def redacted(self) -> dict[str, Any]:
        """The config as a dict with every secret-looking Kafka or Spark setting replaced by '***' (and a
        registry URL's user info)."""
        out = dataclasses.asdict(self)
        for section in ("kafka", "spark"):
            out[section] = {k: "***" if _SECRET.search(k) else v for k, v in out[section].items()}
        out["value"]["registry"] = {k: "***" if _SECRET.search(k) else security.redact_url(v) if k == "url" else v
                                    for k, v in self.value.registry.items()}
        out["file"] = str(self.file)
        return out
