"""Wiring one pipeline: Kafka source -> foreachBatch(BronzeWriter) -> checkpoint, with metrics per batch."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from ingestion import kafka
from ingestion.config import PipelineConfig
from ingestion.delta import ledger
from ingestion.delta.log_checkpoints import BackgroundCheckpoints
from ingestion.errors import IngestionError, KafkaAccessError, one_line
from ingestion.kafka import access
from ingestion.runtime import listener
from ingestion.stream import checkpoint, context, handover, shape, source
from ingestion.stream.batch import BatchResult
from ingestion.stream.context import PipelineContext
from ingestion.stream.facts import Facts, Launch, Prepared, locked, read_facts
from ingestion.stream.followers import Follower, LogCheckpoints, Maintenance
from ingestion.stream.lock import WriterLock
from ingestion.stream.maintenance import ScheduledMaintenance
from ingestion.stream.metrics import RunMetrics, start_metrics
from ingestion.stream.monitor import PipelineMonitor, Progress
from ingestion.stream.prometheus import Exporter, LagRefresher, PipelineState, watch
from ingestion.stream.writer import BronzeWriter
from ingestion.units import spark_interval

log = logging.getLogger(__name__)

# How one of our errors raised on an executor or in foreachBatch appears in Spark's failure text.
_OUR_ERROR = re.compile(r"^\s*ingestion\.errors\.\w+: (.*)$")


class RunStatus(StrEnum):
    """How a run ended, as MLflow names a run's end."""

    FINISHED = "FINISHED"
    FAILED = "FAILED"
    KILLED = "KILLED"


@dataclass(frozen=True)
class RunOutcome:
    """How one pipeline of `run_all` ended, and why when it failed."""

    status: RunStatus
    reason: str = ""

    def __str__(self) -> str:
        return f"{self.status}: {self.reason}" if self.reason else str(self.status)

    def said(self) -> str:
        """How `run --all` tells it: a run ended by Ctrl-C or SIGTERM (MLflow's KILLED) was stopped on request."""
        said = {RunStatus.FINISHED: "finished", RunStatus.FAILED: "failed",
                RunStatus.KILLED: "stopped on request"}[self.status]
        if self.status is RunStatus.FINISHED and self.reason:
            return self.reason
        return f"{said}: {self.reason}" if self.reason else said


@dataclass
class RunningPipeline:
    context: PipelineContext
    query: StreamingQuery
    app_id: str
    metrics: RunMetrics | None
    monitor: PipelineMonitor
    batches: list[BatchResult]
    followers: tuple[Follower, ...] = ()  # what follows each commit (`followers`), as the pipeline's shape says
    lock: WriterLock | None = None
    stopped_on_request: bool = False
    writer: BronzeWriter | None = None
    prometheus: LagRefresher | None = None
    available_now: bool = False
    stopped_in: float | None = None  # seconds `stop` took, once stopped

    @property
    def config(self) -> PipelineConfig:
        return self.context.config

    @property
    def log_checkpoints(self) -> BackgroundCheckpoints | None:
        return next((f.checkpoints for f in self.followers if isinstance(f, LogCheckpoints)), None)

    @property
    def maintenance(self) -> ScheduledMaintenance | None:
        return next((f.schedule for f in self.followers if isinstance(f, Maintenance)), None)

    def failure(self) -> str | None:
        """Why a follower of the run cannot go on (`silver: <why>`), once one cannot."""
        return next((f"{f.what}: {one_line(error)}" for f in self.followers if (error := f.failure()) is not None),
                    None)

    def stop_between_batches(self, timeout: float = 600.0) -> None:
        """Let the batch being written finish, make the next one end the query before it writes anything, and
        stop the query: no write is interrupted (a stopped write is redone exactly once, but noisily)."""
        self.stopped_on_request = True
        if self.writer is not None:
            self.writer.stop_requested.set()
            self.writer.idle.wait(timeout)
        with contextlib.suppress(StreamingQueryException):
            self.query.stop()


