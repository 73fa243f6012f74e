"""A run's metrics on a real MLflow store (SQLite in tmp_path): every step arrives, and a slow store holds no
batch back."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
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


def _reader(uri: str) -> Any:
    """A client of the test's own on the store the runs write through their store's process."""
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)


def test_every_step_is_written_before_the_run_is_closed(tracking: str) -> None:
    metrics.open_store_early()
    run = RunMetrics.start("ingest/orders", "orders", {"topic": "orders", "trigger": "10 seconds"})
    for step in range(5):
        run.log(step, {"rows": 100.0 * step, "lag_records": float(5 - step)})
    run.finish("KILLED")

    client = _reader(tracking)
    found = client.get_run(run.run_id)
    assert found.info.status == "KILLED"
    assert found.data.params == {"topic": "orders", "trigger": "10 seconds"}
    assert _history(client, run.run_id, "rows") == [(s, 100.0 * s) for s in range(5)]
    assert _history(client, run.run_id, "lag_records") == [(s, float(5 - s)) for s in range(5)]
    assert not run._writer.is_alive()


def test_the_store_is_opened_and_written_by_a_process_of_its_own(tracking: str) -> None:
    """MLflow is imported by the store's process, never by the run's (its import held the interpreter's lock
    against the batches); a store process that ended (idle) is started again for the next request."""
    run = RunMetrics.start("ingest/apart", "apart", {})
    store = run.store
    assert store._proc.pid != os.getpid() and store._proc.poll() is None
    run.log(0, {"rows": 1.0})
    store._proc.stdin.close()  # as its idle end would
    store._proc.wait(30)
    run.finish()
    assert store._proc.poll() is None  # another process took the finish
    assert _reader(tracking).get_run(run.run_id).info.status == "FINISHED"
    code = ("import sys; from ingestion.stream import metrics; metrics.RunMetrics.start('ingest/x', 'x', {}).finish(); "
            "sys.exit(any(m.startswith('mlflow') for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0  # no mlflow module here


class _SlowStore:
    """The run's real store whose metric writes wait until the test lets them through, counting the metrics of
    each call."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.go = threading.Event()
        self.calls: list[int] = []

    def call(self, op: str, **request: Any) -> Any:
        if op == "log":
            self.go.wait(30)
            self.calls.append(len(request["metrics"]))
        return self.store.call(op, **request)


def test_a_slow_store_holds_no_batch_back_and_gets_the_queue_in_few_calls(tracking: str) -> None:
    opened = RunMetrics.start("ingest/slow", "slow", {})
    opened._queue.put(None)  # this test writes through its own RunMetrics on the same run
    slow = _SlowStore(opened.store)
    run = RunMetrics(opened.run_id, opened.experiment_id, opened.uri, slow)

    for step in range(4):  # returns at once although the store is not answering
        run.log(step, {"rows": float(step), "lag_records": 0.0})
    assert slow.calls == []
    slow.go.set()
    run.finish()

    assert _history(_reader(tracking), run.run_id, "rows") == [(s, float(s)) for s in range(4)]
    assert sum(slow.calls) == 8  # every metric once
    assert len(slow.calls) <= 2  # the first batch alone at most, then what had queued behind it in one call


def test_a_store_that_fails_loses_metrics_not_the_run(tracking: str, caplog: pytest.LogCaptureFixture) -> None:
    opened = RunMetrics.start("ingest/failing", "failing", {})
    opened._queue.put(None)

    class Failing(_SlowStore):
        def call(self, op: str, **request: Any) -> Any:
            if op == "log":
                raise metrics.MetricsStoreError("store is read-only")
            return self.store.call(op, **request)

    run = RunMetrics(opened.run_id, opened.experiment_id, opened.uri, Failing(opened.store))
    run.log(0, {"rows": 1.0})
    run.finish()

    assert _reader(tracking).get_run(run.run_id).info.status == "FINISHED"
    assert "could not log 1 metrics: store is read-only" in caplog.text


def test_a_batch_of_more_metrics_than_one_call_takes_is_split(tracking: str) -> None:
    run = RunMetrics.start("ingest/wide", "wide", {})
    lag = {f"lag_records_p{p}": float(p) for p in range(1500)}  # a topic of 1,500 partitions
    run.log(0, lag)  # MLflow takes at most 1,000 metrics a call: the store's process splits them
    run.finish()

    assert len(_reader(tracking).get_run(run.run_id).data.metrics) == 1500


