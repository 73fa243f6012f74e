"""routing: the section's keys, each mistake one line naming file, key and value; route names and tables."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ingestion.config import load_pipeline, route_name
from ingestion.errors import ConfigError

ROUTED = """\
name: orders
topic: orders
sink:
  root: /lake
  catalogTable: bronze.orders
value:
  subjectNameStrategy: TopicRecordNameStrategy
routing:
  by: recordName
  tables: {OrderCreated: orders_created}
"""


def load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return load_pipeline(path)


def test_route_values_are_lowercased_and_every_other_character_is_an_underscore() -> None:
    assert route_name("OrderPaid") == "orderpaid"
    assert route_name("tenant-42.eu") == "tenant_42_eu"
    assert route_name("Ä b_c") == "__b_c"


def test_each_route_has_its_table_beside_the_pipelines_and_its_catalog_name(tmp_path: Path) -> None:
    config = load(tmp_path, ROUTED)
    assert config.routing is not None and config.routing.by == "recordName"
    assert config.route_table("OrderCreated") == "orders_created"  # tables: names it
    assert config.route_table("OrderPaid") == "orders_orderpaid"  # the template "{pipeline}_{route}"
    paid = config.routed("OrderPaid", record="com.acme.OrderPaid")
    assert paid.table_path == "/lake/tables/orders_orderpaid"
    assert paid.quarantine_path == config.quarantine_path == "/lake/tables/orders_quarantine"
    assert paid.checkpoint_path == config.checkpoint_path == "/lake/checkpoints/orders"
    assert paid.catalog_names == ("bronze.orders_orderpaid", "bronze.orders_quarantine")
    assert paid.value.subject_for("orders") == "orders-com.acme.OrderPaid"
    assert paid.routing is None


def test_a_topic_route_reads_its_own_topic(tmp_path: Path) -> None:
    config = load(tmp_path, "name: t\ntopicPattern: 'tenant-.*'\nsink: {root: /lake}\nrouting: {by: topic, "
                            "table: 'raw_{route}'}\n")
    route = config.routed("tenant-7", topics=("tenant-7",))
    assert route.table_path == "/lake/tables/raw_tenant_7"
    assert route.topics == ("tenant-7",) and route.topic_pattern == "" and route.value_subjects(["tenant-7"]) == \
        ["tenant-7-value"]


@pytest.mark.parametrize(("routing", "key", "value"), [
    ("{by: kind}", "routing.by", "'kind'"),
    ("{by: field}", "routing.field", "''"),
    ("{by: header}", "routing.header", "''"),
    ("{by: topic, header: x}", "routing.header", "'topic'"),
    ("{by: recordName, table: 'x_{type}'}", "routing.table", "'x_{type}'"),
    ("{by: recordName, table: 'fixed'}", "routing.table", "'fixed'"),
    ("{by: recordName, tables: {A: 'a b'}}", "routing.tables.A", "'a b'"),
    ("{by: recordName, colour: red}", "routing.colour", "'red'"),
])
def test_each_routing_mistake_is_one_line_naming_the_key_and_value(tmp_path: Path, routing: str, key: str,
                                                                    value: str) -> None:
    value_section = "{subjectNameStrategy: RecordNameStrategy}" if "recordName" in routing else "{subject: s}"
    text = f"name: o\ntopics: [a, b]\nvalue: {value_section}\nrouting: {routing}\n"
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    message = str(info.value)
    assert "\n" not in message and str(tmp_path / "p.yaml") in message
    assert repr(key) in message or f"'{key}'" in message or f"key '{key}'" in message, message
    assert value in message, message


@pytest.mark.parametrize(("text", "key"), [
    ("topic: o\nvalue: {subject: o-value}\nrouting: {by: recordName}", "routing.by"),  # one subject, no types
    ("topic: o\nvalue: {format: jsonschema, subjectNameStrategy: RecordNameStrategy}\nrouting: {by: recordName}",
     "routing.by"),  # JSON Schema: route by a field
    ("topic: o\nvalue: {format: protobuf, subjectNameStrategy: RecordNameStrategy, messageName: a.B}\n"
     "routing: {by: recordName}", "value.messageName"),  # each message its table: none pinned
    ("topic: o\nvalue: {format: avro, subject: s}\nrouting: {by: header, header: h}\nsilver: {key: [id]}",
     "silver"),
    ("topic: o\nvalue: {subject: o-value}\nrouting: {by: field, field: kind}", "routing.field"),  # Avro values
    ("topic: o\nvalue: {subject: o-value}\nrouting: {by: topic}", "routing.by"),  # one topic: one route
    ("topic: o\nvalue: {subject: o-value}\nsink: {table: /x}\nrouting: {by: header, header: h}", "sink.table"),
])
def test_contradictions_with_routing_are_refused(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(ConfigError, match=f"key '{key}'"):
        load(tmp_path, "name: o\n" + text + "\n")


def test_routing_by_field_of_json_and_by_the_kafka_key_load(tmp_path: Path) -> None:
    schema = tmp_path / "s.json"
    schema.write_text('{"type": "object", "properties": {"kind": {"type": "string"}}}')
    config = load(tmp_path, f"name: o\ntopic: o\nvalue: {{format: json, schemaFile: {schema}}}\n"
                            "routing: {by: field, field: kind}\n")
    assert config.routing is not None and config.routing.route_field == "kind"
    config = load(tmp_path, "name: o\ntopic: o\nvalue: {subject: o-value}\nrouting: {by: field, field: _kafka_key}\n")
    assert config.routing is not None and config.routing.by == "field"


def test_the_names_a_routed_pipelines_tables_can_have(tmp_path: Path) -> None:
    from ingestion.delta.routed import name_pattern

    pattern = name_pattern(load(tmp_path, ROUTED))
    assert pattern.fullmatch("orders_orderpaid") and pattern.fullmatch("orders_created")
    assert not pattern.fullmatch("orders_quarantine-x") and not pattern.fullmatch("payments_orderpaid")
    assert not pattern.fullmatch("orders_OrderPaid")  # {route} is normalised: lowercase only


def test_a_routed_pipeline_is_rewound_to_a_time_not_to_a_version_refused_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ingestion.cli import main

    path = tmp_path / "p.yaml"
    path.write_text(ROUTED)
    assert main(["rewind", str(path), "--to-version", "1"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "key 'routing'" in err and "--to-timestamp" in err, err


def test_routing_silver_gives_each_named_route_its_silver_section(tmp_path: Path) -> None:
    config = load(tmp_path, ROUTED + "  silver:\n    OrderPaid: {key: id}\n"
                                     "    ordercreated: {key: [id], mode: history}\n")
    silvers = config.route_silvers()
    assert sorted(silvers) == ["orders_created", "orders_orderpaid"]  # routing.tables names OrderCreated's table
    paid = silvers["orders_orderpaid"]
    assert paid.silver is not None and paid.silver.key == ("id",) and paid.silver_path == paid.table_path + "_silver"
    assert silvers["orders_created"].silver is not None and silvers["orders_created"].silver.mode == "history"
    assert config.routed("OrderCreated").silver == silvers["orders_created"].silver  # the value as read, too
    assert config.routed("OrderCancelled").silver is None
    with pytest.raises(ConfigError) as info:
        load(tmp_path, ROUTED + "  silver:\n    OrderPaid: {key: [id], trackHistoryOn: [amount]}\n")
    assert "\n" not in str(info.value) and "key 'routing.silver.OrderPaid.trackHistoryOn'" in str(info.value)
    with pytest.raises(ConfigError, match=re.escape("key 'routing.silver.OrderPaid.table' names the silver table "
                                                    "of route 'OrderCreated' too")):
        load(tmp_path, ROUTED + "  silver:\n    OrderCreated: {key: id, table: /s/x}\n"
                                "    OrderPaid: {key: id, table: /s/x}\n")