def start(spark: SparkSession, target: PipelineConfig | PipelineContext, *, available_now: bool = False,
          with_metrics: bool = True, pool: str | None = None, exporter: Exporter | None = None,
          launch: Launch | None = None) -> RunningPipeline:
    """Start the streaming query of one pipeline and return at once. Kafka is asked first (the brokers and the
    topics, unless `target` is a context that was: `launch.check_can_start`), so a pipeline that cannot run creates
    nothing; then the writer lock is taken (a second writer of the pipeline is refused at once) and the run's facts
    read under it, unless the launch sequence (`launch`) did both and hands them down with what it prepared. A
    failure after that releases the lock and closes the MLflow run as FAILED. With an `exporter`, the pipeline's
    Prometheus series follow it from `starting`."""
    prometheus = None
    try:
        ctx = context.of(target, check=True)
        prometheus = launch.prometheus if launch is not None and launch.prometheus is not None else \
            watch(exporter, ctx, available_now=available_now) if exporter is not None else None
        prepared = launch.prepared if launch is not None else None
        if launch is None or launch.lock is None:  # not held since the launch sequence (a checkpoint only the JVM
            launch = locked(ctx, spark)  # reaches, or a caller without one): taken now, with the session
        lock = launch.lock
        assert lock is not None  # (`locked` with a session always locks)
        try:
            facts = launch.facts if launch.facts is not None else read_facts(ctx)  # read under the lock
            running = _start(spark, ctx, facts, prepared or Prepared(None), available_now=available_now,
                             with_metrics=with_metrics, pool=pool, prometheus=prometheus)
        except BaseException:
            lock.release()
            raise
    except BaseException:
        if exporter is not None:  # a pipeline that cannot start is shown failed, whatever stopped it
            failed = prometheus.metrics if prometheus is not None else exporter.pipeline(target.name, None)
            failed.set_state(PipelineState.FAILED)
        raise
    running.lock = lock
    if prometheus is not None:
        running.prometheus = prometheus
        prometheus.metrics.set_state(PipelineState.RUNNING)
        prometheus.start()
    if running.metrics is not None:  # for the next writer, should this one die
        lock.note_run(running.metrics.run_id, running.metrics.uri)
    return running


STARTS_AT_ONCE = 4  # pipelines `run_all` starts at once


def pool_name(config: PipelineConfig | PipelineContext) -> str:
    """The FAIR scheduler pool of a pipeline's jobs under `run --all` (declared by the session, `get_session`'s
    `pools`), so that a busy pipeline's batches do not queue the others' behind them."""
    return f"pipeline-{config.name}"


def _started_in_pool(spark: SparkSession, stream: Any, pool: str | None) -> StreamingQuery:
    """Start the query with `spark.scheduler.pool` set in the starting thread: the query's thread inherits it, and
    every job of its batches runs in that pool."""
    if pool is None:
        return stream.start()
    context = spark.sparkContext
    previous = context.getLocalProperty("spark.scheduler.pool")
    context.setLocalProperty("spark.scheduler.pool", pool)
    try:
        return stream.start()
    finally:
        context.setLocalProperty("spark.scheduler.pool", previous)  # type: ignore[arg-type]


