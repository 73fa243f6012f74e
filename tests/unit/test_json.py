"""JSON values without Spark: the type mapping, the refusals, the invalid documents (each one names its path), Kafka
Connect's types, and the differential test against the `jsonschema` validator on mutated documents."""

from __future__ import annotations

import base64
import copy
import datetime as dt
import decimal
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

from ingestion.decode.spec import DecodeSpec
from ingestion.decode.wire import encode
from ingestion.errors import SchemaError
from ingestion.schema import connect_types, json_schemas, json_types
from ingestion.schema.json_types import InvalidJsonError, UnsupportedSchemaError

UTC = dt.UTC

# The orders schema the tests produce with (the integration tests register it, version 2 adds `channel`).
ORDER: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Order",
    "type": "object",
    "properties": {
        "id": {"type": "string", "minLength": 1},
        "amount_cents": {"type": "integer", "minimum": 0},
        "price": {"type": "number"},
        "paid": {"type": "boolean"},
        "status": {"enum": ["NEW", "PAID", "SHIPPED"]},
        "placed_at": {"type": "string", "format": "date-time"},
        "ship_on": {"type": ["string", "null"], "format": "date"},
        "slot": {"type": "string", "format": "time"},
        "ref": {"type": "string", "format": "uuid"},
        "note": {"oneOf": [{"type": "string", "maxLength": 20}, {"type": "null"}]},
        "ship_to": {"$ref": "#/$defs/address"},
        "items": {"type": "array", "maxItems": 5, "items": {"$ref": "#/$defs/item"}},
        "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        "extra": {"type": "object"},
    },
    "required": ["id", "amount_cents", "status", "placed_at"],
    "$defs": {
        "address": {"type": "object", "additionalProperties": False, "required": ["city"],
                    "properties": {"city": {"type": "string"}, "zip": {"anyOf": [{"type": "string"},
                                                                                 {"type": "null"}]}}},
        "item": {"type": "object", "required": ["sku", "qty"],
                 "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "maximum": 1000}}},
    },
}
ORDER_V2 = {**ORDER, "properties": {**ORDER["properties"], "channel": {"type": ["string", "null"]}}}
ORDER_DDL = ("struct<id:string,amount_cents:bigint,price:double,paid:boolean,status:string,placed_at:timestamp,"
             "ship_on:date,slot:string,ref:string,note:string,ship_to:struct<city:string,zip:string>,"
             "items:array<struct<sku:string,qty:bigint>>,tags:array<string>,counts:map<string,bigint>,"
             "extra:string>")
DOCUMENT = json_schemas.document(ORDER)


def order(seq: int) -> dict[str, Any]:
    """A valid order; seq varies every field."""
    return {
        "id": f"o{seq}", "amount_cents": 100 * seq + 7, "price": seq + 0.25, "paid": seq % 2 == 0,
        "status": ["NEW", "PAID", "SHIPPED"][seq % 3], "placed_at": f"2026-01-{seq % 28 + 1:02d}T10:{seq % 60:02d}:00Z",
        "ship_on": None if seq % 4 == 0 else f"2026-02-{seq % 28 + 1:02d}", "slot": "08:30:00+01:00",
        "ref": f"12345678-1234-4234-8234-{seq:012d}", "note": None if seq % 2 else f"note {seq}",
        "ship_to": {"city": f"city{seq}", "zip": None if seq % 3 else f"{10000 + seq}"},
        "items": [{"sku": f"s{seq}-{i}", "qty": i + 1} for i in range(seq % 3)],
        "tags": ["a", "bc"][: seq % 3], "counts": {"x": seq, "y": -seq}, "extra": {"k": [seq, "v"]},
    }


