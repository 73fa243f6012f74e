"""Where writer schemas come from, on the driver only: a Confluent Schema Registry or the `schemas/` folder.

Two sources behave alike: a Confluent Schema Registry (`value.registry`, through confluent-kafka's client, basic
auth and TLS settings passed as is; `mock://` gives an in-memory one for tests), or the `schemas/` folder.

The registry's client keeps what it fetched by id and by version, and the pipeline asks again only for schema ids
it has not seen: while the registry is away, records of known ids keep decoding. A request that gets no answer is
retried by the client with exponential backoff (`max.retries`, default 3; `retries.wait.ms`, 1000;
`retries.max.wait.ms`, 20000, in `value.registry`); then, like a refused login (401) or a refused subject (403),
it is a SchemaError that names the registry and the cause, never "subject not found".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ingestion import security
from ingestion.config import PipelineConfig
from ingestion.errors import SchemaError, SubjectNotFoundError, one_line
from ingestion.paths import schemas_dir
from ingestion.schema import json_schemas, protobuf_schemas
from ingestion.schema.files import canonical_json, load_subject, read_avsc, read_proto, suffix_of
from ingestion.security import redact_url

_CLIENTS: dict[str, Any] = {}


# Settings the registry client wants as numbers; a pipeline file's values are text.
_NUMBERS = ("max.retries", "retries.wait.ms", "retries.max.wait.ms", "timeout", "cache.capacity",
            "cache.latest.ttl.sec")


def registry_client(settings: Mapping[str, str]) -> Any:
    """One client per distinct settings in this process (so an in-memory `mock://` registry is shared)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    key = json.dumps(sorted(settings.items()))
    if key not in _CLIENTS:
        typed: dict[str, Any] = dict(settings)
        for name in _NUMBERS:
            if name in typed:
                typed[name] = float(typed[name]) if "." in str(typed[name]) else int(typed[name])
        _CLIENTS[key] = SchemaRegistryClient.new_client(typed)
    return _CLIENTS[key]


def registry_failure(exc: Exception, settings: Mapping[str, str], subject: str | None = None) -> SchemaError | None:
    """The SchemaError of a registry client's failure: refused credentials (401), a refused subject (403), no
    answer (after the client's retries) or a TLS failure; None for anything else (a 404 among them)."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    url = redact_url(settings.get("url", "?"))
    if isinstance(exc, SchemaRegistryError):
        if exc.http_status_code == 401:
            return SchemaError(f"schema registry at {url} refused the credentials (401 {exc.error_message}); check "
                               "value.registry.basic.auth.user.info (user:password)")
        if exc.http_status_code == 403:
            what = f"subject {subject!r}" if subject else "the request"
            return SchemaError(f"schema registry at {url} denied access to {what} (403 {exc.error_message}); grant "
                               "the registry user read access to it")
        if exc.http_status_code >= 500 or exc.http_status_code in (408, 429):
            return SchemaError(f"schema registry at {url} failed to answer ({exc.http_status_code} "
                               f"{exc.error_message}) after {_attempts(settings)} attempts")
        return None
    # httpx's (or httpx2's, whichever the client uses) TransportError: no answer, refused, reset, TLS failures
    if any(c.__name__ == "TransportError" for c in type(exc).__mro__):
        reason = security.mask(one_line(exc))
        if "CERTIFICATE_VERIFY_FAILED" in reason or "certificate verify failed" in reason:
            return SchemaError(f"schema registry at {url}: TLS certificate not trusted ({reason}); set "
                               "value.registry.ssl.ca.location to the CA that signed it")
        return SchemaError(f"schema registry at {url} did not answer after {_attempts(settings)} attempts "
                           f"({type(exc).__name__}: {reason}); check value.registry.url and that the registry runs")
    return None


def _attempts(settings: Mapping[str, str]) -> int:
    return int(settings.get("max.retries", 3)) + 1


class SchemaSource(Protocol):
    def versions(self, subject: str) -> dict[int, str]:
        """Every version of the subject: schema id -> canonical schema JSON, oldest first."""

    def subjects(self) -> list[str]:
        """Every subject the source knows, sorted."""

    def by_id(self, schema_id: int) -> str | None:
        """The canonical JSON of any schema id, or None when unknown."""


@dataclass
@dataclass(frozen=True)
class FolderSource:
    """`schemas/<subject>/<id>.avsc` (or `.proto`, `.json`), read again on every call so files added while running
    are seen. `suffix`: the extension of the pipeline's format, named in the error about a missing subject."""

    suffix: str = ".avsc"

    def versions(self, subject: str) -> dict[int, str]:
        return load_subject(schemas_dir(), subject, self.suffix).versions

    def subjects(self) -> list[str]:
        return sorted(p.name for p in schemas_dir().glob("*")
                      if p.is_dir() and any(any(p.glob(f"*{suffix}")) for suffix in (".avsc", ".proto", ".json")))

    def by_id(self, schema_id: int) -> str | None:
        for file in schemas_dir().glob(f"*/{schema_id}.avsc"):
            return read_avsc(file)
        for file in schemas_dir().glob(f"*/{schema_id}.proto"):
            return read_proto(file, schemas_dir())
        for file in schemas_dir().glob(f"*/{schema_id}.json"):
            return json_schemas.read_file(file)
        return None


@dataclass
class SchemaFileSource:
    """value.format json / connect-json: one schema file (`value.schemaFile`) for every subject, schema id 0."""

    setting: str
    connect: bool = False

    @property
    def file(self) -> Path:
        return json_schemas.schema_file(self.setting, schemas_dir())

    def versions(self, subject: str) -> dict[int, str]:
        return {json_schemas.FILE_SCHEMA_ID: json_schemas.read_file(self.file, connect=self.connect)}

    def subjects(self) -> list[str]:
        return []

    def by_id(self, schema_id: int) -> str | None:
        return self.versions("")[schema_id] if schema_id == json_schemas.FILE_SCHEMA_ID else None


