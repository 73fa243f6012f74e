"""The strict Avro reading: bodies the specification rejects are refused with the field and the fault named."""

from __future__ import annotations

import io
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer

from ingestion.decode.validate import MalformedAvroError, UnrepresentableValueError, body_validator, min_size

SCHEMA: dict[str, Any] = {
    "type": "record", "name": "Sample", "fields": [
        {"name": "e", "type": {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN", "BLUE"]}},
        {"name": "u", "type": ["null", "string", "long"]},
        {"name": "s", "type": "string"},
        {"name": "b", "type": "bytes"},
        {"name": "a", "type": {"type": "array", "items": "int"}},
        {"name": "m", "type": {"type": "map", "values": "long"}},
        {"name": "f", "type": {"type": "fixed", "name": "Four", "size": 4}},
        {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}},
        {"name": "ok", "type": "boolean"},
    ]}
VALID = {"e": "GREEN", "u": "x", "s": "héllo", "b": b"\x00\x01", "a": [1, 2], "m": {"k": 5}, "f": b"abcd",
         "d": __import__("decimal").Decimal("12.34"), "ok": True}


def encode(record: dict[str, Any], schema: dict[str, Any] = SCHEMA) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(schema), record)
    return out.getvalue()


def zigzag(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z & ~0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def body(e: bytes = zigzag(1), u: bytes = zigzag(1) + zigzag(1) + b"x", s: bytes = zigzag(6) + "héllo".encode(),
         b: bytes = zigzag(2) + b"\x00\x01", a: bytes = zigzag(2) + zigzag(1) + zigzag(2) + zigzag(0),
         m: bytes = zigzag(1) + zigzag(1) + b"k" + zigzag(5) + zigzag(0), f: bytes = b"abcd",
         d: bytes = zigzag(2) + (1234).to_bytes(2, "big"), ok: bytes = b"\x01") -> bytes:
    return e + u + s + b + a + m + f + d + ok


def test_the_hand_built_body_is_what_fastavro_writes() -> None:
    assert body() == encode(VALID)
    assert body_validator(SCHEMA)(body()) == len(body())


@pytest.mark.parametrize(("parts", "message"), [
    ({"e": zigzag(-1)}, "e: enum index -1 outside [0, 3)"),
    ({"e": zigzag(3)}, "e: enum index 3 outside [0, 3)"),
    ({"u": zigzag(-1)}, "u: union index -1 outside [0, 3)"),
    ({"u": zigzag(3)}, "u: union index 3 outside [0, 3)"),
    ({"s": zigzag(-2) + b"ab"}, "s: string length -2 is negative"),
    ({"s": zigzag(1000)}, "s: string length 1000 is beyond the"),
    ({"s": zigzag(2) + b"\xc3\x28"}, "s: string is not valid UTF-8 (byte 0xc3 at 0"),
    ({"s": zigzag(3) + b"\xed\xa0\x80"}, "s: string is not valid UTF-8"),  # a surrogate
    ({"s": zigzag(2) + b"\xc0\xaf"}, "s: string is not valid UTF-8"),  # overlong '/'
    ({"b": zigzag(-1)}, "b: bytes length -1 is negative"),
    ({"a": zigzag(2**40)}, "a: array block count 1099511627776 is beyond the"),
    ({"a": zigzag(-2) + b"\xff" * 11}, "a: array block size varint is longer than 10 bytes"),
    ({"a": zigzag(1) + b"\xff\xff\xff\xff\xff\xff"}, "a[0]: int varint is longer than 5 bytes"),
    ({"a": zigzag(1) + b"\xff\xff\xff\xff\x7f"}, "a[0]: int varint overflows 32 bits"),
    ({"m": zigzag(1) + zigzag(1) + b"\xff" + zigzag(5) + zigzag(0)}, "m: map key is not valid UTF-8"),
    ({"m": zigzag(1) + zigzag(1) + b"k" + b"\xff" * 11}, "m['k']: long varint is longer than 10 bytes"),
    ({"d": zigzag(2) + (10000).to_bytes(2, "big")}, "d: decimal unscaled value 10000 exceeds precision 4"),
    ({"d": zigzag(0)}, "d: decimal has no bytes"),
    ({"ok": b"\x02"}, "ok: boolean byte 2 is neither 0 nor 1"),
])
def test_each_invalid_body_is_refused_naming_the_field_and_the_fault(parts: dict[str, bytes], message: str) -> None:
    with pytest.raises(MalformedAvroError) as caught:
        body_validator(SCHEMA)(body(**parts))
    assert str(caught.value).startswith(message), str(caught.value)


def test_a_cut_body_is_refused_where_it_ends() -> None:
    whole = body()
    for cut in range(len(whole)):
        with pytest.raises(MalformedAvroError):
            body_validator(SCHEMA)(whole[:cut])


def test_blocks_with_a_byte_size_and_several_blocks_are_valid() -> None:
    two_blocks = zigzag(-1) + zigzag(1) + zigzag(1) + zigzag(1) + zigzag(2) + zigzag(0)
    whole = body(a=two_blocks)
    assert body_validator(SCHEMA)(whole) == len(whole)


def test_values_spark_cannot_hold_are_unrepresentable() -> None:
    schema = {"type": "record", "name": "T",
              "fields": [{"name": "day", "type": {"type": "int", "logicalType": "date"}}]}
    assert body_validator(schema)(zigzag(0)) == 1
    with pytest.raises(UnrepresentableValueError, match=r"day: date 2932897 days is outside"):
        body_validator(schema)(zigzag(2_932_897))


def test_uuid_strings_must_have_the_rfc_4122_form() -> None:
    schema = {"type": "record", "name": "T", "fields": [{"name": "id", "type": {"type": "string",
                                                                               "logicalType": "uuid"}}]}
    good = b"123e4567-e89b-12d3-a456-426614174000"
    assert body_validator(schema)(zigzag(len(good)) + good) == 1 + len(good)
    with pytest.raises(MalformedAvroError, match="id: uuid 'not-a-uuid' is not in the 8-4-4-4-12"):
        body_validator(schema)(zigzag(10) + b"not-a-uuid")


def test_recursive_named_types_validate() -> None:
    schema = {"type": "record", "name": "Node", "fields": [
        {"name": "value", "type": "int"}, {"name": "next", "type": ["null", "Node"]}]}
    chain = encode({"value": 1, "next": {"value": 2, "next": None}}, schema)
    assert body_validator(schema)(chain) == len(chain)
    assert min_size(schema) == 2


def test_fixed_needs_its_whole_size() -> None:
    with pytest.raises(MalformedAvroError, match="f: fixed of 4 bytes is beyond the 3 bytes left"):
        body_validator(SCHEMA)(body(f=b"abc", d=b"", ok=b""))


_DIFFERENTIAL = [
    SCHEMA,
    {"type": "record", "name": "Node", "fields": [{"name": "value", "type": "int"},
                                                  {"name": "next", "type": ["null", "Node"]}]},
    {"type": "record", "name": "Times", "namespace": "t", "fields": [
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "price", "type": {"type": "fixed", "name": "Price", "size": 3, "logicalType": "decimal",
                                   "precision": 5, "scale": 2}},
        {"name": "again", "type": "Price"}, {"name": "flags", "type": {"type": "array", "items": "boolean"}},
        {"name": "nested", "type": {"type": "map", "values": {"type": "array", "items": ["null", "float",
                                                                                         "double"]}}}]},
]


