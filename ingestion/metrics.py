"""Pipeline metrics in MLflow: one run per `ingest run`, one step per batch (step = batch id).

The tracking store is embedded by default (SQLite under the local state folder); `MLFLOW_TRACKING_URI` points
it elsewhere. Metrics are logged asynchronously so a slow store never holds a batch back.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ingestion.paths import state_dir

if TYPE_CHECKING:
    from mlflow.entities import Param

log = logging.getLogger(__name__)


def tracking_uri() -> str:
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    folder = state_dir() / "mlflow"
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'mlflow.db'}"


@dataclass
class RunMetrics:
    """An open MLflow run that batches report to."""

    run_id: str
    experiment_id: str
    uri: str
    client: Any  # the MlflowClient the run was opened with, reused for every batch

    @classmethod
    def start(cls, experiment: str, run_name: str, params: Mapping[str, str]) -> RunMetrics:
        import mlflow
        from mlflow.tracking import MlflowClient

        uri = tracking_uri()
        mlflow.set_tracking_uri(uri)
        client = MlflowClient(uri)
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
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(key, float(value), now, step) for key, value in values.items()]
        self.client.log_batch(self.run_id, metrics=metrics, synchronous=False)

    def finish(self, status: str = "FINISHED") -> None:
        import mlflow

        mlflow.flush_async_logging()
        self.client.set_terminated(self.run_id, status=status)


def _param(key: str, value: str) -> Param:
    from mlflow.entities import Param

    return Param(key, str(value)[:6000])
