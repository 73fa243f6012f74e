"""Pipeline metrics in MLflow: one run per `ingest run`, one step per batch (step = batch id).

The tracking store is embedded by default (SQLite under the local state folder); `MLFLOW_TRACKING_URI` points
it elsewhere. A run's metrics go through a queue to one thread of its own, so a slow store never holds a batch
back, and closing the run waits only for what is still queued. (MLflow's own asynchronous logging polls its
queue once a second: closing a run through it took 2 s.)

Opening the store (importing mlflow, SQLAlchemy, checking the SQLite schema) takes a second or two of Python, so
the store is opened and written by a process of its own (`mlflow_server`), one per tracking URI, which
`open_store_early` starts while the start batch is written and the JVM boots: on the machine's other core, not
against the batches for the interpreter's lock (docs/performance.md#mlflow-in-a-process-of-its-own).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from importlib import metadata
from typing import TYPE_CHECKING, Any

from ingestion.config import PipelineConfig
from ingestion.errors import IngestionError, one_line
from ingestion.paths import state_dir

if TYPE_CHECKING:
    from ingestion.stream.lock import Holder

log = logging.getLogger(__name__)

ENDED_BY_TAG = "ingest.ended_by"  # on a run ended by another process: why (`writer lock taken from dead pid 4242`)
_stores: dict[str, Store] = {}  # tracking URI -> its store's process
_stores_lock = threading.Lock()
Metric = tuple[str, float, int, int]  # key, value, timestamp (ms), step


class MetricsStoreError(IngestionError):
    """The MLflow store refused a request, or its process is gone."""


class Store:
    """A tracking store, opened and written by its own process (`mlflow_server`): one request at a time."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._lock = threading.Lock()
        self._proc = self._start()
        self.used = False

    def close(self) -> None:
        """End the store's process: at once if it never served a request (a run with nothing to do), else when it
        has read its input's end (after what it is writing)."""
        with self._lock:
            if not self.used:
                self._proc.terminate()
            elif self._proc.stdin is not None:
                self._proc.stdin.close()

    def _start(self) -> subprocess.Popen[str]:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))  # the package, wherever
        return subprocess.Popen([sys.executable, "-m", "ingestion.stream.mlflow_server", self.uri], env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def call(self, op: str, **request: Any) -> Any:
        """Ask the store's process (another one if it ended, idle); MetricsStoreError with its one line when it
        refuses or is gone."""
        with self._lock:
            if self._proc.poll() is not None:
                self._proc = self._start()
            self.used = True
            try:
                assert self._proc.stdin is not None and self._proc.stdout is not None
                self._proc.stdin.write(json.dumps({"op": op, **request}) + "\n")
                self._proc.stdin.flush()
                line = self._proc.stdout.readline()
            except (OSError, ValueError):
                line = ""
        if not line:
            raise MetricsStoreError(f"the MLflow store's process for {self.uri} ended (exit code {self._proc.poll()})")
        reply = json.loads(line)
        if "error" in reply:
            raise MetricsStoreError(one_line(reply["error"]))
        return reply["ok"]


def tracking_uri() -> str:
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    return f"sqlite:///{state_dir() / 'mlflow' / 'mlflow.db'}"  # (its folder made by the store's process, if needed)


def open_store_early() -> None:
    """Start opening the tracking store on a thread (see the module's docstring); `RunMetrics.start` waits."""
    _store(tracking_uri())


def make_store_early() -> None:
    """For a run that will write (its checks passed, records to read): the store's process makes the store now, on
    a thread, if it does not exist yet. A new SQLite store's tables take about 2 s, which a fresh checkout's first
    run otherwise waited for after its last start batch, at its MLflow run's start; a store that exists answers at
    once."""
    store = _store(tracking_uri())

    def make() -> None:
        try:
            store.call("open")
        except Exception as exc:  # noqa: BLE001 - the run's own first request says what is wrong
            log.debug("the MLflow store could not be made ahead: %s", one_line(exc))

    threading.Thread(target=make, name="mlflow-open", daemon=True).start()


def _store(uri: str) -> Store:
    with _stores_lock:
        found = _stores.get(uri)
        if found is None:
            if not _stores:
                atexit.register(_close_stores)
            found = _stores[uri] = Store(uri)
        return found


def _close_stores() -> None:
    for store in list(_stores.values()):
        try:
            store.close()
        except OSError:
            pass


class RunMetrics:
    """An open MLflow run that batches report to."""

    def __init__(self, run_id: str, experiment_id: str, uri: str, store: Any) -> None:
        self.run_id = run_id
        self.experiment_id = experiment_id
        self.uri = uri
        self.store = store  # the Store the run was opened with, written for every batch
        self._queue: queue.SimpleQueue[list[Metric] | None] = queue.SimpleQueue()
        self._writer = threading.Thread(target=self._write, name=f"mlflow-{run_id[:8]}", daemon=True)
        self._writer.start()

    @classmethod
    def start(cls, experiment: str, run_name: str, params: Mapping[str, str]) -> RunMetrics:
        uri = tracking_uri()
        store = _store(uri)  # (one request at a time: two pipelines of one experiment create it once)
        artifacts = (state_dir() / "mlflow" / "artifacts").as_uri() if uri.startswith("sqlite") else None
        run = store.call("start", experiment=experiment, run_name=run_name, artifacts=artifacts,
                         params={k: str(v) for k, v in params.items()})
        log.info("mlflow run %s in experiment %r (%s)", run["run_id"], experiment, uri)
        return cls(run["run_id"], run["experiment_id"], uri, store)

    def log(self, step: int, values: Mapping[str, float]) -> None:
        """Queue one batch's metrics; they are written by the run's own thread."""
        now = int(time.time() * 1000)
        self._queue.put([(key, float(value), now, step) for key, value in values.items()])

    def _write(self) -> None:
        """Write queued metrics until `finish`; what queued up while the store was busy goes in one call."""
        closing = False
        while not closing:
            pending: list[Metric] = []
            item = self._queue.get()
            while item is not None:
                pending.extend(item)
                if self._queue.empty():
                    break
                item = self._queue.get()
            closing = item is None
            self._send(pending)

    def _send(self, metrics: list[Metric]) -> None:
        if not metrics:
            return
        try:
            self.store.call("log", run_id=self.run_id, metrics=metrics)
        except Exception as exc:  # noqa: BLE001 - metrics are lost, the stream is not
            log.warning("mlflow run %s: could not log %d metrics: %s", self.run_id, len(metrics), one_line(exc))

    def finish(self, status: str = "FINISHED", timeout: float = 60.0) -> None:
        """Write what is queued, then close the run with `status`."""
        self._queue.put(None)
        self._writer.join(timeout)
        if self._writer.is_alive():
            log.warning("mlflow run %s: metrics still being written after %.0fs; closing the run", self.run_id,
                        timeout)
        self.store.call("finish", run_id=self.run_id, status=status)


def end_abandoned(holder: Holder) -> None:
    """End the MLflow run of a writer that died holding the pipeline's lock (`WriterLock.taken_from`): KILLED, ended
    now, tagged `ingest.ended_by` with why. Without it the run stays RUNNING for ever. A run already closed (the
    writer died between closing it and releasing the lock) is left as it is; a store that cannot be reached costs a
    warning, not the run."""
    if holder.mlflow_run is None:
        return
    uri = holder.mlflow_uri or tracking_uri()
    try:
        if not _store(uri).call("end_abandoned", run_id=holder.mlflow_run, tag=ENDED_BY_TAG, reason=holder.reason):
            return
    except Exception as exc:  # noqa: BLE001 - the new run goes on; the old one stays RUNNING, as it was
        log.warning("mlflow run %s of pid %d (ended without closing it) could not be ended as KILLED in %s: %s",
                    holder.mlflow_run, holder.pid, uri, one_line(exc))
        return
    log.info("mlflow run %s ended as KILLED: %s (on %s since %s)", holder.mlflow_run, holder.reason, holder.host,
             holder.started)


def start_metrics(config: PipelineConfig, app_id: str, available_now: bool, starting: str | None) -> RunMetrics:
    """The MLflow run of one `ingest run` of a pipeline, its parameters logged (no secret: the config's digest is
    of its redacted form)."""
    import pyspark

    params = {
        "pipeline": config.name, "topic": config.subscription,
        "table": config.table_path,
        "checkpoint": config.checkpoint_path, "txn_app_id": app_id,
        "starting_offsets": starting or config.source.starting_offsets,
        "trigger": "availableNow" if available_now else config.sink.trigger,
        "config_digest": hashlib.sha256(json.dumps(config.redacted(), sort_keys=True).encode()).hexdigest()[:16],
        "consumer_group": config.consumer_group,
        "spark_version": pyspark.__version__, "delta_version": metadata.version("delta-spark"),
        "confluent_kafka_version": metadata.version("confluent-kafka"),
    }
    return RunMetrics.start(config.experiment, config.name, params)
