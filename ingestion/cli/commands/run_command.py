"""ingest run: one pipeline or every one (`--all`), streaming or `--available-now`, with the Prometheus exporter."""

from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING, Any

from ingestion.cli.common import load_to_write, one_or_all
from ingestion.errors import IngestionError

if TYPE_CHECKING:
    from ingestion.config import PipelineConfig

log = logging.getLogger("ingestion")


def run(args: argparse.Namespace) -> int:
    from ingestion.stream import prometheus

    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        raise IngestionError(f"--metrics-port must be a TCP port (0: off), got {args.metrics_port}")
    configs = one_or_all(args, load_to_write)
    exporter = prometheus.exporter_for(configs, port=args.metrics_port, available_now=args.available_now)
    try:
        code = _run_pipelines(args, configs, exporter)
        gateway = configs[0].metrics.prometheus.pushgateway
        if exporter is not None and args.available_now and gateway:
            exporter.push(gateway, prometheus.push_instance(configs))
        return code
    finally:
        if exporter is not None:
            exporter.close()


def _run_pipelines(args: argparse.Namespace, configs: list[PipelineConfig], exporter: Any) -> int:
    """The launch sequence (`stream.launch`, the same as `ingestion.run_pipeline`'s), and its outcome printed."""
    from ingestion.stream import launch, pipeline

    if args.all:
        outcome = launch.run_all(None, configs, available_now=args.available_now, exporter=exporter)
        for name, ended in outcome.items():
            print(f"{name}: {ended.said()}")
        return 1 if any(o.status is pipeline.RunStatus.FAILED for o in outcome.values()) else 0
    (config,) = configs
    ran = launch.run(None, config, available_now=args.available_now, exporter=exporter)
    if isinstance(ran, launch.Finished):
        return 0
    from ingestion.processes import process_age

    rows = sum(b.rows for b in ran.batches if b.committed)
    how = "stopped on request" if ran.stopped_on_request else "done"
    age, stopped = process_age(), ran.stopped_in
    log.info("%s: %s, %d batches, %d rows written%s%s", config.name, how, len(ran.batches), rows,
             f", {age:.1f} s after the process's start" if age is not None else "",
             f" (the query stopped in {stopped:.2f} s)" if stopped is not None else "")
    return 0
