"""`value.strict` on Protobuf topics, without a JVM: a body with an unknown field (a number its message does not
define, or a known number sent in another wire type, both of which Protobuf reads as unknown and drops) is
quarantined as UnknownFieldError naming the field path; without it such bodies land as Protobuf reads them. The
differential test holds the strict decoder to upb's own unknown-field sets on mutated bodies."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from ingestion.errors import ConfigError
from ingestion.schema import protobuf_types
from tests import protobuf as shop
from tests.unit.test_decode import column
from tests.unit.test_protobuf import _config, _len, _mutated, _tag, decode, framed, spec

ORDER = shop.order(2).SerializeToString()

# name -> (body, the UnknownFieldError message); each lands (its unknown field dropped) without value.strict.
UNKNOWN: dict[str, tuple[bytes, str]] = {
    "a string sent as a varint": (b"\x08\x01", "id: wire type 0 (varint) where its type string takes wire type 2 "
                                               "(length-delimited)"),
    "a number the message lacks": (ORDER + _tag(77, 0) + b"\x05", "#77: field number 77 (varint) is not a field of "
                                                                  "shop.v1.Order"),
    "a nested one": (ORDER + _len(4, _tag(9, 5) + b"\x00\x00\x00\x00"),
                     "ship_to.#9: field number 9 (fixed32) is not a field of shop.v1.Address"),
    "in a repeated message": (ORDER + _len(5, _len(1, b"s")) + _len(5, _tag(1, 0) + b"\x01"),
                              "items[4].sku: wire type 0 (varint) where its type string takes wire type 2 "
                              "(length-delimited)"),
    "in a map entry": (ORDER + _len(6, _len(1, b"k") + _tag(3, 0) + b"\x01"),
                       "tags.#3: field number 3 (varint) is not a field of shop.v1.Order.TagsEntry"),
    "a group": (ORDER + _tag(79, 3) + _tag(1, 0) + b"\x01" + _tag(79, 4),
                "#79: field number 79 (start-group) is not a field of shop.v1.Order"),
    "a message sent as a fixed64": (_tag(4, 1) + b"\x00" * 8, "ship_to: wire type 1 (fixed64) where its type "
                                                              "shop.v1.Address takes wire type 2 (length-delimited)"),
}


def strict_spec() -> Any:
    return replace(spec(), strict=True)


def test_a_strict_topic_quarantines_every_unknown_field_naming_its_path() -> None:
    values = [framed(body) for body, _ in UNKNOWN.values()]
    out = decode(values, spec_=strict_spec())
    assert column(out, "_error_class") == ["UnknownFieldError"] * len(UNKNOWN)
    assert dict(zip(UNKNOWN, column(out, "_error_message"), strict=True)) == {k: m for k, (_, m) in UNKNOWN.items()}
    lenient = decode(values)
    assert column(lenient, "_error_class") == [None] * len(UNKNOWN)  # Protobuf's rule: dropped
    assert column(lenient, "_payload")[0]["id"] == ""  # `08 01` reads as an all-default row


def test_a_strict_topic_takes_every_valid_encoding() -> None:
    """Packed and unpacked repeated scalars, fields in any order, repeated singular fields: no unknown field."""
    unpacked = _tag(19, 0) + b"\x05" + _tag(19, 0) + b"\x06"
    values = [framed(shop.order(seq).SerializeToString()) for seq in range(6)] + [
        framed(ORDER + unpacked), framed(_len(1, b"a") + _len(1, b"b")), framed(b"")]
    out = decode(values, spec_=strict_spec())
    assert column(out, "_error_class") == [None] * len(values)
    assert column(out, "_payload")[6]["codes"][-2:] == [5, 6]


def test_strict_is_for_protobuf_only(tmp_path: Any) -> None:
    assert _config(tmp_path, "format: protobuf\nstrict: true").value.strict is True
    with pytest.raises(ConfigError, match=r"key 'value\.strict' is for value\.format protobuf, got format "
                                          r"'confluent'"):
        _config(tmp_path, "format: confluent\nstrict: true")


def _unknown_fields(msg: Any) -> int:
    """upb's own count of unknown fields in a parsed message, at every depth."""
    from google.protobuf import unknown_fields

    count = len(unknown_fields.UnknownFieldSet(msg))
    for field, value in msg.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            inner = field.message_type.fields_by_name["value"]
            values = list(value.values()) if inner.message_type is not None else []
        else:
            values = list(value) if protobuf_types._is_repeated(field) else [value]
        count += sum(_unknown_fields(v) for v in values)
    return count


def test_differential_the_strict_decoder_refuses_exactly_the_bodies_upb_keeps_unknown_fields_of() -> None:
    bodies = _mutated(46)[:3000]
    lenient = column(decode([framed(b) for b in bodies]), "_error_class")
    strict = column(decode([framed(b) for b in bodies], spec_=strict_spec()), "_error_class")
    cls = shop.message_class()
    disagreements, refused = [], 0
    for body, was, now in zip(bodies, lenient, strict, strict=True):
        if was is not None:
            if now != was:
                disagreements.append(("class", body.hex(), was, now))
            continue
        unknown = _unknown_fields(cls.FromString(body))
        if (now == "UnknownFieldError") != (unknown > 0) or now not in (None, "UnknownFieldError"):
            disagreements.append(("strict", body.hex(), unknown, now))
        refused += now is not None
    assert disagreements == []
    assert 0.05 * len(bodies) < refused  # plenty of bodies with unknown fields among those Protobuf accepts