@dataclass
class RegistrySource:
    client: Any
    settings: Mapping[str, str] = field(default_factory=dict)

    def versions(self, subject: str) -> dict[int, str]:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            numbers = sorted(self.client.get_versions(subject))
            found = {}
            for number in numbers:
                registered = self.client.get_version(subject, number)
                found[int(registered.schema_id)] = self._text(registered.schema, f"{subject}.proto")
            return found
        except Exception as exc:
            failure = registry_failure(exc, self.settings, subject)
            if failure is not None:
                raise failure from None
            if isinstance(exc, SchemaRegistryError):
                kind = SubjectNotFoundError if exc.http_status_code == 404 else SchemaError
                raise kind(f"subject {subject!r} not found in the schema registry at "
                           f"{redact_url(self.settings.get('url', '?'))}: {exc.error_message} "
                           f"({exc.http_status_code}, error code {exc.error_code})") from None
            raise

    def subjects(self) -> list[str]:
        try:
            return sorted(self.client.get_subjects())
        except Exception as exc:
            failure = registry_failure(exc, self.settings)
            if failure is not None:
                raise failure from None
            raise

    def _text(self, schema: Any, name: str) -> str:
        """The pipeline's text of a registered schema: canonical JSON for Avro; for Protobuf, the document of the
        file and its references (each a subject version, resolved recursively; well-known files need none)."""
        kind = schema.schema_type or "AVRO"
        if kind == "JSON":
            return json_schemas.from_registry(schema.schema_str, self._references(schema), name)
        if kind != "PROTOBUF":
            return canonical_json(json.loads(schema.schema_str))
        return protobuf_schemas.document(name, {**self._references(schema), name: schema.schema_str})

    def _references(self, schema: Any) -> dict[str, str]:
        """The text of every schema a schema's references name (recursively), by reference name."""
        found: dict[str, str] = {}
        pending = list(schema.references or [])
        while pending:
            reference = pending.pop()
            if reference.name in found:
                continue
            referenced = self.client.get_version(reference.subject, reference.version).schema
            found[reference.name] = referenced.schema_str
            pending.extend(referenced.references or [])
        return found

    def by_id(self, schema_id: int) -> str | None:
        try:
            return self._text(self.client.get_schema(schema_id), f"schema-{schema_id}.proto")
        except Exception as exc:
            failure = registry_failure(exc, self.settings)
            if failure is not None:
                raise failure from None
            from confluent_kafka.schema_registry.error import SchemaRegistryError

            if isinstance(exc, SchemaRegistryError):
                return None
            raise


def source_for(config: PipelineConfig) -> SchemaSource:
    if config.value.schema_file:
        return SchemaFileSource(config.value.schema_file, connect=config.value.format == "connect-json")
    if not config.value.registry:
        return FolderSource(suffix_of(config.value.format))
    return RegistrySource(registry_client(config.value.registry), config.value.registry)


def check_registry(config: PipelineConfig, *, subject_may_be_missing: bool = False) -> None:
    """The registry answers and takes the credentials, and the subjects of the named topics exist (in the registry
    or the schemas/ folder), asked before a JVM starts: a SchemaError naming the pipeline file and the cause (a
    missing subject with the closest existing ones) otherwise."""
    by_record = config.routing is not None and config.routing.by == "recordName"
    if config.value.registry:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        client = registry_client(config.value.registry)
        # a pattern's topics are not known here, nor the record types of a pipeline routed by them: any answer will do
        subjects = [] if by_record else config.value_subjects(config.topics)
        try:
            client.get_versions(subjects[0]) if subjects else client.get_subjects()
        except Exception as exc:
            failure = registry_failure(exc, config.value.registry, subjects[0] if subjects else None)
            if failure is not None:
                raise SchemaError(f"{config.file}: {failure}") from None
            if not (isinstance(exc, SchemaRegistryError) and exc.http_status_code == 404):
                raise
    if not subject_may_be_missing and not by_record:
        check_subjects(config)


def check_subjects(config: PipelineConfig) -> None:
    """Every value subject a stream of the pipeline must find (its named topics', or `value.subject`) exists, with
    the schemas in it readable; a SchemaError naming the file, the key and the closest subjects otherwise."""
    import difflib

    if config.value.schema_file:  # json, connect-json: the file is read (and its schema checked) now
        try:
            source_for(config).versions("")
        except SchemaError as exc:
            raise type(exc)(f"{config.file}: key 'value.schemaFile' ({config.value.schema_file!r}): {exc}") from None
        return
    if config.value.format not in ("confluent", "avro", "protobuf", "jsonschema"):
        return
    if config.topic_pattern:  # the topics a pattern matches are not known here
        subjects = [config.value.subject] if config.value.subject else []
    else:
        subjects = config.value_subjects(config.topics)
    key = "value.subject" if config.value.subject else "value.subjectNameStrategy"
    source = source_for(config)
    for subject in subjects:
        try:
            source.versions(subject)
        except SubjectNotFoundError as exc:
            known = source.subjects()
            close = difflib.get_close_matches(subject, known, n=3, cutoff=0.5)
            hint = f"; closest: {', '.join(close)}" if close else f"; known subjects: {', '.join(known[:10])}"
            raise SubjectNotFoundError(f"{config.file}: key '{key}' ({subject!r}): {exc}"
                                       f"{hint if known else ''}") from None
