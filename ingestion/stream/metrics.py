"""Pipeline metrics in MLflow: one run per `ingest run`, one step per batch (step = batch id).

The tracking store is embedded by default (SQLite under the local state folder); `MLFLOW_TRACKING_URI` points
it elsewhere. A run's metrics go through a queue to one thread of its own, so a slow store never holds a batch
back, and closing the run waits only for what is still queued. (MLflow's own asynchronous logging polls its
queue once a second: closing a run through it took 2 s.)

Opening the store (importing mlflow, SQLAlchemy, checking the SQLite schema) takes a second or two of Python;
`open_store_early` starts it on a thread while the JVM of the Spark session boots, which keeps Python idle.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from importlib import metadata
from typing import TYPE_CHECKING, Any

from ingestion.config import PipelineConfig
from ingestion.errors import one_line
from ingestion.paths import state_dir

if TYPE_CHECKING:
    from mlflow.entities import Metric, Param

    from ingestion.stream.lock import Holder

log = logging.getLogger(__name__)

MAX_METRICS_PER_CALL = 1000  # MLflow's limit for one log_batch call
ENDED_BY_TAG = "ingest.ended_by"  # on a run ended by another process: why (`writer lock taken from dead pid 4242`)
_stores: dict[str, Future[Any]] = {}  # tracking URI -> MlflowClient (being) opened
_stores_lock = threading.Lock()
_experiments_lock = threading.Lock()  # two pipelines of one experiment starting at once create it once


def tracking_uri() -> str:
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    folder = state_dir() / "mlflow"
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'mlflow.db'}"


def open_store_early() -> None:
    """Start opening the tracking store on a thread (see the module's docstring); `RunMetrics.start` waits."""
    _store(tracking_uri())


def _store(uri: str) -> Future[Any]:
    with _stores_lock:
        found = _stores.get(uri)
        if found is None:
            found = _stores[uri] = Future()
            threading.Thread(target=_open, args=(uri, found), name="mlflow-open", daemon=True).start()
        return found


def _open(uri: str, into: Future[Any]) -> None:
    try:
        from mlflow.tracking import MlflowClient

        into.set_result(MlflowClient(uri))
    except BaseException as exc:  # noqa: BLE001 - handed to the caller of RunMetrics.start
        into.set_exception(exc)


class RunMetrics:
    """An open MLflow run that batches report to."""

    def __init__(self, run_id: str, experiment_id: str, uri: str, client: Any) -> None:
        self.run_id = run_id
        self.experiment_id = experiment_id
        self.uri = uri
        self.client = client  # the MlflowClient the run was opened with, used for every batch
        self._queue: queue.SimpleQueue[list[Metric] | None] = queue.SimpleQueue()
        self._writer = threading.Thread(target=self._write, name=f"mlflow-{run_id[:8]}", daemon=True)
        self._writer.start()

    @classmethod
    def start(cls, experiment: str, run_name: str, params: Mapping[str, str]) -> RunMetrics:
        uri = tracking_uri()
        client = _store(uri).result()
        with _experiments_lock:
            found = client.get_experiment_by_name(experiment)
            if found is not None:
                experiment_id = found.experiment_id
            else:
                artifacts = (state_dir() / "mlflow" / "artifacts").as_uri() if uri.startswith("sqlite") else None
                experiment_id = client.create_experiment(experiment, artifact_location=artifacts)
        run = client.create_run(experiment_id, run_name=run_name, tags={"ingest.pipeline": run_name})
        client.log_batch(run.info.run_id, params=[_param(k, v) for k, v in params.items()])
        log.info("mlflow run %s in experiment %r (%s)", run.info.run_id, experiment, uri)
        return cls(run.info.run_id, experiment_id, uri, client)

    def log(self, step: int, values: Mapping[str, float]) -> None:
        """Queue one batch's metrics; they are written by the run's own thread."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._queue.put([Metric(key, float(value), now, step) for key, value in values.items()])

    def _write(self) -> None:
        """Write queued metrics until `finish`; what queued up while the store was busy goes in one call."""
        closing = False
        while not closing:
            pending: list[Metric] = []
            item = self._queue.get()
            while item is not None:
                pending.extend(item)
                if len(pending) >= MAX_METRICS_PER_CALL or self._queue.empty():
                    break
                item = self._queue.get()
            closing = item is None
            self._send(pending)

    def _send(self, metrics: list[Metric]) -> None:
        for first in range(0, len(metrics), MAX_METRICS_PER_CALL):
            chunk = metrics[first:first + MAX_METRICS_PER_CALL]
            try:
                self.client.log_batch(self.run_id, metrics=chunk)
            except Exception as exc:  # noqa: BLE001 - metrics are lost, the stream is not
                log.warning("mlflow run %s: could not log %d metrics: %s", self.run_id, len(chunk),
                            one_line(exc))

    def finish(self, status: str = "FINISHED", timeout: float = 60.0) -> None:
        """Write what is queued, then close the run with `status`."""
        self._queue.put(None)
        self._writer.join(timeout)
        if self._writer.is_alive():
            log.warning("mlflow run %s: metrics still being written after %.0fs; closing the run", self.run_id,
                        timeout)
        self.client.set_terminated(self.run_id, status=status)


def end_abandoned(holder: Holder) -> None:
    """End the MLflow run of a writer that died holding the pipeline's lock (`WriterLock.taken_from`): KILLED, ended
    now, tagged `ingest.ended_by` with why. Without it the run stays RUNNING for ever. A run already closed (the
    writer died between closing it and releasing the lock) is left as it is; a store that cannot be reached costs a
    warning, not the run."""
    if holder.mlflow_run is None:
        return
    uri = holder.mlflow_uri or tracking_uri()
    try:
        client = _store(uri).result()
        if client.get_run(holder.mlflow_run).info.status != "RUNNING":
            return
        client.set_tag(holder.mlflow_run, ENDED_BY_TAG, holder.reason)
        client.set_terminated(holder.mlflow_run, status="KILLED")
    except Exception as exc:  # noqa: BLE001 - the new run goes on; the old one stays RUNNING, as it was
        log.warning("mlflow run %s of pid %d (ended without closing it) could not be ended as KILLED in %s: %s",
                    holder.mlflow_run, holder.pid, uri, one_line(exc))
        return
    log.info("mlflow run %s ended as KILLED: %s (on %s since %s)", holder.mlflow_run, holder.reason, holder.host,
             holder.started)


def _param(key: str, value: str) -> Param:
    from mlflow.entities import Param

    return Param(key, str(value)[:6000])


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
