"""`ingest shadow`'s pure parts: the versions and offsets a range names, the Kafka check, the state, the diff."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import io
from pathlib import Path

import pyarrow as pa
import pytest

from ingestion.cli.parser import build_parser
from ingestion.config import load_pipeline
from ingestion.delta.ledger import BatchKind, BatchRecord, PartitionRange
from ingestion.errors import ConfigError
from ingestion.ops import shadow, shadow_diff
from ingestion.ops.shadow import ShadowError, Span
from ingestion.ops.shadow_state import digest

T0 = dt.datetime(2026, 1, 1, 10, 0, 0)


def _record(version: int, ranges: list[tuple[int, int, int]], kind: BatchKind = BatchKind.STREAM) -> BatchRecord:
    return BatchRecord(pipeline="orders", app_id="a", batch_id=version, kind=kind, rows=1, schema_ids=(),
                       ranges=tuple(PartitionRange("t", p, f, last, last - f + 1) for p, f, last in ranges),
                       version=version, committed_at=T0 + dt.timedelta(minutes=version))


RECORDS = [_record(1, [(0, 0, 9), (1, 0, 4)]), _record(2, [(0, 10, 19)]), _record(3, [(0, 20, 29), (1, 5, 9)]),
           _record(4, [(0, 30, 39)])]


def test_versions_by_number_or_time() -> None:
    assert shadow.version_range(RECORDS, "2", "3") == (2, 3)
    assert shadow.version_range(RECORDS, "2", None) == (2, 4)
    assert shadow.version_range(RECORDS, "2026-01-01T10:01:30", "2026-01-01T10:03:30") == (2, 3)
    assert shadow.version_range(RECORDS, "2026-01-01T10:01:30+00:00", None) == (2, 4)
    assert shadow.version_range(RECORDS, "1767261690000", "2026-01-01T11:03:30+01:00") == (2, 3)  # epoch ms
    with pytest.raises(ShadowError, match="after --to"):
        shadow.version_range(RECORDS, "4", "2")
    with pytest.raises(ShadowError, match="no table version committed at or after"):
        shadow.version_range(RECORDS, "2027-01-01T00:00:00", None)
    with pytest.raises(ShadowError, match="cannot read 'yesterday'"):
        shadow.version_range(RECORDS, "yesterday", None)


def test_spans_are_the_offsets_the_versions_hold() -> None:
    assert shadow.spans_of(RECORDS, 2, 3) == (Span("t", 0, 10, 29), Span("t", 1, 5, 9))
    with pytest.raises(ShadowError, match="hold no Kafka offsets"):
        shadow.spans_of([*RECORDS, _record(9, [], BatchKind.OPTIMIZE)], 9, 9)
    rewound = [*RECORDS, _record(5, [(0, 0, 19)], BatchKind.REWIND), _record(6, [(0, 20, 25)])]
    with pytest.raises(ShadowError, match="version 5 in 4-6 is a rewind commit"):
        shadow.spans_of(rewound, 4, 6)
    filled = [*RECORDS, _record(5, [(0, 12, 12)], BatchKind.REPLAY)]
    with pytest.raises(ShadowError, match=r"version 5 .replay. holds offsets 12-12 of t/0"):
        shadow.spans_of(filled, 2, 3)
    # Versions 3 and 4 undone by a rewind to 2 (version 5), their offsets read again at 6: they hold nothing now.
    redone = [*RECORDS, dataclasses.replace(_record(5, [(0, 0, 19), (1, 0, 4)], BatchKind.REWIND), batch_id=2),
              _record(6, [(0, 20, 39), (1, 5, 9)])]
    assert shadow.spans_of(redone, 6, 6) == (Span("t", 0, 20, 39), Span("t", 1, 5, 9))


def test_a_live_commit_changes_a_shadows_rows_when_it_holds_its_offsets_or_rewinds_before_its_last_version() -> None:
    from ingestion.ops.shadow_promote import changes_rows

    made = shadow.Shadow("s", "/f.yaml", "/t__s", "/q__s", (2, 3), (Span("t", 0, 10, 29), Span("t", 1, 5, 9)))
    assert not changes_rows(_record(5, [(0, 40, 49)]), made)  # the stream goes on after the shadow's offsets
    assert changes_rows(_record(5, [(1, 7, 7)], BatchKind.REPLAY), made)
    rewind = dataclasses.replace(_record(5, [(0, 0, 29), (1, 0, 9)], BatchKind.REWIND), batch_id=3)
    assert not changes_rows(rewind, made)  # back to the shadow's last version: its rows are as they were
    assert changes_rows(dataclasses.replace(rewind, batch_id=2), made)
    assert not changes_rows(_record(5, [], BatchKind.OPTIMIZE), made)


def test_a_range_kafka_no_longer_holds_is_refused_naming_the_first_missing_offset() -> None:
    spans = [Span("t", 0, 10, 29), Span("t", 1, 5, 9)]
    shadow.check_kafka_holds(spans, {"t": {0: (10, 100), 1: (0, 10)}})
    with pytest.raises(ShadowError) as refused:
        shadow.check_kafka_holds(spans, {"t": {0: (0, 100), 1: (7, 100)}})
    text = str(refused.value)
    assert "\n" not in text
    assert text.startswith("Kafka no longer holds offset 5 of t/1 (the partition's log starts at 7")
    with pytest.raises(ShadowError, match="no partition 1 of topic 't'"):
        shadow.check_kafka_holds(spans, {"t": {0: (0, 100)}})


def _pipeline(folder: Path, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "orders.yaml"
    path.write_text(f"""name: orders
