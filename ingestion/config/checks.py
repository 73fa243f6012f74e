"""The checks of a typed config that no field's type can make: contradictions between keys, values Spark or Kafka
would refuse only once the pipeline runs, promises the settings would break. Each raises one ConfigError naming
the file, the key (as the YAML spells it) and the offending value.

A new section's check is one `_check_<section>(config)` function appended to CHECKS.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ingestion import retention, security, storage
from ingestion.config import coerce, conditions
from ingestion.config.model import PipelineConfig
from ingestion.errors import ConfigError
from ingestion.units import duration_seconds, size_bytes

# The package's logger, as before the split into modules: the name on the CLI's log lines stays the same.
log = logging.getLogger("ingestion.config")

Check = Callable[[PipelineConfig], None]

_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
_ISOLATION = ("read_committed", "read_uncommitted")
_CATALOG_NAME = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]*\.)?[A-Za-z_][A-Za-z0-9_]*")


def check(config: PipelineConfig, raw_source: set[str]) -> None:
    """Every check, in order; the first problem is the error. `raw_source`: the keys the file's `source:` gives
    (a startingOffsets written out conflicts with a start time, its default does not)."""
    _check_contradictions(config, raw_source)
    for each in CHECKS:
        each(config)


def topics(config: PipelineConfig, file: Path) -> dict[str, Any]:
    """`topic`, `topics` and `topicPattern` checked (exactly one given) and normalized: `topics` lists the named
    topics, `topic` is set when there is exactly one."""
    given = [k for k, v in (("topic", config.topic), ("topics", config.topics),
                            ("topicPattern", config.topic_pattern)) if v]
    if not given:
        raise ConfigError(f"{file}: missing required key 'topic' (or 'topics: [a, b]', or 'topicPattern')")
    if len(given) > 1:
        raise ConfigError(f"{file}: give only one of topic, topics and topicPattern, got {given}")
    if config.topic_pattern:
        try:
            re.compile(config.topic_pattern)
        except re.error as exc:
            raise ConfigError(f"{file}: key 'topicPattern' is not a valid regular expression ({exc}), got "
                              f"{config.topic_pattern!r}") from None
        return {}
    names = (config.topic,) if config.topic else tuple(dict.fromkeys(config.topics))
    for name in names:
        if not _TOPIC_NAME.fullmatch(name) or name in (".", ".."):
            key = "topic" if config.topic else "topics"
            raise ConfigError(f"{file}: key {key!r}: a Kafka topic name is 1-249 letters, digits, '.', '_' or '-', "
                              f"got {name!r}")
    return {"topics": names, "topic": names[0] if len(names) == 1 else ""}


def _check_contradictions(config: PipelineConfig, raw_source: set[str]) -> None:
    """Contradictions no single key can show."""
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", config.name):
        raise ConfigError(f"{config.file}: key 'name' must be letters, digits, '_', '-' or '.', got {config.name!r}")
    if config.source.max_offsets_per_trigger is not None and config.source.max_offsets_per_trigger <= 0:
        raise ConfigError(f"{config.file}: key 'source.maxOffsetsPerTrigger' must be positive, "
                          f"got {config.source.max_offsets_per_trigger!r}")
    starts = [k for k, v in (("startingTimestamp", config.source.starting_timestamp),
                             ("startingOffsetsByTimestamp", config.source.starting_offsets_by_timestamp)) if v]
    given = sorted(starts + list(raw_source & {"startingOffsets"}))
    if len(given) > 1:
        raise ConfigError(f"{config.file}: give only one of source.startingOffsets, source.startingTimestamp and "
                          f"source.startingOffsetsByTimestamp, got {given}")
    if config.source.start_from_group and starts:
        raise ConfigError(f"{config.file}: key 'source.startFromGroup' starts partitions at offsets; the partitions "
                          f"its group has not committed start at source.startingOffsets, not at a time: remove "
                          f"{starts[0]!r}, got startFromGroup {config.source.start_from_group!r}")
    if config.value.registry and "url" not in config.value.registry:
        shown = config.redacted()["value"]["registry"]
        raise ConfigError(f"{config.file}: key 'value.registry' needs 'url', got {shown!r}")
    if not all(_is_url(u.strip()) for u in config.value.registry.get("url", "http://x").split(",")):
        raise ConfigError(f"{config.file}: key 'value.registry.url' must be the registry's http(s) URL, such as "
                          f"http://localhost:8081 (several: comma-separated), got "
                          f"{security.redact_url(config.value.registry['url'])!r}")
    for key, name in (("sink.catalogTable", config.sink.catalog_table),
                      ("sink.quarantineCatalogTable", config.sink.quarantine_catalog_table)):
        if name and not _CATALOG_NAME.fullmatch(name):
            raise ConfigError(f"{config.file}: key {key!r} must be a table name like bronze.orders (letters, digits "
                              f"and '_', at most one '.' before the table), got {name!r}")
    if config.sink.quarantine_catalog_table and not config.sink.catalog_table:
        raise ConfigError(f"{config.file}: key 'sink.quarantineCatalogTable' needs sink.catalogTable, got "
                          f"{config.sink.quarantine_catalog_table!r}")
    _check_subjects(config)
    if storage.scheme(config.table_path) != storage.scheme(config.quarantine_path):
        log.warning("%s: bronze (%s) and quarantine (%s) are on different file systems; a record and its "
                    "quarantine entry are then kept in two places with separate lifetimes", config.file,
                    config.table_path, config.quarantine_path)
    topic = config.topic_settings
    if topic.partitions <= 0 or topic.replication_factor <= 0:
        raise ConfigError(f"{config.file}: key 'topicSettings' needs positive partitions and replicationFactor, "
                          f"got {topic.partitions!r} and {topic.replication_factor!r}")
    for key in config.kafka:
        if key.startswith("kafka."):
            raise ConfigError(f"{config.file}: key 'kafka.{key}': write Kafka client settings without the "
                              f"'kafka.' prefix (it is added for Spark), got {key!r}")
        why = security.unknown_setting(key)
        if why is not None:
            raise ConfigError(f"{config.file}: unknown key 'kafka.{key}' "
                              f"(value {coerce.shown(key, config.kafka[key])}): {why}")
    problem = security.check(config.kafka)
    if problem:
        raise ConfigError(f"{config.file}: {problem}")


def _is_url(text: str) -> bool:
    """Whether `text` is an http(s) URL with a host (and a numeric port, if any); `mock://` for tests."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text)
        return parts.scheme in ("http", "https", "mock") and bool(parts.hostname) and (parts.port or 0) >= 0
    except ValueError:  # a port that is not a number
        return False


