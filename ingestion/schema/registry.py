"""Where writer schemas come from, on the driver only: a Confluent Schema Registry or the `schemas/` folder.

Two sources behave alike: a Confluent Schema Registry (`value.registry`, through confluent-kafka's client, basic
auth and TLS settings passed as is; `mock://` gives an in-memory one for tests), or the `schemas/` folder.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ingestion.config import PipelineConfig
from ingestion.errors import SchemaError
from ingestion.paths import schemas_dir
from ingestion.schema.files import canonical_json, load_subject

_CLIENTS: dict[str, Any] = {}


def registry_client(settings: Mapping[str, str]) -> Any:
    """One client per distinct settings in this process (so an in-memory `mock://` registry is shared)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    key = json.dumps(sorted(settings.items()))
    if key not in _CLIENTS:
        _CLIENTS[key] = SchemaRegistryClient.new_client(dict(settings))
    return _CLIENTS[key]


class SchemaSource(Protocol):
    def versions(self, subject: str) -> dict[int, str]:
        """Every version of the subject: schema id -> canonical schema JSON, oldest first."""

    def by_id(self, schema_id: int) -> str | None:
        """The canonical JSON of any schema id, or None when unknown."""


@dataclass
class FolderSource:
    """`schemas/<subject>/<id>.avsc`, read again on every call so files added while running are seen."""

    def versions(self, subject: str) -> dict[int, str]:
        return load_subject(schemas_dir(), subject).versions

    def by_id(self, schema_id: int) -> str | None:
        for file in schemas_dir().glob(f"*/{schema_id}.avsc"):
            return canonical_json(json.loads(file.read_text()))
        return None


@dataclass
class RegistrySource:
    client: Any

    def versions(self, subject: str) -> dict[int, str]:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            numbers = sorted(self.client.get_versions(subject))
        except SchemaRegistryError as exc:
            raise SchemaError(f"subject {subject!r} not found in the schema registry: {exc}") from None
        found = {}
        for number in numbers:
            registered = self.client.get_version(subject, number)
            found[int(registered.schema_id)] = canonical_json(json.loads(registered.schema.schema_str))
        return found

    def by_id(self, schema_id: int) -> str | None:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            return canonical_json(json.loads(self.client.get_schema(schema_id).schema_str))
        except SchemaRegistryError:
            return None


def source_for(config: PipelineConfig) -> SchemaSource:
    return RegistrySource(registry_client(config.value.registry)) if config.value.registry else FolderSource()
