"""Avro schemas as Spark types, and fastavro values as Arrow-ready values."""

from __future__ import annotations

import datetime as dt
import io
import json
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from pyspark.sql import types as T

from ingestion.errors import SchemaError
from ingestion.schema import avro_types as avro

ORDERS = json.loads((Path(__file__).resolve().parents[2] / "schemas" / "orders-value" / "1.avsc").read_text())

EVERYTHING: dict[str, Any] = {
    "type": "record", "name": "Everything", "namespace": "test.types",
    "fields": [
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "by", "type": "bytes"},
        {"name": "s", "type": "string"},
        {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
        {"name": "e_ref", "type": "Color"},
        {"name": "fx", "type": {"type": "fixed", "name": "Hash", "size": 4}},
        {"name": "arr", "type": {"type": "array", "items": "long"}},
        {"name": "m", "type": {"type": "map", "values": "double"}},
        {"name": "nested", "type": {"type": "record", "name": "Inner", "fields": [
            {"name": "x", "type": "int"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
        ]}},
        {"name": "nested_ref", "type": ["null", "test.types.Inner"]},
        {"name": "opt", "type": ["null", "string"]},
        {"name": "opt_last", "type": ["long", "null"]},
        {"name": "multi", "type": ["null", "int", "string"]},
        {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
        {"name": "dec_fixed", "type": {"type": "fixed", "name": "Money", "size": 8, "logicalType": "decimal",
                                       "precision": 18, "scale": 4}},
        {"name": "dt", "type": {"type": "int", "logicalType": "date"}},
        {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "tu", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "tsm", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tsu", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "ltsm", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "ltsu", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "unknown_logical", "type": {"type": "string", "logicalType": "color-name"}},
        {"name": "wrapped", "type": {"type": "long"}},
    ],
}


def field(name: str, data_type: T.DataType) -> T.StructField:
    return T.StructField(name, data_type, True)


INNER = T.StructType([field("x", T.IntegerType()), field("tags", T.ArrayType(T.StringType(), True))])

EXPECTED = T.StructType([
    field("b", T.BooleanType()),
    field("i", T.IntegerType()),
    field("l", T.LongType()),
    field("f", T.FloatType()),
    field("d", T.DoubleType()),
    field("by", T.BinaryType()),
    field("s", T.StringType()),
    field("e", T.StringType()),
    field("e_ref", T.StringType()),
    field("fx", T.BinaryType()),
    field("arr", T.ArrayType(T.LongType(), True)),
    field("m", T.MapType(T.StringType(), T.DoubleType(), True)),
    field("nested", INNER),
    field("nested_ref", INNER),
    field("opt", T.StringType()),
    field("opt_last", T.LongType()),
    field("multi", T.StructType([field("member0", T.IntegerType()), field("member1", T.StringType())])),
    field("dec", T.DecimalType(12, 2)),
    field("dec_fixed", T.DecimalType(18, 4)),
    field("dt", T.DateType()),
    field("tm", T.IntegerType()),
    field("tu", T.LongType()),
    field("tsm", T.TimestampType()),
    field("tsu", T.TimestampType()),
    field("ltsm", T.TimestampNTZType()),
    field("ltsu", T.TimestampNTZType()),
    field("u", T.StringType()),
    field("unknown_logical", T.StringType()),
    field("wrapped", T.LongType()),
])


# --- spark_schema / spark_type ----------------------------------------------------------------------------------

def test_every_type_maps_to_expected_spark_struct() -> None:
    result = avro.spark_schema(EVERYTHING)
    assert result == EXPECTED
    # StructType equality covers names, types and nullability; check the nullability explicitly too.
    assert [f.nullable for f in result.fields] == [True] * len(EXPECTED.fields)


def test_orders_schema() -> None:
    item = T.StructType([field("sku", T.StringType()), field("quantity", T.IntegerType()),
                         field("unit_price", T.DoubleType())])
    assert avro.spark_schema(ORDERS) == T.StructType([
        field("order_id", T.StringType()),
        field("customer_id", T.LongType()),
        field("status", T.StringType()),
        field("amount", T.DecimalType(12, 2)),
        field("currency", T.StringType()),
        field("items", T.ArrayType(item, True)),
        field("placed_at", T.TimestampType()),
        field("note", T.StringType()),
    ])


@pytest.mark.parametrize(("schema", "expected"), [
    ("string", T.StringType()),
    ("null", T.NullType()),
    (["null", "double"], T.DoubleType()),
    (["int", "string"], T.StructType([field("member0", T.IntegerType()), field("member1", T.StringType())])),
    ({"type": "map", "values": {"type": "array", "items": "int"}},
     T.MapType(T.StringType(), T.ArrayType(T.IntegerType(), True), True)),
    ({"type": "bytes", "logicalType": "decimal", "precision": 5}, T.DecimalType(5, 0)),
    ({"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 38}, T.DecimalType(38, 38)),
    # A logical type on the wrong base type is ignored, as the Avro spec says.
    ({"type": "string", "logicalType": "date"}, T.StringType()),
])
def test_spark_type(schema: Any, expected: T.DataType) -> None:
    assert avro.spark_type(schema) == expected


def test_spark_schema_of_non_record_raises() -> None:
    with pytest.raises(SchemaError, match="must be an Avro record"):
        avro.spark_schema("string")


def test_recursive_record_raises() -> None:
    node = {"type": "record", "name": "Node", "namespace": "test.list", "fields": [
        {"name": "value", "type": "int"},
        {"name": "next", "type": ["null", "Node"]},
    ]}
    with pytest.raises(SchemaError, match="recursive") as info:
        avro.spark_schema(node)
    assert "'test.list.Node'" in str(info.value)


def test_mutually_recursive_records_raise() -> None:
    schema = {"type": "record", "name": "A", "fields": [
        {"name": "b", "type": {"type": "record", "name": "B", "fields": [{"name": "a", "type": ["null", "A"]}]}},
    ]}
    with pytest.raises(SchemaError, match="recursive"):
        avro.spark_schema(schema)


def test_decimal_precision_over_38_raises() -> None:
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "big", "type": {"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 2}},
    ]}
    with pytest.raises(SchemaError, match=r"decimal\(40,2\) exceeds Spark's maximum precision of 38"):
        avro.spark_schema(schema)


def test_unknown_named_type_raises() -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "x", "type": "NoSuchType"}]}
    with pytest.raises(SchemaError, match="unknown Avro type 'NoSuchType'"):
        avro.spark_schema(schema)


def test_named_decimal_fixed_can_be_referenced() -> None:
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "a", "type": {"type": "fixed", "name": "Money", "size": 8, "logicalType": "decimal",
                               "precision": 10, "scale": 2}},
        {"name": "b", "type": "Money"},
    ]}
    assert avro.spark_schema(schema) == T.StructType([field("a", T.DecimalType(10, 2)),
                                                      field("b", T.DecimalType(10, 2))])


