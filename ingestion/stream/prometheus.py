"""Prometheus metrics of `ingest run` (docs/operations.md#prometheus): one registry and one endpoint per process,
a set of labelled series per pipeline.

The batch series (counters, the duration histogram, the last commit) are fed from the writer's `BatchResult`, the
same object MLflow's metrics come from (`PipelineMonitor.on_batch`). The lag series are not taken from batches: a
pipeline that stopped committing reports no batch, so a thread of each pipeline asks Kafka for its end offsets
every `metrics.prometheus.lagInterval` and sets lag against the offsets the table holds (as `ingest status`
counts them), at zero too, so that "no data" never hides "stuck".
"""

from __future__ import annotations

import datetime as dt
import enum
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, Histogram, push_to_gateway, start_http_server

from ingestion import kafka
from ingestion.config import PipelineConfig
from ingestion.delta import routed, rs_reads
from ingestion.delta.ledger import BatchKind
from ingestion.delta.reader import JvmFreeReadError
from ingestion.errors import IngestionError, one_line
from ingestion.stream.batch import BatchResult
from ingestion.stream.context import PipelineContext
from ingestion.units import duration_seconds

log = logging.getLogger(__name__)

Positions = dict[str, dict[int, int]]  # topic -> partition -> the next offset the table expects

