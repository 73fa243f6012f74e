"""JSON schemas as the pipeline keeps them: one self-contained *document* per schema id (docs/json.md#schemas).

A JSON Schema may `$ref` other documents (a registry's *references*: each a subject version, named as the `$ref`
names it). The pipeline keeps each version as canonical JSON `{"jsonschema": {"root": ..., "refs": {name: ...}}}`,
plain text as an Avro schema is, so the resolver, the spec and the executors carry it the same way. A Kafka
Connect schema (value.format connect-json) is kept as `{"connect": ...}` (`connect_types`).

Sources: a registry's versions with `schemaType: JSON`, `schemas/<subject>/<id>.json`, or one file
(`value.schemaFile`, for `json` and `connect-json`, which carry no schema id: its id is 0).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ingestion.errors import SchemaError
from ingestion.schema import connect_types, json_ddl, json_types

DOCUMENT_KEY = "jsonschema"
FILE_SCHEMA_ID = 0  # the schema id of value.format json / connect-json rows: their one schema file


def is_document(text: str) -> bool:
    return text.startswith('{"jsonschema":')


def document(root: Any, refs: dict[str, Any] | None = None) -> str:
    # not key-sorted: the order of `properties` is the order of the columns
    return json.dumps({DOCUMENT_KEY: {"refs": refs or {}, "root": root}}, separators=(",", ":"))


def checked(text: str, where: str) -> str:
    """The document, after compiling it: UnsupportedSchemaError naming `where` and the construct otherwise."""
    if connect_types.is_document(text):
        connect_types.spark_schema(text)
    else:
        json_types.spark_schema(text, where)
    return text


def read_file(file: Path, *, connect: bool = False) -> str:
    """The document of a schema file: a JSON Schema (a Spark DDL string in a `.ddl` file, `json_ddl`), or with
    `connect` a Kafka Connect schema (the `schema` part of a JsonConverter record; a whole record
    `{"schema": ..., "payload": ...}` is taken for its schema)."""
    try:
        if file.suffix == ".ddl" and not connect:  # a Spark DDL string: the JSON Schema it means
            return checked(document(json_ddl.to_json_schema(file.read_text())), str(file))
        parsed = json.loads(file.read_text())
    except SchemaError as exc:
        raise type(exc)(f"{file}: {exc}") from None
    except OSError as exc:
        raise SchemaError(f"{file}: cannot read the schema file: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{file}: not valid JSON: {exc}") from None
    if connect:
        if isinstance(parsed, dict) and set(parsed) == {"schema", "payload"}:
            parsed = parsed["schema"]
        text = connect_types.document(parsed)
    else:
        refs = _sibling_refs(file, parsed)
        for name, each in {file.name: parsed, **refs}.items():
            _check_document(file.parent / name, each)
        text = document(parsed, refs)
    try:
        return checked(text, str(file))
    except SchemaError as exc:
        message = str(exc)
        raise type(exc)(message if message.startswith(str(file)) else f"{file}: {message}") from None


def _check_document(file: Path, schema: Any) -> None:
    """A JSON Schema file that its own metaschema accepts (the draft its `$schema` names, else the newest): one
    SchemaError naming the file, the place in it and the reason otherwise (`"properties": "x"`, say)."""
    from jsonschema import exceptions, validators

    try:
        validators.validator_for(schema).check_schema(schema)
    except exceptions.SchemaError as exc:
        raise SchemaError(f"{file}: not a valid JSON Schema: {exc.message} (at {exc.json_path})") from None


def _sibling_refs(file: Path, schema: Any) -> dict[str, Any]:
    """The documents a schema file's `$ref`s name (`other.json#/...`), read from beside it."""
    refs: dict[str, Any] = {}
    pending = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and not ref.startswith("#"):
                name = ref.partition("#")[0]
                path = file.parent / name
                if name not in refs and path.is_file():
                    refs[name] = json.loads(path.read_text())
                    pending.append(refs[name])
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return refs


def schema_file(setting: str, schemas: Path) -> Path:
    """value.schemaFile as a path: absolute, or relative to the schemas folder."""
    path = Path(setting).expanduser()
    return path if path.is_absolute() else schemas / path


def from_registry(schema_str: str, refs: dict[str, str], where: str) -> str:
    """The document of a registry version (schemaType JSON) and its references (name -> schema text)."""
    try:
        root = json.loads(schema_str)
        parsed = {name: json.loads(text) for name, text in refs.items()}
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{where}: a JSON Schema that is not valid JSON: {exc}") from None
    return document(root, parsed)
