"""Protobuf topics without a JVM: schemas to Spark types, Confluent's framing, the body check and the Python
decoder on hand-built Arrow batches; the differential test against the protobuf package's own parsers."""

from __future__ import annotations

import base64
import datetime as dt
import random
import struct
import textwrap
from typing import Any

import pyarrow as pa
import pytest

from ingestion.config import parse_pipeline
from ingestion.decode.protobuf_check import fault
from ingestion.decode.protobuf_decoder import ProtobufBatchDecoder
from ingestion.decode.protobuf_wire import index_bytes, split_indexes
from ingestion.decode.spec import DecodeSpec
from ingestion.decode.wire import WireFormatError, encode
from ingestion.errors import ConfigError, SchemaError
from ingestion.schema import protobuf_schemas, protobuf_types
from tests import protobuf as shop
from tests.unit.test_decode import KAFKA_SCHEMA, column

ORDER_COLUMNS = (
    "struct<id:string,amount_cents:bigint,status:string,ship_to:struct<street:string,city:string>,"
    "items:array<struct<sku:string,qty:int>>,tags:map<string,int>,card:string,voucher:string,placed_at:timestamp,"
    "note:string,discount:double,big:decimal(20,0),delta:int,blob:binary,gift:boolean,weight:float,small:bigint,"
    "ref:bigint,codes:array<bigint>,total:struct<currency:string,units:bigint>>")


def test_the_table_message_is_the_one_no_other_uses_and_maps_field_by_field() -> None:
    doc = shop.document()
    assert protobuf_schemas.message_names(doc) == ["shop.v1.Address", "shop.v1.Order"]
    assert protobuf_schemas.table_message(doc) == shop.ORDER
    assert protobuf_schemas.table_message(doc, "Address") == "shop.v1.Address"
    order = protobuf_schemas.find_message(doc, shop.ORDER)
    assert protobuf_schemas.indexes_of(order) == (1,)
    assert protobuf_types.spark_schema(order).simpleString() == ORDER_COLUMNS
    with pytest.raises(SchemaError, match=r"value\.messageName 'Nope' is no message"):
        protobuf_schemas.table_message(doc, "Nope")


def test_a_serialized_descriptor_and_the_proto_text_give_the_same_document() -> None:
    order = protobuf_schemas.find_message(shop.document(), shop.ORDER)
    serialized = base64.b64encode(order.file.serialized_pb).decode()
    # the import as a reference in text, the main file serialized: each compiled as it comes
    assert protobuf_schemas.document("any.proto", {"any.proto": serialized, shop.COMMON: shop.common_text()}) \
        == shop.document()


def test_the_schemas_folder_takes_proto_files_with_imports_beside_them(tmp_path: Any, monkeypatch: Any) -> None:
    from ingestion.schema.registry import FolderSource

    folder = tmp_path / "schemas"
    (folder / "orders-value" / "shop" / "v1").mkdir(parents=True)
    (folder / "orders-value" / "shop" / "v1" / "common.proto").write_text(shop.common_text())
    (folder / "orders-value" / "7.proto").write_text(shop.proto_text())
    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(folder))
    source = FolderSource()
    doc = source.versions("orders-value")[7]
    assert source.subjects() == ["orders-value"] and source.by_id(7) == doc
    order = protobuf_schemas.find_message(doc, shop.ORDER)
    assert protobuf_types.spark_schema(order).simpleString() == ORDER_COLUMNS
    (folder / "orders-value" / "8.proto").write_text("syntax = 'proto3'; message {")
    with pytest.raises(SchemaError, match=r"8\.proto: protoc refuses '8\.proto'") as refused:
        source.versions("orders-value")
    assert "ingest-protoc-" not in str(refused.value) and "8.proto:1:" in str(refused.value), refused.value


