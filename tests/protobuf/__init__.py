"""Protobuf schemas for the tests and their message classes, built at run time from the .proto text the way the
pipeline builds its own: `shop.proto` (two top-level messages, the topic's is the second and uses the first) and
`two.proto` (two top-level messages neither of which uses the other: the records' message indexes decide)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from ingestion.schema import protobuf_schemas

PROTO = Path(__file__).parent / "shop.proto"
FILE = "shop/v1/shop.proto"
COMMON = "shop/v1/common.proto"  # imported by shop.proto
ORDER = "shop.v1.Order"
# Version 2 adds a field to Order and one to the nested Address: both become columns mid-stream.
V2_ADDITIONS = (("  Money total = 20;\n", "  Money total = 20;\n  string channel = 21;\n"),
                ("  string city = 2;\n", "  string city = 2;\n  string zip = 3;\n"))


def proto_text(version: int = 1) -> str:
    text = PROTO.read_text()
    if version == 2:
        for old, new in V2_ADDITIONS:
            assert old in text
            text = text.replace(old, new)
    return text


def document(version: int = 1) -> str:
    return protobuf_schemas.document(FILE, {FILE: proto_text(version), COMMON: common_text()})


def common_text() -> str:
    return (PROTO.parent / "common.proto").read_text()


def message_class(version: int = 1, name: str = ORDER) -> Any:
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(protobuf_schemas.find_message(document(version), name))


def order(seq: int, version: int = 1) -> Any:
    """A rich Order (every kind of field set, the oneof member alternating, the wrapper and optional set or not)."""
    cls = message_class(version)
    msg = cls(id=f"o{seq}", amount_cents=seq * 1000 - 2**40, status=seq % 3, delta=-seq,
              blob=bytes([seq % 256, 0, 255]), gift=seq % 2 == 0, weight=seq + 0.5, small=2**32 - 1 - seq,
              big=2**64 - 1 - seq)
    msg.ship_to.street, msg.ship_to.city = f"{seq} Main St", "Zürich"
    for i in range(seq % 3 + 1):
        msg.items.add(sku=f"sku-{i}", qty=i - 1)
    msg.tags["é"], msg.tags[f"t{seq}"] = seq, -seq
    if seq % 2:
        msg.card = f"card-{seq}"
    else:
        msg.voucher = f"voucher-{seq}"
    msg.placed_at.seconds, msg.placed_at.nanos = 1_700_000_000 + seq, 123_456_789
    if seq % 3:
        msg.note.value = f"note {seq} 😀"
        msg.discount = 0.0  # an optional set to its default is present
    if seq % 4 == 0:
        msg.ref.value = -(2**62)
    msg.codes.extend([seq, -1, 2**40])
    if seq % 2 == 0:
        msg.total.currency, msg.total.units = "EUR", seq * 7
    if version == 2:
        msg.channel = f"web-{seq}"
        msg.ship_to.zip = f"80{seq:02d}"
    return msg


def expected_row(msg: Any) -> dict[str, Any]:
    """What bronze holds for an Order, as Spark's Row gives it back (asDict(recursive=True))."""
    def has(name: str) -> bool:
        return msg.HasField(name)

    row = {
        "id": msg.id, "amount_cents": msg.amount_cents,
        "status": ["STATUS_UNSPECIFIED", "PLACED", "SHIPPED"][msg.status],
        "ship_to": {"street": msg.ship_to.street, "city": msg.ship_to.city} if has("ship_to") else None,
        "items": [{"sku": i.sku, "qty": i.qty} for i in msg.items], "tags": dict(msg.tags),
        "card": msg.card if has("card") else None, "voucher": msg.voucher if has("voucher") else None,
        "placed_at": dt.datetime(1970, 1, 1) + dt.timedelta(seconds=msg.placed_at.seconds,
                                                            microseconds=msg.placed_at.nanos // 1000),
        "note": msg.note.value if has("note") else None, "discount": msg.discount if has("discount") else None,
        "big": msg.big, "delta": msg.delta, "blob": msg.blob, "gift": msg.gift, "weight": msg.weight,
        "small": msg.small, "ref": msg.ref.value if has("ref") else None, "codes": list(msg.codes),
        "total": {"currency": msg.total.currency, "units": msg.total.units} if has("total") else None,
    }
    if "channel" in msg.DESCRIPTOR.fields_by_name:
        row["channel"] = msg.channel
        row["ship_to"]["zip"] = msg.ship_to.zip
    return row


# two.proto: two top-level messages, neither used by the other; the topic's records are the second's (index [1]).
TWO_FILE = "bar/shop.proto"
AUDIT, TWO_ORDER = "bar.shop.Audit", "bar.shop.Order"


def two_document() -> str:
    return protobuf_schemas.document(TWO_FILE, {TWO_FILE: (PROTO.parent / "two.proto").read_text()})


def two_class(name: str = TWO_ORDER) -> Any:
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(protobuf_schemas.find_message(two_document(), name))


def two_order(seq: int) -> Any:
    msg = two_class()(id=f"b{seq}", kind=seq % 3, big=2**64 - 1 - seq, blob=bytes([seq % 256, 255]),
                      weight=seq / 4)
    for i in range(seq % 3):
        msg.lines.add(sku=f"sku-{seq}-{i}", qty=2**32 - 1 - i)
    msg.totals["net"], msg.totals["tax"] = seq * 100, -seq
    msg.placed_at.seconds, msg.placed_at.nanos = 1_750_000_000 + seq, 987_654_321
    if seq % 2:
        msg.note, msg.card = f"note {seq} ✓", f"card-{seq}"
    else:
        msg.voucher = f"voucher-{seq}"
    return msg


def two_expected_row(msg: Any) -> dict[str, Any]:
    """What bronze holds for a bar.shop.Order, as Spark's Row gives it back (asDict(recursive=True))."""
    return {
        "id": msg.id, "kind": ["KIND_UNSPECIFIED", "PICKUP", "DELIVERY"][msg.kind],
        "lines": [{"sku": line.sku, "qty": line.qty} for line in msg.lines], "totals": dict(msg.totals),
        "placed_at": dt.datetime(1970, 1, 1) + dt.timedelta(seconds=msg.placed_at.seconds,
                                                            microseconds=msg.placed_at.nanos // 1000),
        "big": msg.big, "note": msg.note if msg.HasField("note") else None,
        "card": msg.card if msg.HasField("card") else None, "voucher": msg.voucher if msg.HasField("voucher") else None,
        "blob": msg.blob, "weight": msg.weight,
    }
