"""Typed, frozen pipeline configs read from YAML: unknown keys, wrong types and contradictions are rejected.

Every error names the file, the key (dotted path) and the offending value. `${VAR}` and `${VAR:-default}` are
replaced from the environment, so secrets stay out of files; `redacted()` hides them again for printing.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from ingestion import retention, security, storage
from ingestion.config import coerce
from ingestion.config.model import (
    KeyFormat,
    MaintenanceOptions,
    MetricsOptions,
    PipelineConfig,
    PrometheusOptions,
    SilverOptions,
    SinkOptions,
    SourceOptions,
    TopicOptions,
    ValueFormat,
)
from ingestion.errors import ConfigError
from ingestion.paths import conf_dir
from ingestion.units import duration_seconds, size_bytes

__all__ = [
    "DEFAULTS_FILE",
    "DEPRECATED_KEYS",
    "KeyFormat",
    "MaintenanceOptions",
    "MetricsOptions",
    "PipelineConfig",
    "PrometheusOptions",
    "SilverOptions",
    "SinkOptions",
    "SourceOptions",
    "TopicOptions",
    "ValueFormat",
    "check_retention",
    "duration_seconds",
    "inherited",
    "list_pipelines",
    "load_all",
    "load_pipeline",
    "parse_pipeline",
]

log = logging.getLogger(__name__)

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_SECRET = security.SECRET_KEY


def load_pipeline(name_or_path: str | Path) -> PipelineConfig:
    """Load `conf/pipelines/<name>.yaml`, or the YAML file at the given path."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = conf_dir() / "pipelines" / f"{name_or_path}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (conf_dir() / "pipelines").glob("*.yaml"))
        raise ConfigError(f"no pipeline config {str(name_or_path)!r}: {path} does not exist (known: {known})")
    return parse_pipeline(_with_defaults(_read(path), path), path)


def inherited(data: dict[str, Any], path: Path) -> PipelineConfig:
    """The config a file at `path` holding `data` would load as, with the defaults it would inherit."""
    return parse_pipeline(_with_defaults(dict(data), path), path)


DEFAULTS_FILE = "defaults.yaml"
_PER_PIPELINE = ("name", "topic", "topics", "topicPattern")  # what a defaults file cannot hold