def test_a_file_imported_beside_the_versions_is_not_a_version_and_a_stray_one_is_refused(
        tmp_path: Any, monkeypatch: Any) -> None:
    """docs/protobuf.md: imports are looked up beside the file (`schemas/<subject>/common.proto`), then from the
    folder's root; only `<id>.proto` files are versions, and the messages name `.proto`, not `.avsc`."""
    from ingestion.errors import SubjectNotFoundError
    from ingestion.schema.registry import FolderSource, check_subjects

    folder = tmp_path / "schemas"
    subject = folder / "shipments-value"
    subject.mkdir(parents=True)
    (subject / "common.proto").write_text(shop.common_text())
    (subject / "2.proto").write_text(shop.proto_text().replace('import "shop/v1/common.proto";',
                                                               'import "common.proto";'))
    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(folder))
    source = FolderSource(".proto")
    versions = source.versions("shipments-value")
    assert list(versions) == [2]
    assert protobuf_schemas.file_names(versions[2])[-2:] == ["common.proto", "2.proto"]
    order = protobuf_schemas.find_message(versions[2], shop.ORDER)
    assert protobuf_types.spark_schema(order).simpleString() == ORDER_COLUMNS

    stray = subject / "draft.proto"
    stray.write_text('syntax = "proto3";\nmessage Draft { string x = 1; }\n')
    with pytest.raises(SchemaError) as refused:
        source.versions("shipments-value")
    assert str(refused.value) == (f"{stray}: schema files are named by their schema id, like 1.proto; got "
                                  "'draft.proto', which no version of the subject imports")
    stray.unlink()

    with pytest.raises(SubjectNotFoundError) as missing:
        source.versions("returns-value")
    assert str(missing.value) == ("no schemas for subject 'returns-value': expected files like "
                                  f"{folder / 'returns-value' / '1.proto'}")
    config = _config(tmp_path, "format: protobuf\nsubject: returns-value")
    with pytest.raises(SubjectNotFoundError) as named:
        check_subjects(config)
    assert str(named.value) == (f"{config.file}: key 'value.subject' ('returns-value'): no schemas for subject "
                                f"'returns-value': expected files like {folder / 'returns-value' / '1.proto'}; "
                                "closest: shipments-value")


def _types(body: str, name: str = "t.M") -> str:
    imports = "".join(f'import "google/protobuf/{wk}.proto";\n'
                      for wk in ("any", "duration", "struct", "empty", "wrappers"))
    text = f'syntax = "proto3";\npackage t;\n{imports}{body}'
    doc = protobuf_schemas.document("t.proto", {"t.proto": text})
    return protobuf_types.spark_schema(protobuf_schemas.find_message(doc, name)).simpleString()


def test_well_known_types_and_scalars_map_as_documented() -> None:
    got = _types("""message M {
      uint32 a = 1; fixed64 b = 2; sfixed64 c = 3; double d = 4; google.protobuf.Duration e = 5;
      google.protobuf.Struct f = 6; google.protobuf.Value g = 7; google.protobuf.ListValue h = 8;
      google.protobuf.Any i = 9; google.protobuf.Empty j = 10; google.protobuf.UInt64Value k = 11;
      google.protobuf.BytesValue l = 12; map<int64, M2> m = 13; }
    message M2 { bool x = 1; }""")
    assert got == ("struct<a:bigint,b:decimal(20,0),c:bigint,d:double,e:struct<seconds:bigint,nanos:int>,f:string,"
                   "g:string,h:string,i:struct<type_url:string,value:binary>,j:boolean,k:decimal(20,0),l:binary,"
                   "m:map<bigint,struct<x:boolean>>>")


def test_recursion_is_refused_naming_the_message_and_the_field() -> None:
    with pytest.raises(SchemaError, match=r"message t.Node is recursive at field 'child.node' "):
        _types("message Node { string v = 1; Wrap child = 2; }\nmessage Wrap { Node node = 1; }", "t.Node")


def test_message_indexes_frame_as_confluent_writes_them() -> None:
    assert index_bytes([0]) == b"\x00"
    assert index_bytes([1]) == b"\x02\x02"
    assert index_bytes([2, 0, 70]) == b"\x06\x04\x00\x8c\x01"
    for indexes in ([0], [1], [3, 1], [0, 0, 200]):
        schema_id, got, body = split_indexes(encode(7, index_bytes(indexes) + b"\x08\x01"))
        assert (schema_id, list(got), bytes(body)) == (7, indexes, b"\x08\x01")
    for bad, message in ((b"\x01\x02", "count -1 is outside"), (b"\x04\x02", "cut short"), (b"\x03", "outside"),
                         (b"", "cut short")):
        with pytest.raises(WireFormatError, match=message):
            split_indexes(encode(7, bad))