def test_a_store_opened_early_and_never_asked_ends_with_the_run(tracking: str) -> None:
    """A run with nothing to do (caught up) opened the store early for nothing: its process ends at the run's exit,
    not after it; a store that served a request ends once it has read its input's end."""
    unused = metrics.Store(tracking.replace("mlflow.db", "unused.db"))  # (two processes creating one new
    used = metrics.Store(tracking)  # SQLite store race on its schema, as MLflow's clients in two processes would)
    run_id = used.call("start", experiment="ingest/closing", run_name="closing", params={}, artifacts=None)["run_id"]
    for store in (unused, used):
        store.close()
    assert unused._proc.wait(30) != 0  # terminated
    assert used._proc.wait(30) == 0  # read the end of its input, and ended
    assert _reader(tracking).get_run(run_id).info.status == "RUNNING"


def test_a_new_store_is_made_without_a_line_on_the_runs_output(tracking: str,
                                                               capfd: pytest.CaptureFixture[str]) -> None:
    """The store's process shares the run's standard error: MLflow's INFO lines (a new SQLite store's table
    creation) stay off it, as the run's own logging keeps them off (warnings only)."""
    RunMetrics.start("ingest/quiet", "quiet", {}).finish()
    out, err = capfd.readouterr()
    captured = out + err
    # (the run's own lines may be there, by whatever handlers the process has: not MLflow's)
    assert "initial MLflow database tables" not in captured and "Updating database tables" not in captured, captured


def test_a_store_made_early_exists_before_the_runs_first_request(tracking: str) -> None:
    """`make_store_early` (a run whose checks passed and that has records to read): the store's process makes a new
    SQLite store on its own, with no request of the run's waiting, so the run's MLflow run starts at once later."""
    file = Path(tracking.removeprefix("sqlite:///"))
    metrics.open_store_early()
    assert not file.exists()  # opened early, the process makes nothing until asked (a refused run leaves nothing)
    metrics.make_store_early()
    store = metrics._store(tracking)
    deadline = time.monotonic() + 60
    while not file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert file.exists()
    assert store.call("open") is True
    run_id = store.call("start", experiment="ingest/early", run_name="early", params={}, artifacts=None)["run_id"]
    assert _reader(tracking).get_run(run_id).info.run_name == "early"


def test_a_report_names_an_unknown_run_another_pipelines_run_and_a_run_without_batches(
        tracking: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mlflow.tracking import MlflowClient

    from ingestion.cli import main
    from ingestion.config import load_pipeline
    from ingestion.errors import IngestionError
    from ingestion.ops import report

    file = tmp_path / "orders.yaml"
    file.write_text(f"name: orders\ntopic: orders\nkafka:\n  bootstrap.servers: 127.0.0.1:9\n"
                    f"sink:\n  table: {tmp_path / 'orders'}\n")
    config = load_pipeline(file)
    client = MlflowClient(tracking)
    experiment = client.create_experiment(config.experiment)
    ran = client.create_run(experiment, tags={"ingest.pipeline": "orders"}).info.run_id
    client.log_metric(ran, "lag_records", 5.0, step=0)
    other = client.create_run(experiment, tags={"ingest.pipeline": "payments"}).info.run_id
    client.log_metric(other, "lag_records", 5.0, step=0)
    empty = client.create_run(experiment, tags={"ingest.pipeline": "orders"}).info.run_id  # the newest
    png = tmp_path / "charts" / "y.png"
    capsys.readouterr()  # the store's creation, logged by the test's own client

    assert main(["report", str(file), "--run", "nosuchrun", "--output", str(png)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no MLflow run 'nosuchrun' at ") and "\n" not in err, err
    with pytest.raises(IngestionError, match=f"run '{other}' is not a run of pipeline 'orders': it is 'payments''s"):
        report.write_png(config, png, other)
    for run_id in (empty, None):  # named, or the newest
        with pytest.raises(IngestionError, match=f"run '{empty}' of pipeline 'orders' has no batch metrics"):
            report.write_png(config, png, run_id)
    assert not png.exists()
    assert report.write_png(config, png, ran) == png and png.stat().st_size > 0