topic: orders
kafka:
  bootstrap.servers: "127.0.0.1:9"
value:
  format: json
  schemaFile: {folder / 'x.json'}
sink:
  table: {folder.parent / 'tables' / 'orders'}
  checkpointLocation: {folder.parent / 'checkpoints' / 'orders'}
{extra}""")
    return path


def test_the_other_config_must_be_the_same_pipeline_and_the_state_file_keeps_shadows(tmp_path: Path) -> None:
    live = load_pipeline(_pipeline(tmp_path / "live"))
    other = load_pipeline(_pipeline(tmp_path / "other"))
    target = shadow.shadow_config(live, other, "fix-1")
    assert target.table_path == live.table_path + "__fix-1"
    assert target.quarantine_path == live.quarantine_path + "__fix-1"
    assert target.value.schema_file == other.value.schema_file
    moved = load_pipeline(_pipeline(tmp_path / "moved", "  partitionBy: [status]\n"))
    with pytest.raises(ConfigError, match=r"sink\.partitionBy.*not yet"):
        shadow.shadow_config(live, moved, "shadow")
    with pytest.raises(ShadowError, match="letters, digits"):
        shadow.shadow_config(live, other, "a/b")
    made = shadow.Shadow("s", str(other.file), target.table_path, target.quarantine_path, (2, 3),
                         (Span("t", 0, 10, 29),), created_at="now")
    shadow.save_shadow(live, made, "s")
    assert shadow.load_shadows(live) == {"s": made}
    assert Path(shadow.state_location(live)).is_file()
    shadow.save_shadow(live, None, "s")
    assert shadow.load_shadows(live) == {}
    with pytest.raises(ShadowError, match="has no shadow 'x'"):
        shadow.get(live, "x")
    # A promote refuses a shadow whose config file changed since it was made (before any table is read).
    made = dataclasses.replace(made, config_digest=digest(other.file))
    shadow.check_still_current(live, made)
    Path(other.file).write_text(Path(other.file).read_text() + "# edited\n")
    with pytest.raises(ShadowError, match=r"other/orders.yaml changed \(or is gone\) since shadow 's' was made"):
        shadow.check_still_current(live, made)


def test_switching_the_config_keeps_the_old_file_once(tmp_path: Path) -> None:
    live, other = tmp_path / "orders.yaml", tmp_path / "fixed.yaml"
    live.write_text("old\n")
    other.write_text("new\n")
    backup = shadow.switch_config(live, other, "shadow")
    assert (live.read_text(), backup.read_text(), backup.name) == ("new\n", "old\n", "orders.yaml.before-shadow")
    shadow.switch_config(live, other, "shadow")  # a rerun keeps the old file
    assert backup.read_text() == "old\n"


def _table(rows: list[dict[str, object]]) -> pa.Table:
    return pa.Table.from_pylist(rows)


def test_diff_counts_moves_and_changed_values() -> None:
    def row(offset: int, **values: object) -> dict[str, object]:
        return {"_kafka_topic": "t", "_kafka_partition": 0, "_kafka_offset": offset, "_ingested_at": offset, **values}

    live = _table([row(o, amount=o, note=None) for o in range(0, 6)])
    live_q = _table([{**row(o), "_error_class": "MissingField"} for o in (6, 7)])
    shadow_rows = _table([row(o, amount=o * (2 if o in (1, 2, 3, 4) else 1), note="n") for o in (0, 1, 2, 3, 4, 6)]
                         + [{**row(o, amount=o, note="n"), "_ingested_at": 99} for o in (8,)])
    shadow_q = _table([{**row(o), "_error_class": "Other"} for o in (5, 7)])
    d = shadow_diff.compare("orders", "shadow", (2, 3), ["t/0:0-8"],
                            {"lb": live, "lq": live_q, "sb": shadow_rows, "sq": shadow_q})
    assert (d.to_quarantine.count, d.to_quarantine.samples) == (1, [["t", 0, 5]])
    assert (d.from_quarantine.count, d.from_quarantine.samples) == (1, [["t", 0, 6]])
    assert (d.error_changed.count, d.only_shadow.count, d.only_live.count) == (1, 1, 0)
    assert d.columns["amount"].count == 4 and d.columns["amount"].samples == [["t", 0, 1], ["t", 0, 2], ["t", 0, 3]]
    assert d.columns["note"].count == 5 and "_ingested_at" not in d.columns and not d.same
    assert "amount: 4 (e.g. t/0:1, t/0:2, t/0:3)" in shadow_diff.render(d)


def test_shadow_help_lists_the_five_subcommands() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args(["shadow", "--help"])
    for action in ("start", "status", "diff", "promote", "drop"):
        assert f"    {action} " in out.getvalue()
    args = build_parser().parse_args(["shadow", "start", "orders", "--config", "f.yaml", "--from", "3"])
    assert (args.start, args.end, args.name, args.config) == ("3", None, "shadow", "f.yaml")
    args = build_parser().parse_args(["shadow", "diff", "orders", "--name", "x", "--json"])
    assert (args.name, args.json) == ("x", True)


def test_the_commands_answer_in_one_line_without_a_jvm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ingestion.cli import main

    path = _pipeline(tmp_path / "live")
    assert main(["shadow", "status", str(path)]) == 0
    assert "orders: no shadows" in capsys.readouterr().out
    assert main(["shadow", "status", str(path), "--json"]) == 0
    assert '"shadows": []' in capsys.readouterr().out
    for action in ("diff", "drop", "promote"):
        assert main(["shadow", action, str(path), "--name", "x"]) == 1
        err = capsys.readouterr().err.strip()
        assert "has no shadow 'x'" in err and "\n" not in err, err


def _routed_record(table: str, version: int, batch: int, minute: int, ranges: list[tuple[int, int, int]],
                   kind: BatchKind = BatchKind.STREAM) -> BatchRecord:
    app = f"outbox-0123456789abcdef.{table}" if kind == BatchKind.STREAM else "replay"
    return BatchRecord(pipeline="outbox", app_id=app, batch_id=batch, kind=kind, rows=1, schema_ids=(),
                       ranges=tuple(PartitionRange("t", p, f, last, last - f + 1) for p, f, last in ranges),
                       version=version, committed_at=T0 + dt.timedelta(minutes=minute, seconds=version))


def test_a_routed_range_is_whole_stream_batches_between_two_times_and_a_version_is_refused() -> None:
    # batch 1's commits straddle 10:02: it is inside (its first commit is), in every table
    ledgers = {"outbox_a": [_routed_record("outbox_a", 1, 0, 1, [(0, 0, 8)]),
                            _routed_record("outbox_a", 2, 1, 2, [(0, 10, 18)])],
               "outbox_b": [_routed_record("outbox_b", 1, 0, 1, [(0, 1, 9)]),
                            _routed_record("outbox_b", 2, 1, 3, [(0, 11, 19), (1, 0, 4)])],
               "quarantine": [_routed_record("quarantine", 5, 2, 4, [(0, 20, 20)])]}
    assert shadow.routed_spans(ledgers, "2026-01-01T10:02:00", "2026-01-01T10:03:30") == (
        Span("t", 0, 10, 19), Span("t", 1, 0, 4))
    assert shadow.routed_spans(ledgers, "2026-01-01T10:02:00", None) == (Span("t", 0, 10, 20), Span("t", 1, 0, 4))
    with pytest.raises(ShadowError, match=r"^f.yaml: --to 7: a routed pipeline's tables \(outbox_a, outbox_b, "
                                          r"quarantine\) each have versions of their own.*ISO time"):
        shadow.routed_spans(ledgers, "2026-01-01T10:02:00", "7", "f.yaml")
    with pytest.raises(ShadowError, match="holds Kafka offsets"):
        shadow.routed_spans(ledgers, "2026-01-01T11:00:00", None)
    # a replay inside batch 1's offsets, committed later: the range would interleave it
    filled = {**ledgers, "outbox_a": [*ledgers["outbox_a"],
                                      _routed_record("outbox_a", 3, -2, 9, [(0, 12, 12)], BatchKind.REPLAY)]}
    with pytest.raises(ShadowError, match=r"outbox_a version 3 .*interleaved"):
        shadow.routed_spans(filled, "2026-01-01T10:02:00", "2026-01-01T10:05:00")
    rewound = {**ledgers, "outbox_b": [*ledgers["outbox_b"],
                                       _routed_record("outbox_b", 3, 0, 4, [], BatchKind.REWIND)]}
    with pytest.raises(ShadowError, match=r"outbox_b version 3 .*rewind commit"):
        shadow.routed_spans(rewound, "2026-01-01T10:02:00", None)


def test_a_routed_shadows_tables_are_named_beside_the_live_ones(tmp_path: Path) -> None:
    def routed_file(folder: Path, routing: str) -> Path:
        folder.mkdir(parents=True)
        path = folder / "outbox.yaml"
        path.write_text(f"""name: outbox
