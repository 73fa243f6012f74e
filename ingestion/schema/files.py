"""Where writer schemas come from, looked up on the driver only.

The schema folder mirrors a registry: `schemas/<subject>/<schema id>.avsc` (Avro) or `<schema id>.proto`
(Protobuf; imports are found beside the file, then from the folder's root: a `.proto` file beside the versions
that is not named by an id is not a version but a file they import). Ids are global, as in a Confluent Schema
Registry: the same id under two subjects must be the same schema. The newest id of a subject is its current
version, the reader schema the table is built from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ingestion.errors import SchemaError, SubjectNotFoundError, one_line
from ingestion.schema import avro_types
from ingestion.schema.avro_types import AvroSchema


@dataclass(frozen=True)
class Subject:
    """All known versions of one subject: schema id -> schema JSON text, oldest first."""

    name: str
    versions: dict[int, str]

    @property
    def latest_id(self) -> int:
        return max(self.versions)

    @property
    def latest(self) -> AvroSchema:
        return json.loads(self.versions[self.latest_id])


# The file a subject's versions are named like, by value format (what errors show as the example).
SUFFIXES = {"protobuf": ".proto", "jsonschema": ".json"}


def suffix_of(value_format: str) -> str:
    """The extension of a schema file of this value format in the schemas folder (`.avsc` for Avro)."""
    return SUFFIXES.get(value_format, ".avsc")


def load_subject(folder: Path, subject: str, suffix: str = ".avsc") -> Subject:
    """Read every `<id>.avsc` (or `<id>.proto`, `<id>.json`) of a subject; raise SchemaError naming the file when
    one is invalid. `suffix`: the extension the messages name as the example (the pipeline's value format's)."""
    directory = folder / subject
    # A .json file not named by an id is a document the versions' `$ref`s name (json_schemas.read_file reads it);
    # a .proto file not named by an id, one the versions import (checked below).
    files = sorted([*directory.glob("*.avsc"), *(f for f in directory.glob("*.proto") if f.stem.isdigit()),
                    *(f for f in directory.glob("*.json") if f.stem.isdigit())]) if directory.is_dir() else []
    if not files:
        raise SubjectNotFoundError(f"no schemas for subject {subject!r}: expected files like "
                                   f"{directory / ('1' + suffix)}")
    versions: dict[int, str] = {}
    for file in files:
        if not file.stem.isdigit():
            raise SchemaError(f"{file}: schema files are named by their schema id, like 1{file.suffix}; got "
                              f"{file.name!r}")
        if file.suffix == ".proto":
            versions[int(file.stem)] = read_proto(file, folder)
            continue
        if file.suffix == ".json":  # a JSON Schema (value.format jsonschema)
            from ingestion.schema import json_schemas

            versions[int(file.stem)] = json_schemas.read_file(file)
            continue
        versions[int(file.stem)] = read_avsc(file)
    _check_imports(directory, versions)
    _check_global_ids(folder, subject, {int(f.stem): f for f in files}, versions)
    return Subject(subject, dict(sorted(versions.items())))


def _check_imports(directory: Path, versions: dict[int, str]) -> None:
    """Every `.proto` file beside the versions that is not named by an id is imported by one of them (by its name,
    as `import "common.proto";` names it): anything else is a version misnamed, refused naming the file."""
    others = [f for f in sorted(directory.glob("*.proto")) if not f.stem.isdigit()]
    if not others:
        return
    from ingestion.schema import protobuf_schemas

    imported = {name for text in versions.values() if protobuf_schemas.is_document(text)
                for name in protobuf_schemas.file_names(text)}
    for file in others:
        if file.name not in imported:
            raise SchemaError(f"{file}: schema files are named by their schema id, like 1.proto; got "
                              f"{file.name!r}, which no version of the subject imports")


def read_proto(file: Path, folder: Path) -> str:
    """The Protobuf document of a `.proto` schema file (protobuf_schemas), SchemaError naming the file."""
    from ingestion.schema import protobuf_schemas

    try:
        return protobuf_schemas.document(file.name, {file.name: file.read_text()}, (file.parent, folder))
    except SchemaError as exc:
        raise SchemaError(f"{file}: {exc}") from None


def read_avsc(file: Path) -> str:
    """The canonical JSON of an `.avsc` file: a valid Avro schema (fastavro's parser: names, types, defaults)
    whose every type Spark can hold; else one SchemaError naming the file and the reason."""
    try:
        schema = json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{file}: not valid JSON: {exc}") from None
    import fastavro

    try:
        fastavro.parse_schema(schema, _write_hint=False)
    except fastavro.schema.UnknownType:
        pass  # the walk below names the field whose type is unknown
    except Exception as exc:  # noqa: BLE001 - fastavro's SchemaParseException, and its TypeErrors on odd JSON
        raise SchemaError(f"{file}: not a valid Avro schema: {one_line(exc)}") from None
    try:
        avro_types.spark_type(schema)
    except SchemaError as exc:
        raise SchemaError(f"{file}: {exc}") from None
    return canonical_json(schema)


def _check_global_ids(folder: Path, subject: str, own: dict[int, Path], versions: dict[int, str]) -> None:
    """A schema id of the subject (its file `own[id]`, its text `versions[id]`) that another subject's `.avsc` or
    `.proto` file gives a different schema: refused naming both files (a registry's ids are global)."""
    for other in folder.iterdir():
        if not other.is_dir() or other.name == subject:
            continue
        for schema_id, text in versions.items():
            twin = other / f"{schema_id}.proto"
            if twin.is_file():
                differs = read_proto(twin, folder) != text
            else:
                twin = other / f"{schema_id}.avsc"
                differs = twin.is_file() and read_avsc(twin) != text
            if differs:
                raise SchemaError(f"schema id {schema_id} means two different schemas: {own[schema_id]} and {twin}")


def canonical_json(schema: AvroSchema) -> str:
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))