def _start(spark: SparkSession, ctx: PipelineContext, facts: Facts, prepared: Prepared, *, available_now: bool,
           with_metrics: bool, pool: str | None = None, prometheus: LagRefresher | None = None) -> RunningPipeline:
    config, tables = ctx.config, shape.of(ctx.config)
    schemas = tables.ready(spark, ctx, facts, prepared)
    location = config.checkpoint_path
    resumed = facts.checkpoint_started if facts.checkpoint_started is not None else \
        checkpoint.has_progress(location, config.spark, spark)
    facts = tables.recovered(spark, config, facts, resumed=resumed)
    app_id = checkpoint.app_id(location, config.name, config.spark, spark)
    facts = facts.after(prepared.start_batches)
    recorded = _recorded_offsets(spark, config, facts) if available_now or not resumed else {}
    starting = None if resumed else _resume_from_table(ctx, recorded)
    if config.source.start_from_group:
        starting = _start_from_group(ctx, starting, resumed=resumed, planned=facts.group_start)
    log.info("%s: %s checkpoint %s, txnAppId %s%s", config.name, "resuming" if resumed else "new", location,
             app_id, f", starting from the table's offsets {starting}" if starting else "")
    metrics = start_metrics(config, app_id, available_now, starting) if with_metrics else None
    try:
        progress = Progress(facts.records_to_do(), pipeline=config.name) if available_now else None
        monitor = PipelineMonitor(config, ctx.kafka.client, metrics, progress, prometheus)
        batches: list[BatchResult] = []
        followers = tables.followers(spark, ctx, facts, metrics=metrics, pool=pool, prometheus=prometheus,
                                     available_now=available_now)

        def on_batch(result: BatchResult) -> None:
            batches.append(result)
            monitor.on_batch(result)
            for follower in followers:
                follower.committed(result)

        monitor.on_start_batches(prepared.start_batches)
        for start_batch in prepared.start_batches:
            batches.append(start_batch.result)
            for follower in followers:
                follower.committed(start_batch.result)

        writer = BronzeWriter(config=config, app_id=app_id, resolver=schemas, on_batch=on_batch,
                              on_topics=ctx.saw, kafka_client=ctx.kafka.client, context=ctx)
        writer.jvm_path(spark)  # decide (and log) how records are decoded; value.decoder jvm fails here if it cannot
        listener.routes(spark).add(config.name, monitor)
        kafka_rows = source.read_stream(spark, ctx, starting)
        first = min(facts.records_to_do(), config.source.max_offsets_per_trigger or 2**62)
        if pool is None and first > writer.max_driver_offsets:
            # the first batch is a Spark job (more than the driver-side path takes) of a session's only pipeline:
            # its plan is built beside the query's start (run --all's pipelines start several at once already)
            _beside(f"{config.name}: the first batch's plan", lambda: writer.plan_ahead(kafka_rows))
        stream = (kafka_rows.writeStream
                  .queryName(config.name).foreachBatch(writer).option("checkpointLocation", location))
        stream = (stream.trigger(availableNow=True) if available_now
                  else stream.trigger(processingTime=spark_interval(config.sink.trigger)))
        query = _started_in_pool(spark, stream, pool)
        if not available_now:
            for follower in followers:
                follower.began()
    except BaseException:
        listener.routes(spark).remove(config.name)
        if metrics is not None:
            metrics.finish(RunStatus.FAILED)
        raise
    return RunningPipeline(ctx, query, app_id, metrics, monitor, batches, followers, writer=writer,
                           available_now=available_now)


def _beside(what: str, work: Callable[[], object]) -> None:
    """`work` on a thread of its own, beside the query's start (the JVM's driver runs one thread of it at a time,
    the machine has more cores); a failure is only logged: the work is done again where it is needed."""
    def run() -> None:
        started = time.monotonic()
        try:
            work()
        except Exception as exc:  # noqa: BLE001 - ahead of time only; the batch that needs it does it again
            log.debug("%s: not ahead: %s", what, one_line(exc))
            return
        log.debug("%s: ahead in %.2f s", what, time.monotonic() - started)

    threading.Thread(target=run, name="ahead", daemon=True).start()