# --- the Python decoder -------------------------------------------------------------------------------------------

def spec(writers: dict[int, str] | None = None) -> DecodeSpec:
    writers = writers or {1: shop.document()}
    return DecodeSpec(writer_schemas=writers, reader_schema=writers[max(writers)], max_bytes=1 << 20,
                      fail_fast=False, key_format="string", value_format="protobuf", message_name=shop.ORDER)


def decode(values: list[bytes | None], writers: dict[int, str] | None = None,
           spec_: DecodeSpec | None = None) -> pa.RecordBatch:
    n = len(values)
    batch = pa.RecordBatch.from_arrays([
        pa.array([f"k{i}".encode() for i in range(n)], pa.binary()), pa.array(values, pa.binary()),
        pa.array(["t"] * n), pa.array([0] * n, pa.int32()), pa.array(range(n), pa.int64()),
        pa.array([0] * n, pa.timestamp("us", tz="UTC")), pa.array([0] * n, pa.int32()),
        pa.array([[]] * n, KAFKA_SCHEMA.field("headers").type)], schema=KAFKA_SCHEMA)
    decoder = ProtobufBatchDecoder(spec_ or spec(writers))
    decoder._prepare()
    return decoder.decode_batch(batch)


def framed(body: bytes, indexes: tuple[int, ...] = (1,), schema_id: int = 1) -> bytes:
    return encode(schema_id, index_bytes(indexes) + body)


def test_records_decode_to_rows_field_by_field() -> None:
    messages = [shop.order(seq) for seq in range(6)]
    out = decode([framed(m.SerializeToString()) for m in messages] + [None])
    assert column(out, "_error_class") == [None] * 7
    assert column(out, "_tombstone") == [False] * 6 + [True]
    for got, msg in zip(column(out, "_payload"), messages, strict=False):
        want = shop.expected_row(msg)
        got["tags"] = dict(got["tags"])
        got["placed_at"] = got["placed_at"].replace(tzinfo=None)
        assert got == want


def _tag(number: int, wire_type: int) -> bytes:
    return _varint(number << 3 | wire_type)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes([*out, value])


def _len(number: int, payload: bytes) -> bytes:
    return _tag(number, 2) + _varint(len(payload)) + payload


