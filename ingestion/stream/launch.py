"""The one launch sequence of a run: `ingest run` and `ingestion.run_pipeline` (and `run --all`) call it alike.

1. **Checks** (`check_can_start`, seconds, before anything is created or a JVM boots): Kafka answers, the topics
   exist and may be read, the consumer group may be used, no other process runs the pipeline, the registry answers,
   and what `onboard --dry-run` checks (`setup.check`: the schemas resolve to columns the table takes, the
   partition and silver columns exist), so a config mistake leaves no table, checkpoint, catalog entry or MLflow run.
2. **The writer lock**, taken now where the checkpoint is a local folder; in object storage the query's start
   takes it (its lease is written through the JVM's file system).
3. **The facts, read once** under that lock (`Facts`): the offsets the table's ledger records, Kafka's bounds,
   bronze's state, whether the checkpoint has batches. Everything after takes them; nothing reads them again.
4. An available-now run with nothing to read ends here: **caught up**, no JVM.
5. While the JVM boots (unless the caller brought a session), **prepared without a JVM** (`prepare`): the schemas
   resolved and the tables made, and the **start batch** written (`start_batch`). An available-now run whose start
   batch read everything **finishes without a JVM** (`finish_without_jvm`).
6. **The query starts** (`pipeline.start`) with all of it handed down as one immutable `Launch`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TypeVar

from pyspark.sql import SparkSession

from ingestion.config import PipelineConfig
from ingestion.decode import parallel
from ingestion.delta.log_checkpoints import checkpoint_if_due
from ingestion.processes import process_age
from ingestion.runtime.session import pipelines_session, submitted
from ingestion.schema import registry
from ingestion.stream import checkpoint, context, pipeline, shape, start_batch
from ingestion.stream.batch import BatchResult
from ingestion.stream.context import PipelineContext
from ingestion.stream.facts import Launch, Prepared, caught_up, locked, watched
from ingestion.stream.lock import WriterLock
from ingestion.stream.metrics import make_store_early, open_store_early, start_metrics
from ingestion.stream.monitor import PipelineMonitor
from ingestion.stream.pipeline import RunningPipeline, RunOutcome, RunStatus
from ingestion.stream.prometheus import Exporter, PipelineState, watch
from ingestion.stream.start_batch import StartBatch

log = logging.getLogger(__name__)

In = TypeVar("In")
Out = TypeVar("Out")

CHECKS_AT_ONCE = 8  # pipelines asked about at once before the JVM (each is mostly waiting on Kafka)
STARTS_AT_ONCE = 4  # pipelines prepared or started at once

@dataclass(frozen=True)
class Finished:
    """A run that needed no query: `caught_up` (nothing to read) or its start batch read everything."""

    name: str
    batches: tuple[BatchResult, ...]  # the start batches (a query's run has `RunningPipeline.batches`); none: caught
    # up
    reached: dict[str, dict[int, int]]  # the offset the table reached per topic and partition

    @property
    def caught_up(self) -> bool:
        return not self.batches


def check_can_start(config: PipelineConfig) -> PipelineContext:
    """What a run checks first, without a Spark session: Kafka answers, the topics exist and may be read, the
    consumer group may be used, no other process runs the pipeline, the schema registry (if any) answers and takes
    the credentials, and the schemas, tables and silver section pass `onboard --dry-run`'s checks. These failures
    come in seconds, before anything is created; the context it returns (one listing of the topics, the schemas
    resolved) is what the run goes on with."""
    ctx = context.resolve(config, check=True)
    WriterLock(config.name, config.checkpoint_path, settings=config.spark).probe()
    registry.check_registry(config)
    return shape.of(config).check(ctx)


def check_all_can_start(configs: Sequence[PipelineConfig]) -> list[PipelineContext]:
    """`check_can_start` of each pipeline, several at once (each is mostly waiting on Kafka: 0.16 s a pipeline,
    16 s for 100 one after another). The first failure in the configs' order is raised."""
    return each(check_can_start, configs, CHECKS_AT_ONCE)


def prepare(ctx: PipelineContext, launch: Launch, *, write_start_batch: bool = True,
            more: Callable[[], bool] = lambda: False) -> Prepared:
    """Without a JVM, what the query's start can have before its session exists: the schemas and the tables
    (made with delta-rs), then the start batch where the checkpoint allows one, and more of them while `more()` says
    so (the JVM still boots). Run while the JVM boots."""
    started = time.monotonic()
    schemas = shape.of(ctx.config).prepare(ctx)
    batches: tuple[StartBatch, ...] = ()
    facts = launch.facts
    if schemas is not None and write_start_batch and launch.lock is not None and facts is not None \
            and facts.recorded is not None and start_batch.allowed(ctx.config, facts.checkpoint_started):
        batches = start_batch.write(ctx, schemas, facts.recorded, facts.bounds, more=more)
    return Prepared(schemas, batches, time.monotonic() - started)