def _read(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings at the top level, got {data!r}")
    return data


def _with_defaults(data: dict[str, Any], path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The file's settings over those of the file it extends: `extends: <path>` (relative to the file), or, for a
    file in conf/pipelines/ without that key, conf/defaults.yaml when it exists (`extends: null` opts out).
    A defaults file is checked on its own first, so a bad key in it is reported with its file's name."""
    data = _renamed(data, path)
    if "extends" in data:
        parent_name = data.pop("extends")
        if parent_name is None:
            return data
        if not isinstance(parent_name, str):
            raise ConfigError(f"{path}: key 'extends' must be the path of a defaults file, got {parent_name!r}")
        parent = (path.parent / parent_name).resolve()
        if not parent.is_file():
            raise ConfigError(f"{path}: key 'extends' names {parent_name!r}, but {parent} does not exist")
    else:
        parent = conf_dir() / DEFAULTS_FILE
        if path.resolve().parent != (conf_dir() / "pipelines").resolve() or not parent.is_file():
            return data
    if parent in seen or parent == path.resolve():
        raise ConfigError(f"{path}: 'extends' goes round in a circle through {parent}")
    defaults = _with_defaults(_read(parent), parent, (*seen, path.resolve()))
    for key in _PER_PIPELINE:
        if key in defaults:
            raise ConfigError(f"{parent}: key {key!r} belongs in each pipeline's file, not in shared defaults "
                              f"(value {coerce.shown(key, defaults[key])})")
    coerce.build(PipelineConfig, _interpolate(defaults, parent, ""), parent, "", partial=True)
    return _merged(defaults, data)


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`over` on top of `base`, mapping by mapping; any other value (lists too) is replaced whole."""
    out = dict(base)
    for key, value in over.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def list_pipelines() -> list[Path]:
    return sorted((conf_dir() / "pipelines").glob("*.yaml"))


def load_all(paths: list[Path] | None = None) -> tuple[list[PipelineConfig], list[ConfigError]]:
    """Every pipeline file (default: conf/pipelines/*.yaml): the valid configs, and one error per bad file. Two
    files with the same pipeline name, table or checkpoint are both bad (each error names the other file)."""
    configs: list[PipelineConfig] = []
    errors: list[ConfigError] = []
    for path in list_pipelines() if paths is None else paths:
        try:
            configs.append(load_pipeline(path))
        except ConfigError as exc:
            errors.append(exc)
    clashing: set[Path] = set()
    for what, key in (("name", lambda c: c.name), ("table", lambda c: c.table_path),
                      ("checkpoint", lambda c: c.checkpoint_path), ("catalog table", lambda c: c.sink.catalog_table)):
        seen: dict[str, PipelineConfig] = {}
        for config in configs:
            if not key(config):
                continue
            other = seen.setdefault(key(config), config)
            if other is not config:
                errors.append(ConfigError(f"{config.file}: pipeline {config.name!r} has the same {what} "
                                          f"{key(config)!r} as {other.file}; each pipeline needs its own"))
                clashing |= {config.file, other.file}
    return [c for c in configs if c.file not in clashing], errors


# Keys renamed to camelCase: (section, old spelling) -> new spelling; the old one is read with a warning.
DEPRECATED_KEYS = {("sink", "on_error"): "onError"}


def _renamed(data: dict[str, Any], file: Path) -> dict[str, Any]:
    """`data` with deprecated spellings of keys replaced by the current ones, each with one warning line."""
    out = dict(data)
    for (section, old), new in DEPRECATED_KEYS.items():
        given = out.get(section)
        if not isinstance(given, dict) or old not in given:
            continue
        if new in given:
            raise ConfigError(f"{file}: keys '{section}.{old}' and '{section}.{new}' are the same setting; keep "
                              f"'{section}.{new}'")
        log.warning("%s: key '%s.%s' is deprecated; write '%s.%s'", file, section, old, section, new)
        out[section] = {(new if k == old else k): v for k, v in given.items()}
    return out


def parse_pipeline(data: object, file: Path) -> PipelineConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: expected a mapping of settings at the top level, got {data!r}")
    data = _renamed(data, file)
    silver = data.get("silver")
    if isinstance(silver, dict) and isinstance(silver.get("key"), str):  # `key: id` for `key: [id]`
        data = {**data, "silver": {**silver, "key": [silver["key"]]}}
    config = coerce.build(PipelineConfig, _interpolate(data, file, ""), file, "")
    config = dataclasses.replace(config, file=file, **_topics(config, file))
    if config.topic:
        # One topic: one subject, by the strategy unless named (TopicNameStrategy: <topic>-value, <topic>-key).
        config = dataclasses.replace(config, value=dataclasses.replace(
            config.value, subject=config.value.subject_for(config.topic)))
        if config.key.format in ("avro", "protobuf"):
            config = dataclasses.replace(config, key=dataclasses.replace(
                config.key, subject=config.key.subject_for(config.topic)))
    source = data.get("source")
    _check(config, set(source) if isinstance(source, dict) else set())
    return config


_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


def _topics(config: PipelineConfig, file: Path) -> dict[str, Any]:
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


def _check_subjects(config: PipelineConfig) -> None:
    value = config.value
    needs_record = value.subject_name_strategy != "TopicNameStrategy" and not value.subject
    if needs_record and not value.record_name:
        raise ConfigError(f"{config.file}: key 'value.subjectNameStrategy' is {value.subject_name_strategy}, which "
                          f"needs 'value.recordName' (the record's full name, such as com.acme.Order)")
    registry_key = {"avro": ("confluent", "avro"), "protobuf": ("protobuf",)}.get(config.key.format)
    if registry_key is not None and value.format not in registry_key:
        raise ConfigError(f"{config.file}: key 'key.format' is {config.key.format} with value.format "
                          f"{value.format}: a schema-registry key is decoded in the value's format")
    if value.message_name and value.format != "protobuf":
        raise ConfigError(f"{config.file}: key 'value.messageName' is for value.format protobuf, got format "
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


def _check(config: PipelineConfig, raw_source: set[str]) -> None:
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
    _check_values(config)
    _check_maintenance(config)
    _check_prometheus(config)
    _check_silver(config)


def _check_silver(config: PipelineConfig) -> None:
    silver, file = config.silver, config.file
    if silver is None:
        return
    if not silver.key:
        raise ConfigError(f"{file}: key 'silver.key' must name the fields that identify a row, such as [id], got []")
    for name in silver.key:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", name):
            raise ConfigError(f"{file}: key 'silver.key' names fields (dotted for nested ones), got {name!r}")
    if silver.sequence_by != "kafka" and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*",
                                                            silver.sequence_by):
        raise ConfigError(f"{file}: key 'silver.sequenceBy' is 'kafka' or a field (dotted for nested ones), got "
                          f"{silver.sequence_by!r}")
    if silver.catalog_table and not _CATALOG_NAME.fullmatch(silver.catalog_table):
        raise ConfigError(f"{file}: key 'silver.catalogTable' must be a table name like silver.orders (letters, "
                          f"digits and '_', at most one '.' before the table), got {silver.catalog_table!r}")
    if silver.trigger and not duration_seconds(silver.trigger):
        raise ConfigError(f"{file}: key 'silver.trigger' must be a duration such as '10 seconds', got "
                          f"{silver.trigger!r}")
    taken = {config.table_path.rstrip("/"), config.quarantine_path.rstrip("/")}
    if (config.silver_path or "").rstrip("/") in taken:
        raise ConfigError(f"{file}: key 'silver.table' must differ from bronze's and quarantine's tables, got "
                          f"{silver.table!r}")


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


_ISOLATION = ("read_committed", "read_uncommitted")
_CATALOG_NAME = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]*\.)?[A-Za-z_][A-Za-z0-9_]*")


def _check_values(config: PipelineConfig) -> None:
    """Values Spark or Kafka would refuse only once the pipeline runs, refused at load instead."""
    file, source = config.file, config.source
    timeout = duration_seconds(source.broker_timeout)
    if timeout is None or timeout <= 0:
        raise ConfigError(f"{file}: key 'source.brokerTimeout' must be a positive duration such as '15 seconds', "
                          f"got {source.broker_timeout!r}")
    if config.sink.direct_write_max_offsets < 0:
        raise ConfigError(f"{file}: key 'sink.directWriteMaxOffsets' must be 0 or more, "
                          f"got {config.sink.direct_write_max_offsets!r}")
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


def _interpolate(value: Any, file: Path, where: str) -> Any:
    if isinstance(value, dict):
        return {k: _interpolate(v, file, f"{where}{k}.") for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, file, where) for v in value]
    if not isinstance(value, str):
        return value

    def sub(match: re.Match[str]) -> str:
        var, default = match.group(1), match.group(2)
        if os.environ.get(var):
            return os.environ[var]
        if default is not None:  # as in the shell, ${VAR:-x} also falls back when VAR is set but empty
            return default
        if var in os.environ:
            return ""
        raise ConfigError(f"{file}: key {where.rstrip('.')!r} uses ${{{var}}}, which is not set in the environment")

    text = _ENV.sub(sub, value)
    if _ENV.fullmatch(value):
        # A value that is only `${VAR}` gets the type YAML would give the text (`${N}` -> 500 for N=500).
        typed = yaml.safe_load(text) if text else text
        return typed if isinstance(typed, (int, float, bool)) else text
    return text