def run(spark: SparkSession, target: PipelineConfig | PipelineContext, *, available_now: bool = False,
        exporter: Exporter | None = None, launch: Launch | None = None,
        on_started: Callable[[RunningPipeline], None] | None = None) -> RunningPipeline:
    """Run a pipeline's query in `spark` until it stops: caught up (available-now), failed, or asked to stop
    (SIGINT, SIGTERM). The launch sequence (`launch.run`, the public `ingestion.run_pipeline`) calls it with what it
    read and prepared; called directly, it reads them itself."""
    with _stop_signals() as stop_requested:
        # a signal meanwhile stops it at once
        running = start(spark, target, available_now=available_now, exporter=exporter, launch=launch)
        if on_started is not None:
            on_started(running)
        ctx = running.context
        status = RunStatus.FAILED
        try:
            # Wait in slices: PySpark's own SIGINT handler would call into the JVM while the main thread is
            # inside awaitTermination, which py4j cannot do; ours only sets a flag that is checked here.
            while not running.query.awaitTermination(1):
                if stop_requested.is_set():
                    log.info("%s: stopping on request, after the batch being written", ctx.name)
                    running.stop_between_batches()
                    break
                if running.monitor.refused is not None:
                    running.stop_between_batches()
                    raise _failed(ctx, running.monitor.refused)
                if (failed := running.failure()) is not None:
                    running.stop_between_batches()
                    raise IngestionError(f"pipeline {ctx.name!r} failed: {failed}")
            status = RunStatus.KILLED if stop_requested.is_set() else RunStatus.FINISHED
        except StreamingQueryException as exc:
            if not stop_requested.is_set():
                log.debug("%s: the query failed: %s", ctx.name, exc)  # Spark's whole message, under -v
                raise _failed(ctx, exc) from None
            status = RunStatus.KILLED  # the query ended where the next batch would have started
        finally:
            stop(spark, running, status)
        if (failed := running.failure()) is not None:
            raise IngestionError(f"pipeline {ctx.name!r}: bronze is done, {failed}")
    return running


def run_all(spark: SparkSession, targets: Sequence[PipelineConfig | PipelineContext], *,
            available_now: bool = False, exporter: Exporter | None = None,
            launches: Sequence[Launch] | None = None) -> dict[str, RunOutcome]:
    """Run several pipelines in one Spark application, a query each (own checkpoint, own txnAppId), each query's
    jobs in its own FAIR pool (`pool_name`; declare them with `get_session(pools=...)`). A pipeline that fails is
    reported by name and stopped; the others go on. Returns pipeline name -> how it ended."""
    outcome: dict[str, RunOutcome] = {}
    running = _start_all(spark, targets, outcome, available_now=available_now, exporter=exporter,
                         launches=launches)

    def ended(r: RunningPipeline, result: RunOutcome) -> None:
        outcome[r.config.name] = result
        stop(spark, r, result.status)
        if result.status is RunStatus.FINISHED and (failed := r.failure()) is not None:
            result = outcome[r.config.name] = RunOutcome(RunStatus.FAILED, failed)
        if result.status is RunStatus.FAILED:
            log.error("%s failed (the other pipelines go on): %s", r.config.name, result.reason)

    def record_ended() -> None:
        """Report each query that has ended since the last look, by name."""
        for r in running:
            if r.config.name not in outcome and r.query.isActive and r.monitor.refused is not None:
                r.stop_between_batches()
                ended(r, RunOutcome(RunStatus.FAILED, str(r.monitor.refused)))
            if r.config.name not in outcome and (failed := r.failure()) is not None:
                r.stop_between_batches()
                ended(r, RunOutcome(RunStatus.FAILED, failed))
            if r.config.name in outcome or r.query.isActive:
                continue
            error = r.query.exception()
            ended(r, RunOutcome(RunStatus.FAILED, failure_reason(error, r.context)) if error
                  else RunOutcome(RunStatus.FINISHED))

    with _stop_signals() as stop_requested:
        said = time.monotonic()
        while any(r.query.isActive for r in running) and not stop_requested.is_set():
            with contextlib.suppress(StreamingQueryException):  # a failed query is reported by name below
                spark.streams.awaitAnyTermination(1)
            record_ended()
            spark.streams.resetTerminated()
            if time.monotonic() - said >= COMBINED_EVERY:
                log.info("%s", combined_progress(running, outcome, len(targets)))
                said = time.monotonic()
        record_ended()  # a query that ended between the last look and the loop's condition
        for r in running:
            if r.config.name not in outcome:
                r.stop_between_batches()
                ended(r, RunOutcome(RunStatus.KILLED))
    return outcome