def finish_without_jvm(ctx: PipelineContext, launch: Launch, exporter: Exporter | None = None) -> Finished | None:
    """End an available-now run whose start batches left nothing to read, without a JVM: the batches reported as a
    query's would be (MLflow run, consumer group, Prometheus series) and the writer lock released; None (nothing
    done) when there are none or records remain."""
    batches = launch.prepared.start_batches if launch.prepared is not None else ()
    if not batches or launch.lock is None or launch.facts is None:
        return None
    facts = launch.facts.after(batches)
    reached = caught_up(ctx, facts)
    if reached is None:
        return None
    config, lock = ctx.config, launch.lock
    prometheus = launch.prometheus or (watch(exporter, ctx, available_now=True) if exporter is not None else None)
    metrics = start_metrics(config, checkpoint.app_id(config.checkpoint_path, config.name, config.spark), True, None)
    lock.note_run(metrics.run_id, metrics.uri)
    if prometheus is not None:
        prometheus.metrics.set_state(PipelineState.RUNNING)
        prometheus.start()
    monitor = PipelineMonitor(config, ctx.kafka.client, metrics, None, prometheus)
    monitor.on_start_batches(batches)
    monitor.close()
    properties = facts.table.properties if facts.table is not None else None
    version = batches[-1].result.version
    if version is not None and properties is not None:
        checkpoint_if_due(config.table_path, version, dict(properties), config.storage_options())
    metrics.finish(RunStatus.FINISHED)
    if prometheus is not None:
        prometheus.stop(PipelineState.STOPPED)
    lock.release()
    return Finished(config.name, tuple(b.result for b in batches), reached)


def _warm_arrow() -> None:
    """pyarrow imports pandas at its first array (0.4 to 0.7 s of Python): on a thread while the checks wait on
    Kafka, not in the first batch (docs/performance.md#the-driver-side-fetch)."""
    def warm() -> None:
        import pyarrow as pa

        pa.array([0])

    threading.Thread(target=warm, name="warm-arrow", daemon=True).start()


def _decode_workers(available_now: bool, launches: Iterable[Launch]) -> None:
    """An available-now run with a backlog of `parallel.RUN_MIN` records or more decodes its start batches on every
    core: its decode workers start now, beside the tables' preparation (a smaller run decodes in this process:
    starting a worker costs about as much as it saves on 100,000 records, docs/performance.md)."""
    todo = sum(launch.facts.records_to_do() for launch in launches if launch.facts is not None)
    if available_now and todo >= parallel.RUN_MIN:
        parallel.warm()


def run(spark: SparkSession | None, target: PipelineConfig | PipelineContext, *, available_now: bool = False,
        exporter: Exporter | None = None) -> Finished | RunningPipeline:
    """Run one pipeline through the launch sequence (see the module) until it stops: caught up (available-now),
    failed, or asked to stop (SIGINT, SIGTERM); `ingestion.run_pipeline`. `spark`: the session to run in; None: the
    JVM boots here while the tables are prepared and the start batch is written. Both outcomes have `batches`."""
    clock = _Clock()
    _warm_arrow()
    open_store_early()  # its process opens the tracking store while the checks run, the start batch is written and
    # the JVM boots (a run that has nothing to do ends it unused)
    ctx = target if isinstance(target, PipelineContext) else check_can_start(target)
    clock.mark("checks")
    launch = watched(locked(ctx), ctx, exporter, available_now=available_now)
    clock.mark("lock and facts")
    _decode_workers(available_now, [launch])
    try:
        if available_now and (reached := caught_up(ctx, launch.facts)) is not None:
            where = ", ".join(f"{t}/{p}:{o}" for t, parts in sorted(reached.items()) for p, o in sorted(parts.items()))
            log.info("%s: caught up, nothing to do (the table holds every committed record before %s); no Spark "
                     "session started", ctx.name, where)
            if launch.prometheus is not None:
                launch.prometheus.stop(PipelineState.STOPPED)
            return Finished(ctx.name, (), reached)
        make_store_early()  # the run will write and open an MLflow run
        if spark is None and submitted():  # spark-submit's JVM runs already: nothing to do while it boots
            spark = pipelines_session(f"ingest-{ctx.name}", [ctx.config], record_classes=True)
        if spark is None and available_now and launch.facts is not None and start_batch.fits(
                ctx.config, launch.facts.recorded, launch.facts.bounds, launch.facts.checkpoint_started):
            # start batches read it all: perhaps no JVM
            launch = replace(launch, prepared=prepare(ctx, launch, more=lambda: True))
            if (finished := finish_without_jvm(ctx, launch, exporter)) is not None:
                log.info("%s: done, %d batches, %d rows written; no Spark session started", ctx.name,
                         len(finished.batches), sum(b.rows for b in finished.batches))
                return finished
        if spark is None:
            # One start batch beside the booting JVM, not more: on 2 cores the two share the CPU, and every start
            # batch after the first delayed the session by about as long as it took (docs/performance.md).
            with _meanwhile(lambda: launch.prepared or prepare(ctx, launch)) as preparing:
                spark = pipelines_session(f"ingest-{ctx.name}", [ctx.config], record_classes=True)
                clock.mark("JVM and session")
                launch = replace(launch, prepared=preparing.result())
                clock.mark("the start batch")
        handed, launch = launch, Launch(launch.facts, launch.prepared, None)  # the lock and series are the query's
        return pipeline.run(spark, ctx, available_now=available_now, exporter=exporter, launch=handed,
                            on_started=lambda _: clock.started(ctx.name, handed.prepared))
    except BaseException:
        if launch.prometheus is not None:
            launch.prometheus.stop(PipelineState.FAILED)
        raise
    finally:
        if launch.lock is not None:
            launch.lock.release()