def _check_subjects(config: PipelineConfig) -> None:
    value = config.value
    by_record = config.routing is not None and config.routing.by == "recordName"
    needs_record = value.subject_name_strategy != "TopicNameStrategy" and not value.subject and not by_record
    if needs_record and not value.record_name:
        raise ConfigError(f"{config.file}: key 'value.subjectNameStrategy' is {value.subject_name_strategy}, which "
                          f"needs 'value.recordName' (the record's full name, such as com.acme.Order)")
    registry_key = {"avro": ("confluent", "avro"), "protobuf": ("protobuf",)}.get(config.key.format)
    if registry_key is not None and value.format not in registry_key:
        raise ConfigError(f"{config.file}: key 'key.format' is {config.key.format} with value.format "
                          f"{value.format}: a schema-registry key is decoded in the value's format")
    for key, given in (("messageName", value.message_name), ("strict", value.strict)):
        if given and value.format != "protobuf":
            raise ConfigError(f"{config.file}: key 'value.{key}' is for value.format protobuf, got format "
                              f"{value.format!r}")
    file_formats = ("json", "connect-json")
    if (value.format in file_formats) != bool(value.schema_file):
        raise ConfigError(f"{config.file}: key 'value.schemaFile' " + (
            f"is needed with value.format {value.format} (the table's schema)" if not value.schema_file else
            f"is for value.format json or connect-json, got format {value.format!r}"))
    if value.format in file_formats and value.registry:
        raise ConfigError(f"{config.file}: key 'value.registry' is not used with value.format {value.format} (its "
                          f"schema is value.schemaFile); use value.format jsonschema for a registry's JSON Schemas")
    if value.format == "avro" and not config.topic and not value.subject:
        raise ConfigError(f"{config.file}: key 'value.format' is avro (bodies without a schema id), so every topic "
                          f"must be written with one subject's newest version: set 'value.subject' for "
                          f"{config.reads}")


_COLLECTOR = re.compile(r"-XX:\+Use\w*GC\b")  # a JVM's choice of garbage collector


