"""connect-json without Spark: Debezium's semantic types, and each record's embedded schema as its writer schema
(a new nested field learnt by the resolver and taken by the table, older records reading null, a changed type
refused with the field named)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from ingestion.decode.spec import DecodeSpec
from ingestion.schema import connect_types, debezium_types, struct_evolution
from ingestion.schema.json_values import JsonFormatError, JsonRangeError, JsonTypeError
from tests.connect_envelopes import change, customer_row, envelope_schema, variable_decimal

UTC = dt.UTC
ROW_DDL = ("struct<id:int,name:string,updated_at:timestamp,created:timestamp,seen_ms:timestamp,birthday:date,"
           "opens:string,balance:decimal(38,18),prefs:string,ref:string,tier:string{}>")


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-03-01T10:00:00Z", dt.datetime(2026, 3, 1, 10, tzinfo=UTC)),
    ("2026-03-01T10:00:00.5+02:00", dt.datetime(2026, 3, 1, 8, 0, 0, 500_000, tzinfo=UTC)),
    ("2026-03-01T00:30:00.123456789-05:30", dt.datetime(2026, 3, 1, 6, 0, 0, 123_456, tzinfo=UTC)),
    ("0001-01-01T00:00:00Z", dt.datetime(1, 1, 1, tzinfo=UTC)),
    ("1969-12-31T23:59:59.999999Z", dt.datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)),
])
def test_zoned_timestamps_with_offsets_and_fractions_are_utc_timestamps(text: str, expected: dt.datetime) -> None:
    assert debezium_types.zoned_timestamp(text, "$.t") == expected


@pytest.mark.parametrize(("value", "fault", "message"), [
    ("2026-03-01 10:00:00Z", JsonFormatError, r'^\$\.t: "2026-03-01 10:00:00Z" is not a ZonedTimestamp'),
    ("2026-03-01T10:00:00", JsonFormatError, "is not a ZonedTimestamp"),
    ("0001-01-01T00:00:00+01:00", JsonFormatError, "is not a ZonedTimestamp"),
    (1767225600000, JsonTypeError, r"^\$\.t: expected ZonedTimestamp"),
])
def test_a_zoned_timestamp_that_is_not_one_is_refused_with_the_field(value: Any, fault: type, message: str) -> None:
    with pytest.raises(fault, match=message):
        debezium_types.zoned_timestamp(value, "$.t")


def test_epoch_timestamps_in_ms_us_ns_round_toward_the_past() -> None:
    epoch = dt.datetime(1970, 1, 1, tzinfo=UTC)
    assert debezium_types.micro_timestamp(1_767_225_600_000_001, "$") == dt.datetime(2026, 1, 1, 0, 0, 0, 1,
                                                                                     tzinfo=UTC)
    assert debezium_types.micro_timestamp(-1, "$") == epoch - dt.timedelta(microseconds=1)
    assert debezium_types.micro_timestamp(-86_400_000_001, "$") == dt.datetime(1969, 12, 30, 23, 59, 59, 999_999,
                                                                               tzinfo=UTC)
    assert debezium_types.timestamp(-1500, "$") == epoch - dt.timedelta(milliseconds=1500)
    assert debezium_types.nano_timestamp(1_999, "$") == epoch + dt.timedelta(microseconds=1)
    assert debezium_types.nano_timestamp(-1, "$") == epoch - dt.timedelta(microseconds=1)
    with pytest.raises(JsonRangeError, match=r"^\$\.t: 9223372036854775807 µs is outside years 1 to 9999$"):
        debezium_types.micro_timestamp(2**63 - 1, "$.t")
    with pytest.raises(JsonTypeError, match=r"^\$\.t: expected MicroTimestamp"):
        debezium_types.micro_timestamp("1", "$.t")
    with pytest.raises(JsonTypeError):
        debezium_types.timestamp(True, "$.t")


def test_dates_and_times_of_day() -> None:
    assert debezium_types.date(-1, "$") == dt.date(1969, 12, 31)
    assert debezium_types.date(20_454, "$") == dt.date(2026, 1, 1)
    assert debezium_types.time(3_723_004, "$") == "01:02:03.004"
    assert debezium_types.micro_time(3_723_000_005, "$") == "01:02:03.000005"
    assert debezium_types.nano_time(3_723_000_005_999, "$") == "01:02:03.000005"
    assert debezium_types.micro_time(86_400_000_000, "$") == "24:00:00.000000"  # PostgreSQL's 24:00
    for convert, value in ((debezium_types.micro_time, -1), (debezium_types.time, 86_400_001),
                           (debezium_types.nano_time, -5)):
        with pytest.raises(JsonRangeError, match="is not a time of day"):
            convert(value, "$.t")


@pytest.mark.parametrize(("scale", "unscaled", "expected"), [
    (0, 42, "42"), (2, -12345, "-123.45"), (-3, 7, "7000"), (18, 1, "0.000000000000000001"),
    (30, 10**12, "0.000000000000000001"),  # a large scale with trailing zeros: exact
    (0, 10**20 - 1, "99999999999999999999"), (5, 0, "0"), (-2, -1, "-100"),
])
def test_variable_scale_decimals_are_exact(scale: int, unscaled: int, expected: str) -> None:
    raw = unscaled.to_bytes((unscaled.bit_length() + 8) // 8 or 1, "big", signed=True)
    for value in (raw, variable_decimal(decimal.Decimal(unscaled).scaleb(-scale))["value"]):
        got = debezium_types.variable_scale_decimal({"scale": scale, "value": value}, "$.b")
        assert got == decimal.Decimal(expected)
        assert pa.array([got], pa.decimal128(38, 18)).to_pylist() == [decimal.Decimal(expected)]


@pytest.mark.parametrize(("value", "message"), [
    ({"scale": 19, "value": "AQ=="}, r'^\$\.b: "1E-19" is not exact in decimal\(38,18\)'),
    ({"scale": -20, "value": "AQ=="}, r'^\$\.b: "1E\+20" is not exact in decimal\(38,18\)'),
    ({"scale": 2}, r"^\$\.b\.value: expected bytes"),
    ({"scale": "2", "value": "AQ=="}, r"^\$\.b\.scale: expected int32"),
    ({"scale": 2, "value": "@@"}, r'^\$\.b\.value: "@@" is not base64'),
    ({"scale": 2, "value": "AQ==", "x": 1}, r"^\$\.b\.x: field not in the record's schema"),
])
def test_a_variable_scale_decimal_that_is_not_exact_or_not_one_is_refused(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        debezium_types.variable_scale_decimal(value, "$.b")


def test_debeziums_envelope_maps_its_semantic_types() -> None:
    spark = connect_types.compile_schema(json.dumps(envelope_schema())).spark
    assert isinstance(spark, T.StructType)
    assert spark["after"].dataType.simpleString() == ROW_DDL.format("")
    assert spark["source"].dataType.simpleString().startswith("struct<version:string,connector:string,")
    # a name on another type than Debezium gives it is that plain type
    other = connect_types.node({"type": "int64", "name": debezium_types.ZONED_TIMESTAMP, "optional": True})
    assert other.spark == T.LongType()
    # the table's columns written back as a Connect schema give the same columns
    assert connect_types.spark_schema(connect_types.document(connect_types.from_spark(spark))) == spark


def test_fit_and_merge_name_the_field() -> None:
    old = connect_types.compile_schema(json.dumps(envelope_schema())).spark
    new = connect_types.compile_schema(json.dumps(envelope_schema(points="int32"))).spark
    bad = connect_types.compile_schema(json.dumps(envelope_schema(points="string"))).spark
    wide = connect_types.compile_schema(json.dumps(envelope_schema(points="int64"))).spark
    assert isinstance(old, T.StructType) and isinstance(new, T.StructType) and isinstance(wide, T.StructType)
    assert struct_evolution.fit(old, new, "$.payload") == struct_evolution.Fit()
    assert struct_evolution.fit(new, old, "$.payload").new == "$.payload.before.points: a field the table does not have"
    assert struct_evolution.fit(bad, new, "$.payload").conflict == (
        "$.payload.before.points: the record's schema makes it string, the table's column is int")
    merged = struct_evolution.merge(old, new, widen=True)
    assert merged == new
    assert struct_evolution.fit(new, wide, "$") == struct_evolution.Fit()  # an int fits a bigint column
    assert struct_evolution.merge(new, wide, widen=True) == wide
    assert struct_evolution.merge(new, wide, widen=False, path="$.payload") == (
        "$.payload.before.points: the record's schema makes it bigint, the table's column is int "
        "(sink.typeWidening is off)")
    assert struct_evolution.merge(new, bad, widen=True, path="$.payload") == (
        "$.payload.before.points: the record's schema makes it string, the table's column is int")


def _decode(spec: DecodeSpec, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from ingestion.decode.python_decoder import batch_decoder

    n = len(records)
    batch = pa.RecordBatch.from_pydict({"key": [None] * n, "value": [json.dumps(r).encode() for r in records],
                                        "topic": ["t"] * n, "partition": [0] * n, "offset": list(range(n))})
    return next(iter(batch_decoder(spec)(iter([batch])))).to_pylist()


def _resolver(tmp_path: Path, widening: bool = True) -> Any:
    from ingestion.config import parse_pipeline
    from ingestion.decode.resolver import SchemaResolver
    from ingestion.schema.registry import SchemaFileSource

    file = tmp_path / "customers.connect.json"
    file.write_text(json.dumps(envelope_schema()))
    config = parse_pipeline({"name": "c", "topic": "customers",
                             "value": {"format": "connect-json", "schemaFile": str(file)},
                             "sink": {"typeWidening": widening}}, tmp_path / "p.yaml")
    return SchemaResolver(config, SchemaFileSource(file, connect=True))


def test_a_new_nested_field_is_learnt_from_the_records_and_older_records_read_null(tmp_path: Path) -> None:
    resolver = _resolver(tmp_path)
    old = change(1, 1, "c", lsn=10)
    new = change(2, 2, "u", lsn=20, points="int32", before_points=None, after_points=7)
    first = _decode(resolver.spec, [old, new])
    assert first[0]["_error_class"] is None
    assert first[0]["_payload"]["after"] == {k: v for k, v in customer_row(1, 1).items() if k != "points"}
    assert first[1]["_error_class"] == "UnknownSchemaError"
    new_id = first[1]["_schema_id"]
    assert first[1]["_error_message"] == (f"schema id {new_id}: a schema the table has not taken yet "
                                          "($.payload.before.points: a field the table does not have)")
    assert resolver.refresh({new_id}, {"customers"}, {new_id: json.dumps(new).encode()})
    assert resolver.spec.payload_type["after"].dataType.simpleString() == ROW_DDL.format(",points:int")
    again = _decode(resolver.spec, [old, new, change(3, 1, "c", lsn=30)])
    assert [r["_error_class"] for r in again] == [None, None, None]
    assert [r["_schema_id"] for r in again] == [first[0]["_schema_id"], new_id, first[0]["_schema_id"]]
    assert again[0]["_payload"]["before"] is None and again[0]["_payload"]["after"] == customer_row(1, 1)
    assert again[1]["_payload"]["after"] == customer_row(2, 2, points=7)
    assert again[1]["_payload"]["before"] == customer_row(2, 1)
    # a restarted resolver takes the table's columns as its reader: both shapes decode from the first record
    from ingestion.decode.resolver import SchemaResolver

    restarted = SchemaResolver(resolver.config, resolver.source, table_payload=resolver.spec.payload_type)
    assert restarted.spec.payload_type == resolver.spec.payload_type
    assert [r["_error_class"] for r in _decode(restarted.spec, [old, new])] == [None, None]


def test_a_changed_type_is_refused_naming_the_field_and_a_widening_follows_the_setting(tmp_path: Path) -> None:
    resolver = _resolver(tmp_path, widening=False)
    new = change(2, 2, "u", lsn=20, points="int32", after_points=7)
    learnt = _decode(resolver.spec, [new])[0]["_schema_id"]
    resolver.refresh({learnt}, {"customers"}, {learnt: json.dumps(new).encode()})
    changed = change(3, 3, "u", lsn=30, points="string", after_points=None)
    wide = change(4, 4, "u", lsn=40, points="int64", after_points=2**40)
    out = _decode(resolver.spec, [changed, wide])
    assert (out[0]["_error_class"], out[0]["_error_message"]) == (
        "ConnectSchemaError", "$.payload.before.points: the record's schema makes it string, the table's column is int")
    assert out[1]["_error_class"] == "UnknownSchemaError"
    wide_id = out[1]["_schema_id"]
    resolver.refresh({wide_id}, {"customers"}, {wide_id: json.dumps(wide).encode()})
    refused = _decode(resolver.spec, [wide])[0]
    assert (refused["_error_class"], refused["_error_message"]) == (
        "ConnectSchemaError", "$.payload.before.points: bigint, wider than the table's int; the table did not take "
                              "this schema (sink.typeWidening is off)")
    (tmp_path / "w").mkdir()
    widening = _resolver(tmp_path / "w")
    widening.refresh({wide_id}, {"customers"}, {wide_id: json.dumps(wide).encode()})
    assert widening.spec.payload_type["after"].dataType["points"].dataType == T.LongType()
    assert widening.widened_columns(resolver.spec.payload_type) == [("before.points", T.LongType()),
                                                                    ("after.points", T.LongType())]
    assert _decode(widening.spec, [wide, new])[1]["_payload"]["after"]["points"] == 7


def test_debeziums_avro_connect_names_map_as_their_json_names() -> None:
    """The AvroConverter's `connect.name` beside a plain Avro type: the same Spark types and values as the JSON
    names, the field named in a refusal."""
    from ingestion.schema import avro_types

    zoned = ["null", {"type": "string", "connect.name": debezium_types.ZONED_TIMESTAMP}]
    amount = {"type": "record", "name": "VariableScaleDecimal", "namespace": "io.debezium.data",
              "connect.name": debezium_types.VARIABLE_SCALE_DECIMAL,
              "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}]}
    schema = {"type": "record", "name": "Value", "fields": [
        {"name": "at", "type": zoned}, {"name": "amount", "type": ["null", amount]},
        {"name": "again", "type": ["null", "io.debezium.data.VariableScaleDecimal"]},
        {"name": "day", "type": {"type": "int", "connect.name": debezium_types.DATE}},
        {"name": "other", "type": {"type": "string", "connect.name": debezium_types.DATE}}]}
    assert avro_types.spark_schema(schema).simpleString() == (
        "struct<at:timestamp,amount:decimal(38,18),again:decimal(38,18),day:date,other:string>")
    convert = avro_types.converter(schema)
    assert convert is not None
    assert convert({"at": "2026-03-01T10:00:00+01:00", "amount": {"scale": 1, "value": b"\x0f"}, "again": None,
                    "day": 1, "other": "x"}) == {
        "at": dt.datetime(2026, 3, 1, 9, tzinfo=UTC), "amount": decimal.Decimal("1.5"), "again": None,
        "day": dt.date(1970, 1, 2), "other": "x"}
    with pytest.raises(JsonFormatError, match=r'^\$\.at: "soon" is not a ZonedTimestamp'):
        convert({"at": "soon", "amount": None, "again": None, "day": 0, "other": "x"})


def test_records_whose_schema_text_shares_a_prefix_decode_by_their_own_schema() -> None:
    """The decoder keys its cache by the schema's bytes up to `,"payload":`; a schema holding that text itself (a
    parameter named payload) must not lend its converter to another."""
    def record(kind: str, value: Any) -> dict[str, Any]:
        return {"schema": {"type": "struct", "parameters": {"a": "1", "payload": "2"},
                           "fields": [{"field": "x", "type": kind, "optional": True}]}, "payload": {"x": value}}

    table = connect_types.document({"type": "struct", "fields": [{"field": "x", "type": "int64", "optional": True}]})
    spec = DecodeSpec(writer_schemas={0: table}, reader_schema=table, max_bytes=1 << 20, fail_fast=False,
                      value_format="connect-json", plain_schema_id=0)
    compact = [record("int32", 1), record("string", "s"), record("int32", 2)]
    from ingestion.decode.python_decoder import batch_decoder

    values = [json.dumps(r, separators=(",", ":")).encode() for r in compact]
    batch = pa.RecordBatch.from_pydict({"key": [None] * 3, "value": values, "topic": ["t"] * 3,
                                        "partition": [0] * 3, "offset": [0, 1, 2]})
    out = next(iter(batch_decoder(spec)(iter([batch])))).to_pylist()
    assert [(r["_payload"], r["_error_class"]) for r in out] == [
        ({"x": 1}, None), (None, "ConnectSchemaError"), ({"x": 2}, None)]