def start(spark: SparkSession, target: PipelineConfig | PipelineContext, *, available_now: bool = False,
          with_metrics: bool = True, pool: str | None = None, exporter: Exporter | None = None) -> RunningPipeline:
    """Start one pipeline's query in `spark` and return at once (`ingestion.start_pipeline`): the launch sequence's
    checks, writer lock, facts and Prometheus series as `run` takes them, then the query's start; no start batch (the
    session exists already, as when `run` is given one). Stop it with `pipeline.stop`."""
    ctx = target if isinstance(target, PipelineContext) else check_can_start(target)
    launch = watched(locked(ctx), ctx, exporter, available_now=available_now)
    try:
        return pipeline.start(spark, ctx, available_now=available_now, with_metrics=with_metrics, pool=pool,
                              exporter=exporter, launch=launch)
    except BaseException:  # (the query's start released the lock already: released once more, harmlessly)
        _release(launch, PipelineState.FAILED)
        raise


def run_all(spark: SparkSession | None, targets: Sequence[PipelineConfig | PipelineContext], *,
            available_now: bool = False, exporter: Exporter | None = None) -> dict[str, RunOutcome]:
    """Run several pipelines through the launch sequence in one Spark application (`pipeline.run_all`); the ones
    an available-now run finds caught up, or finishes by their start batches, need no JVM. Returns pipeline name ->
    how it ended."""
    _warm_arrow()
    open_store_early()
    if all(isinstance(t, PipelineContext) for t in targets):
        contexts = [t for t in targets if isinstance(t, PipelineContext)]
    else:
        contexts = check_all_can_start([t.config if isinstance(t, PipelineContext) else t for t in targets])
    launches = {name: watched(launch, ctx, exporter, available_now=available_now)
                for ctx, (name, launch) in zip(contexts, _locked_all(contexts).items(), strict=True)}
    _decode_workers(available_now, launches.values())
    outcome: dict[str, RunOutcome] = {}
    try:
        if available_now:
            for ctx, reached in zip(contexts, each(lambda c: caught_up(c, launches[c.name].facts), contexts,
                                                   CHECKS_AT_ONCE), strict=True):
                if reached is not None:
                    outcome[ctx.name] = RunOutcome(RunStatus.FINISHED, "caught up, nothing to do")
                    _release(launches.pop(ctx.name))
            contexts = [c for c in contexts if c.name in launches]
            if not contexts:
                return outcome
        make_store_early()  # pipelines will write and open MLflow runs
        if spark is None and submitted():  # spark-submit's JVM runs already: nothing to do while it boots
            configs = [c.config for c in contexts]
            spark = pipelines_session("ingest-all", configs, pools=[pipeline.pool_name(c) for c in configs],
                                      streams=sum(1 + (c.silver is not None) for c in configs))
        if spark is None and available_now and all(
                (f := launches[c.name].facts) is not None and start_batch.fits(c.config, f.recorded, f.bounds,
                                                                                 f.checkpoint_started)
                for c in contexts):  # start batches read it all: perhaps no JVM at all
            for ctx, prepared in zip(contexts, each(lambda c: prepare(c, launches[c.name], more=lambda: True),
                                                    contexts, STARTS_AT_ONCE), strict=True):
                launches[ctx.name] = replace(launches[ctx.name], prepared=prepared)
            contexts = _finished(contexts, launches, outcome, exporter)
            if not contexts:
                return outcome
        if spark is None:
            session_ready = threading.Event()

            def prepare_all() -> None:
                for ctx in contexts:  # start batches only until the session is up: the queries read the rest
                    launch = launches[ctx.name]
                    if launch.prepared is None:
                        launches[ctx.name] = replace(launch, prepared=prepare(
                            ctx, launch, write_start_batch=not session_ready.is_set()))

            with _meanwhile(prepare_all) as preparing:
                configs = [c.config for c in contexts]
                spark = pipelines_session("ingest-all", configs, pools=[pipeline.pool_name(c) for c in configs],
                                          record_classes=True,
                                          streams=sum(1 + (c.silver is not None) for c in configs))
                session_ready.set()
                preparing.result()
        if available_now:
            contexts = _finished(contexts, launches, outcome, exporter)
        handed = [launches.pop(c.name) for c in contexts]  # their locks are the queries' now
        outcome.update(pipeline.run_all(spark, contexts, available_now=available_now, exporter=exporter,
                                        launches=handed) if contexts else {})
        return outcome
    finally:
        for launch in launches.values():
            _release(launch)