def _start_all(spark: SparkSession, targets: Sequence[PipelineConfig | PipelineContext],
               outcome: dict[str, RunOutcome], *, available_now: bool, exporter: Exporter | None,
               launches: Sequence[Launch] | None) -> list[RunningPipeline]:
    """Start every pipeline, `STARTS_AT_ONCE` at a time: a start is mostly waiting (on the JVM, Kafka, the
    tracking store), and 100 one after another took 77 s. A pipeline that cannot start is in `outcome`; the
    others run. Any other error stops the pipelines started and is raised."""
    started: list[RunningPipeline] = []
    with ThreadPoolExecutor(max(1, min(STARTS_AT_ONCE, len(targets))), thread_name_prefix="start") as pool:
        handed = list(launches) if launches is not None else [None] * len(targets)
        futures: list[Future[RunningPipeline]] = [
            pool.submit(start, spark, target, available_now=available_now, pool=pool_name(target),
                        exporter=exporter, launch=launch) for target, launch in zip(targets, handed, strict=True)]
        unexpected: BaseException | None = None
        for target, future in zip(targets, futures, strict=True):
            try:
                started.append(future.result())
            except IngestionError as exc:
                outcome[target.name] = RunOutcome(RunStatus.FAILED, one_line(exc))
                log.error("%s: could not start: %s", target.name, outcome[target.name].reason)
            except BaseException as exc:  # noqa: BLE001 - raised below, once the others are stopped
                unexpected = unexpected or exc
                for waiting in futures:
                    waiting.cancel()
    if unexpected is not None:
        for r in started:
            r.stop_between_batches()
            stop(spark, r, RunStatus.FAILED)
        raise unexpected
    return started


COMBINED_EVERY = 30.0  # seconds between the combined progress lines of `run --all`


def combined_progress(running: list[RunningPipeline], outcome: dict[str, RunOutcome], total: int) -> str:
    """One line for all pipelines of `run --all`: how many run, batches and rows so far, total lag and the
    pipelines furthest behind (`run --all: 20 pipelines, 19 running, 1 failed; 340 batches, 52,000 rows;
    lag 1,200 records (orders 1,000, payments 200)`)."""
    lag = {r.config.name: sum(n for parts in r.monitor.last_lag.values() for n in parts.values()) for r in running}
    behind = sorted(((n, name) for name, n in lag.items() if n), reverse=True)[:3]
    failed = sum(1 for o in outcome.values() if o.status is RunStatus.FAILED)
    active = sum(1 for r in running if r.query.isActive)
    batches = sum(len(r.batches) for r in running)
    rows = sum(b.rows for r in running for b in r.batches if b.committed)
    worst = f" ({', '.join(f'{name} {n:,}' for n, name in behind)})" if behind else ""
    return (f"run --all: {total} pipelines, {active} running, {failed} failed; {batches:,} batches, {rows:,} rows; lag "
            f"{sum(lag.values()):,} records{worst}")


@contextlib.contextmanager
def _stop_signals() -> Iterator[threading.Event]:
    """SIGINT and SIGTERM set an event instead of raising, while a pipeline runs in the main thread."""
    requested = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield requested
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda signum, frame: requested.set())
    try:
        yield requested
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stop(spark: SparkSession, running: RunningPipeline, status: RunStatus = RunStatus.FINISHED) -> None:
    """Stop the query (if it still runs), report its last batches, finish a Delta checkpoint being written and
    close the MLflow run."""
    started = time.monotonic()
    if running.query.isActive:
        running.query.stop()
    for follower in running.followers:  # a finished available-now run drains silver first
        follower.close(drain=status is RunStatus.FINISHED and running.available_now)
    if running.writer is not None:
        running.writer.close()
    listener.wait_for_listener_events(spark)
    running.monitor.drain()
    listener.routes(spark).remove(running.context.name)
    running.monitor.close()
    if running.monitor.progress is not None:
        running.monitor.progress.close()
    if running.metrics is not None:
        running.metrics.finish(status)
    if running.prometheus is not None:
        running.prometheus.stop(PipelineState.FAILED if status is RunStatus.FAILED else PipelineState.STOPPED)
    if running.lock is not None:
        running.lock.release()
    running.stopped_in = time.monotonic() - started