def _check_values(config: PipelineConfig) -> None:
    """Values Spark or Kafka would refuse only once the pipeline runs, refused at load instead."""
    file, source = config.file, config.source
    timeout = duration_seconds(source.broker_timeout)
    if timeout is None or timeout <= 0:
        raise ConfigError(f"{file}: key 'source.brokerTimeout' must be a positive duration such as '15 seconds', "
                          f"got {source.broker_timeout!r}")
    for key, count in (("directWriteMaxOffsets", config.sink.direct_write_max_offsets),
                       ("startBatchMaxOffsets", config.sink.start_batch_max_offsets)):
        if count < 0:
            raise ConfigError(f"{file}: key 'sink.{key}' must be 0 or more, got {count!r}")
    if duration_seconds(config.sink.trigger) is None:
        raise ConfigError(f"{file}: key 'sink.trigger' must be a duration such as '10 seconds', '500 milliseconds' "
                          f"or '1 minute', got {config.sink.trigger!r}")
    positive = {"value.maxBytes": config.value.max_bytes, "source.minPartitions": source.min_partitions}
    for key, value in positive.items():
        if value is not None and value <= 0:
            raise ConfigError(f"{file}: key {key!r} must be positive, got {value!r}")
    if source.starting_timestamp is not None and source.starting_timestamp < 0:
        raise ConfigError(f"{file}: key 'source.startingTimestamp' must be epoch milliseconds (>= 0), got "
                          f"{source.starting_timestamp!r}")
    if source.starting_offsets not in ("earliest", "latest"):
        _check_offsets_json(config, "source.startingOffsets", source.starting_offsets, low=-2)
    if source.starting_offsets_by_timestamp:
        _check_offsets_json(config, "source.startingOffsetsByTimestamp", source.starting_offsets_by_timestamp,
                            low=-2)
    isolation = config.kafka.get("isolation.level")
    if isolation is not None and isolation not in _ISOLATION:
        raise ConfigError(f"{file}: key 'kafka.isolation.level' must be one of {list(_ISOLATION)}, got {isolation!r}")
    for key in ("spark.driver.memory", "spark.executor.memory"):
        if key in config.spark and size_bytes(config.spark[key]) is None:
            raise ConfigError(f"{file}: key 'spark.{key}' must be a size such as 2g or 1536m, got "
                              f"{config.spark[key]!r}")
    for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
        collectors = sorted(set(_COLLECTOR.findall(config.spark.get(key, ""))))
        if len(collectors) > 1:  # the JVM refuses to start with two ("multiple garbage collectors selected")
            raise ConfigError(f"{file}: key 'spark.{key}' selects {len(collectors)} garbage collectors "
                              f"({', '.join(collectors)}); a JVM starts with one, so keep one")


def _check_offsets_json(config: PipelineConfig, key: str, text: str, *, low: int) -> None:
    """Spark's JSON form of per-partition positions: {"<topic>": {"<partition>": <offset or time>}}."""
    import json

    try:
        data = json.loads(text)
    except ValueError:
        data = None
    topics = data if isinstance(data, dict) else {}
    valid = bool(topics) and all(
        isinstance(parts, dict) and parts and all(str(p).isdigit() and isinstance(v, int) and not isinstance(v, bool)
                                                  and v >= low for p, v in parts.items())
        for parts in topics.values())
    example = config.topics[0] if config.topics else "events.a"
    if config.topic_pattern:
        raise ConfigError(f"{config.file}: key {key!r}: JSON positions cannot follow a topicPattern (Spark wants "
                          "every partition it assigns named, and the topics that match change); use earliest, "
                          f"latest or source.startingTimestamp, got {text!r}")
    if not valid:
        raise ConfigError(f"{config.file}: key {key!r} must be earliest, latest or JSON like "
                          f'{{"{example}": {{"0": 42, "1": -2}}}}, got {text!r}')
    # Spark wants a position for every partition it reads, so a list of topics needs them all named.
    other = sorted(t for t in topics if not config.reads_topic(t))
    missing = sorted(set(config.topics) - set(topics))
    if other or missing:
        raise ConfigError(f"{config.file}: key {key!r} names topics {sorted(topics)}, but the pipeline reads "
                          f"{config.reads}" + (f" (not read: {other})" if other else f" (missing: {missing})"))


