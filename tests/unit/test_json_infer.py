"""A JSON Schema inferred from sample documents (`ingest init` on a plain JSON topic): every sample is valid against
it, by the `jsonschema` validator and by the decoder, and lands with its values; two kinds of value at one place
keep their JSON text rather than refuse one of them."""

from __future__ import annotations

import datetime as dt
import json
import random
from typing import Any

import jsonschema
import pytest

from ingestion.schema import json_infer, json_schemas, json_types

SAMPLES: list[dict[str, Any]] = [
    {"id": 1, "page": "/a", "ms": 1.5, "at": "2026-12-07T10:00:00Z", "day": "2026-12-07", "tags": ["a"],
     "user": {"x": 1, "y": None}, "never": None, "mixed": 1, "empty": {}, "none_yet": [], "ok": True},
    {"id": 2, "page": None, "ms": 2, "at": "2026-12-07T11:00:00.5+01:00", "day": "2026-12-08", "tags": [],
     "user": {"x": 2, "z": [1, 2.5]}, "mixed": "one", "extra": False},
]


def _decoded(schema: dict[str, Any], document: dict[str, Any]) -> dict[str, Any]:
    return json_types.converter(json_schemas.document(schema))(json_types.parse(json.dumps(document)))


def test_the_schema_holds_every_sample_with_the_columns_an_analyst_wants() -> None:
    schema = json_infer.infer(SAMPLES)
    assert json_types.spark_schema(json_schemas.document(schema)).simpleString() == (
        "struct<id:bigint,page:string,ms:double,at:timestamp,day:date,tags:array<string>,"
        "user:struct<x:bigint,y:string,z:array<double>>,never:string,mixed:string,empty:string,"
        "none_yet:array<string>,ok:boolean,extra:boolean>")
    for document in SAMPLES:
        jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(document)
    first, second = (_decoded(schema, d) for d in SAMPLES)
    assert (first["id"], first["ms"], first["mixed"], first["empty"], first["never"]) == (1, 1.5, "1", "{}", None)
    assert (second["page"], second["ms"], second["mixed"], second["user"]["z"]) == (None, 2.0, '"one"', [1.0, 2.5])
    assert second["at"] == dt.datetime(2026, 12, 7, 10, 0, 0, 500000, tzinfo=dt.UTC)  # converted to UTC
    assert (first["day"], first["tags"], second["extra"]) == (dt.date(2026, 12, 7), ["a"], False)


def test_a_string_is_a_timestamp_or_date_only_when_every_sample_is_one() -> None:
    schema = json_infer.infer([{"at": "2026-12-07T10:00:00Z"}, {"at": "yesterday"}, {"at": None}])
    assert schema["properties"]["at"] == {"type": ["string", "null"]}
    schema = json_infer.infer([{"at": "2026-12-07T10:00:00Z"}, {"at": "2026-12-07"}])
    assert schema["properties"]["at"] == {"type": ["string", "null"]}
    assert json_infer.infer([{"d": "2026-02-28"}])["properties"]["d"]["format"] == "date"
    assert "format" not in json_infer.infer([{"d": "2026-02-30"}])["properties"]["d"]  # no such day


def test_only_json_objects_have_a_schema() -> None:
    with pytest.raises(ValueError, match="not all JSON objects"):
        json_infer.infer([{"a": 1}, [1, 2]])


def test_seeded_random_documents_are_all_valid_against_what_was_inferred_from_them() -> None:
    rng = random.Random(76)

    def value(depth: int) -> Any:
        kind = rng.choice(["null", "bool", "int", "float", "str", "time", "list", "obj"][:8 if depth < 3 else 6])
        if kind == "list":
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        if kind == "obj":
            return {f"k{rng.randint(0, 4)}": value(depth + 1) for _ in range(rng.randint(0, 3))}
        return {"null": None, "bool": rng.random() < 0.5, "int": rng.randint(-2 ** 63, 2 ** 63 - 1),
                "float": rng.uniform(-1e6, 1e6), "str": rng.choice(["", "x", "ü€", "2026-13-01"]),
                "time": "2026-12-07T10:00:00Z"}[kind]

    for _ in range(200):
        documents = [{f"p{rng.randint(0, 6)}": value(0) for _ in range(rng.randint(0, 5))}
                     for _ in range(rng.randint(1, 6))]
        if not any(documents):
            with pytest.raises(ValueError, match="no properties"):
                json_infer.infer(documents)
            continue
        schema = json_infer.infer(documents)
        json_types.spark_schema(json_schemas.document(schema))  # maps to columns
        for document in documents:
            jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(document)
            assert set(_decoded(schema, document)) == set(schema["properties"])


def test_the_fields_of_two_kinds_of_value_are_named_with_the_kinds_seen() -> None:
    documents = [{"id": 1, "amount": 2.5, "status": "a"}, {"id": 2, "amount": 3, "status": None},
                 {"id": "3", "amount": 1.0, "status": 7}]
    assert json_infer.mixed_kinds(documents) == {"id": ["integer", "string"], "status": ["integer", "string"]}
    assert json_infer.infer(documents)["properties"]["amount"] == {"type": ["number", "null"]}
