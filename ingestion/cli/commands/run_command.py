"""ingest run: one pipeline or every one (`--all`), streaming or `--available-now`, with the Prometheus exporter."""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ingestion.cli.common import all_valid, load, spark_session
from ingestion.errors import IngestionError, UsageError

if TYPE_CHECKING:
    from ingestion.config import PipelineConfig

log = logging.getLogger("ingestion")


def run(args: argparse.Namespace) -> int:
    from ingestion.stream import prometheus

    if args.all == bool(args.pipeline):
        raise UsageError("name one pipeline, or pass --all")
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        raise IngestionError(f"--metrics-port must be a TCP port (0: off), got {args.metrics_port}")
    configs = all_valid() if args.all else [load(args.pipeline)]
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


# The start orchestration, one piece: the checks before a JVM, the start batches (perhaps no JVM at all), the
# session booted while they are written, then the queries. _run_pipelines and the two helpers below it are all
# of it, kept together to move into ingestion/stream/ as they are.


def _run_pipelines(args: argparse.Namespace, configs: list[PipelineConfig], exporter: Any) -> int:
    from ingestion.stream import early, metrics, pipeline

    if args.all:
        contexts = pipeline.check_all_can_start(configs)
        if args.available_now:
            positions = pipeline.all_caught_up(contexts)
            done = [c for c, at in zip(contexts, positions, strict=True) if at is not None]
            for ctx in done:
                print(f"{ctx.name}: caught up, nothing to do")
            contexts = [c for c in contexts if c not in done]
            if not contexts:
                return 0
            if all(early.fits(c) for c in contexts):  # start batches read it all: perhaps no JVM at all
                metrics.open_store_early()
                contexts = _finished_without_jvm(contexts, exporter, write=True)
                if not contexts:
                    return 0
        metrics.open_store_early()  # while the JVM boots
        configs = [c.config for c in contexts]
        session_ready = threading.Event()
        with _meanwhile(lambda: early.prepare_all(contexts, session_ready)) as prepared:
            spark = spark_session("ingest-all", configs, pools=[pipeline.pool_name(c) for c in configs],
                                  record_classes=True,
                                  streams=sum(1 + (c.silver is not None) for c in configs))
            session_ready.set()
            prepared.result()
        if args.available_now:
            contexts = _finished_without_jvm(contexts, exporter, write=False)
        outcome = pipeline.run_all(spark, contexts, available_now=args.available_now, exporter=exporter) \
            if contexts else {}
        for name, ended in outcome.items():
            print(f"{name}: {ended}")
        return 1 if any(o.status is pipeline.RunStatus.FAILED for o in outcome.values()) else 0
    (config,) = configs
    ctx = pipeline.check_can_start(config)  # before anything is created or a JVM boots: Kafka, the topics, the lock
    if args.available_now and (reached := pipeline.caught_up(ctx)) is not None:
        where = ", ".join(f"{t}/{p}:{o}" for t, parts in sorted(reached.items()) for p, o in sorted(parts.items()))
        log.info("%s: caught up, nothing to do (the table holds every committed record before %s); no Spark "
                 "session started", config.name, where)
        return 0
    if args.available_now and early.fits(ctx):  # one start batch reads it all: perhaps no JVM at all
        metrics.open_store_early()  # while the batch is written
        early.prepare(ctx)
        if (batch := pipeline.finish_without_jvm(ctx, exporter)) is not None:
            log.info("%s: done, 1 batch, %d rows written; no Spark session started", config.name, batch.rows)
            return 0
    metrics.open_store_early()  # while the JVM boots
    with _meanwhile(lambda: early.prepare(ctx)) as prepared:  # schemas, tables and the start batch, without a JVM
        spark = spark_session(f"ingest-{config.name}", [config], record_classes=True)
        prepared.result()
    running = pipeline.run(spark, ctx, available_now=args.available_now, exporter=exporter)
    rows = sum(b.rows for b in running.batches if b.committed)
    how = "stopped on request" if running.stopped_on_request else "done"
    log.info("%s: %s, %d batches, %d rows written", config.name, how, len(running.batches), rows)
    return 0


def _finished_without_jvm(contexts: list[Any], exporter: Any, *, write: bool) -> list[Any]:
    """Of an available-now `run --all`'s pipelines, those whose start batch (written here first with `write`)
    has not caught them up; the others are reported done."""
    from ingestion.stream import pipeline

    left = []
    for ctx, batch in zip(contexts, pipeline.finish_all_without_jvm(contexts, exporter, write=write), strict=True):
        if batch is None:
            left.append(ctx)
        else:
            print(f"{ctx.name}: finished, {batch.rows} rows, no Spark session needed")
    return left


@contextlib.contextmanager
def _meanwhile(work: Callable[[], Any]) -> Iterator[concurrent.futures.Future[Any]]:
    """`work` on a thread while the caller's block runs (a JVM boots in the main thread, which alone may set the
    signal dispositions the JVM keeps); its result, or its error, from the future the block waits on."""
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="meanwhile") as pool:
        yield pool.submit(work)
