"""Which message a Protobuf table holds (docs/protobuf.md#which-message), without Kafka or a JVM: a pin, the
message the table records, the file's only candidate, and for a new table of a file that leaves it open, the
message the topic's earliest records name; MessageTypeError names both messages and blames value.messageName only
when it was set."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest

from ingestion.decode.protobuf_message import choose, named_by
from ingestion.decode.protobuf_wire import index_bytes
from ingestion.decode.resolver import SchemaResolver
from ingestion.decode.wire import encode
from tests import protobuf as shop
from tests.unit.test_decode import column
from tests.unit.test_protobuf import _config, decode


def _order(seq: int, schema_id: int = 3) -> bytes:
    return encode(schema_id, index_bytes([1]) + shop.two_order(seq).SerializeToString())


def _audit(schema_id: int = 3) -> bytes:
    return encode(schema_id, index_bytes([0]) + shop.two_class(shop.AUDIT)(actor="a").SerializeToString())


def _never() -> Sequence[bytes]:
    raise AssertionError("the records were asked for, though something else decides the message")


def test_the_earliest_records_name_the_message_of_a_new_table_when_the_file_leaves_it_open() -> None:
    doc = shop.two_document()
    versions = {3: doc}
    got = choose(doc, versions, sample=lambda: [_order(1), _audit(), _order(2), b"not framed", _order(3, 99),
                                                _order(4)])
    assert (got.name, got.pinned) == (shop.TWO_ORDER, False)
    assert got.reason == "named by the message indexes of 3 of the topic's 6 earliest records (1 name other messages)"
    # a tie goes to the message met first
    assert choose(doc, versions, sample=lambda: [_audit(), _order(1)]).name == shop.AUDIT
    assert named_by([_order(1), _audit(), encode(3, index_bytes([7]))], versions) == {shop.TWO_ORDER: 1, shop.AUDIT: 1}

    empty = choose(doc, versions, sample=list)
    assert empty.name == shop.AUDIT  # Confluent's default: the file's first top-level message
    assert empty.reason == ("the file's first top-level message (the default): the file leaves it open "
                            "(bar.shop.Audit, bar.shop.Order) and the topic has no records yet")
    assert choose(doc, versions, sample=lambda: [b"\x01junk"]).reason.endswith(
        "and none of the topic's 1 earliest records names one of its messages")


def test_a_pin_wins_then_the_message_the_table_records_and_an_old_table_keeps_the_default() -> None:
    doc = shop.two_document()
    pinned = choose(doc, {3: doc}, pinned="Audit", recorded=shop.TWO_ORDER, table_exists=True, sample=_never)
    assert (pinned.name, pinned.pinned, pinned.reason) == (shop.AUDIT, True, "value.messageName")
    recorded = choose(doc, {3: doc}, recorded=shop.TWO_ORDER, table_exists=True, sample=_never)
    assert (recorded.name, recorded.reason) == (shop.TWO_ORDER, "recorded by the table in its property "
                                                                "ingest.protobuf.message")
    old = choose(doc, {3: doc}, table_exists=True, sample=_never)  # made before tables recorded their message
    assert old.name == shop.AUDIT
    single = shop.document()  # Order uses Address: the file decides, no record is looked at
    assert choose(single, {1: single}, sample=_never).name == shop.ORDER


class _Source:
    def __init__(self, versions: dict[int, str]) -> None:
        self._versions = versions

    def versions(self, subject: str) -> dict[int, str]:
        return dict(self._versions)

    def subjects(self) -> list[str]:
        return ["t-value"]

    def by_id(self, schema_id: int) -> str | None:
        return self._versions.get(schema_id)


def test_the_resolver_builds_the_records_message_into_the_spec_and_logs_why(
        tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    config = _config(tmp_path, "format: protobuf")
    source = _Source({3: shop.two_document()})
    with caplog.at_level(logging.INFO, logger="ingestion.decode.resolver"):
        spec = SchemaResolver(config, source, sample=lambda: [_order(1), _order(2)]).spec
    assert (spec.message_name, spec.message_pinned) == (shop.TWO_ORDER, False)
    assert spec.payload_type.fieldNames() == ["id", "kind", "lines", "totals", "placed_at", "big", "note", "card",
                                              "voucher", "blob", "weight"]
    assert "p: the table holds Protobuf message bar.shop.Order (named by the message indexes of 2 of the topic's 2 " \
           "earliest records)" in caplog.messages
    restarted = SchemaResolver(config, source, table_payload=spec.payload_type, table_message=shop.TWO_ORDER,
                               sample=_never).spec
    assert restarted.message_name == shop.TWO_ORDER
    pinned = SchemaResolver(_config(tmp_path, "format: protobuf\nmessageName: bar.shop.Order"), source,
                            sample=_never).spec
    assert (pinned.message_name, pinned.message_pinned) == (shop.TWO_ORDER, True)


def test_a_record_of_the_other_message_is_a_message_type_error_naming_both() -> None:
    from dataclasses import replace

    from tests.unit.test_protobuf import spec

    writers = {3: shop.two_document()}
    unpinned = replace(spec(writers), message_name=shop.TWO_ORDER)
    out = decode([_order(5), _audit()], spec_=unpinned)
    assert column(out, "_error_class") == [None, "MessageTypeError"]
    assert column(out, "_error_message")[1] == ("message indexes [0] name bar.shop.Audit, the table holds "
                                                "bar.shop.Order")
    assert column(out, "_payload")[0]["id"] == "b5"
    out = decode([_audit()], spec_=replace(unpinned, message_pinned=True))
    assert column(out, "_error_message") == ["message indexes [0] name bar.shop.Audit, the table holds "
                                             "bar.shop.Order (value.messageName)"]
