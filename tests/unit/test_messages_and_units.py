"""One parser for durations, sizes and times (for every command that takes a time), one way to shorten an
exception to a line, and renamed keys read with a warning."""

from __future__ import annotations

import datetime as dt
import logging
import re
from pathlib import Path

import pytest

from ingestion.config import parse_pipeline
from ingestion.errors import ConfigError, one_line
from ingestion.units import duration_seconds, parse_time, size_bytes, spark_interval, version_or_time

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("text", "seconds"), [
    ("10 seconds", 10.0), ("500 milliseconds", 0.5), ("90s", 90.0), ("1 minute", 60.0), ("2.5 h", 9000.0),
    ("interval 7 days", 604800.0), ("1 week", 604800.0), ("2 weeks", 1209600.0), ("168 hours", 604800.0)])
def test_one_duration_parser_for_every_key(text: str, seconds: float) -> None:
    assert duration_seconds(text) == seconds


def test_what_is_not_a_duration_or_a_size() -> None:
    assert duration_seconds("soon") is None and duration_seconds("10 fortnights") is None
    assert size_bytes("lots") is None
    assert (size_bytes("128mb"), size_bytes("1g"), size_bytes("256 KB"), size_bytes("1536m"), size_bytes("42")) == (
        128 * 2**20, 2**30, 256 * 2**10, 1536 * 2**20, 42)


def test_a_trigger_in_any_spelling_reaches_spark_in_one_form() -> None:
    assert spark_interval("1 week") == "604800000 milliseconds"
    assert spark_interval("90s") == "90000 milliseconds"
    assert spark_interval("500 milliseconds") == "500 milliseconds"


TEN = dt.datetime(2026, 12, 8, 10, 0, tzinfo=dt.UTC)
TIME_OPTIONS = (["rewind", "orders", "--to-timestamp"], ["replay", "orders", "--from"],
                ["replay", "orders", "--from", "earliest", "--to"], ["shadow", "start", "orders", "--config", "f.yaml",
                                                                     "--from"],
                ["shadow", "start", "orders", "--config", "f.yaml", "--from", "1", "--to"])


@pytest.mark.parametrize(("text", "utc"), [
    ("2026-12-08T10:00:00", TEN), ("2026-12-08 10:00", TEN), ("2026-12-08T10:00:00Z", TEN),
    ("2026-12-08T11:00:00+01:00", TEN), ("2026-12-08T10:00:00.000+00:00", TEN), ("1796724000000", TEN),
    ("2026-12-08", TEN.replace(hour=0))])
def test_one_time_parser_for_every_command_that_takes_a_time(text: str, utc: dt.datetime) -> None:
    from ingestion.cli.parser import build_parser

    assert parse_time(text) == utc and version_or_time(text) == utc
    parser = build_parser()
    assert parser.parse_args(["rewind", "orders", "--to-timestamp", text]).to_timestamp == utc
    assert parser.parse_args(["replay", "orders", "--from", text]).start.millis == utc.timestamp() * 1000
    assert parser.parse_args(["shadow", "start", "orders", "--config", "f", "--from", text]).start == text
    assert version_or_time("12") == 12  # shadow's --from: a number below 10**12 is a table version


@pytest.mark.parametrize("text", ["yesterday", "2026/12/08", "08-12-2026", "2026-13-01", "99999999999999999999"])
def test_a_time_no_command_can_read_is_a_usage_error_naming_the_option_and_the_forms(
        text: str, capsys: pytest.CaptureFixture[str]) -> None:
    from ingestion.cli.parser import build_parser

    for argv in TIME_OPTIONS:
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args([*argv, text])
        assert exited.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert f"error: argument {argv[-1]}: cannot read {text!r} as " in err, err
        assert "ISO-8601" in err and "epoch milliseconds" in err and "ValueError" not in err, err


def test_a_number_too_short_for_epoch_milliseconds_is_no_time() -> None:
    """`20261208` would be a date to ISO's basic form and 1970 as milliseconds: neither is guessed."""
    from ingestion.cli.parser import build_parser

    with pytest.raises(ValueError, match="cannot read '20261208' as a time"):
        parse_time("20261208")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["rewind", "orders", "--to-timestamp", "20261208"])


def _pipeline(sink: dict[str, object], tmp_path: Path) -> object:
    return parse_pipeline({"name": "p", "topic": "t", "value": {"subject": "s"}, "sink": sink}, tmp_path / "p.yaml")


def test_the_same_durations_are_accepted_for_the_trigger_and_the_vacuum_retention(tmp_path: Path) -> None:
    config = parse_pipeline({"name": "p", "topic": "t", "value": {"subject": "s"}, "sink": {"trigger": "1 week"},
                             "maintenance": {"vacuumRetention": "1 week"}}, tmp_path / "p.yaml")
    assert config.sink.trigger == "1 week" and config.maintenance.window_seconds == 604800.0