def expected_row(doc: dict[str, Any], schema: dict[str, Any] = ORDER) -> dict[str, Any]:
    """The bronze row of a valid order, computed from the document with the standard library."""
    row: dict[str, Any] = {}
    for name in schema["properties"]:
        value = doc.get(name)
        if value is None:
            row[name] = None
        elif name == "placed_at":
            row[name] = dt.datetime.fromisoformat(value.upper().replace("Z", "+00:00")).astimezone(UTC)
        elif name == "ship_on":
            row[name] = dt.date.fromisoformat(value)
        elif name in ("amount_cents",):
            row[name] = int(value)
        elif name == "price":
            row[name] = float(value)
        elif name == "ship_to":
            row[name] = {"city": value["city"], "zip": value.get("zip")}
        elif name == "items":
            row[name] = [{"sku": i["sku"], "qty": int(i["qty"])} for i in value]
        elif name == "counts":
            row[name] = [(k, int(v)) for k, v in value.items()]
        elif name == "extra":
            row[name] = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        else:
            row[name] = value
    return row


def decode(value: bytes | str, document: str = DOCUMENT) -> dict[str, Any]:
    return json_types.converter(document)(json_types.parse(value))


def test_the_type_mapping() -> None:
    assert json_types.spark_schema(DOCUMENT).simpleString() == ORDER_DDL
    assert decode(json.dumps(order(5))) == expected_row(order(5))


# name -> (a value, the error class, the start of the message); valid framing for the tests' schema id 1.
BODIES: dict[str, tuple[bytes, str, str]] = {
    "not-json": (b'{"id": "o1", ', "MalformedJsonError", "$: not JSON: Expecting property name"),
    "not-utf8": (b'{"id": "\xff"}', "MalformedJsonError", "$: not UTF-8 text"),
    "nan": (b'{"price": NaN}', "MalformedJsonError", "$: NaN is not a JSON value"),
    "duplicate-key": (b'{"id": "a", "id": "b"}', "DuplicateKeyError", "$: key 'id' appears twice"),
    "lone-surrogate": (b'{"id": "a\\ud800"}', "MalformedJsonError", "$.id: a lone surrogate \\ud800 is not Unicode"),
    "not-an-object": (b'[1, 2]', "JsonTypeError", "$: expected object, got array"),
    "missing-required": (b'{"id": "o1", "status": "NEW", "placed_at": "2026-01-01T00:00:00Z"}',
                         "MissingPropertyError", "$.amount_cents: required property is missing"),
    "wrong-type": (b'{"id": "o1", "amount_cents": "100"}', "JsonTypeError",
                   '$.amount_cents: expected integer, got string "100"'),
    "fraction-for-integer": (b'{"id": "o1", "amount_cents": 1.5}', "JsonTypeError",
                             "$.amount_cents: expected integer, got number 1.5"),
    "null-not-allowed": (b'{"id": null}', "JsonTypeError", "$.id: expected string, got null"),
    "enum-outside": (b'{"id": "o1", "amount_cents": 1, "status": "LOST"}', "JsonEnumError",
                     '$.status: "LOST" is not one of'),
    "beyond-int64": (b'{"id": "o1", "amount_cents": 9223372036854775808}', "JsonRangeError",
                     "$.amount_cents: 9223372036854775808 is beyond a 64-bit integer column"),
    "below-minimum": (b'{"id": "o1", "amount_cents": -1}', "JsonRangeError", "$.amount_cents: -1 is outside minimum"),
    "number-overflow": (b'{"id": "o1", "amount_cents": 1, "status": "NEW", "price": 1e400}', "JsonRangeError",
                        "$.price: Infinity is beyond a double"),
    "bad-date-time": (b'{"id": "o1", "amount_cents": 1, "status": "NEW", "placed_at": "2026-02-30T00:00:00Z"}',
                      "JsonFormatError", '$.placed_at: "2026-02-30T00:00:00Z" is not a date-time'),
    "bad-uuid": (b'{"id": "o1", "amount_cents": 1, "status": "NEW", "placed_at": "2026-01-01T00:00:00Z", '
                 b'"ref": "12345678"}', "JsonFormatError", '$.ref: "12345678" is not a uuid'),
    "nested-wrong-type": (b'{"id": "o1", "amount_cents": 1, "status": "NEW", "placed_at": "2026-01-01T00:00:00Z", '
                          b'"items": [{"sku": "a", "qty": 1}, {"sku": 2, "qty": 1}]}', "JsonTypeError",
                          "$.items[1].sku: expected string, got integer 2"),
    "closed-object": (b'{"id": "o1", "amount_cents": 1, "status": "NEW", "placed_at": "2026-01-01T00:00:00Z", '
                      b'"ship_to": {"city": "x", "street": "y"}}', "JsonConstraintError",
                      "$.ship_to.street: property not allowed"),
    "too-long": (b'{"id": "o1", "amount_cents": 1, "status": "NEW", "placed_at": "2026-01-01T00:00:00Z", '
                 b'"note": "this note is far too long"}', "JsonConstraintError", "$.note: 25 characters"),
    "map-value": (b'{"id": "o1", "amount_cents": 1, "status": "NEW", "placed_at": "2026-01-01T00:00:00Z", '
                  b'"counts": {"a": "1"}}', "JsonTypeError", '$.counts.a: expected integer, got string "1"'),
}
# Framing faults of value.format jsonschema, beside the bodies above (framed with schema id 1).
FRAMING: dict[str, tuple[bytes, str, str]] = {
    "magic-byte": (b"\x01\x00\x00\x00\x01{}", "WireFormatError", "magic byte"),
    "unknown-id": (encode(99, json.dumps(order(1)).encode()), "UnknownSchemaError", "schema id 99"),
}
INVALID = {**{k: (encode(1, v), c, m) for k, (v, c, m) in BODIES.items()}, **FRAMING}


