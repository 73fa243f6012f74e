from __future__ import annotations

import datetime as dt
import io
import logging
from types import SimpleNamespace

import pytest

from ingestion.delta.ledger import PartitionRange
from ingestion.stream.batch import BatchResult
from ingestion.stream.monitor import Progress, batch_metrics, phases, topic_lags


def test_partition_lag_from_spark_offset_json() -> None:
    end = '{"orders":{"0":10,"1":7,"2":3}}'
    latest = '{"orders":{"0":15,"1":7,"2":9}}'
    assert topic_lags(end, latest).get("orders", {}) == {0: 5, 1: 0, 2: 6}
    assert topic_lags(None, latest).get("orders", {}) == {}
    # a batch Spark replays after a restart can come without a latestOffset JSON: no lag known, no failure
    assert topic_lags(end, "") == {} and topic_lags(end, "not json") == {} and topic_lags(end, "null") == {}
    assert topic_lags(end, '{"other":{"0":1}}').get("orders", {}) == {}


def test_lag_of_several_topics_is_per_topic_partition_and_named_by_both() -> None:
    end = '{"events.a":{"0":10,"1":4},"events.b":{"0":3}}'
    latest = '{"events.a":{"0":12,"1":4},"events.b":{"0":9},"events.c":{"0":5}}'
    lags = topic_lags(end, latest)
    assert lags == {"events.a": {0: 2, 1: 0}, "events.b": {0: 6}, "events.c": {0: 5}}  # c: new, not in end yet
    values = batch_metrics(_progress(), None, lags, dt.datetime.now(dt.UTC), single_topic=False)
    assert values["lag_records"] == 13.0
    assert (values["lag_records_events.a_p0"], values["lag_records_events.b_p0"], values["lag_records_events.c_p0"]) \
        == (2.0, 6.0, 5.0)
    assert not any(k.startswith("lag_records_p") for k in values)


def _progress(rows: int = 100) -> SimpleNamespace:
    return SimpleNamespace(numInputRows=rows, inputRowsPerSecond=50.0, processedRowsPerSecond=None, batchDuration=1500)


def _result(committed: bool = True) -> BatchResult:
    return BatchResult(batch_id=4, rows=98, quarantined=2, bytes=12_000, version=4, committed=committed,
                       ranges=(PartitionRange("orders", 0, 0, 99, 100),),
                       max_timestamp=dt.datetime(2026, 1, 1, 12, 0, 0), seconds=1.5)


def test_batch_metrics_merge_progress_result_and_lag() -> None:
    now = dt.datetime(2026, 1, 1, 12, 0, 30, tzinfo=dt.UTC)
    values = batch_metrics(_progress(), _result(), {"orders": {0: 5, 1: 0}}, now)
    assert values == {
        "input_rows": 100.0, "input_rows_per_second": 50.0, "processed_rows_per_second": 0.0,
        "batch_duration_ms": 1500.0, "lag_records": 5.0, "lag_records_p0": 5.0, "lag_records_p1": 0.0,
        "rows": 98.0, "quarantined_rows": 2.0, "input_bytes": 12000.0, "table_version": 4.0, "lag_seconds": 30.0,
    }


def test_lag_seconds_is_zero_when_caught_up_and_skipped_batches_write_no_rows() -> None:
    now = dt.datetime(2026, 1, 1, 13, 0, 0, tzinfo=dt.UTC)
    values = batch_metrics(_progress(), _result(committed=False), {"orders": {0: 0}}, now)
    assert (values["lag_seconds"], values["rows"], values["quarantined_rows"]) == (0.0, 0.0, 0.0)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_a_bar_on_a_terminal() -> None:
    out = _Tty()
    progress = Progress(total=200, stream=out)
    progress.advance(50)
    progress.advance(150)
    progress.close()
    lines = out.getvalue().split("\r")
    assert lines[1].startswith("[#######                       ] 50/200 records (25%)")
    assert lines[2].startswith("[##############################] 200/200 records (100%)")
    assert out.getvalue().endswith("\n")


