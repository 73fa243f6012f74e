"""load_subject on a schema folder laid out like a registry: `<subject>/<id>.avsc`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ingestion.errors import SchemaError
from ingestion.schema.files import Subject, canonical_json, load_subject


def schema(*fields: str) -> dict[str, Any]:
    return {"type": "record", "name": "R", "fields": [{"name": f, "type": "string"} for f in fields]}


def put(folder: Path, subject: str, name: str, content: Any) -> Path:
    (folder / subject).mkdir(parents=True, exist_ok=True)
    path = folder / subject / name
    path.write_text(content if isinstance(content, str) else json.dumps(content, indent=2))
    return path


def test_ids_from_file_names_and_latest(tmp_path: Path) -> None:
    put(tmp_path, "orders-value", "1.avsc", schema("a"))
    put(tmp_path, "orders-value", "2.avsc", schema("a", "b"))
    put(tmp_path, "orders-value", "10.avsc", schema("a", "b", "c"))
    put(tmp_path, "orders-value", "notes.txt", "ignored")
    subject = load_subject(tmp_path, "orders-value")
    assert subject == Subject("orders-value", {1: canonical_json(schema("a")), 2: canonical_json(schema("a", "b")),
                                               10: canonical_json(schema("a", "b", "c"))})
    assert list(subject.versions) == [1, 2, 10]
    assert subject.latest_id == 10
    assert subject.latest == schema("a", "b", "c")


def test_versions_are_canonical_json(tmp_path: Path) -> None:
    put(tmp_path, "s", "3.avsc", '{ "type" : "record", "name":"R",\n "fields": [] }')
    assert load_subject(tmp_path, "s").versions == {3: '{"fields":[],"name":"R","type":"record"}'}


def test_canonical_json() -> None:
    assert canonical_json({"b": 1, "a": [1, {"d": 2, "c": 3}]}) == '{"a":[1,{"c":3,"d":2}],"b":1}'


def test_shipped_orders_subject() -> None:
    folder = Path(__file__).resolve().parents[2] / "schemas"
    subject = load_subject(folder, "orders-value")
    assert list(subject.versions) == [1]
    assert subject.latest_id == 1
    assert subject.latest["name"] == "Order"


def test_missing_subject(tmp_path: Path) -> None:
    with pytest.raises(SchemaError) as info:
        load_subject(tmp_path, "nope")
    assert str(info.value) == f"no schemas for subject 'nope': expected files like {tmp_path / 'nope' / '1.avsc'}"


def test_non_numeric_file_name(tmp_path: Path) -> None:
    put(tmp_path, "s", "1.avsc", schema("a"))
    bad = put(tmp_path, "s", "latest.avsc", schema("a"))
    with pytest.raises(SchemaError) as info:
        load_subject(tmp_path, "s")
    assert str(info.value) == (f"{bad}: schema files are named by their schema id, like 1.avsc; "
                               "got 'latest.avsc'")


def test_invalid_json(tmp_path: Path) -> None:
    bad = put(tmp_path, "s", "2.avsc", '{"type": "record",')
    with pytest.raises(SchemaError) as info:
        load_subject(tmp_path, "s")
    assert str(info.value).startswith(f"{bad}: not valid JSON: ")


def test_same_id_different_schema_under_two_subjects(tmp_path: Path) -> None:
    put(tmp_path, "a-value", "5.avsc", schema("x"))
    put(tmp_path, "b-value", "5.avsc", schema("y"))
    for subject, other in (("a-value", "b-value"), ("b-value", "a-value")):
        with pytest.raises(SchemaError) as info:
            load_subject(tmp_path, subject)
        assert str(info.value) == (f"schema id 5 means two different schemas: {tmp_path / subject / '5.avsc'} "
                                   f"and {tmp_path / other / '5.avsc'}")


def test_same_id_of_another_format_under_another_subject_names_each_file(tmp_path: Path) -> None:
    own = put(tmp_path, "p-value", "7.proto", 'syntax = "proto3";\nmessage M { string id = 1; }\n')
    twin = put(tmp_path, "a-value", "7.avsc", schema("x"))
    with pytest.raises(SchemaError) as info:
        load_subject(tmp_path, "p-value", ".proto")
    assert str(info.value) == f"schema id 7 means two different schemas: {own} and {twin}"


def test_same_id_same_schema_under_two_subjects_is_fine(tmp_path: Path) -> None:
    put(tmp_path, "a-value", "5.avsc", schema("x"))
    # Same schema, different formatting and key order.
    put(tmp_path, "b-value", "5.avsc", '{"fields": [{"type": "string", "name": "x"}], "name": "R", "type": "record"}')
    put(tmp_path, "b-value", "6.avsc", schema("z"))
    assert load_subject(tmp_path, "a-value").versions == {5: canonical_json(schema("x"))}
    assert list(load_subject(tmp_path, "b-value").versions) == [5, 6]


def test_invalid_twin_under_another_subject_raises_schema_error(tmp_path: Path) -> None:
    put(tmp_path, "a-value", "1.avsc", schema("x"))
    twin = put(tmp_path, "b-value", "1.avsc", "{oops")
    with pytest.raises(SchemaError, match=str(twin)):
        load_subject(tmp_path, "a-value")


def test_an_unknown_avro_type_names_the_file_and_the_field(tmp_path: Path) -> None:
    bad = {"type": "record", "name": "R", "fields": [
        {"name": "id", "type": "string"},
        {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line", "fields": [
            {"name": "qty", "type": "integr"}]}}}]}
    file = put(tmp_path, "orders-value", "1.avsc", bad)
    with pytest.raises(SchemaError) as caught:
        load_subject(tmp_path, "orders-value")
    assert str(caught.value) == f"{file}: field 'lines.qty': unknown Avro type 'integr'"


def test_a_missing_subject_is_named_with_the_closest_before_a_jvm_starts(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from ingestion.config import load_pipeline
    from ingestion.errors import SubjectNotFoundError
    from ingestion.schema.registry import check_registry

    put(tmp_path / "schemas", "orders-value", "1.avsc", schema("a"))
    put(tmp_path / "schemas", "customers-key", "1.avsc", schema("a"))
    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(tmp_path / "schemas"))
    file = tmp_path / "orders.yaml"
    file.write_text("name: orders\ntopic: orders\nkafka:\n  bootstrap.servers: 127.0.0.1:9\n"
                    "value:\n  subject: order-value\n")
    with pytest.raises(SubjectNotFoundError) as caught:
        check_registry(load_pipeline(file))
    assert str(caught.value) == (
        f"{file}: key 'value.subject' ('order-value'): no schemas for subject 'order-value': expected files like "
        f"{tmp_path / 'schemas' / 'order-value' / '1.avsc'}; closest: orders-value")
    check_registry(load_pipeline(file), subject_may_be_missing=True)  # onboard --register-schemas makes it
    file.write_text("name: orders\ntopic: orders\nkafka:\n  bootstrap.servers: 127.0.0.1:9\n")
    check_registry(load_pipeline(file))  # orders-value, by the topic's name: there


def test_a_missing_schema_file_names_the_pipeline_file_the_key_and_the_path(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from ingestion.config import load_pipeline
    from ingestion.schema.registry import check_subjects

    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(tmp_path / "schemas"))
    pipeline = tmp_path / "events.yaml"
    pipeline.write_text("name: events\ntopic: events\nkafka:\n  bootstrap.servers: 127.0.0.1:9\n"
                        "value:\n  format: json\n  schemaFile: events/event.json\n")
    with pytest.raises(SchemaError) as refused:
        check_subjects(load_pipeline(pipeline))
    message = str(refused.value)
    assert message.startswith(f"{pipeline}: key 'value.schemaFile' ('events/event.json'): ")
    assert str(tmp_path / "schemas" / "events" / "event.json") in message and "\n" not in message


@pytest.mark.parametrize(("content", "reason"), [
    ({"type": "record", "name": "R", "fields": [{"name": "a"}]}, "not a valid Avro schema: Record field 'a' is "
     "missing 'type'"),
    ({"type": "record", "fields": [{"name": "a", "type": "int"}]}, "not a valid Avro schema: \"name\" is a required"),
    ({"type": "record", "name": "R"}, "record 'R' needs 'fields', a list of its fields, got None"),
    ({"type": "record", "name": "R", "fields": {"a": "int"}}, "not a valid Avro schema: Record field must be a dict"),
    ([1, 2], "not a valid Avro schema: "),
    ({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}, {"name": "a", "type": "long"}]},
     "record 'R' has the field 'a' twice"),
    ({"type": "record", "name": "R", "fields": [{"name": "d", "type": {
        "type": "bytes", "logicalType": "decimal", "precision": 2, "scale": 5}}]},
     "not a valid Avro schema: decimal scale must be less than or equal to the precision of 2"),
    ({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int", "default": "x"}]},
     "not a valid Avro schema: Default value <x> must match schema type: int"),
])
def test_a_broken_avro_schema_file_is_one_line_naming_the_file_and_the_reason(
        tmp_path: Path, content: Any, reason: str) -> None:
    file = put(tmp_path, "orders-value", "1.avsc", content)
    with pytest.raises(SchemaError) as caught:
        load_subject(tmp_path, "orders-value")
    message = str(caught.value)
    assert message.startswith(f"{file}: {reason}") and "\n" not in message, message