def spec(value_format: str = "jsonschema", schemas: dict[int, str] | None = None) -> DecodeSpec:
    writers = schemas or {1: DOCUMENT}
    return DecodeSpec(writer_schemas=writers, reader_schema=writers[max(writers)], max_bytes=1 << 20,
                      fail_fast=False, key_format="string", value_format=value_format,
                      plain_schema_id=None if value_format == "jsonschema" else max(writers))


def test_every_invalid_value_is_refused_naming_its_path_in_the_decoder() -> None:
    import pyarrow as pa

    from ingestion.decode.python_decoder import batch_decoder

    values = [*(v for v, _, _ in INVALID.values()), encode(1, json.dumps(order(2)).encode())]
    batch = pa.RecordBatch.from_pydict({"key": [b"k"] * len(values), "value": values,
                                        "topic": ["t"] * len(values), "partition": [0] * len(values),
                                        "offset": list(range(len(values)))})
    out = next(iter(batch_decoder(spec())(iter([batch])))).to_pylist()
    for (name, (_, error_class, message)), row in zip(INVALID.items(), out, strict=False):
        assert (row["_error_class"], row["_error_message"][:len(message)]) == (error_class, message), name
    assert out[-1]["_error_class"] is None and out[-1]["_payload"]["id"] == "o2"
    assert len({c for _, c, _ in INVALID.values()}) >= 9 and len(INVALID) >= 20


@pytest.mark.parametrize(("schema", "construct"), [
    ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, "oneOf of 2 non-null schemas"),
    ({"type": ["string", "integer"]}, "a union of several non-null types"),
    ({"type": "object", "patternProperties": {"^x": {}}}, "keyword 'patternProperties'"),
    ({"$ref": "#"}, "a recursive schema"),
    ({"type": "array"}, "an array without an items schema"),
    ({"enum": [1, 2]}, "enum of non-string values"),
    ({"allOf": [{"type": "string"}]}, "keyword 'allOf'"),
    ({"type": "integer", "multipleOf": 2}, "keyword 'multipleOf'"),
    ({"$ref": "other.json#/x"}, "$ref 'other.json#/x' to a document"),
])
def test_constructs_a_column_cannot_hold_are_refused_in_one_line_naming_the_file(schema: Any, construct: str,
                                                                                  tmp_path: Path) -> None:
    file = tmp_path / "t.json"
    file.write_text(json.dumps({"type": "object", "properties": {"x": schema}}))
    with pytest.raises(UnsupportedSchemaError) as failure:
        json_schemas.read_file(file)
    message = str(failure.value)
    assert message.startswith(f"{file}: ") and construct in message and "\n" not in message, message