@pytest.mark.parametrize("schema", _DIFFERENTIAL, ids=["sample", "recursive", "logical"])
def test_the_generated_walk_answers_as_the_precise_walk_on_mutated_bodies(schema: dict[str, Any]) -> None:
    """`body_validator` walks a body with generated code first and, when not sure, with the precise readers: on
    every body, valid or mutated (bytes flipped, cut, inserted, trailing), it ends where the precise walk ends or
    raises the precise walk's error."""
    import random

    from ingestion.decode import validate

    compiler = validate._Compiler()
    read = compiler.compile(schema, None)
    checked = body_validator(schema)

    def outcome(check: Any, raw: bytes) -> tuple[str, Any]:
        try:
            return "ends", check(raw)
        except (MalformedAvroError, UnrepresentableValueError) as exc:
            return type(exc).__name__, str(exc)

    node = _DIFFERENTIAL[1]
    bodies = {
        "Sample": [body(), encode(VALID)],
        "Node": [encode({"value": v, "next": {"value": -v, "next": None}}, node) for v in (0, 63, 64, 2**31 - 1)],
        "Times": [zigzag(19000) + b"\x02" + zigzag(1_700_000_000_000_000) + zigzag(36)
                  + b"123e4567-e89b-12d3-a456-426614174000" + b"\x00\x30\x39" + b"\xff\xcf\xc7"
                  + zigzag(2) + b"\x01\x00" + zigzag(0)
                  + zigzag(1) + zigzag(1) + b"k" + zigzag(1) + zigzag(1) + b"\x00\x00\x80\x3f" + zigzag(0)
                  + zigzag(0)],
    }[schema["name"]]
    rng = random.Random(7)
    seen = {"ends": 0, "errors": 0}
    for original in bodies:
        assert outcome(checked, original) == ("ends", len(original))
        for _ in range(400):
            raw = bytearray(original)
            kind = rng.randrange(4)
            if kind == 0:
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            elif kind == 1:
                del raw[rng.randrange(len(raw)):]
            elif kind == 2:
                raw.insert(rng.randrange(len(raw) + 1), rng.choice((0x00, 0x01, 0x7F, 0x80, 0xFF)))
            else:
                raw += bytes([rng.randrange(256)])
            mutated = bytes(raw)
            precise = outcome(lambda b: read(b, 0, ""), mutated)
            assert outcome(checked, mutated) == precise, mutated.hex()
            seen["ends" if precise[0] == "ends" else "errors"] += 1
    assert seen["ends"] > 50 and seen["errors"] > 50, seen  # both kinds of answer were compared