# --- converter --------------------------------------------------------------------------------------------------

def test_orders_needs_no_converter() -> None:
    assert avro.converter(ORDERS) is None


def test_plain_schemas_need_no_converter() -> None:
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A"]}},
        {"name": "e2", "type": "E"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "d", "type": {"type": "int", "logicalType": "date"}},
        {"name": "arr", "type": {"type": "array", "items": ["null", "string"]}},
    ]}
    assert avro.converter(schema) is None


CONVERTED: dict[str, Any] = {
    "type": "record", "name": "Converted", "namespace": "test.conv",
    "fields": [
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "at", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "at_us", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "attrs", "type": {"type": "map", "values": "string"}},
        {"name": "times", "type": {"type": "map", "values": {"type": "int", "logicalType": "time-millis"}}},
        {"name": "u", "type": ["null", "int", "string"]},
        {"name": "opt_id", "type": ["null", {"type": "string", "logicalType": "uuid"}]},
        {"name": "ids", "type": {"type": "array", "items": {"type": "string", "logicalType": "uuid"}}},
        {"name": "plain", "type": "long"},
    ],
}

ID = uuid.UUID("12345678-1234-5678-1234-567812345678")


def test_converter_maps_decoded_values() -> None:
    convert = avro.converter(CONVERTED)
    assert convert is not None
    decoded = {
        "id": ID, "at": dt.time(1, 2, 3, 4000), "at_us": dt.time(1, 2, 3, 4005),
        "attrs": {"a": "1", "b": "2"}, "times": {"t": dt.time(0, 0, 1)},
        "u": 5, "opt_id": None, "ids": [ID], "plain": 7,
    }
    assert convert(decoded) == {
        "id": "12345678-1234-5678-1234-567812345678",
        "at": 3_723_004,
        "at_us": 3_723_004_005,
        "attrs": [("a", "1"), ("b", "2")],
        "times": [("t", 1000)],
        "u": {"member0": 5},
        "opt_id": None,
        "ids": ["12345678-1234-5678-1234-567812345678"],
        "plain": 7,
    }
    assert decoded["id"] == ID  # the input is not modified