def _check_maintenance(config: PipelineConfig) -> None:
    """The maintenance section, and the retention settings it promises a window with (retention.py)."""
    file, m = config.file, config.maintenance
    if size_bytes(m.target_file_size) in (None, 0):
        raise ConfigError(f"{file}: key 'maintenance.targetFileSize' must be a size such as '128mb', got "
                          f"{m.target_file_size!r}")
    if m.every_batches is not None and m.every_batches <= 0:
        raise ConfigError(f"{file}: key 'maintenance.everyBatches' must be positive, got {m.every_batches!r}")
    if m.every is not None and not (duration_seconds(m.every) or 0) > 0:
        raise ConfigError(f"{file}: key 'maintenance.every' must be a duration such as '60 minutes', got "
                          f"{m.every!r}")
    if config.sink.partition_by and set(m.z_order_by) & set(config.sink.partition_by):
        raise ConfigError(f"{file}: key 'maintenance.zOrderBy' names partition columns "
                          f"{sorted(set(m.z_order_by) & set(config.sink.partition_by))}; Delta cannot z-order by them")
    if m.window_seconds > 0:  # tables are created with the deleted-file retention equal to the window
        created = {retention.DELETED_FILE_RETENTION: retention.as_interval(m.window_seconds)}
        check_retention(config, created | dict(config.sink.table_properties), str(file))
    else:
        check_retention(config, config.sink.table_properties, str(file))


def check_retention(config: PipelineConfig, properties: Mapping[str, str], where: str, *,
                    table: bool = False) -> None:
    """Refuse a vacuum retention and table properties under which a promise breaks (retention.problems): one
    ConfigError naming `where` (the file, or a table), the setting, its value and the reason."""
    found = retention.problems(config.maintenance.vacuum_retention, properties,
                               allow_short=config.maintenance.allow_short_retention)
    if found:
        key, reason = found[0]
        shown = key if key.startswith("maintenance.") or table else f"sink.tableProperties.{key}"
        raise ConfigError(f"{where}: key {shown!r}: {reason}")


def _check_locations(config: PipelineConfig) -> None:
    """The pipeline's tables and checkpoint each in a folder of its own: none the same as another, or inside it
    (`storage.location_key`: relative paths, `file:` URIs and `..` resolved), else one would hold the other's files."""
    places = [(key, value, storage.location_key(value)) for key, value in (
        ("sink.table", config.table_path), ("sink.quarantineTable", config.quarantine_path),
        ("silver.table", config.silver_path), ("sink.checkpointLocation", config.checkpoint_path)) if value]
    for i, (key, value, at) in enumerate(places):
        for other, their_value, theirs in places[:i]:
            how = storage.nesting(at, theirs)
            if how is not None:
                where = {"same": "the same folder as", "inside": "inside", "holds": "holding"}[how]
                raise ConfigError(f"{config.file}: key {key!r} is {value!r}, {where} {other} ({their_value!r}): "
                                  f"each table and the checkpoint need a folder of their own")


def _check_prometheus(config: PipelineConfig) -> None:
    options = config.metrics.prometheus
    if not 0 <= options.port <= 65535:
        raise ConfigError(f"{config.file}: key 'metrics.prometheus.port' must be a TCP port (0 turns the endpoint "
                          f"off), got {options.port!r}")
    interval = duration_seconds(options.lag_interval)
    if interval is None or interval <= 0:
        raise ConfigError(f"{config.file}: key 'metrics.prometheus.lagInterval' must be a positive interval such as "
                          f"'15 seconds', got {options.lag_interval!r}")
    if options.pushgateway and not re.match(r"https?://", options.pushgateway):
        raise ConfigError(f"{config.file}: key 'metrics.prometheus.pushgateway' must be an http(s) URL, got "
                          f"{security.redact_url(options.pushgateway)!r}")