topic: outbox
kafka:
  bootstrap.servers: "127.0.0.1:9"
value:
  format: json
  schemaFile: {folder / 'x.json'}
sink:
  root: {tmp_path / 'lake'}
routing:
  by: field
  field: kind
{routing}""")
        return path

    live = load_pipeline(routed_file(tmp_path / "live", ""))
    other = load_pipeline(routed_file(tmp_path / "other", "  tables: {Refund: refunds}\n"))
    target = shadow.shadow_config(live, other, "fix")
    assert target.route_path(target.route_table("Sale")) == live.route_path("outbox_sale") + "__fix"
    assert target.route_table("Refund") == "refunds__fix"
    assert target.quarantine_path == live.quarantine_path + "__fix"
    assert target.checkpoint_path == live.checkpoint_path and target.name == "outbox__fix"
    with pytest.raises(ConfigError, match=r"key 'routing': absent, and the live pipeline is routed"):
        shadow.shadow_config(live, load_pipeline(_pipeline(tmp_path / "flat")), "fix")


def test_a_routed_start_by_version_is_refused_in_one_line_without_a_jvm(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from ingestion.cli import main

    path = tmp_path / "outbox.yaml"
    path.write_text(f"""name: outbox
topic: outbox
kafka:
  bootstrap.servers: "127.0.0.1:9"