@pytest.mark.parametrize(("schema", "reason"), [
    ({"type": "object", "properties": "x"}, "not a valid JSON Schema: 'x' is not of type 'object' (at $.properties)"),
    ({"type": "object", "properties": {"a": {"type": "text"}}}, "not a valid JSON Schema: 'text' is not valid"),
    ({"type": "object", "required": "a"}, "not a valid JSON Schema: 'a' is not of type 'array' (at $.required)"),
])
def test_a_schema_file_its_metaschema_refuses_is_one_line_naming_the_file(schema: Any, reason: str,
                                                                          tmp_path: Path) -> None:
    file = tmp_path / "t.json"
    file.write_text(json.dumps(schema))
    with pytest.raises(SchemaError) as failure:
        json_schemas.read_file(file)
    message = str(failure.value)
    assert message.startswith(f"{file}: {reason}") and "\n" not in message, message


def test_additional_properties_policy_and_free_form_values() -> None:
    document = json_schemas.document({"type": "object", "properties": {
        "open": {"type": "object", "properties": {"a": {"type": "integer"}}},
        "checked": {"type": "object", "properties": {"a": {"type": "integer"}},
                    "additionalProperties": {"type": "string"}},
        "map": {"type": "object", "additionalProperties": {"type": "boolean"}},
        "any": {}}})
    assert json_types.spark_schema(document).simpleString() == (
        "struct<open:struct<a:bigint>,checked:struct<a:bigint>,map:map<string,boolean>,any:string>")
    row = decode('{"open": {"a": 1, "b": 2}, "checked": {"a": 1, "b": "x"}, "map": {"t": true}, '
                 '"any": [1, {"a": null}]}',
                 document)
    assert row == {"open": {"a": 1}, "checked": {"a": 1}, "map": [("t", True)], "any": '[1,{"a":null}]'}
    with pytest.raises(json_types.JsonTypeError, match=r"^\$\.checked\.b: expected string, got integer 2$"):
        decode('{"checked": {"b": 2}}', document)


# --- Kafka Connect -------------------------------------------------------------------------------------------

CONNECT_SCHEMA: dict[str, Any] = {"type": "struct", "name": "shop.Order", "optional": False, "fields": [
    {"field": "id", "type": "int64", "optional": False},
    {"field": "small", "type": "int8", "optional": True},
    {"field": "name", "type": "string", "optional": True},
    {"field": "ratio", "type": "float", "optional": True},
    {"field": "total", "type": "bytes", "optional": False, "name": connect_types.DECIMAL, "version": 1,
     "parameters": {"scale": "2", "connect.decimal.precision": "10"}},
    {"field": "day", "type": "int32", "optional": True, "name": connect_types.DATE, "version": 1},
    {"field": "at", "type": "int64", "optional": True, "name": connect_types.TIMESTAMP, "version": 1},
    {"field": "slot", "type": "int32", "optional": True, "name": connect_types.TIME, "version": 1},
    {"field": "raw", "type": "bytes", "optional": True},
    {"field": "tags", "type": "array", "items": {"type": "string", "optional": False}, "optional": True},
    {"field": "attrs", "type": "map", "keys": {"type": "string", "optional": False},
     "values": {"type": "int32", "optional": True}, "optional": True},
    {"field": "ship_to", "type": "struct", "optional": True, "fields": [
        {"field": "city", "type": "string", "optional": False}]},
]}
CONNECT_DDL = ("struct<id:bigint,small:tinyint,name:string,ratio:float,total:decimal(10,2),day:date,at:timestamp,"
               "slot:string,raw:binary,tags:array<string>,attrs:map<string,int>,ship_to:struct<city:string>>")


