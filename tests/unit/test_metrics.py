"""A run's metrics on a real MLflow store (SQLite in tmp_path): every step arrives, and a slow store holds no
batch back."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from ingestion.stream import metrics
from ingestion.stream.metrics import RunMetrics


@pytest.fixture
def tracking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("INGEST_HOME", str(tmp_path / "home"))
    return uri


def _history(client: Any, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def test_every_step_is_written_before_the_run_is_closed(tracking: str) -> None:
    metrics.open_store_early()
    run = RunMetrics.start("ingest/orders", "orders", {"topic": "orders", "trigger": "10 seconds"})
    for step in range(5):
        run.log(step, {"rows": 100.0 * step, "lag_records": float(5 - step)})
    run.finish("KILLED")

    found = run.client.get_run(run.run_id)
    assert found.info.status == "KILLED"
    assert found.data.params == {"topic": "orders", "trigger": "10 seconds"}
    assert _history(run.client, run.run_id, "rows") == [(s, 100.0 * s) for s in range(5)]
    assert _history(run.client, run.run_id, "lag_records") == [(s, float(5 - s)) for s in range(5)]
    assert not run._writer.is_alive()


class _SlowStore:
    """A real MLflow client whose writes wait until the test lets them through, counting the calls."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.go = threading.Event()
        self.calls: list[int] = []

    def log_batch(self, run_id: str, metrics: list[Any]) -> None:
        self.go.wait(30)
        self.calls.append(len(metrics))
        self.client.log_batch(run_id, metrics=metrics)

    def set_terminated(self, run_id: str, status: str) -> None:
        self.client.set_terminated(run_id, status=status)


def test_a_slow_store_holds_no_batch_back_and_gets_the_queue_in_few_calls(tracking: str) -> None:
    opened = RunMetrics.start("ingest/slow", "slow", {})
    opened._queue.put(None)  # this test writes through its own RunMetrics on the same run
    slow = _SlowStore(opened.client)
    run = RunMetrics(opened.run_id, opened.experiment_id, opened.uri, slow)

    for step in range(4):  # returns at once although the store is not answering
        run.log(step, {"rows": float(step), "lag_records": 0.0})
    assert slow.calls == []
    slow.go.set()
    run.finish()

    assert _history(opened.client, run.run_id, "rows") == [(s, float(s)) for s in range(4)]
    assert sum(slow.calls) == 8  # every metric once
    assert len(slow.calls) <= 2  # the first batch alone at most, then what had queued behind it in one call


def test_a_store_that_fails_loses_metrics_not_the_run(tracking: str, caplog: pytest.LogCaptureFixture) -> None:
    opened = RunMetrics.start("ingest/failing", "failing", {})
    opened._queue.put(None)

    class Failing(_SlowStore):
        def log_batch(self, run_id: str, metrics: list[Any]) -> None:
            raise RuntimeError("store is read-only")

    store = Failing(opened.client)
    run = RunMetrics(opened.run_id, opened.experiment_id, opened.uri, store)
    run.log(0, {"rows": 1.0})
    run.finish()

    assert opened.client.get_run(run.run_id).info.status == "FINISHED"
    assert "could not log 1 metrics: store is read-only" in caplog.text


def test_a_batch_of_more_metrics_than_one_call_takes_is_split(tracking: str) -> None:
    opened = RunMetrics.start("ingest/wide", "wide", {})
    opened._queue.put(None)
    store = _SlowStore(opened.client)
    store.go.set()
    run = RunMetrics(opened.run_id, opened.experiment_id, opened.uri, store)
    lag = {f"lag_records_p{p}": float(p) for p in range(1500)}  # a topic of 1,500 partitions
    run.log(0, lag)
    run.finish()

    assert store.calls == [1000, 500]  # MLflow takes at most 1,000 metrics a call
    assert len(opened.client.get_run(run.run_id).data.metrics) == 1500
