"""The MLflow side of `metrics`, in a process of its own: `python -m ingestion.stream.mlflow_server <tracking uri>`.

Importing MLflow and opening its store (SQLAlchemy, the SQLite schema check) takes one to two seconds of Python. In
the run's own process that work held the interpreter's lock against the batches being decoded beside it (a
50,000-record start batch's decode took 1.43 s instead of 0.82 s); here it runs on the machine's other core. The
process reads one JSON request a line on its standard input and answers each with one JSON line on its standard
output: `{"ok": ...}` or `{"error": "<class>: <message>"}`. It ends when its input closes (the run's process ended)
or after `IDLE_SECONDS` without a request (a library caller's process may live on; `metrics.Store` starts another
when it needs one).

Requests (`op`): `open` -> true once the store is made (a new SQLite store's tables: about 2 s); `start`
(experiment, run_name, params, artifacts) -> {run_id, experiment_id}; `log` (run_id, metrics as [key, value,
timestamp ms, step]); `finish` (run_id, status); `end_abandoned` (run_id, tag, reason) -> whether the run was still
RUNNING and is now KILLED.
"""

from __future__ import annotations

import json
import logging
import select
import sys
from pathlib import Path
from typing import Any

MAX_METRICS_PER_CALL = 1000  # MLflow's limit for one log_batch call
IDLE_SECONDS = 300.0
SQLITE = "sqlite:///"


def _handle(client: Any, request: dict[str, Any]) -> Any:
    from mlflow.entities import Metric, Param

    op = request["op"]
    if op == "open":  # the store made (`main` does before any request): a run that will write asks it early
        return True
    if op == "start":
        found = client.get_experiment_by_name(request["experiment"])
        experiment_id = found.experiment_id if found is not None else client.create_experiment(
            request["experiment"], artifact_location=request.get("artifacts"))
        run = client.create_run(experiment_id, run_name=request["run_name"],
                                tags={"ingest.pipeline": request["run_name"]})
        params = [Param(k, str(v)[:6000]) for k, v in request.get("params", {}).items()]
        if params:
            client.log_batch(run.info.run_id, params=params)
        return {"run_id": run.info.run_id, "experiment_id": experiment_id}
    if op == "log":
        metrics = [Metric(key, float(value), int(stamp), int(step)) for key, value, stamp, step in request["metrics"]]
        for first in range(0, len(metrics), MAX_METRICS_PER_CALL):
            client.log_batch(request["run_id"], metrics=metrics[first:first + MAX_METRICS_PER_CALL])
        return len(metrics)
    if op == "finish":
        client.set_terminated(request["run_id"], status=request["status"])
        return True
    if op == "end_abandoned":
        if client.get_run(request["run_id"]).info.status != "RUNNING":
            return False
        client.set_tag(request["run_id"], request["tag"], request["reason"])
        client.set_terminated(request["run_id"], status="KILLED")
        return True
    raise ValueError(f"unknown request {op!r}")


def sqlite_file(uri: str) -> Path | None:
    """The file of a SQLite tracking store (`sqlite:///<path>`), None for another store."""
    return Path(uri[len(SQLITE):]) if uri.startswith(SQLITE) else None


def _client(uri: str) -> Any:
    """The store's client; a SQLite store's folder made first (its file is made by the client)."""
    from mlflow.tracking import MlflowClient

    if (file := sqlite_file(uri)) is not None:
        file.parent.mkdir(parents=True, exist_ok=True)
    return MlflowClient(uri)


def main(uri: str) -> None:
    """Serve requests. MLflow is imported at once (the slow part); a SQLite store that does not exist yet is made
    only by the first request: a run refused by its checks leaves no file behind."""
    client: Any = None
    broken = None
    try:
        import mlflow.tracking  # noqa: F401 - imported ahead of the first request

        for noisy in ("alembic", "mlflow", "urllib3"):  # as the run's own logging: warnings only (a new store's
            logging.getLogger(noisy).setLevel(logging.WARNING)  # table creation lines are not the user's)

        if (file := sqlite_file(uri)) is None or file.exists():
            client = _client(uri)
    except Exception as exc:  # noqa: BLE001 - every request is answered with it
        broken = f"{type(exc).__name__}: {exc}"
    while select.select([sys.stdin], [], [], IDLE_SECONDS)[0]:  # one request at a time: nothing is buffered
        line = sys.stdin.readline()
        if not line:
            return
        try:
            if broken is not None:
                raise RuntimeError(broken)
            if client is None:
                client = _client(uri)
            reply = {"ok": _handle(client, json.loads(line))}
        except Exception as exc:  # noqa: BLE001 - the caller decides what a failed request costs
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1])