def connect_record(seq: int, total: decimal.Decimal | None = None) -> dict[str, Any]:
    """A JsonConverter record (schemas.enable=true) with its payload; the Decimal as base64 (decimal.format BASE64)."""
    total = total if total is not None else decimal.Decimal(f"{seq}.{seq % 100:02d}")
    unscaled = int(total.scaleb(2))
    raw = unscaled.to_bytes((unscaled.bit_length() + 8) // 8 or 1, "big", signed=True)
    return {"schema": CONNECT_SCHEMA, "payload": {
        "id": seq, "small": -seq % 128, "name": f"n{seq}", "ratio": 0.5, "total": base64.b64encode(raw).decode(),
        "day": 20454 + seq, "at": 1767225600000 + seq, "slot": 3_600_000 + seq,
        "raw": base64.b64encode(b"\x00\xff").decode(),
        "tags": ["a"], "attrs": {"k": seq}, "ship_to": {"city": f"c{seq}"}}}


def connect_row(seq: int) -> dict[str, Any]:
    return {"id": seq, "small": -seq % 128, "name": f"n{seq}", "ratio": 0.5,
            "total": decimal.Decimal(f"{seq}.{seq % 100:02d}"), "day": dt.date(2026, 1, 1) + dt.timedelta(days=seq),
            "at": dt.datetime(2026, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=seq),
            "slot": f"01:00:00.{seq:03d}", "raw": b"\x00\xff", "tags": ["a"], "attrs": [("k", seq)],
            "ship_to": {"city": f"c{seq}"}}


def test_kafka_connect_types_and_logical_types() -> None:
    import pyarrow as pa

    from ingestion.decode.python_decoder import batch_decoder

    document = connect_types.document(CONNECT_SCHEMA)
    assert connect_types.spark_schema(document).simpleString() == CONNECT_DDL
    negative = connect_record(3, decimal.Decimal("-12345678.90"))
    bad = {**connect_record(4), "payload": {**connect_record(4)["payload"], "small": 200}}
    values = [json.dumps(connect_record(7)).encode(), json.dumps(negative).encode(), json.dumps(bad).encode(),
              json.dumps(connect_record(5)["payload"]).encode()]
    batch = pa.RecordBatch.from_pydict({"key": [None] * 4, "value": values, "topic": ["t"] * 4,
                                        "partition": [0] * 4, "offset": [0, 1, 2, 3]})
    decoding = DecodeSpec(writer_schemas={0: document}, reader_schema=document, max_bytes=1 << 20, fail_fast=False,
                          value_format="connect-json", plain_schema_id=0)
    out = next(iter(batch_decoder(decoding)(iter([batch])))).to_pylist()
    assert out[0]["_payload"] == connect_row(7)
    assert out[1]["_payload"]["total"] == decimal.Decimal("-12345678.90")
    assert (out[2]["_error_class"], out[2]["_error_message"]) == ("JsonRangeError",
                                                                 "$.payload.small: 200 is beyond int8")
    assert out[3]["_error_class"] == "MalformedJsonError" and "not a Kafka Connect record" in out[3]["_error_message"]


# --- the differential test against the jsonschema validator -------------------------------------------------

_STRINGS = ["", "x", "NEW", "LOST", "2026-01-31T12:00:00Z", "2026-01-31T12:00:00.123456789+05:30",
            "2026-02-29T00:00:00Z", "2026-01-31t12:00:00z", "2026-01-31 12:00:00Z", "2026-01-31", "2026-13-01",
            "0000-01-01", "12:30:00Z",
            "25:00:00Z", "12:30:00", "12345678-1234-4234-8234-123456789abc", "12345678-1234-4234-8234-12345678",
            "abc", "ABC", "a1", "this note is far too long", "é", "1", "null", "true"]
_NUMBERS: list[Any] = [0, 1, -1, 7, 1000, 1001, 2**53, -(2**62), 2**63 - 1, -(2**63), 1.0, 1.5, -0.0, 1e18, 2.5e15,
                       3.25]


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(8 if depth < 2 else 5)
    if kind == 0:
        return rng.choice(_STRINGS)
    if kind == 1:
        return rng.choice(_NUMBERS)
    if kind == 2:
        return rng.choice([True, False])
    if kind == 3:
        return None
    if kind == 4:
        return rng.choice(_NUMBERS + _STRINGS)
    if kind == 5:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    return {rng.choice(["city", "zip", "sku", "qty", "a", "x"]): _random_value(rng, depth + 1)
            for _ in range(rng.randrange(3))}


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            found.extend(_paths(v, (*prefix, k)))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            found.extend(_paths(v, (*prefix, i)))
    return found


def mutate(doc: Any, rng: random.Random) -> Any:
    """One to three seeded mutations: a value replaced (by another type, a boundary number, a tricky string), a
    property deleted or added, an array grown."""
    doc = copy.deepcopy(doc)
    for _ in range(rng.randrange(1, 4)):
        path = rng.choice(_paths(doc))
        if not path:
            if rng.random() < 0.05:
                return _random_value(rng)
            continue
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        last = path[-1]
        action = rng.randrange(5)
        if action == 0 and isinstance(parent, dict):
            del parent[last]
        elif action == 1 and isinstance(parent, dict):
            parent[rng.choice([*ORDER["properties"], "street", "zzz"])] = _random_value(rng)
        elif action == 2 and isinstance(parent[last], list):
            parent[last].append(_random_value(rng))
        else:
            parent[last] = _random_value(rng)
    return doc


def _judged(doc: Any) -> tuple[bool, Any]:
    try:
        return True, decode(json.dumps(doc))
    except InvalidJsonError as exc:
        return False, exc


def test_the_decoder_agrees_with_the_jsonschema_validator_on_6000_mutated_documents() -> None:
    """Accept/reject agree with jsonschema (Draft 2020-12, format checking on) on every document; where both
    accept, the row equals the one computed from the document. The project's stricter rules are kept out of the
    generator (integers stay within 64 bits, no duplicate keys: JSON text of a dict has none) and tested below."""
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(ORDER, format_checker=Draft202012Validator.FORMAT_CHECKER)
    rng = random.Random(40)
    disagreements, accepted = [], 0
    for n in range(6000):
        doc = mutate(order(n % 50), rng)
        valid = validator.is_valid(doc)
        ok, result = _judged(doc)
        if ok != valid:
            disagreements.append((n, valid, result, doc))
        elif ok:
            accepted += 1
            if result != expected_row(doc):
                disagreements.append((n, "value", result, doc))
    assert not disagreements, "\n".join(map(str, disagreements[:5]))
    assert 1000 < accepted < 5000  # both outcomes are well represented


def test_the_stricter_rules_beyond_json_schema() -> None:
    """Where the validator accepts and the decoder refuses: duplicate keys (json.loads keeps the last), integers
    beyond a 64-bit column, date-times outside years 1 to 9999 in UTC, a format string with a trailing newline."""
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(ORDER, format_checker=Draft202012Validator.FORMAT_CHECKER)
    cases = {
        '{"id": "a", "id": "b", "amount_cents": 1, "status": "NEW", "placed_at": "2026-01-01T00:00:00Z"}':
            "DuplicateKeyError",
        '{"id": "a", "amount_cents": 9223372036854775808, "status": "NEW", "placed_at": "2026-01-01T00:00:00Z"}':
            "JsonRangeError",
        '{"id": "a", "amount_cents": 1e300, "status": "NEW", "placed_at": "2026-01-01T00:00:00Z"}': "JsonRangeError",
        '{"id": "a", "amount_cents": 1, "status": "NEW", "placed_at": "0001-01-01T00:00:00+01:00"}':
            "JsonFormatError",
        '{"id": "a", "amount_cents": 1, "status": "NEW", "placed_at": "2026-01-01T00:00:00Z\\n"}': "JsonFormatError",
    }
    for text, error_class in cases.items():
        assert validator.is_valid(json.loads(text)), text
        with pytest.raises(InvalidJsonError) as failure:
            decode(text)
        assert type(failure.value).__name__ == error_class, text


def test_what_the_jvm_path_leaves_to_python_it_names() -> None:
    """A pattern (Java's regular expressions are not Python's), a free-form JSON text column and Kafka Connect
    records are decoded in Python; `value.decoder: jvm` is refused at start with this reason."""
    from ingestion.decode import json_jvm

    assert json_jvm.unusable(None, spec()) == "$.tags[] has a pattern: decoded in Python"  # type: ignore[arg-type]
    no_pattern = {**ORDER, "properties": {**ORDER["properties"], "tags": {"type": "array",
                                                                          "items": {"type": "string"}}}}
    assert json_jvm.unusable(None, spec(schemas={1: json_schemas.document(no_pattern)})) == (  # type: ignore[arg-type]
        "$.extra is free-form JSON (kept as text): decoded in Python")
    connect = DecodeSpec(writer_schemas={0: "{}"}, reader_schema="{}", max_bytes=1, fail_fast=False,
                         value_format="connect-json")
    assert "carry their own schema" in (json_jvm.unusable(None, connect) or "")  # type: ignore[arg-type]


def test_schema_folder_and_schema_file_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`schemas/<subject>/<id>.json` with a `$ref` to a file beside it (value.format jsonschema), and
    value.schemaFile relative to the schemas folder (json)."""
    from ingestion.config import parse_pipeline
    from ingestion.schema.registry import source_for

    subject = tmp_path / "orders-value"
    subject.mkdir()
    (subject / "address.json").write_text(json.dumps(ORDER["$defs"]["address"]))
    v1 = copy.deepcopy(ORDER)
    v1["properties"]["ship_to"] = {"$ref": "address.json"}
    (subject / "1.json").write_text(json.dumps(v1))
    (tmp_path / "order.schema.json").write_text(json.dumps(ORDER))
    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(tmp_path))
    base = {"name": "o", "topic": "orders", "sink": {"table": str(tmp_path / "t")}}
    folder = parse_pipeline({**base, "value": {"format": "jsonschema"}}, tmp_path / "p.yaml")
    plain = parse_pipeline({**base, "value": {"format": "json", "schemaFile": "order.schema.json"}},
                           tmp_path / "q.yaml")
    for config in (folder, plain):
        versions = source_for(config).versions("orders-value")
        assert json_types.spark_schema(versions[max(versions)]).simpleString() == ORDER_DDL
    assert list(source_for(plain).versions("orders-value")) == [0]


@pytest.mark.parametrize(("value", "message"), [
    ({"format": "json"}, "key 'value.schemaFile' is needed with value.format json"),
    ({"format": "jsonschema", "schemaFile": "x.json"}, "key 'value.schemaFile' is for value.format json or "
                                                        "connect-json, got format 'jsonschema'"),
    ({"format": "json", "schemaFile": "x.json", "registry": {"url": "http://r"}},
     "key 'value.registry' is not used with value.format json"),
])
def test_json_config_mistakes_are_named(value: dict[str, Any], message: str, tmp_path: Path) -> None:
    from ingestion.config import parse_pipeline
    from ingestion.errors import ConfigError

    with pytest.raises(ConfigError, match=f"^{tmp_path / 'p.yaml'}: {message}"):
        parse_pipeline({"name": "o", "topic": "orders", "value": value}, tmp_path / "p.yaml")


@pytest.mark.parametrize(("total", "expected"), [
    ("1.5", decimal.Decimal("1.50")), ("7", decimal.Decimal("7.00")), ("-0.01", decimal.Decimal("-0.01")),
    ("1.505", "$.payload.total: 1.505 has more than 2 digits after the point"),
    ("123456789.00", "$.payload.total: 123456789.00 is beyond decimal(10,2)"),
    ('"AA=="', decimal.Decimal("0.00")),
    ('"not base64!"', '$.payload.total: "not base64!" is not base64'),
])
def test_connect_decimals_as_numbers_and_as_base64(total: str, expected: Any) -> None:
    """decimal.format NUMERIC (a JSON number, read exactly) and BASE64 (the default), against decimal(10,2)."""
    node = connect_types.compile_schema(json.dumps(CONNECT_SCHEMA))
    text = json.dumps({**connect_record(3)["payload"], "total": "@"}).replace('"@"', total)
    payload = json_types.parse(text, parse_float=decimal.Decimal)
    if isinstance(expected, str):
        with pytest.raises(InvalidJsonError) as failure:
            node.convert(payload, "$.payload")
        assert str(failure.value) == expected
    else:
        assert node.convert(payload, "$.payload")["total"] == expected


def test_a_registry_schema_a_column_cannot_hold_is_refused_naming_the_subject(tmp_path: Path) -> None:
    from ingestion.config import parse_pipeline
    from ingestion.decode.resolver import SchemaResolver

    class Registry:  # a SchemaSource of one version (the registry client is not what is tested here)
        def versions(self, subject: str) -> dict[int, str]:
            return {3: json_schemas.document({"type": "object", "properties": {"x": {"type": ["string", "integer"]}}})}

        def subjects(self) -> list[str]:
            return ["orders-value"]

        def by_id(self, schema_id: int) -> str | None:
            return None

    config = parse_pipeline({"name": "o", "topic": "orders", "value": {"format": "jsonschema"}}, tmp_path / "p.yaml")
    with pytest.raises(UnsupportedSchemaError, match=r"^subject\(s\) 'orders-value': type \['string', 'integer'\] "
                                                     r"\(a union of several non-null types\) at #/properties/x "):
        SchemaResolver(config, Registry())


def test_a_spark_ddl_schema_file_means_the_json_schema_of_its_fields(tmp_path: Path) -> None:
    """value.schemaFile ending in .ddl: NOT NULL is required and not nullable; types outside the mapping refused."""
    file = tmp_path / "orders.ddl"
    file.write_text("id BIGINT NOT NULL, placed_at TIMESTAMP, items ARRAY<STRUCT<sku: STRING NOT NULL, qty: BIGINT>>,"
                    " counts MAP<STRING, DOUBLE>, paid BOOLEAN, ship_on DATE")
    document = json_schemas.read_file(file)
    assert json_types.spark_schema(document).simpleString() == (
        "struct<id:bigint,placed_at:timestamp,items:array<struct<sku:string,qty:bigint>>,counts:map<string,double>,"
        "paid:boolean,ship_on:date>")
    assert decode('{"id": 1, "items": [{"sku": "a", "qty": null}], "counts": {"x": 2}}', document) == {
        "id": 1, "placed_at": None, "items": [{"sku": "a", "qty": None}], "counts": [("x", 2.0)], "paid": None,
        "ship_on": None}
    for text, fault in [('{"id": null}', "$.id: expected integer, got null"),
                        ('{"id": 1, "items": [{"qty": 1}]}', "$.items[0].sku: required property is missing")]:
        with pytest.raises(InvalidJsonError, match=f"^{re.escape(fault)}$"):
            decode(text, document)
    file.write_text("id BIGINT, amount DECIMAL(10, 2)")
    with pytest.raises(json_types.SchemaError, match=rf"^{re.escape(str(file))}: Spark DDL: type DECIMAL is not one"):
        json_schemas.read_file(file)