def _recorded_offsets(spark: SparkSession, config: PipelineConfig, facts: Facts) -> dict[str, dict[str, int]]:
    """Where the table's ledger says the topic's partitions continue (a new checkpoint resumes there, an
    available-now run counts its records to do from there): the facts' (read with delta-rs), or read by Delta in
    the JVM where delta-rs cannot read the table (seconds in a new JVM, growing with the table's versions)."""
    if facts.recorded is not None:
        return {t: dict(parts) for t, parts in facts.recorded.items()}
    if ledger.table_version(spark, config.table_path) == 0:
        return {}
    return ledger.next_offsets(ledger.history(spark, config.table_path))


def failure_reason(exc: Exception, ctx: PipelineContext | None = None) -> str:
    """The line of a Spark failure that says why: one of ours (a DecodeError names topic, partition and offset),
    or Kafka's Java client refusing the pipeline (named as `kafka.access` names it), or Spark's first line."""
    text = str(exc)
    for line in text.splitlines():
        found = _OUR_ERROR.search(line)
        if found:
            return found.group(1)
    refused = _refusal(text, ctx)
    if refused is not None:
        return str(refused)
    return one_line(exc)


def _refusal(text: str, ctx: PipelineContext | None) -> KafkaAccessError | None:
    if ctx is None:
        return access.from_java(text, {})
    return access.from_java(text, ctx.kafka.client, next(iter(ctx.topics), None), ctx.config.consumer_group)


def _failed(ctx: PipelineContext, cause: Exception) -> IngestionError:
    """The error `run` raises for a query that failed: a KafkaAccessError when Kafka refused the pipeline."""
    if isinstance(cause, KafkaAccessError):
        return KafkaAccessError(f"pipeline {ctx.name!r} failed: {cause}", denied=cause.denied,
                                resource=cause.resource)
    refused = None if _OUR_ERROR.search(str(cause)) else _refusal(str(cause), ctx)
    if refused is not None:
        return KafkaAccessError(f"pipeline {ctx.name!r} failed: {refused}", denied=refused.denied,
                                resource=refused.resource)
    return IngestionError(f"pipeline {ctx.name!r} failed: {failure_reason(cause, ctx)}")


def _resume_from_table(ctx: PipelineContext, recorded: dict[str, dict[str, int]]) -> str | None:
    """With no checkpoint progress but offsets recorded in the table, resume after them, not at startingOffsets:
    a lost checkpoint must cause neither duplicates nor a gap."""
    if not recorded:
        return None
    # Spark wants every partition it reads named: partitions (and topics) the table has never seen start at the
    # earliest offset (-2), as Spark's JSON form allows; topics no longer read are left out. The partitions are
    # the context's listing, asked again now (one metadata request): a topic a pattern matches, or a partition,
    # may have come since the command's listing (while a start batch was written and the JVM booted), and Spark's
    # first batch assigns from what the brokers hold when the query starts.
    ctx.saw(kafka.pipeline_partitions(ctx.config, ctx.kafka, missing_ok=True))
    positions = {topic: {str(p): recorded.get(topic, {}).get(str(p), -2) for p in partitions}
                 for topic, partitions in ctx.partitions.items()}
    return json.dumps(positions) if positions else None


def _start_from_group(ctx: PipelineContext, starting: str | None, *, resumed: bool,
                      planned: handover.GroupStart | None) -> str | None:
    """With source.startFromGroup: the group's positions for a new checkpoint of a table that records no offsets
    (`handover`), else the positions already decided, the key ignored with one line saying why."""
    group = ctx.config.source.start_from_group
    if resumed or starting is not None:
        log.info("%s: source.startFromGroup %r ignored: %s", ctx.name, group,
                 "the checkpoint goes on" if resumed else "the table records offsets, it resumes from them")
        return starting
    start = planned or handover.plan(ctx)
    log.info("%s: taking over from consumer group %r: %s", ctx.name, group,
             "; ".join(p.describe() for p in start.partitions))
    return start.positions()