def test_converter_union_string_branch_and_nulls() -> None:
    convert = avro.converter(CONVERTED)
    assert convert is not None
    decoded = {"id": None, "at": None, "at_us": None, "attrs": None, "times": None, "u": "x",
               "opt_id": ID, "ids": None, "plain": 1}
    assert convert(decoded) == {"id": None, "at": None, "at_us": None, "attrs": None, "times": None,
                                "u": {"member1": "x"}, "opt_id": "12345678-1234-5678-1234-567812345678",
                                "ids": None, "plain": 1}
    assert convert(None) is None


def test_converter_after_fastavro_roundtrip() -> None:
    parsed = parse_schema(CONVERTED)
    out = io.BytesIO()
    schemaless_writer(out, parsed, {
        "id": str(ID), "at": dt.time(1, 2, 3, 4000), "at_us": dt.time(1, 2, 3, 4005), "attrs": {"k": "v"},
        "times": {}, "u": "x", "opt_id": None, "ids": [], "plain": 3,
    })
    decoded = schemaless_reader(io.BytesIO(out.getvalue()), parsed, None)
    convert = avro.converter(CONVERTED)
    assert convert is not None
    assert convert(decoded) == {
        "id": "12345678-1234-5678-1234-567812345678", "at": 3_723_004, "at_us": 3_723_004_005,
        "attrs": [("k", "v")], "times": [], "u": {"member1": "x"}, "opt_id": None, "ids": [], "plain": 3,
    }


def test_union_value_matching_no_branch_raises() -> None:
    convert = avro.converter(["null", "int", "string"])
    assert convert is not None
    assert convert(5) == {"member0": 5}
    assert convert("x") == {"member1": "x"}
    with pytest.raises(SchemaError, match="matches no branch"):
        convert(1.5)


def test_union_bool_is_not_an_int() -> None:
    convert = avro.converter(["int", "boolean"])
    assert convert is not None
    assert convert(True) == {"member1": True}
    assert convert(3) == {"member0": 3}


def test_union_of_named_types() -> None:
    schema = {"type": "record", "name": "R", "namespace": "n", "fields": [
        {"name": "r", "type": {"type": "record", "name": "Point", "fields": [{"name": "x", "type": "int"}]}},
        {"name": "u", "type": ["null", "Point", "string", {"type": "bytes", "logicalType": "decimal",
                                                           "precision": 4, "scale": 1}]},
    ]}
    convert = avro.converter(schema)
    assert convert is not None
    assert convert({"r": {"x": 1}, "u": {"x": 2}}) == {"r": {"x": 1}, "u": {"member0": {"x": 2}}}
    assert convert({"r": {"x": 1}, "u": Decimal("1.5")}) == {"r": {"x": 1}, "u": {"member2": Decimal("1.5")}}


def test_union_int_long_widens_to_long_like_spark_from_avro() -> None:
    assert avro.spark_type(["null", "int", "long"]) == T.LongType()
    assert avro.spark_type(["float", "double"]) == T.DoubleType()
    assert avro.converter(["null", "int", "long"]) is None


def test_union_int_long_with_other_branches_picks_long_for_large_values() -> None:
    convert = avro.converter(["null", "int", "long", "string"])
    assert convert is not None
    assert convert(2**40) == {"member1": 2**40}
    assert convert(7) == {"member0": 7}
    assert convert("x") == {"member2": "x"}
