"""`ingest init`: a pipeline file per topic, from what the broker and the registry (or schemas/) already know.

The file holds only what differs from the defaults it inherits (conf/defaults.yaml, docs/configuration.md): the
name, the topic, and the key format when a `<topic>-key` subject exists, with comments saying what was found; a
topic whose values are several record types, a `<topic>-<record>` subject each, gets a routed pipeline (a table per
type, docs/routing.md). A topic without a subject whose first records are JSON gets a schema file beside it:
Kafka Connect's own schema for JsonConverter envelopes (`connect-json`), else one inferred from the records
(`json`, `schema.json_infer`)."""

from __future__ import annotations

import datetime as dt
import difflib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from ingestion import kafka
from ingestion.config import PipelineConfig, inherited, route_name
from ingestion.decode import wire
from ingestion.errors import ConfigError, IngestionError, TopicNotFoundError
from ingestion.paths import conf_dir, schemas_dir
from ingestion.schema import connect_types, json_infer, json_schemas, json_values, protobuf_schemas
from ingestion.schema.registry import source_for

log = logging.getLogger(__name__)

SAMPLED = 500  # records read to tell a topic without a subject, spread over its partitions (at least 10 each)


@dataclass(frozen=True)
class Draft:
    config: PipelineConfig
    text: str
    files: tuple[tuple[Path, str], ...] = ()  # (path, text) of the schema files the pipeline names, written with it

    @property
    def path(self) -> Path:
        return self.config.file