# name -> (value, error class, the message it starts with); each is refused by Protobuf's parser or this project.
INVALID: dict[str, tuple[bytes, str, str]] = {
    "varint cut short": (framed(_tag(2, 0) + b"\xff"), "MalformedProtobufError",
                         "amount_cents: value varint is cut short"),
    "varint of 11 bytes": (framed(_tag(2, 0) + b"\xff" * 10 + b"\x01"), "MalformedProtobufError",
                           "amount_cents: value varint is longer than 10 bytes"),
    "wire type 6": (framed(_tag(3, 6)), "MalformedProtobufError", "status: wire type 6 is not"),
    "wire type 7": (framed(_tag(99, 7)), "MalformedProtobufError", "#99: wire type 7 is not"),
    "end group without a start": (framed(_tag(50, 4)), "MalformedProtobufError",
                                  "#50: end-group tag without a matching start-group tag"),
    "group never closed": (framed(_tag(50, 3) + _tag(1, 0) + b"\x01"), "MalformedProtobufError",
                           "#50: group of field 50 is not closed"),
    "length beyond the body": (framed(_tag(1, 2) + _varint(100) + b"ab"), "MalformedProtobufError",
                               "id: length 100 is beyond the 2 bytes left"),
    "string not UTF-8": (framed(_len(1, b"\xc3\x28")), "MalformedProtobufError", "id: string is not valid UTF-8"),
    "nested string not UTF-8": (framed(_len(4, _len(2, b"\xed\xa0\x80"))), "MalformedProtobufError",
                                "ship_to.city: string is not valid UTF-8"),
    "repeated message string not UTF-8": (framed(_len(5, _len(1, b"ok")) + _len(5, _len(1, b"\xff"))),
                                          "MalformedProtobufError", "items[1].sku: string is not valid UTF-8"),
    "map key not UTF-8": (framed(_len(6, _len(1, b"\x80"))), "MalformedProtobufError",
                          "tags.key: string is not valid UTF-8"),
    "fixed32 cut short": (framed(_tag(17, 5) + b"\x01\x02"), "MalformedProtobufError",
                          "small: fixed 4-byte value is cut short"),
    "packed varint cut short": (framed(_len(19, b"\x01\xff")), "MalformedProtobufError",
                                "codes: packed value varint is cut short"),
    "field number 0": (framed(b"\x00\x01"), "MalformedProtobufError", "body: field number 0"),
    "nested length beyond its message": (framed(_len(4, _tag(1, 2) + _varint(9) + b"x")), "MalformedProtobufError",
                                         "ship_to.street: length 9 is beyond the 1 bytes left"),
    "unknown message index": (framed(b"", indexes=(5,)), "UnknownMessageError", "message indexes [5] name no "),
    "another message of the file": (framed(b"", indexes=(0,)), "MessageTypeError",
                                    "message indexes [0] name shop.v1.Address, the table holds shop.v1.Order"),
    "nested index past the nested messages": (framed(b"", indexes=(1, 3)), "UnknownMessageError", "message indexes"),
    "unknown schema id": (framed(b"", schema_id=99), "UnknownSchemaError", "schema id 99 is not a version"),
    "message-index array cut short": (encode(1, b"\x04\x02"), "WireFormatError", "the message-index array is cut"),
    "magic byte 1": (b"\x01" + framed(b"")[1:], "WireFormatError", "magic byte is 1"),
}


def test_every_invalid_body_is_quarantined_naming_the_field_and_the_fault() -> None:
    out = decode([value for value, _, _ in INVALID.values()])
    for (name, (_, error_class, message)), got_class, got_message, payload in zip(
            INVALID.items(), column(out, "_error_class"), column(out, "_error_message"), column(out, "_payload"),
            strict=True):
        assert (got_class, payload) == (error_class, None), (name, got_message)
        assert got_message.startswith(message), (name, got_message)


def test_unknown_fields_and_mismatched_wire_types_are_dropped_as_protobuf_reads_them() -> None:
    msg = shop.order(1)
    extra = _tag(77, 0) + b"\x05" + _len(78, b"\xff\xfe") + _tag(79, 3) + _tag(1, 0) + b"\x01" + _tag(79, 4) \
        + _tag(1, 0) + b"\x05"  # field 1 (a string) as a varint: an unknown field to Protobuf
    out = decode([framed(msg.SerializeToString() + extra)])
    assert column(out, "_error_class") == [None]
    assert column(out, "_payload")[0]["id"] == "o1"


def test_an_older_version_fills_the_columns_it_has_and_leaves_the_new_ones_null() -> None:
    v1, v2 = shop.order(4), shop.order(5, version=2)
    out = decode([framed(v1.SerializeToString(), schema_id=1), framed(v2.SerializeToString(), schema_id=2)],
                 writers={1: shop.document(1), 2: shop.document(2)})
    old, new = column(out, "_payload")
    assert (old["channel"], old["ship_to"]["zip"], old["id"]) == (None, None, "o4")
    assert (new["channel"], new["ship_to"]["zip"]) == ("web-5", "8005")


def _config(tmp_path: Any, value: str, key: str = "") -> Any:
    text = f"name: p\ntopic: t\nvalue:\n{textwrap.indent(value, '  ')}\n{key}"
    import yaml

    return parse_pipeline(yaml.safe_load(text), tmp_path / "p.yaml")


def test_the_config_takes_protobuf_and_refuses_contradictions(tmp_path: Any) -> None:
    config = _config(tmp_path, "format: protobuf\nmessageName: shop.v1.Order", "key:\n  format: protobuf\n")
    assert (config.value.format, config.value.message_name, config.key.subject) == ("protobuf", shop.ORDER, "t-key")
    assert _config(tmp_path, "format: protobuf\ndecoder: jvm").value.decoder == "jvm"
    with pytest.raises(ConfigError, match=r"key 'key\.format' is avro with value\.format protobuf"):
        _config(tmp_path, "format: protobuf", "key:\n  format: avro\n")
    with pytest.raises(ConfigError, match=r"'value\.messageName' is for value\.format protobuf"):
        _config(tmp_path, "format: confluent\nmessageName: x")