def test_progress_logs_plain_lines_elsewhere(caplog: pytest.LogCaptureFixture) -> None:
    out = io.StringIO()
    progress = Progress(total=0, stream=out, pipeline="orders")
    with caplog.at_level(logging.INFO, logger="ingestion.stream.monitor"):
        progress.advance(10)
    assert out.getvalue() == ""
    assert "orders progress: 10 of 0 records (100%)" in caplog.text  # run --all logs several pipelines'


def test_phases_list_sparks_durations_longest_first_after_the_total() -> None:
    duration = {"triggerExecution": 1500, "addBatch": 1100, "latestOffset": 40, "walCommit": 120,
                "commitOffsets": 90, "queryPlanning": 30, "getBatch": 0}
    assert phases(duration) == ("1500 ms: addBatch 1100, walCommit 120, commitOffsets 90, latestOffset 40, "
                                "queryPlanning 30, getBatch 0")
    assert phases({"addBatch": 5}) == "addBatch 5"


def test_run_all_combined_progress_line_names_counts_and_the_furthest_behind() -> None:
    from ingestion.stream.pipeline import RunOutcome, RunStatus, combined_progress

    def running(name: str, lag: dict[str, dict[int, int]], rows: list[int], active: bool = True) -> SimpleNamespace:
        batches = [SimpleNamespace(rows=n, committed=True) for n in rows]
        return SimpleNamespace(config=SimpleNamespace(name=name), monitor=SimpleNamespace(last_lag=lag),
                               query=SimpleNamespace(isActive=active), batches=batches)

    pipelines = [running("orders", {"orders": {0: 900, 1: 100}}, [5000, 5000]),
                 running("refunds", {"refunds": {0: 0}}, [10]),
                 running("events", {"events.a": {0: 20}, "events.b": {0: 5}}, [7], active=False)]
    failed = {"events": RunOutcome(RunStatus.FAILED, "boom"), "late": RunOutcome(RunStatus.FAILED, "no topic")}
    line = combined_progress(pipelines, failed, 4)  # type: ignore[arg-type]
    assert line == ("run --all: 4 pipelines, 2 running, 2 failed; 4 batches, 10,017 rows; lag 1,025 records "
                    "(orders 1,000, events 25)")


def test_a_batch_that_wrote_nothing_still_logs_lag_seconds_beside_lag_records() -> None:
    """Spark reports batches the writer never wrote (no offsets, say): `lag_seconds` still comes with
    `lag_records`, from the newest record an earlier batch committed, so the two series stay aligned."""
    now = dt.datetime(2026, 1, 1, 12, 1, 0, tzinfo=dt.UTC)
    caught_up = batch_metrics(_progress(0), None, {"orders": {0: 0}}, now)
    assert caught_up["lag_seconds"] == 0.0 and "rows" not in caught_up
    behind = batch_metrics(_progress(0), None, {"orders": {0: 7}}, now, newest=dt.datetime(2026, 1, 1, 12, 0, 0))
    assert behind["lag_seconds"] == 60.0
    unknown = batch_metrics(_progress(0), None, {"orders": {0: 7}}, now)
    assert "lag_seconds" not in unknown  # nothing held yet: no age to tell


def test_run_all_tells_each_end_in_words_a_stop_on_request_not_as_killed() -> None:
    from ingestion.stream.pipeline import RunOutcome, RunStatus

    assert [RunOutcome(status, reason).said() for status, reason in (
        (RunStatus.FINISHED, ""), (RunStatus.FINISHED, "caught up, nothing to do"), (RunStatus.KILLED, ""),
        (RunStatus.FAILED, "topic 'x' does not exist"))] == [
        "finished", "caught up, nothing to do", "stopped on request", "failed: topic 'x' does not exist"]