def pipeline_name(topic: str) -> str:
    """A pipeline name for a topic: its characters outside letters, digits, `_ - .` become `_`."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", topic).lstrip(".-") or "topic"


def draft(topic: str, name: str | None = None) -> Draft:
    """The file for `topic`, checked against the broker and the schema source; IngestionError naming the closest
    existing topics or subjects when one is missing."""
    name = name or pipeline_name(topic)
    path = conf_dir() / "pipelines" / f"{name}.yaml"
    config = inherited({"name": name, "topic": topic}, path)
    settings = kafka.resolve_settings(config)
    try:  # a missing topic's error names the closest; init writes files for topics that exist
        partitions = kafka.partitions(settings.client, topic, settings.timeout)
    except TopicNotFoundError as exc:
        raise exc.with_hint("init writes a pipeline for a topic that exists: create the topic first, or write "
                            f"{path} yourself and run `ingest onboard {name} "
                            "--create-topic`") from None
    source = source_for(config)
    subjects = source.subjects()
    value_subject = config.value.subject
    record_subjects = sorted(x for x in subjects
                             if x.startswith(f"{topic}-") and x not in (value_subject, f"{topic}-key"))
    if value_subject not in subjects and len(record_subjects) > 1:
        versions = source.versions(record_subjects[0])
        protobuf = protobuf_schemas.is_document(versions[max(versions)])
        return _routed(topic, name, path, len(partitions), record_subjects, protobuf)
    key_subject = f"{topic}-key"
    # The first records (up to SAMPLED): what a topic without a value subject holds, and whether its keys are text.
    # Where only the keys are asked about, a topic this client may describe but not read keeps the comment.
    sampled: list[tuple[bytes | None, bytes | None]] = []
    keys_open = key_subject not in subjects and config.key.format == "bytes"
    if value_subject not in subjects or keys_open:
        try:
            sampled = kafka.earliest_records(settings.client, {topic: partitions}, timeout=settings.timeout,
                                             per_partition=max(10, SAMPLED // max(len(partitions), 1)))
        except IngestionError:
            if value_subject not in subjects:
                raise
    key_line = [_key_line(sampled, key_subject)] if keys_open else []
    if value_subject not in subjects:
        where = "the schema registry" if config.value.registry else "schemas/"
        missing = f"topic {topic!r}: no subject {value_subject!r} in {where}{_closest(value_subject, subjects)}"
        values = [value for _, value in sampled if value is not None]
        return _schemaless(topic, name, path, len(partitions), values, missing, key_line)
    versions = source.versions(value_subject)
    lines = [f"# ingest init, {dt.date.today().isoformat()}: {len(partitions)} partitions; values by subject "
             f"{value_subject} ({len(versions)} version{'s' * (len(versions) != 1)}, newest id {max(versions)})",
             f"name: {name}",
             f"topic: {_yaml_text(topic)}"]
    newest = versions[max(versions)]
    if protobuf_schemas.is_document(newest) and len(protobuf_schemas.candidates(newest)) > 1:
        lines.append(f"value: {{format: protobuf}}  # a Protobuf subject; its file has "
                     f"{', '.join(protobuf_schemas.message_names(newest))}: the table holds the message the topic's "
                     "first records name (docs/protobuf.md#which-message); messageName pins one")
    elif protobuf_schemas.is_document(newest):
        message = protobuf_schemas.table_message(newest)
        lines.append(f"value: {{format: protobuf, messageName: {message}}}  # a Protobuf subject; its file has "
                     f"{', '.join(protobuf_schemas.message_names(newest))}")
    elif json_schemas.is_document(newest):
        lines.append("value: {format: jsonschema}  # a JSON Schema subject (docs/json.md)")
    if key_subject in subjects:
        key_versions = source.versions(key_subject)
        key_newest = key_versions[max(key_versions)]
        if json_schemas.is_document(key_newest):
            lines.append(f"key: {{format: string}}  # subject {key_subject} holds JSON Schemas: keys kept as text")
        else:
            key_format = "protobuf" if protobuf_schemas.is_document(key_newest) else "avro"
            lines.append(f"key: {{format: {key_format}}}  # subject {key_subject} exists")
    lines += key_line
    lines += _rule_example(_field_names(newest)[:1])
    text = "\n".join(lines) + "\n"
    return Draft(inherited(_parsed(text), path), text)


def _key_line(sampled: list[tuple[bytes | None, bytes | None]], key_subject: str) -> str:
    """The pipeline's key line when no `<topic>-key` subject exists: `format: string` when every sampled key is
    UTF-8 text, else a comment (`_kafka_key` keeps the bytes)."""
    keys = [key for key, _ in sampled if key is not None]
    try:
        text = bool(keys) and all(key.decode("utf-8").isprintable() for key in keys)
    except UnicodeDecodeError:
        text = False
    if text:
        return f"key: {{format: string}}  # no subject {key_subject}; the first {len(keys)} keys are UTF-8 text"
    return f"# keys: no subject {key_subject}, so _kafka_key keeps the bytes (key.format: string for text)"


def _schemaless(topic: str, name: str, path: Path, partitions: int, values: list[bytes], missing: str,
                key_line: list[str]) -> Draft:
    """The file of a topic without a value subject whose first records are JSON objects, and its schema file: the
    schema of the first JsonConverter envelope (`connect-json`: every record carries its own, which evolves the
    table), else the JSON Schema inferred from the records (`json`). IngestionError `missing` when they are not."""
    documents, other = [], 0
    for value in values:
        try:
            parsed = json_values.parse(value)
        except json_values.InvalidJsonError:
            parsed = None
        if isinstance(parsed, dict):
            documents.append(parsed)
        else:
            other += 1
    if not documents or other > len(documents):
        if values and (framed := _schema_ids(values)):
            # Confluent's wire format (Avro, Protobuf or JSON Schema): its schemas are in a registry not named here
            ids = ", ".join(map(str, framed[:5])) + (" ..." if len(framed) > 5 else "")
            raise IngestionError(f"{missing}; its first {len(values)} records are in a schema registry's wire format "
                                 f"(schema ids {ids}): name that registry (value.registry.url, in "
                                 "conf/defaults.yaml for every pipeline) or put its schemas under schemas/")
        seen = ((f"{other} of its first {len(values)} records are not JSON objects" if documents else
                 f"its first {len(values)} records are not JSON objects") if values else
                "the topic holds no record with a value to tell its format from")
        raise IngestionError(f"{missing}; {seen}: write value.format and its schema by hand (docs/configuration.md)")
    envelopes = [d for d in documents if set(d) == {"schema", "payload"} and isinstance(d["schema"], dict)]
    skipped = f" ({other} not a JSON object: quarantined when read)" if other else ""
    if envelopes and len(envelopes) == len(documents):
        file = schemas_dir() / f"{name}.connect.json"
        schema_text = json.dumps(envelopes[0]["schema"], indent=2) + "\n"
        head = (f"Kafka Connect JsonConverter records with their schemas (schemas.enable=true) in {len(values)} "
                f"sampled{skipped}; the first one's schema is {file.name}, the table's first columns")
        value_line = (f"value: {{format: connect-json, schemaFile: {_yaml_text(file.name)}}}  # each record's own "
                      "schema evolves the table (docs/json.md)")
        fields = [f.get("field") for f in envelopes[0]["schema"].get("fields") or [] if isinstance(f, dict)]
        document = connect_types.document(envelopes[0]["schema"])
    else:
        file = schemas_dir() / f"{name}.schema.json"
        try:
            inferred = json_infer.infer(documents)
        except ValueError as exc:  # objects without properties
            raise IngestionError(f"{missing}; its first records are JSON, but {exc}: write value.format and its "
                                 "schema by hand (docs/configuration.md)") from None
        schema_text = json.dumps(inferred, indent=2) + "\n"
        mixed = json_infer.mixed_kinds(documents)
        kept = "; ".join(f"{name} ({', '.join(kinds)})" for name, kinds in mixed.items())
        if mixed:
            log.warning("%s: %d field(s) held values of two kinds in the samples and are kept as their JSON text: %s; "
                        "give each its type in %s", topic, len(mixed), kept, file)
        head = (f"plain JSON, no schema subject: {file.name} is inferred from {len(documents)} of {len(values)} "
                f"sampled records{skipped}" + (f"; as JSON text, of two kinds of value: {kept}" if mixed else "")
                + "; check it (docs/json.md#a-schema-from-the-topic)")
        value_line = (f"value: {{format: json, schemaFile: {_yaml_text(file.name)}}}  # a property the samples lacked "
                      "is a column once added to the file")
        fields = list(inferred["properties"])
        document = json_schemas.document(inferred)
    json_schemas.checked(document, str(file))  # the file maps to columns, or one line naming what does not
    lines = [f"# ingest init, {dt.date.today().isoformat()}: {partitions} partitions; {head}",
             f"name: {name}", f"topic: {_yaml_text(topic)}", value_line]
    lines += key_line
    lines += _rule_example(fields)
    text = "\n".join(lines) + "\n"
    return Draft(inherited(_parsed(text), path), text, ((file, schema_text),))


def _schema_ids(values: list[bytes]) -> list[int]:
    """The schema ids of values that are all in the schema registry's wire format; [] when one is not."""
    try:
        return sorted({wire.schema_id(value) for value in values})
    except wire.WireFormatError:
        return []