# --- the differential test ----------------------------------------------------------------------------------------

MUTATIONS = 6000


def _mutated(seed: int) -> list[bytes]:
    """Seeded mutations of valid Orders: bytes replaced, flipped, inserted, deleted, cut, wire types changed,
    unknown fields and groups appended."""
    rng = random.Random(seed)
    bases = [shop.order(seq).SerializeToString() for seq in range(24)]
    bodies = []
    for _ in range(MUTATIONS):
        body = bytearray(rng.choice(bases))
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            kind, at = rng.randrange(7), rng.randrange(len(body) + 1)
            if kind == 0 and at < len(body):
                body[at] = rng.randrange(256)
            elif kind == 1:
                del body[at:]
            elif kind == 2:
                body[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
            elif kind == 3:
                del body[at:at + rng.randint(1, 3)]
            elif kind == 4 and at < len(body):
                body[at] = body[at] & ~7 | rng.choice((1, 2, 3, 4, 5, 6, 7))
            elif kind == 5 and at < len(body):
                body[at] ^= 1 << rng.randrange(8)
            else:
                number = rng.choice((1, 4, 20, 1000, 2**29 - 1))
                body += _tag(number, 3) + _tag(rng.randint(1, 9), 0) + b"\x01" + _tag(
                    rng.choice((number, number + 1)), 4)
        bodies.append(bytes(body))
    return bodies


def _json_of(row: dict[str, Any], descriptor: Any) -> dict[str, Any]:
    """A decoded row (as Arrow gives it back) in Protobuf's JSON mapping, as json_format.MessageToDict writes it
    (fields without presence always, unset ones left out)."""
    out = {}
    for field in descriptor.fields:
        value = row[field.name]
        if value is None:
            continue
        if protobuf_types._is_map(field):
            key, item = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
            out[field.name] = {str(_json_single(k, key)).lower() if isinstance(k, bool) else str(_json_single(k, key)):
                               _json_single(v, item) for k, v in value}
        elif protobuf_types._is_repeated(field):
            out[field.name] = [_json_single(v, field) for v in value]
        else:
            out[field.name] = _json_single(value, field)
    return out


def _json_single(value: Any, field: Any) -> Any:
    t = protobuf_types
    if field.type == t.MESSAGE:
        name = field.message_type.full_name
        if name == t.TIMESTAMP:
            return value.replace(tzinfo=None).isoformat()  # compared below at microseconds
        if name.endswith("Value") and name.startswith("google.protobuf."):
            return _json_single(value, field.message_type.fields_by_name["value"])
        return _json_of(value, field.message_type)
    if field.type in (t.INT64, t.UINT64, t.SINT64, t.FIXED64, t.SFIXED64):
        return str(int(value))
    if field.type == t.BYTES:
        return base64.b64encode(value).decode()
    if field.type == t.ENUM:
        return int(value) if value.lstrip("-").isdigit() else value
    if field.type in (t.FLOAT, t.DOUBLE):
        if value != value or value in (float("inf"), float("-inf")):
            return {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}[str(value)]
        return float(struct.unpack("f", struct.pack("f", value))[0]) if field.type == t.FLOAT else value
    return value


def _their_json(msg: Any, descriptor: Any) -> dict[str, Any]:
    """MessageToDict, its Timestamps cut to microseconds and its floats to float32 as Arrow holds them."""
    from google.protobuf import json_format

    out = json_format.MessageToDict(msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)

    def fix(node: dict[str, Any], message: Any) -> None:
        for field in message.fields:
            if field.name not in node:
                continue
            if field.message_type is not None and field.message_type.full_name == protobuf_types.TIMESTAMP:
                ts = getattr(msg_at[id(node)], field.name)
                node[field.name] = (dt.datetime(1970, 1, 1) + dt.timedelta(
                    microseconds=protobuf_types.timestamp_micros(ts))).isoformat()
            elif field.type == protobuf_types.FLOAT and isinstance(node[field.name], float):
                node[field.name] = float(struct.unpack("f", struct.pack("f", node[field.name]))[0])
            elif field.message_type is not None and not protobuf_types._is_map(field) and \
                    not protobuf_types._is_repeated(field) and isinstance(node[field.name], dict):
                msg_at[id(node[field.name])] = getattr(msg_at[id(node)], field.name)
                fix(node[field.name], field.message_type)
            elif protobuf_types._is_repeated(field) and field.message_type is not None and \
                    not protobuf_types._is_map(field):
                for child, sub in zip(node[field.name], getattr(msg_at[id(node)], field.name), strict=True):
                    msg_at[id(child)] = sub
                    fix(child, field.message_type)

    msg_at = {id(out): msg}
    fix(out, descriptor)
    return out


def test_differential_against_the_protobuf_parser_on_mutated_bodies() -> None:
    """On thousands of seeded mutations: the decoder accepts exactly the bodies Protobuf's parser (upb) accepts and
    whose values its JSON mapping accepts (a Timestamp in range); the body check agrees with upb on every body;
    every accepted body lands as the values json_format.MessageToDict gives for it."""
    from google.protobuf import json_format

    bodies = _mutated(44)
    descriptor = protobuf_schemas.find_message(shop.document(), shop.ORDER)
    cls = shop.message_class()
    out = decode([framed(body) for body in bodies])
    classes, payloads = column(out, "_error_class"), column(out, "_payload")
    disagreements, accepted = [], 0
    for body, error_class, payload in zip(bodies, classes, payloads, strict=True):
        try:
            msg = cls.FromString(body)
        except Exception:  # noqa: BLE001 - upb's DecodeError
            msg = None
        if (msg is None) != (fault(body, descriptor) is not None):
            disagreements.append(("body check", body.hex()))
        try:
            theirs = None if msg is None else _their_json(msg, descriptor)
        except (json_format.SerializeToJsonError, ValueError, OverflowError):
            theirs = None
        if (theirs is None) != (error_class is not None):
            disagreements.append(("accept", body.hex(), error_class))
        elif theirs is not None:
            accepted += 1
            if _json_of(payload, descriptor) != theirs:
                disagreements.append(("values", body.hex()))
    assert disagreements == []
    assert 0.1 * MUTATIONS < accepted < 0.9 * MUTATIONS  # both outcomes, in numbers


def test_protobuf_keys_decode_into_a_struct_and_a_bad_key_is_quarantined() -> None:
    from dataclasses import replace

    doc = shop.document()
    address = shop.message_class(name="shop.v1.Address")
    keyed = replace(spec(), key_format="protobuf", key_schemas={1: doc}, key_reader=doc,
                    key_message_name="shop.v1.Address")
    assert keyed.key_type.simpleString() == "struct<street:string,city:string>"
    good, bad = framed(address(street="s", city="c").SerializeToString(), indexes=(0,)), framed(b"", indexes=(1,))
    value = framed(shop.order(1).SerializeToString())
    batch = pa.RecordBatch.from_arrays([
        pa.array([good, bad], pa.binary()), pa.array([value, value], pa.binary()), pa.array(["t"] * 2),
        pa.array([0] * 2, pa.int32()), pa.array(range(2), pa.int64()), pa.array([0] * 2, pa.timestamp("us", tz="UTC")),
        pa.array([0] * 2, pa.int32()), pa.array([[]] * 2, KAFKA_SCHEMA.field("headers").type)], schema=KAFKA_SCHEMA)
    decoder = ProtobufBatchDecoder(keyed)
    decoder._prepare()
    out = decoder.decode_batch(batch)
    assert column(out, "_key") == [{"street": "s", "city": "c"}, None]
    assert column(out, "_error_class") == [None, "KeyDecodeError"]
    assert column(out, "_error_message")[1].startswith("key: MessageTypeError: key message indexes [1] name "
                                                       "shop.v1.Order, the table holds shop.v1.Address")