def _check_silver(config: PipelineConfig) -> None:
    silver, file = config.silver, config.file
    if silver is None:
        return
    if not silver.key:
        raise ConfigError(f"{file}: key 'silver.key' must name the fields that identify a row, such as [id], got []")
    for name in silver.key:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", name):
            raise ConfigError(f"{file}: key 'silver.key' names fields (dotted for nested ones), got {name!r}")
        if silver.key.count(name) > 1:
            raise ConfigError(f"{file}: key 'silver.key' names {name!r} twice, got {list(silver.key)}")
    if silver.sequence_by not in ("", "kafka") and not re.fullmatch(
            r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", silver.sequence_by):
        raise ConfigError(f"{file}: key 'silver.sequenceBy' is 'kafka' or a field (dotted for nested ones), got "
                          f"{silver.sequence_by!r}")
    if silver.catalog_table and not _CATALOG_NAME.fullmatch(silver.catalog_table):
        raise ConfigError(f"{file}: key 'silver.catalogTable' must be a table name like silver.orders (letters, "
                          f"digits and '_', at most one '.' before the table), got {silver.catalog_table!r}")
    if silver.direct_merge_max_changes < 0:
        raise ConfigError(f"{file}: key 'silver.directMergeMaxChanges' must be 0 or more, got "
                          f"{silver.direct_merge_max_changes!r}")
    if silver.trigger and not duration_seconds(silver.trigger):
        raise ConfigError(f"{file}: key 'silver.trigger' must be a duration such as '10 seconds', got "
                          f"{silver.trigger!r}")
    for key, condition in (("deleteWhen", silver.delete_when), ("truncateWhen", silver.truncate_when)):
        if condition:
            _check_condition(file, f"silver.{key}", condition, spark_dialect=True)
    _check_silver_columns(config)


_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_silver_columns(config: PipelineConfig) -> None:
    """`columns`, `exceptColumns`, `trackHistoryOn` and `ignoreNullUpdates` against each other and the key; whether
    the names are fields of the row is checked against bronze's columns (`SilverSpec.check`)."""
    silver, file = config.silver, config.file
    assert silver is not None
    for key, names in (("columns", silver.columns), ("exceptColumns", silver.except_columns),
                       ("trackHistoryOn", silver.track_history_on)):
        for name in names:
            if not _FIELD.fullmatch(name):
                raise ConfigError(f"{file}: key 'silver.{key}' names top-level fields of the row, got {name!r}")
        if len(set(names)) < len(names):
            raise ConfigError(f"{file}: key 'silver.{key}' names a field twice, got {list(names)!r}")
    if silver.columns and silver.except_columns:
        raise ConfigError(f"{file}: keys 'silver.columns' and 'silver.exceptColumns' exclude each other (keep "
                          f"one), got {list(silver.columns)!r} and {list(silver.except_columns)!r}")
    if silver.track_history_on and silver.mode != "history":
        raise ConfigError(f"{file}: key 'silver.trackHistoryOn' needs 'silver.mode: history' (upsert keeps no "
                          f"history), got {list(silver.track_history_on)!r} with mode {silver.mode!r}")
    def kept(name: str) -> bool:
        return name in silver.columns if silver.columns else name not in silver.except_columns

    for name in silver.key:
        top = name.split(".")[0]
        if top != "_kafka_key" and not kept(top):
            which = "columns" if silver.columns else "exceptColumns"
            raise ConfigError(f"{file}: key 'silver.{which}' leaves out the key field {top!r} (silver.key "
                              f"{list(silver.key)!r}), got {list(silver.columns or silver.except_columns)!r}")
    for name in silver.track_history_on:
        if not kept(name):
            raise ConfigError(f"{file}: key 'silver.trackHistoryOn' names {name!r}, which silver.columns/"
                              f"exceptColumns leave out, got {list(silver.track_history_on)!r}")
        if name in {p.split(".")[0] for p in silver.key}:
            raise ConfigError(f"{file}: key 'silver.trackHistoryOn' names the key field {name!r} (a key's versions "
                              f"share it), got {list(silver.track_history_on)!r}")


_TABLE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def _check_routing(config: PipelineConfig) -> None:
    """`routing:` (docs/routing.md): what each `by` needs, a table template that names one table per route, and
    the sections a routed pipeline does not take yet."""
    routing, file = config.routing, config.file
    if routing is None:
        return
    by, value = routing.by, config.value
    if by == "field" and not routing.route_field:
        raise ConfigError(f"{file}: key 'routing.field' is needed with routing.by field (a top-level field of the "
                          f"value, or _kafka_key), got ''")
    if by == "header" and not routing.header:
        raise ConfigError(f"{file}: key 'routing.header' is needed with routing.by header (a Kafka header's name), "
                          f"got ''")
    for key, given, needs in (("field", routing.route_field, "field"), ("header", routing.header, "header")):
        if given and by != needs:
            raise ConfigError(f"{file}: key 'routing.{key}' is for routing.by {needs}, got by {by!r}")
    if by == "field" and routing.route_field != "_kafka_key" and value.format not in ("json", "jsonschema"):
        raise ConfigError(f"{file}: key 'routing.field' routes by a field of JSON values (value.format json or "
                          f"jsonschema) or by _kafka_key; with value.format {value.format} route by recordName or "
                          f"header, got field {routing.route_field!r}")
    if by == "recordName":
        if value.format not in ("confluent", "protobuf"):
            raise ConfigError(f"{file}: key 'routing.by' is recordName, which reads each record's schema id: "
                              f"value.format must be confluent (Avro) or protobuf (with its message indexes), got "
                              f"{value.format!r}")
        if value.subject or value.subject_name_strategy == "TopicNameStrategy" or value.record_name:
            raise ConfigError(f"{file}: key 'routing.by' is recordName: set value.subjectNameStrategy to "
                              f"TopicRecordNameStrategy or RecordNameStrategy (a subject per record type) and no "
                              f"value.subject or value.recordName, got subjectNameStrategy "
                              f"{value.subject_name_strategy!r}")
        if value.message_name:
            raise ConfigError(f"{file}: key 'value.messageName' pins one message, but routing.by recordName gives "
                              f"each message its table: remove it, got {value.message_name!r}")
    if by == "topic" and len(config.topics) == 1:
        raise ConfigError(f"{file}: key 'routing.by' is topic, but the pipeline reads one topic: use topics or "
                          f"topicPattern, got topic {config.topic!r}")
    try:
        sample = routing.table.format(pipeline=config.name, route="r")
    except (KeyError, IndexError, ValueError):
        raise ConfigError(f"{file}: key 'routing.table' may hold {{pipeline}} and {{route}} only, got "
                          f"{routing.table!r}") from None
    if "{route}" not in routing.table or not _TABLE_NAME.fullmatch(sample):
        raise ConfigError(f"{file}: key 'routing.table' must name a table per route with {{route}} (letters, "
                          f"digits, '_', '-', '.'), got {routing.table!r}")
    for route, table in routing.tables.items():
        if not _TABLE_NAME.fullmatch(table):
            raise ConfigError(f"{file}: key 'routing.tables.{route}' must be a table name (letters, digits, '_', "
                              f"'-', '.'), got {table!r}")
    if config.silver is not None:
        raise ConfigError(f"{file}: key 'silver' is a routed pipeline's per route: write it under "
                          f"routing.silver.<route> (docs/routing.md#silver-over-a-route-table), got silver.key "
                          f"{list(config.silver.key)!r}")
    if config.sink.table:
        raise ConfigError(f"{file}: key 'sink.table' is not supported with routing: yet (each route's table is "
                          f"<sink.root>/tables/<table>; docs/routing.md#not-yet), remove it or routing:")
    silver_paths: dict[str, str] = {}
    for route in routing.silver:
        routed = config.routed(route)
        try:
            _check_silver(routed)
        except ConfigError as exc:  # the route's section, named as written
            raise ConfigError(str(exc).replace("'silver.", f"'routing.silver.{route}.")) from None
        path = (routed.silver_path or "").rstrip("/")
        if path in silver_paths:
            raise ConfigError(f"{file}: key 'routing.silver.{route}.table' names the silver table of route "
                              f"{silver_paths[path]!r} too: each route needs its own, got {path!r}")
        silver_paths[path] = route


_RULE_NAME = re.compile(r"[a-z0-9_]+")


def _check_expectations(config: PipelineConfig) -> None:
    """Each rule named `[a-z0-9_]+`, once per pipeline, with one row-level condition (`conditions`); its columns
    and type are checked against bronze's before a run creates anything (`decode.expectations.compile_rules`)."""
    seen: set[str] = set()
    for i, rule in enumerate(config.expectations):
        where = f"{config.file}: key 'expectations[{i}]"
        if not _RULE_NAME.fullmatch(rule.name):
            raise ConfigError(f"{where}.name' must be lower-case letters, digits and '_', got {rule.name!r}")
        if rule.name in seen:
            raise ConfigError(f"{where}.name': each rule needs its own name, got {rule.name!r} twice")
        seen.add(rule.name)
        _check_condition(config.file, f"expectations[{i}].expect", rule.expect, rule.name)


def _check_condition(file: Path, key: str, text: str, rule: str = "", *, spark_dialect: bool = False) -> None:
    """Refuse a SQL condition of the file that is not exactly one row-level condition (`conditions.problem`)."""
    conditions.check(conditions.where(file, key, text, rule), text, spark_dialect=spark_dialect)


# After the checks across sections (`_check_contradictions`), in this order.
CHECKS: tuple[Check, ...] = (_check_values, _check_locations, _check_maintenance, _check_prometheus, _check_silver,
                             _check_expectations, _check_routing)