def _finished(contexts: list[PipelineContext], launches: dict[str, Launch], outcome: dict[str, RunOutcome],
              exporter: Exporter | None) -> list[PipelineContext]:
    """Of an available-now run's pipelines, those whose start batch has not caught them up; the others are
    finished (`finish_without_jvm`) and in `outcome`."""
    left = []
    for ctx, done in zip(contexts, each(lambda c: finish_without_jvm(c, launches[c.name], exporter), contexts,
                                        STARTS_AT_ONCE), strict=True):
        if done is None:
            left.append(ctx)
            continue
        launches.pop(ctx.name)
        rows = sum(b.rows for b in done.batches)
        outcome[ctx.name] = RunOutcome(RunStatus.FINISHED, f"finished, {rows} rows, no Spark session needed")
    return left


def _locked_all(contexts: Sequence[PipelineContext]) -> dict[str, Launch]:
    """`facts.locked` of each pipeline, several at once; when one fails, the locks the others took are released
    and the first failure in the contexts' order is raised."""
    with ThreadPoolExecutor(max(1, min(CHECKS_AT_ONCE, len(contexts))), thread_name_prefix="launch") as pool:
        futures = [pool.submit(locked, ctx) for ctx in contexts]
    failures = [f.exception() for f in futures if f.exception() is not None]
    if failures:
        for future in futures:
            if future.exception() is None:
                _release(future.result())
        raise failures[0]  # type: ignore[misc]
    return {ctx.name: future.result() for ctx, future in zip(contexts, futures, strict=True)}


def _release(launch: Launch, state: PipelineState = PipelineState.STOPPED) -> None:
    """The lock released and the series stopped (in `state`) of a launch the queries did not take."""
    if launch.lock is not None:
        launch.lock.release()
    if launch.prometheus is not None:
        launch.prometheus.stop(state)


class _Clock:
    """The launch's phases, timed in the launching thread, and the one line that tells them."""

    def __init__(self) -> None:
        self._at = time.monotonic()
        self.phases: list[tuple[str, float]] = []

    def mark(self, phase: str) -> None:
        now = time.monotonic()
        self.phases.append((phase, now - self._at))
        self._at = now

    def started(self, name: str, prepared: Prepared | None) -> None:
        """`<pipeline>: query started 8.1 s after the process: checks 0.42 s, ...` (INFO)."""
        self.mark("query start")
        age = process_age()
        beside = ""
        if prepared is not None:
            rows = sum(b.result.rows for b in prepared.start_batches)
            batches = f", {len(prepared.start_batches)} start batch(es) of {rows:,} rows" if rows else ""
            beside = f" (beside it: schemas and tables{batches} in {prepared.seconds:.1f} s)"
        shown = ", ".join(f"{phase} {seconds:.2f} s{beside if phase == 'JVM and session' else ''}"
                          for phase, seconds in self.phases if seconds >= 0.005)
        log.info("%s: query started%s: %s", name, f" {age:.1f} s after the process" if age is not None else "",
                 shown)


def each(work: Callable[[In], Out], items: Sequence[In], width: int) -> list[Out]:
    """`work` of each item, `width` at a time; the first failure in the items' order is raised."""
    if len(items) <= 1:
        return [work(item) for item in items]
    with ThreadPoolExecutor(min(width, len(items)), thread_name_prefix="launch") as pool:
        return list(pool.map(work, items))


@contextlib.contextmanager
def _meanwhile(work: Callable[[], Out]) -> Iterator[concurrent.futures.Future[Out]]:
    """`work` on a thread while the caller's block runs (a JVM boots in the main thread, which alone may set the
    signal dispositions the JVM keeps); its result, or its error, from the future the block waits on."""
    with ThreadPoolExecutor(1, thread_name_prefix="prepare") as pool:
        yield pool.submit(work)
