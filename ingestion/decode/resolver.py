"""The reader schema of a pipeline and the decode spec built from it, refreshed when new writer ids appear.

The reader schema is the subject's newest version, adopted while the table can follow it: by adding columns,
and (with `sink.typeWidening`, the default) by widening a column where both Avro's schema resolution and Delta's
type widening allow it (int -> long, float -> double). A version that changes an existing column's type in any
other way is not adopted, and its records either resolve to the current reader by Avro's rules or fail like any
undecodable record (quarantine, `SchemaResolutionError`, or fail, per `sink.onError`).

`connect-json` records carry their own schema: each one is its record's writer schema, with an id of its own
(`connect_types.schema_id`). A record whose schema the table cannot hold yet is an UnknownSchemaError with that id,
as a registry format's record of a new version is; the writer hands `refresh` one such record per id, and the
reader becomes the table's columns merged with every schema learnt (`struct_evolution.merge`: fields added, nested
ones too, columns widened), so the same path evolves the table.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql import types as T

from ingestion.config import PipelineConfig
from ingestion.decode import protobuf_message
from ingestion.decode.spec import DecodeSpec, payload_struct, protobuf_struct, same_schema
from ingestion.errors import SchemaError, SubjectNotFoundError
from ingestion.schema import avro_types, connect_types, json_schemas, protobuf_schemas, struct_evolution
from ingestion.schema.registry import SchemaSource

log = logging.getLogger(__name__)


# Seconds before a schema id no subject of the pipeline had is asked for again.
ASK_AGAIN_SECONDS = 30.0

# Column type changes a table follows: promotions (a reader of the new type reads data of the old: Avro's int ->
# long and float -> double, Connect's narrower integers) that Delta's type widening also supports.
WIDENINGS = struct_evolution.WIDER


def evolution(old: T.StructType, new: T.StructType, *, widen: bool,
              prefix: str = "") -> list[tuple[str, T.DataType]] | None:
    """How a table of `old` columns follows `new`: the columns to widen ([] when adding columns is enough, dotted
    paths for nested fields), or None when it cannot (a field dropped, or a type changed in another way)."""
    fields = {f.name: f.dataType for f in new.fields}
    widened: list[tuple[str, T.DataType]] = []
    for f in old.fields:
        if f.name not in fields:
            return None
        now = fields[f.name]
        if isinstance(f.dataType, T.StructType) and isinstance(now, T.StructType):
            inner = evolution(f.dataType, now, widen=widen, prefix=f"{prefix}{f.name}.")
            if inner is None:
                return None
            widened.extend(inner)
        elif f.dataType != now:
            if not (widen and (type(f.dataType), type(now)) in WIDENINGS):
                return None
            widened.append((prefix + f.name, now))
    return widened


def additive(old: T.StructType, new: T.StructType) -> bool:
    """True when `new` keeps every field of `old` with the same type (recursively) and only adds fields."""
    return evolution(old, new, widen=False) == []


@dataclass
class SchemaResolver:
    """The decode spec of one pipeline, refreshed when a batch brings schema ids it does not know.

    Every topic's writer schemas come from its own subject (`value.subject_for`); ids are global in a registry,
    so the writers of all subjects are one map. The reader schema is the newest version among them that the table
    can follow: a table holds one record type (that evolves), whichever topic a version came from."""

    config: PipelineConfig
    source: SchemaSource
    table_payload: T.StructType | None = None  # the payload columns the table has now, if it exists
    topics: tuple[str, ...] | None = None  # the topics read now (default: the config's named topics)
    # value.format protobuf: the message the table records (its property; "" when none or no table), and the values
    # of the topic's earliest records, asked for a new table only when the file leaves its message open
    table_message: str = ""
    sample: Callable[[], Sequence[bytes]] | None = None
    spec: DecodeSpec = field(init=False)

    def __post_init__(self) -> None:
        self._topics = set(self.config.topics if self.topics is None else self.topics)
        self._unresolved: dict[int, float] = {}  # schema id -> when the subjects were last asked for it
        self._unread: set[str] = set()  # topics followed whose subjects were not read yet
        self._message = ""  # value.format protobuf: the message the table holds, chosen once
        self._pinned = False
        self._key_message = ""
        self._embedded: dict[int, str] = {}  # connect-json: schema id -> the schema records brought, as learnt
        self._refused: set[int] = set()  # connect-json: the ids whose schema the table cannot take (logged once)
        versions = self._versions(strict=True)
        if self.config.value.format == "protobuf":
            self._choose_message(versions)
        self.spec = self._build(versions, self._reader(versions, current=None))

    @property
    def subjects(self) -> list[str]:
        return self.config.value_subjects(self._topics)

    def _versions(self, *, strict: bool) -> dict[int, str]:
        """Every version of the subjects: a named topic's missing subject is an error when `strict`; a topic
        found by the pattern may have none yet (its records cannot be decoded until it has)."""
        subjects = self.subjects
        if not subjects:
            raise SchemaError(f"no topic matches topicPattern {self.config.topic_pattern!r} yet, and value.subject is "
                              "not set: the table's columns come from the subjects of the topics it reads; create a "
                              "matching topic (and its subject), or set value.subject")
        found: dict[int, str] = {}
        missing: list[SubjectNotFoundError] = []
        for subject in subjects:
            try:
                found.update(self.source.versions(subject))
            except SubjectNotFoundError as exc:
                if (strict and not self.config.topic_pattern) or len(subjects) == 1:
                    raise
                missing.append(exc)
        for absent in missing:
            log.warning("%s: %s; records written with it cannot be decoded until it exists", self.config.name, absent)
        if not found:
            raise missing[0]
        return {**found, **self._embedded}

    def follow(self, topics: set[str] | list[str]) -> None:
        """Topics the pipeline reads since its start (Spark's listing found them, a batch held them): counted in
        `subjects` from now on, their subjects read at the next refresh."""
        fresh = set(topics) - self._topics
        self._topics |= fresh
        self._unread |= fresh

    def refresh(self, unknown_ids: set[int], topics: set[str] | frozenset[str] = frozenset(),
                records: Mapping[int, bytes] | None = None) -> bool:
        """Learn the given ids if they are versions of the subjects of the pipeline's topics (with `topics`, the
        topics the ids came from, which a pattern may have found since); True when the spec changed. Ids the
        spec holds already are not asked for (a registry that is away costs nothing for them). `records`:
        connect-json, a record value of each id, whose embedded schema is that id's version."""
        if self.config.value.format == "connect-json":
            self._learn(records or {})
        now = time.monotonic()
        new_topics = (set(topics) - self._topics) | self._unread
        asked = {i for i, when in self._unresolved.items() if now - when < ASK_AGAIN_SECONDS}
        # Ids asked about a moment ago are not asked again (a topic without its subject would otherwise cost a
        # round of registry calls per batch), unless a topic came with them whose subject was never read.
        if not set(unknown_ids) - set(self.spec.writer_schemas) - (set() if new_topics else asked):
            return False
        self._topics |= set(topics)
        versions = self._versions(strict=False)
        self._unread.clear()
        learned = {i for i in unknown_ids if i in versions} - set(self.spec.writer_schemas)
        for schema_id in sorted(set(unknown_ids) - learned - set(self.spec.writer_schemas)):
            if schema_id not in self._unresolved:
                log.warning("%s: schema id %d is not a version of subject(s) %s; its records cannot be decoded "
                            "(asked again every %.0f s)", self.config.name, schema_id,
                            ", ".join(repr(s) for s in self.subjects), ASK_AGAIN_SECONDS)
            self._unresolved[schema_id] = now
        if not learned:
            return False
        for schema_id in learned:
            self._unresolved.pop(schema_id, None)
        reader = self._reader(versions, current=self.spec.reader_schema)
        evolved = not same_schema(reader, self.spec.reader_schema)
        if evolved and self.config.value.format == "connect-json":
            columns = self._payload(reader)
            assert columns is not None
            log.info("%s: new schema(s) %s embedded in the records: the table gains or widens %s", self.config.name,
                     sorted(learned), ", ".join(struct_evolution.changed(self.spec.payload_type, columns)))
        elif evolved:
            log.info("%s: new schema version(s) %s of %s: the table evolves to the newest", self.config.name,
                     sorted(learned), ", ".join(repr(s) for s in self.subjects))
        self.spec = self._build({**self.spec.writer_schemas, **versions}, reader)
        return True

    def _learn(self, records: Mapping[int, bytes]) -> None:
        for value in records.values():
            try:
                schema = json.loads(value)["schema"]
                text = json.dumps(schema, sort_keys=True)
                self._payload(connect_types.document(schema))
            except (ValueError, TypeError, KeyError, SchemaError):
                continue  # not a record whose schema is a table's (its decoder says why)
            self._embedded.setdefault(connect_types.schema_id(text), connect_types.document(schema))

    def widened_columns(self, table: T.StructType | None) -> list[tuple[str, T.DataType]]:
        """The columns of a table with `table` payload columns that must widen to hold the reader's rows."""
        if table is None:
            return []
        return evolution(table, self.spec.payload_type, widen=True) or []

    def _reader(self, versions: dict[int, str], current: str | None) -> str:
        """The newest version the table can follow (the newest, for a new table); connect-json: `_merged`."""
        if self.config.value.format == "connect-json":
            return self._merged(versions, current)
        baseline = self.table_payload or (self._payload(current) if current else None)
        widen = self.config.sink.type_widening
        for schema_id in sorted(versions, reverse=True):
            candidate = versions[schema_id]
            payload = self._payload(candidate)
            if payload is None:
                continue  # a Protobuf version without the table's message
            if baseline is None or evolution(baseline, payload, widen=widen) is not None:
                return candidate
            log.warning("%s: schema id %d changes existing column types in a way the table cannot follow%s; "
                        "keeping the current reader schema (records resolve to it by Avro's rules, or fail per "
                        "sink.onError)", self.config.name, schema_id, "" if widen else " (sink.typeWidening is off)")
        if current is None:
            raise SchemaError(f"no version of subject(s) {', '.join(repr(x) for x in self.subjects)} matches the "
                              f"columns of {self.config.table_path}")
        return current

    def _merged(self, versions: dict[int, str], current: str | None) -> str:
        """connect-json: the table's columns (the schema file's for a new table) merged with every version, the
        schema file's first, then the schemas records brought in the order they were learnt."""
        merged = self.table_payload or (self._payload(current) if current else None)
        for schema_id, text in versions.items():
            payload = self._payload(text)
            assert payload is not None
            if merged is None:
                merged = payload
                continue
            result = struct_evolution.merge(merged, payload, widen=self.config.sink.type_widening, path="$.payload")
            if isinstance(result, str):
                if schema_id not in self._refused:
                    self._refused.add(schema_id)
                    where = ("value.schemaFile" if schema_id == json_schemas.FILE_SCHEMA_ID else
                             f"the schema of records with schema id {schema_id}")
                    log.warning("%s: the table cannot take %s: %s; its records are quarantined "
                                "(ConnectSchemaError)", self.config.name, where, result)
                continue
            merged = result
        assert merged is not None
        return connect_types.document(connect_types.from_spark(merged))

    def _payload(self, text: str) -> T.StructType | None:
        """The payload columns of a version; for Protobuf, of the table's message (`_choose_message`), None when
        the version lacks it."""
        value_format = self.config.value.format
        if value_format in ("jsonschema", "json", "connect-json"):
            if protobuf_schemas.is_document(text) or not text.startswith(('{"jsonschema":', '{"connect":')):
                raise SchemaError(f"value.format is {value_format}, but the subject holds a schema that is not a "
                                  "JSON Schema (schemaType JSON)")
            try:
                return payload_struct(value_format, text)
            except SchemaError as exc:  # name where the schema came from (a file's check names the file already)
                where = self.config.value.schema_file or f"subject(s) {', '.join(repr(x) for x in self.subjects)}"
                message = str(exc)
                raise type(exc)(message if message.startswith(where) else f"{where}: {message}") from None
        if value_format != "protobuf":
            return avro_types.spark_schema(json.loads(text))
        if not protobuf_schemas.is_document(text):
            raise SchemaError("value.format is protobuf, but the subject holds a schema that is not Protobuf")
        if protobuf_schemas.find_message(text, self._message) is None:
            return None
        return protobuf_struct(text, self._message)

    def _choose_message(self, versions: dict[int, str]) -> None:
        """The message the table holds (`protobuf_message.choose`), from the newest version, once."""
        newest = versions[max(versions)]
        if not protobuf_schemas.is_document(newest):
            raise SchemaError("value.format is protobuf, but the subject holds a schema that is not Protobuf")
        choice = protobuf_message.choose(newest, versions, pinned=self.config.value.message_name,
                                         recorded=self.table_message, table_exists=self.table_payload is not None,
                                         sample=self.sample)
        self._message, self._pinned = choice.name, choice.pinned
        log.info("%s: the table holds Protobuf message %s (%s)", self.config.name, choice.name, choice.reason)

    def _build(self, writers: dict[int, str], reader: str) -> DecodeSpec:
        protobuf = self.config.value.format == "protobuf"
        if self.config.value.format in ("confluent", "avro"):
            avro_types.check_bounded(json.loads(reader))
        key_schemas = key_reader = None
        if self.config.key.format in ("avro", "protobuf"):
            key_schemas = {}
            subjects = sorted({self.config.key.subject_for(t) for t in self._topics} or {self.config.key.subject})
            for subject in subjects:
                try:
                    key_schemas.update(self.source.versions(subject))
                except SubjectNotFoundError:
                    if not self.config.topic_pattern or (subject == subjects[-1] and not key_schemas):
                        raise
            key_reader = key_schemas[max(key_schemas)]
            if self.config.key.format == "protobuf" and not self._key_message:
                self._key_message = protobuf_schemas.table_message(key_reader, self.config.key.message_name)
        plain_id = None
        if self.config.value.format in ("avro", "json", "connect-json"):  # no header: the newest version wrote all
            plain_id = next((i for i in sorted(writers, reverse=True) if same_schema(writers[i], reader)),
                            json_schemas.FILE_SCHEMA_ID)  # connect-json: a reader merged from several
        # Executors always flag failures instead of raising: the driver first learns schema ids it did not know,
        # then applies sink.onError (see sink.BronzeWriter).
        return DecodeSpec(writer_schemas=dict(writers), reader_schema=reader, max_bytes=self.config.value.max_bytes,
                          fail_fast=False, key_format=self.config.key.format, plain_schema_id=plain_id,
                          key_schemas=key_schemas, key_reader=key_reader, value_format=self.config.value.format,
                          message_name=self._message if protobuf else "", key_message_name=self._key_message,
                          message_pinned=self._pinned, strict=protobuf and self.config.value.strict)
