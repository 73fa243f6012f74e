"""What read-only commands print: no Python `None` in a line, one range convention (inclusive) in verify's line,
and `quarantine show --error-class` with a class that has no records naming the classes that do."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

from ingestion.ops import quarantine, status, verify


def test_status_of_a_pipeline_without_batches_says_so() -> None:
    empty = status.PipelineStatus("orders", "orders", "/t/orders", None, None, None, 0, [], topics=["orders"])
    assert status.render(empty).splitlines()[:2] == [
        "orders: topic orders, no table yet, no batch yet, lag 0 records",
        "  no data files yet; last maintenance: never; no restorable version yet"]
    ran = status.PipelineStatus("orders", "orders", "/t/orders", 4, 3, "2026-11-25T18:00:00.777000+00:00", 0, [],
                                files=2, average_file_bytes=2048, oldest_restorable=0, topics=["orders"])
    assert status.render(ran).splitlines()[:2] == [
        "orders: topic orders, table version 4, last batch 3 at 2026-11-25T18:00:00+00:00, lag 0 records",
        "  2 files, average 2.0 KiB; last maintenance: never; oldest restorable version 0"]
    assert "None" not in status.render(empty) + status.render(ran)


def test_verify_ranges_are_inclusive_on_both_sides() -> None:
    audit = verify.Audit("orders", "orders", [verify.PartitionAudit("orders", 0, 0, 683, 0, 682, rows=683),
                                              verify.PartitionAudit("orders", 1, 5, 5, None, None)],
                         topics=["orders"])
    assert verify.render(audit).splitlines() == [
        "orders: topic orders: OK",
        "  orders/0: offsets 0-682 recorded, 683 held, Kafka 0-682: ok",
        "  orders/1: no offsets recorded, 0 held, Kafka holds none (next offset 5): ok"]


def test_a_record_without_schema_id_says_so() -> None:
    from ingestion.delta.reader import QuarantinedRecord

    record = QuarantinedRecord("orders", 0, 7, dt.datetime(2026, 1, 1), None, "WireFormatError", "short", b"\x07")
    assert "  no schema id  WireFormatError: short" in quarantine.render_records([record])


def test_show_prints_the_key_and_the_text_of_a_value_that_is_text() -> None:
    from ingestion.delta.reader import QuarantinedRecord

    at = dt.datetime(2026, 1, 1)
    text = QuarantinedRecord("orders", 0, 112, at, None, "WireFormatError", "magic byte is 110, expected 0",
                             b"not avro at all", key=b"k0")
    framed = QuarantinedRecord("orders", 1, 91, at, 1, "MalformedAvroError", "order_id: string length -52 is negative",
                               b"\x00\x00\x00\x00\x01garbage-and-more-bytes")
    long_json = QuarantinedRecord("clicks", 2, 5, at, None, "JsonDecodeError", "x", b'{"k": "' + b"v" * 200 + b'"}')
    pretty = QuarantinedRecord("clicks", 2, 6, at, None, "JsonDecodeError", "y", b'{\n\t"k": 1\r\n', key=b"")
    assert quarantine.render_records([text, framed, long_json, pretty]).splitlines() == [
        "orders/0@112  2026-01-01 00:00:00  no schema id  WireFormatError: magic byte is 110, expected 0",
        '    key   2 bytes 6b 30  text "k0"',
        '    value 15 bytes 6e 6f 74 20 61 76 72 6f 20 61 74 20 61 6c 6c  text "not avro at all"',
        "orders/1@91  2026-01-01 00:00:00  schema id 1  MalformedAvroError: order_id: string length -52 is negative",
        "    value 27 bytes 00 00 00 00 01 67 61 72 62 61 67 65 2d 61 6e 64 ...  |.....garbage-and|",
        "clicks/2@5  2026-01-01 00:00:00  no schema id  JsonDecodeError: x",
        '    value 209 bytes 7b 22 6b 22 3a 20 22 76 76 76 76 76 76 76 76 76 ...  text "{\\"k\\": \\"'
        + "v" * 113 + '..."',
        "clicks/2@6  2026-01-01 00:00:00  no schema id  JsonDecodeError: y",
        "    key   0 bytes",
        '    value 11 bytes 7b 0a 09 22 6b 22 3a 20 31 0d 0a  text "{\\n\\t\\"k\\": 1\\r\\n"']


def test_show_with_an_error_class_that_has_no_records_names_those_that_do(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from deltalake import write_deltalake

    from ingestion.cli.commands import quarantine_command
    from ingestion.cli.parser import build_parser

    table = tmp_path / "orders_quarantine"
    write_deltalake(str(table), pa.table({
        "_kafka_topic": ["orders"] * 3, "_kafka_partition": pa.array([0, 0, 1], pa.int32()),
        "_kafka_offset": pa.array([3, 4, 9], pa.int64()),
        "_kafka_timestamp": pa.array([dt.datetime(2026, 1, 1)] * 3, pa.timestamp("us", tz="UTC")),
        "_schema_id": pa.array([None, 7, 7], pa.int32()),
        "_error_class": ["WireFormatError", "UnknownSchemaError", "UnknownSchemaError"],
        "_error_message": ["short", "id 7", "id 7"], "_kafka_value": [b"\x07", b"\x00", b"\x00"],
        "_kafka_key": pa.array([None, b"k", None], pa.binary())}))
    file = tmp_path / "orders.yaml"
    file.write_text(f"name: orders\ntopic: orders\nkafka:\n  bootstrap.servers: 127.0.0.1:9\n"
                    f"sink:\n  table: {tmp_path / 'orders'}\n  quarantineTable: {table}\n")
    args = build_parser().parse_args(["quarantine", "show", str(file), "--error-class", "NoSuchClass"])
    assert quarantine_command.quarantine_show(args) == 1
    assert capsys.readouterr().out == ("no quarantined records of error class 'NoSuchClass'; the classes "
                                       "quarantined now: UnknownSchemaError, WireFormatError\n")
    args = build_parser().parse_args(["quarantine", "show", str(file), "--error-class", "WireFormatError"])
    assert quarantine_command.quarantine_show(args) == 0
    assert capsys.readouterr().out == ("orders/0@3  2026-01-01 00:00:00  no schema id  WireFormatError: short\n"
                                       "    value 1 bytes 07  |.|\n")


def test_rewind_and_reprocess_lines_name_what_happened_without_none() -> None:
    from ingestion.ops import rewind

    undid = rewind.RewindResult(3, None, {"orders": {"0": 12}}, None, (9,), 3)
    assert rewind.render(undid, "orders").splitlines() == [
        "bronze restored to version 3, quarantine had no version then (emptied, if the table exists); no checkpoint "
        'to move aside; the next run resumes from {"orders": {"0": 12}}',
        "the rewind undid the quarantine reprocess at bronze version(s) 9: 3 rows are back in quarantine, and the "
        "next run does not redo it; run `ingest quarantine reprocess orders` to move them to bronze again"]
    # Rewound to before those records were quarantined: none is back there, the next run reads them again.
    earlier = rewind.RewindResult(1, 0, {"orders": {"0": 5}}, None, (9,), 0)
    assert rewind.render(earlier, "orders").splitlines()[1] == (
        "the rewind undid the quarantine reprocess at bronze version(s) 9: the records they moved are after the "
        "version rewound to, and the next run reads them from Kafka again")
    plain = rewind.RewindResult(3, 2, {}, "/c.rewound-x", (), 0)
    assert rewind.render(plain, "orders") == ("bronze restored to version 3, quarantine to version 2; old checkpoint "
                                              "kept at /c.rewound-x; the next run resumes from {}")
    same = rewind.RewindResult(7, None, {"orders": {"0": 12}}, None, unchanged=True)
    assert rewind.render(same, "orders") == "already at version 7: nothing to do"
    nothing = quarantine.RedecodeResult(0, 0, 0, 0, 0, 4, None)
    assert quarantine.render_redecode(nothing) == ("0 examined: 0 re-decoded into bronze, 0 were already there, 0 "
                                                   "still failing (0 with a new error); bronze unchanged, no "
                                                   "quarantine table")


def test_history_says_the_start_batch_and_a_rewinds_version_not_batch_numbers() -> None:
    import datetime as dt

    from ingestion.delta.ledger import BatchKind, BatchRecord, PartitionRange
    from ingestion.ops import history

    at = dt.datetime(2026, 12, 8, 3, 0, 0)
    batch = BatchRecord("orders", "orders-1", -4, BatchKind.STREAM, 10, (1,), (PartitionRange("orders", 0, 0, 9, 10),),
                        version=1, committed_at=at)  # the start batch
    back = BatchRecord("orders", "rewind", 1, BatchKind.REWIND, 0, (), (PartitionRange("orders", 0, 0, 9, 10),),
                       version=3, committed_at=at)
    assert history.render([batch, back]).splitlines()[1:] == [
        "      1  2026-12-08 03:00:00  stream   start      10     0       1  0:0-9",
        "      3  2026-12-08 03:00:00  rewind       -       0     0       -  back to version 1, which holds 0:0-9"]