def test_the_old_spelling_of_on_error_is_read_with_one_warning(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="ingestion.config"):
        config = _pipeline({"on_error": "fail"}, tmp_path)
    assert config.sink.on_error == "fail"  # type: ignore[attr-defined]
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / 'p.yaml'}: key 'sink.on_error' is deprecated; write 'sink.onError'"]
    assert _pipeline({"onError": "fail"}, tmp_path).sink.on_error == "fail"  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"keys 'sink\.on_error' and 'sink\.onError' are the same setting"):
        _pipeline({"on_error": "fail", "onError": "quarantine"}, tmp_path)


class _Silent(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


@pytest.mark.parametrize(("exc", "line"), [
    (TimeoutError(), "TimeoutError"),
    (AssertionError(), "AssertionError"),
    (ValueError("first\nsecond"), "first"),
    (ValueError("\n\n  why  \n"), "why"),
    (_Silent(), "_Silent"),
    (Exception("An error occurred while calling o12.save.\n: java.lang.IllegalStateException: boom\n\tat x.y"),
     "java.lang.IllegalStateException: boom"),
    (Exception("[STREAM_FAILED] Query [id = 1] terminated with exception: [FOREACH_BATCH_USER_FUNCTION_ERROR] An "
               "error occurred in the user provided function in foreach batch sink. Reason: An exception was raised "
               "by the Python Proxy. Return Message: Traceback (most recent call last):\n  File \"/x/batch.py\", "
               "line 3, in call\n    raise ValueError('x')\nduckdb.duckdb.BinderException: Binder Error: "
               "count(*) in a WHERE clause\n\n=== Streaming Query ===\nIdentifier: orders"),
     "[STREAM_FAILED] Query [id = 1] terminated with exception: [FOREACH_BATCH_USER_FUNCTION_ERROR] An error "
     "occurred in the user provided function in foreach batch sink. Reason: An exception was raised by the Python "
     "Proxy. Return Message: duckdb.duckdb.BinderException: Binder Error: count(*) in a WHERE clause"),
])
def test_any_exception_becomes_one_line(exc: BaseException, line: str) -> None:
    assert one_line(exc) == line


def test_an_empty_exception_says_its_cause() -> None:
    try:
        try:
            raise KeyError("missing-key")
        except KeyError as inner:
            raise RuntimeError() from inner
    except RuntimeError as outer:
        assert one_line(outer) == "'missing-key'"


def test_no_handler_shortens_an_exception_by_hand() -> None:
    """Handlers call `one_line`: `str(exc).splitlines()[0]` raises IndexError on an empty message, inside the
    handler (a batch that should stand would fail)."""
    found = [f"{p.relative_to(REPO)}:{n}" for p in sorted((REPO / "ingestion").rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"str\(\w+\)(\.strip\(\))?\.splitlines\(\)\[0\]", line)]
    assert found == []


def test_quarantine_is_kept_beside_bronze_on_its_file_system(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    s3 = _pipeline({"table": "s3a://lake/bronze/orders", "checkpointLocation": "s3a://lake/cp/orders"}, tmp_path)
    assert s3.quarantine_path == "s3a://lake/bronze/orders_quarantine"  # type: ignore[attr-defined]
    local = _pipeline({"root": str(tmp_path / "lake")}, tmp_path)
    assert local.quarantine_path == str(tmp_path / "lake" / "tables" / "p_quarantine")  # type: ignore[attr-defined]
    with caplog.at_level(logging.WARNING, logger="ingestion.config"):
        _pipeline({"table": "s3a://lake/bronze/orders", "quarantineTable": str(tmp_path / "q")}, tmp_path)
    assert "are on different file systems" in caplog.text


def test_a_quarantine_table_at_the_former_default_place_stops_the_pipeline_with_what_to_set(
        tmp_path: Path) -> None:
    from ingestion.stream.context import check_former_quarantine

    sink = {"root": str(tmp_path / "state"), "table": str(tmp_path / "bronze" / "orders")}
    config = _pipeline(sink, tmp_path)
    check_former_quarantine(config)  # type: ignore[arg-type]  # nothing at the former place: fine
    former = tmp_path / "state" / "tables" / "p_quarantine"
    (former / "_delta_log").mkdir(parents=True)
    with pytest.raises(ConfigError) as caught:
        check_former_quarantine(config)  # type: ignore[arg-type]
    assert str(caught.value) == (
        f"{tmp_path / 'p.yaml'}: the quarantine table of a pipeline with sink.table is now kept beside bronze "
        f"({tmp_path / 'bronze' / 'orders'}_quarantine), but this pipeline's is at {former}; set "
        f"sink.quarantineTable: {former} to keep it there, or move it")
    check_former_quarantine(_pipeline({**sink, "quarantineTable": str(former)}, tmp_path))  # type: ignore[arg-type]