def _rule_example(fields: list[object]) -> list[str]:
    """The commented example rule of a draft, on the first of `fields` that SQL names bare ("id" when none)."""
    field = next((f for f in fields if isinstance(f, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", f)), "id")
    rule = re.sub(r"[^a-z0-9_]", "_", field.lower())
    return ["# expectations:  # data-quality rules on every row (docs/expectations.md); onViolation: warn | "
            "quarantine | fail",
            f'#   - {{name: {rule}_given, expect: "{field} IS NOT NULL", onViolation: warn}}']


def _routed(topic: str, name: str, path: Path, partitions: int, records: list[str], protobuf: bool) -> Draft:
    """The file of a topic whose values are several record types (Avro records, or Protobuf messages), a subject
    each (TopicRecordNameStrategy): a routed pipeline, a table per record type (docs/routing.md)."""
    types = [x[len(topic) + 1:] for x in records]
    tables = ", ".join(f"{name}_{route_name(t.rpartition('.')[2])}" for t in types)
    text = "\n".join([
        f"# ingest init, {dt.date.today().isoformat()}: {partitions} partitions; values of {len(records)} record "
        f"types, a subject each: {', '.join(records)}",
        f"name: {name}",
        f"topic: {_yaml_text(topic)}",
        f"value: {{{'format: protobuf, ' if protobuf else ''}subjectNameStrategy: TopicRecordNameStrategy}}",
        f"routing: {{by: recordName}}  # a table per record type ({tables}); a type registered later gets its own "
        "(docs/routing.md)",
    ]) + "\n"
    return Draft(inherited(_parsed(text), path), text)


def _field_names(schema: str) -> list[object]:
    """The field names of an Avro record schema, for the draft's example rule (none for other schemas)."""
    try:
        fields = json.loads(schema).get("fields") or []
        return [field["name"] for field in fields]
    except (ValueError, AttributeError, KeyError, TypeError):
        return []


def write(drafts: list[Draft]) -> list[Path]:
    """Write the drafts' files (each pipeline's schema file first) that do not exist yet; the paths written."""
    written = []
    for d in drafts:
        for path, text in (*d.files, (d.path, d.text)):
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                with open(path, "x") as out:  # never overwrite, even a file made meanwhile
                    out.write(text)
            except FileExistsError:
                continue
            written.append(path)
    return written


def _closest(wanted: str, known: list[str]) -> str:
    close = difflib.get_close_matches(wanted, known, n=3, cutoff=0.5)
    if close:
        return f"; closest: {', '.join(close)}"
    return f"; it knows {len(known)}: {', '.join(known[:10])}{' ...' if len(known) > 10 else ''}" if known else ""


def _yaml_text(value: str) -> str:
    return value if re.fullmatch(r"[A-Za-z0-9_.-]+", value) and not value[0].isdigit() else f'"{value}"'


def _parsed(text: str) -> dict[str, object]:
    import yaml

    data = yaml.safe_load(text)
    if not isinstance(data, dict):  # pragma: no cover - written above
        raise ConfigError(f"ingest init wrote an unreadable file:\n{text}")
    return data