value:
  format: json
  schemaFile: {tmp_path / 'x.json'}
sink:
  root: {tmp_path / 'lake'}
routing:
  by: field
  field: kind
""")
    assert main(["shadow", "start", str(path), "--config", str(path), "--from", "12"]) == 1
    err = capsys.readouterr().err.strip()
    assert f"{path}: --from 12: a routed pipeline's tables" in err and "ISO time" in err and "\n" not in err, err


def test_a_routed_diff_names_records_that_move_between_route_tables() -> None:
    def row(offset: int, **values: object) -> dict[str, object]:
        return {"_kafka_topic": "t", "_kafka_partition": 0, "_kafka_offset": offset, **values}

    live = {"a": _table([row(o, x=o) for o in (0, 1, 2)]), "b": _table([row(o, y=o) for o in (3, 4)])}
    mine = {"a": _table([row(o, x=o + (o == 1)) for o in (0, 1)]), "c": _table([row(o, y=o) for o in (2, 3, 4)])}
    q = _table([{**row(5), "_error_class": "RouteError"}])
    d = shadow_diff.compare_tables("outbox", "s", (-1, -1), ["t/0:0-5"], live, mine, q, q, routed=True)
    assert (d.moved_tables.count, d.moves) == (3, {"a -> c": 1, "b -> c": 2})
    assert d.tables == {"a": [3, 2], "b": [2, 0], "c": [0, 3]}
    assert {c: m.count for c, m in d.columns.items()} == {"a.x": 1} and not d.same
    assert "a -> c 1, b -> c 2" in shadow_diff.render(d)
