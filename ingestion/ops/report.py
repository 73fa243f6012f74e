"""`ingest report`: a pipeline's lag and throughput over batches, from its MLflow run, as a PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ingestion.config import PipelineConfig
from ingestion.errors import IngestionError
from ingestion.stream.metrics import tracking_uri
from ingestion.stream.mlflow_server import sqlite_file

PANELS = (
    ("lag_records", "lag (records)"),
    ("lag_seconds", "lag (seconds)"),
    ("processed_rows_per_second", "processed rows/s"),
    ("input_rows", "input rows per batch"),
)


def metric_series(config: PipelineConfig, run_id: str | None = None) -> tuple[str, dict[str, list[tuple[int, float]]]]:
    """(run id, metric -> [(batch id, value)]) of the given run, or of the pipeline's newest run."""
    from mlflow.tracking import MlflowClient

    uri = tracking_uri()
    if (file := sqlite_file(uri)) is not None and not file.exists():
        raise IngestionError(f"no MLflow run for pipeline {config.name!r}: no MLflow store at {uri} yet (`ingest run` "
                             "it first)")
    client = MlflowClient(uri)
    if run_id is None:
        experiment = client.get_experiment_by_name(config.experiment)
        # The pipeline's stream runs (tagged with its name): not its `ingest maintain` runs (`<name>-maintain`).
        runs = client.search_runs([experiment.experiment_id], f"tags.`ingest.pipeline` = '{config.name}'",
                                  order_by=["attributes.start_time DESC"], max_results=1) if experiment else []
        if not runs:
            raise IngestionError(f"no MLflow run for pipeline {config.name!r} in experiment "
                                 f"{config.experiment!r} at {tracking_uri()}")
        run_id = runs[0].info.run_id
    else:
        _check_run(client, run_id, config)
    series = {key: sorted((m.step, m.value) for m in client.get_metric_history(run_id, key)) for key, _ in PANELS}
    if not any(series.values()):
        raise IngestionError(f"MLflow run {run_id!r} of pipeline {config.name!r} has no batch metrics "
                             f"({', '.join(key for key, _ in PANELS)}): it ended before its first batch; name another "
                             "run with --run")
    return run_id, series


def _check_run(client: Any, run_id: str, config: PipelineConfig) -> None:
    """Refuse, in one line, a run id MLflow does not know and a run of another pipeline (or of `ingest maintain`)."""
    from mlflow.exceptions import MlflowException

    try:
        run = client.get_run(run_id)
    except MlflowException:
        raise IngestionError(f"no MLflow run {run_id!r} at {tracking_uri()} (without --run, `ingest report "
                             f"{config.name}` plots the pipeline's newest run)") from None
    owner = run.data.tags.get("ingest.pipeline")
    if owner != config.name:
        raise IngestionError(f"MLflow run {run_id!r} is not a run of pipeline {config.name!r}: it is "
                             + (f"{owner!r}'s" if owner else "no pipeline's") + "; name one of its runs with --run")


def write_png(config: PipelineConfig, output: Path, run_id: str | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_id, series = metric_series(config, run_id)
    fig, axes = plt.subplots(len(PANELS), 1, figsize=(9, 2.4 * len(PANELS)), sharex=True)
    for ax, (key, title) in zip(axes, PANELS, strict=True):
        points = series[key]
        ax.plot([s for s, _ in points], [v for _, v in points], marker=".", linewidth=1)
        ax.set_ylabel(title)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("batch id")
    fig.suptitle(f"{config.name}: MLflow run {run_id[:8]}")
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=90)
    plt.close(fig)
    return output