# Batch durations from a fraction of a second (a small trigger) to minutes (a backlog under maxOffsetsPerTrigger).
DURATION_BUCKETS = (0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
PUSH_TIMEOUT = 10.0  # seconds a Pushgateway may take


class PipelineState(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    FAILED = "failed"
    STOPPED = "stopped"


class Exporter:
    """The process's registry (its own, not prometheus_client's global one) and, once `serve` is called, the HTTP
    endpoint serving it; `pipeline` adds a pipeline's series."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r, per, part = self.registry, ["pipeline"], ["pipeline", "topic", "partition"]
        self.lag_records = Gauge("ingest_lag_records", "Committed records in Kafka the table does not hold yet",
                                 part, registry=r)
        self.lag_seconds = Gauge("ingest_lag_seconds", "Age of the oldest record the table does not hold yet "
                                 "(0 when caught up)", part, registry=r)
        self.kafka_end = Gauge("ingest_kafka_end_offset", "Kafka's end offset (the next offset a record gets)",
                               part, registry=r)
        self.table_offset = Gauge("ingest_table_offset", "The next offset the table expects", part, registry=r)
        self.batches = Counter("ingest_batches", "Batches committed to the table", per, registry=r)
        self.skipped = Counter("ingest_skipped_batches", "Batches Delta skipped as already committed (a replay)",
                               per, registry=r)
        self.rows = Counter("ingest_rows", "Rows written to the table", per, registry=r)
        self.quarantined = Counter("ingest_quarantined_rows", "Rows written to the quarantine table", per,
                                   registry=r)
        self.expectation_rows = Counter("ingest_expectation_rows", "Rows a data-quality rule was checked on, by "
                                        "outcome (passed, violated)", [*per, "rule", "outcome"], registry=r)
        self.value_bytes = Counter("ingest_value_bytes", "Bytes of Kafka record values read", per, registry=r)
        self.duration = Histogram("ingest_batch_duration_seconds", "Time to write one batch", per,
                                  buckets=DURATION_BUCKETS, registry=r)
        self.last_commit = Gauge("ingest_last_commit_timestamp_seconds", "When this process last committed a "
                                 "batch (its start time until then)", per, registry=r)
        self.version = Gauge("ingest_table_version", "The table's version after the last commit", per, registry=r)
        self.trigger = Gauge("ingest_trigger_interval_seconds", "The stream's trigger interval", per, registry=r)
        self.refreshed = Gauge("ingest_lag_refresh_timestamp_seconds", "When the lag was last read from Kafka", per,
                               registry=r)
        self.refresh_failures = Counter("ingest_lag_refresh_failures", "Lag refreshes Kafka did not answer", per,
                                        registry=r)
        self.state = Enum("ingest_pipeline_state", "The pipeline's state", per,
                          states=[s.value for s in PipelineState], registry=r)
        self.silver_lag_versions = Gauge("ingest_silver_lag_versions", "Bronze versions the silver table has not "
                                         "merged yet", per, registry=r)
        self.silver_lag_seconds = Gauge("ingest_silver_lag_seconds", "Age of the oldest bronze version the silver "
                                        "table has not merged (0 when it holds them all)", per, registry=r)
        self.silver_changes = Counter("ingest_silver_changes", "Changes merged into the silver table", per,
                                      registry=r)
        self.silver_rows = Counter("ingest_silver_rows", "Silver rows inserted, updated and deleted by merges",
                                   [*per, "action"], registry=r)
        self.silver_step_seconds = Gauge("ingest_silver_step_seconds", "How long the silver table's last step "
                                         "lasted", per, registry=r)
        self.silver_slow_steps = Gauge("ingest_silver_slow_steps", "Silver steps of this run that lasted longer "
                                       "than silver.trigger (silver fell behind bronze at each)", per, registry=r)
        self.silver_cross_partition = Counter("ingest_silver_cross_partition_keys", "Keys whose changes came "
                                              "from two or more Kafka partitions (no order between them)", per,
                                              registry=r)
        # a routed pipeline's tables (docs/routing.md#operating-a-routed-pipeline): one series per route table
        routes = ["pipeline", "table"]
        self.route_rows = Counter("ingest_route_rows", "Rows written to a route table of a routed pipeline", routes,
                                  registry=r)
        self.route_version = Gauge("ingest_route_table_version", "A route table's version after its last commit",
                                   routes, registry=r)
        self.route_last_commit = Gauge("ingest_route_last_commit_timestamp_seconds", "When a route table last had "
                                       "a commit with rows (its ledger's, then this process's)", routes, registry=r)
        self._server: Any = None
        self.pipelines: list[str] = []
        self.address: tuple[str, int] | None = None

    def serve(self, host: str, port: int) -> tuple[str, int]:
        """Serve /metrics on host:port (port 0 would pick a free one); the address it listens on."""
        try:
            server, _ = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise IngestionError(f"metrics.prometheus: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        self._server = server
        self.address = (host, int(server.server_address[1]))
        log.info("prometheus metrics on http://%s:%d/metrics", *self.address)
        return self.address

    def pipeline(self, name: str, trigger_seconds: float | None) -> PipelineMetrics:
        self.pipelines.append(name)
        return PipelineMetrics(self, name, trigger_seconds)

    def push(self, gateway: str, instance: str) -> None:
        """Push every series to a Pushgateway under job `ingest` and this `instance` (a run that ends before any
        scrape, `--available-now` under a scheduler). A failure costs a warning: the run's work is done. A run
        that started no pipeline (all caught up) pushes nothing, leaving the last run's series in place."""
        if not self.pipelines:
            return
        try:
            push_to_gateway(gateway, job="ingest", registry=self.registry, grouping_key={"instance": instance},
                            timeout=PUSH_TIMEOUT)
            log.info("metrics pushed to the Pushgateway for instance %r", instance)
        except (OSError, ValueError) as exc:
            log.warning("metrics not pushed to the Pushgateway (instance %r): %s", instance, exc)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class PipelineMetrics:
    """One pipeline's series in the exporter's registry."""

    def __init__(self, exporter: Exporter, name: str, trigger_seconds: float | None) -> None:
        self.exporter = exporter
        self.name = name
        self._partitions: set[tuple[str, str]] = set()
        self._ends: dict[tuple[str, int], int] = {}  # Kafka's end offsets as the last refresh read them
        self._lock = threading.Lock()
        self._committed_tables: set[str] = set()  # route tables this process committed to (their series are newer)
        self.set_state(PipelineState.STARTING)
        e = exporter
        for counter in (e.batches, e.skipped, e.rows, e.quarantined, e.value_bytes, e.refresh_failures):
            counter.labels(name)  # present at 0 from the start: rate() needs the first sample
        e.duration.labels(name)
        e.last_commit.labels(name).set(time.time())
        if trigger_seconds is not None:
            e.trigger.labels(name).set(trigger_seconds)

    def set_state(self, state: PipelineState) -> None:
        self.exporter.state.labels(self.name).state(state.value)

    def batch(self, result: BatchResult) -> None:
        """One batch's result, as the writer reported it."""
        e, name = self.exporter, self.name
        if not result.committed:
            e.skipped.labels(name).inc()
            return
        e.batches.labels(name).inc()
        e.rows.labels(name).inc(result.rows)
        e.quarantined.labels(name).inc(result.quarantined)
        e.value_bytes.labels(name).inc(result.bytes)
        for rule, violated in result.violated.items():
            e.expectation_rows.labels(name, rule, "violated").inc(violated)
            e.expectation_rows.labels(name, rule, "passed").inc(result.checked - violated)
        e.duration.labels(name).observe(result.seconds)
        e.last_commit.labels(name).set(time.time())
        if result.version is not None:
            e.version.labels(name).set(result.version)
        for table, (rows, version) in result.tables.items():  # a routed pipeline: each route table's own
            with self._lock:
                self._committed_tables.add(table)
            e.route_rows.labels(name, table).inc(rows)
            if version is not None:
                e.route_version.labels(name, table).set(version)
            if rows:
                e.route_last_commit.labels(name, table).set(time.time())

    def route_tables(self, found: Iterable[tuple[str, int | None, float | None]]) -> None:
        """(table, version, last commit's time) of each route table its ledger knows, read when the run starts:
        their series from the start, those of tables a batch of this process has set already left as they are."""
        e, name = self.exporter, self.name
        with self._lock:
            for table, version, committed in found:
                if table in self._committed_tables:
                    continue
                e.route_rows.labels(name, table)
                if version is not None:
                    e.route_version.labels(name, table).set(version)
                if committed is not None:
                    e.route_last_commit.labels(name, table).set(committed)

    def lag(self, partitions: Iterable[tuple[str, int, int, int, int, float | None]]) -> None:
        """(topic, partition, Kafka end offset, table offset, lag records, lag seconds) of every partition read;
        seconds None: not known this time (the partition's first record did not come in time), the last value
        stays. The series of partitions no longer read (a topic a pattern matched once) are removed."""
        e, name = self.exporter, self.name
        seen: set[tuple[str, str]] = set()
        with self._lock:
            for topic, p, end, position, records, seconds in partitions:
                labels = (name, topic, str(p))
                self._ends[(topic, p)] = end
                e.kafka_end.labels(*labels).set(end)
                e.table_offset.labels(*labels).set(position)
                e.lag_records.labels(*labels).set(records)
                if seconds is not None:
                    e.lag_seconds.labels(*labels).set(seconds)
                seen.add((topic, str(p)))
            for gone_topic, gone_partition in self._partitions - seen:
                for gauge in (e.kafka_end, e.table_offset, e.lag_records, e.lag_seconds):
                    gauge.remove(name, gone_topic, gone_partition)
            self._partitions = seen
        e.refreshed.labels(name).set(time.time())

    def advanced(self, topic: str, partition: int, position: int) -> None:
        """A commit moved the table's position in a partition: its offset at once, and its lag against Kafka's end
        as last read (the next refresh reads both again; `lag` lets no commit wait for it)."""
        e, labels = self.exporter, (self.name, topic, str(partition))
        with self._lock:
            e.table_offset.labels(*labels).set(position)
            end = self._ends.get((topic, partition))
            if end is not None:
                behind = max(0, end - position)
                e.lag_records.labels(*labels).set(behind)
                if not behind:
                    e.lag_seconds.labels(*labels).set(0)

    def refresh_failed(self) -> None:
        self.exporter.refresh_failures.labels(self.name).inc()

    def silver(self, changes: int, inserted: int, updated: int, deleted: int, cross_partition_keys: int,
               lag_versions: int, lag_seconds: float, step_seconds: float = 0.0, slow_steps: int = 0) -> None:
        """One step of the pipeline's silver table (see ingestion/silver/follower.py)."""
        e, name = self.exporter, self.name
        e.silver_changes.labels(name).inc(changes)
        for action, n in (("inserted", inserted), ("updated", updated), ("deleted", deleted)):
            e.silver_rows.labels(name, action).inc(n)
        e.silver_cross_partition.labels(name).inc(cross_partition_keys)
        e.silver_lag_versions.labels(name).set(lag_versions)
        e.silver_lag_seconds.labels(name).set(lag_seconds)
        e.silver_step_seconds.labels(name).set(step_seconds)
        e.silver_slow_steps.labels(name).set(slow_steps)


class LagRefresher:
    """Sets a pipeline's lag series from Kafka every `interval` seconds on a thread of its own, batches or not.

    Kafka is reached with `settings` (confluent-kafka client settings) for the partitions `topics()` maps; the table's
    position starts at `start_positions()` (the table's ledger) and advances with each committed batch (`batch`).
    Lag is counted as `ingest status` counts it: from the first committed record past the table's position, so
    transaction markers and aborted records are no lag, and its age is that record's timestamp's."""

    def __init__(self, metrics: PipelineMetrics, settings: Mapping[str, Any],
                 topics: Callable[[], Mapping[str, list[int]]],
                 start_positions: Callable[[], Positions], interval: float) -> None:
        self.metrics = metrics
        self.settings = dict(settings)
        self.topics = topics
        self.start_positions = start_positions
        self.interval = interval
        self._recorded: Positions | None = None  # the ledger's, read once by the first refresh
        self._committed: Positions = {}  # past the batches this process committed
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.final_refresh = False  # refresh once more on `stop` (a run that ends, for its push)

    def batch(self, result: BatchResult) -> None:
        """A batch's result: its series, and the table's position past a committed batch's offsets."""
        self.metrics.batch(result)
        if not result.committed:
            return
        with self._lock:
            advanced = []
            for r in result.ranges:
                parts = self._committed.setdefault(r.topic, {})
                parts[r.partition] = max(parts.get(r.partition, 0), r.last + 1)
                advanced.append((r.topic, r.partition, parts[r.partition]))
        for topic, partition, position in advanced:
            self.metrics.advanced(topic, partition, position)

    def start(self) -> None:
        """Refresh on a thread of its own from now on (once: a refresher started by the launch goes on)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name=f"lag-{self.metrics.name}", daemon=True)
        self._thread.start()

    def stop(self, state: PipelineState) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        if self.final_refresh:
            self._refresh_logged()
        self.metrics.set_state(state)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._refresh_logged()
            self._stop.wait(self.interval)

    def _refresh_logged(self) -> None:
        try:
            self.refresh()
        except Exception as exc:  # noqa: BLE001 - the lag goes stale and is counted; the stream goes on
            self.metrics.refresh_failed()
            log.warning("%s: lag not refreshed from Kafka: %s", self.metrics.name, one_line(exc))

    def refresh(self, now: float | None = None) -> None:
        """Read Kafka's end offsets once and set the lag series."""
        if self._recorded is None:  # on this thread: a slow ledger read holds no batch back
            self._recorded = self.start_positions()
        with self._lock:
            positions = {t: dict(recorded) for t, recorded in self._recorded.items()}
            for t, committed in self._committed.items():
                mine = positions.setdefault(t, {})
                for p, o in committed.items():
                    mine[p] = max(mine.get(p, 0), o)
        marks = kafka.watermarks_of(self.settings, self.topics())
        now = time.time() if now is None else now
        rows: list[tuple[str, int, int, int, int, float | None]] = []
        for topic, parts in sorted(marks.items()):
            at = {p: positions.get(topic, {}).get(p, low) for p, (low, _) in parts.items()}
            behind = {p: o for p, o in at.items() if o < parts[p][1]}
            unread = kafka.first_unread(self.settings, topic, behind) if behind else {}
            for p, (_, high) in sorted(parts.items()):
                first = unread.get(p, (at[p], None)) if p in behind else None  # not in unread: did not answer
                records = 0 if first is None else high - first[0]
                seconds = 0.0 if first is None else None if first[1] is None else max(0.0, now - first[1] / 1000)
                rows.append((topic, p, high, at[p], records, seconds))
        self.metrics.lag(rows)


def table_positions(config: PipelineConfig) -> Positions:
    """Where the table's ledger says each partition continues (a routed pipeline's: all its tables' ledgers
    together), read with delta-rs (no JVM); empty for a new table or one delta-rs cannot read (the lag then counts
    from each partition's earliest offset until a batch commits)."""
    try:
        recorded = routed.recorded_offsets(config)
    except JvmFreeReadError as exc:
        log.debug("%s: %s", config.name, exc)
        recorded = None
    if recorded is None:
        log.warning("%s: the table's offsets cannot be read without a JVM; lag counts from the first batch",
                    config.name)
        return {}
    return {t: {int(p): o for p, o in parts.items()} for t, parts in recorded.items()}


def route_table_marks(config: PipelineConfig) -> list[tuple[str, int | None, float | None]]:
    """(table, version, when its last stream commit was made) of each route table of a routed pipeline, from the
    tables' ledgers (delta-rs, local or in object storage); empty when delta-rs cannot read them."""
    reader = rs_reads.DeltaRsReader(config.storage_options() or None)
    found = []
    try:
        for table, path in routed.route_tables(config).items():
            stream = [r for r in reader.history(path) if r.kind == BatchKind.STREAM]
            at = stream[-1].committed_at if stream else None
            found.append((table, reader.version(path), at.replace(tzinfo=dt.UTC).timestamp() if at else None))
    except JvmFreeReadError as exc:
        log.warning("%s: the route tables' series start with their first commit: %s", config.name, exc)
    return found


def watch(exporter: Exporter, ctx: PipelineContext, *, available_now: bool = False,
          recorded: Mapping[str, Mapping[str, int]] | None = None) -> LagRefresher:
    """A pipeline's series and its lag refresher (not started). The Kafka side of the lag comes from the run's
    context: its client settings, and its topics and partitions (grown as the run finds a pattern's new topics);
    the table's side from `recorded` (the run's facts: the ledger's next offsets), else the ledger read once."""
    config = ctx.config
    trigger = None if available_now else duration_seconds(config.sink.trigger)
    metrics = exporter.pipeline(config.name, trigger)
    interval = duration_seconds(config.metrics.prometheus.lag_interval) or 15.0
    known = None if recorded is None else {t: {int(p): o for p, o in parts.items()} for t, parts in recorded.items()}
    def start_positions() -> Positions:  # on the refresher's thread, at its first refresh
        metrics.route_tables(route_table_marks(config))  # none without routing
        return known if known is not None else table_positions(config)

    refresher = LagRefresher(metrics, ctx.kafka.client, lambda: ctx.partitions, start_positions, interval)
    refresher.final_refresh = available_now
    return refresher


def exporter_for(configs: list[PipelineConfig], *, port: int | None, available_now: bool) -> Exporter | None:
    """The process's exporter, serving when a port is set (`--metrics-port` over `metrics.prometheus.port`), or
    only kept for a push when an `--available-now` run names a Pushgateway; None when neither. Pipelines of one
    process share the endpoint, so they must agree on it."""
    chosen = {(c.metrics.prometheus.host, c.metrics.prometheus.port if port is None else port,
               c.metrics.prometheus.pushgateway) for c in configs}
    if len(chosen) > 1:
        shown = ", ".join(f"{c.file}: {c.metrics.prometheus.host}:{c.metrics.prometheus.port}" for c in configs)
        raise IngestionError(f"the pipelines of one `ingest run` share one metrics endpoint and Pushgateway, but "
                             f"their metrics.prometheus settings differ ({shown})")
    host, chosen_port, gateway = chosen.pop()
    if not chosen_port and not (available_now and gateway):
        return None
    exporter = Exporter()
    if chosen_port:
        exporter.serve(host, chosen_port)
    return exporter


def push_instance(configs: list[PipelineConfig]) -> str:
    """The Pushgateway `instance` of a run: the pipeline's name, or `all@<host>` for `run --all`."""
    return configs[0].name if len(configs) == 1 else f"all@{socket.gethostname()}"
