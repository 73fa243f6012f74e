"""Per-batch observation: lag and throughput to MLflow, offsets to a Kafka consumer group, progress on screen.

Spark reports each finished micro-batch to a StreamingQueryListener with the Kafka source's `endOffset` (where
the batch stopped) and `latestOffset` (the newest offsets Spark saw when it planned the batch); their difference
per partition is the lag in records, at no cost of extra Kafka calls. The writer's own result for the same batch
(rows, quarantined, bytes, table version, newest Kafka timestamp) is merged in, and everything is logged with
step = batch id. The end offsets are then committed to a consumer group so Kafka's own tools show the position
and lag; those offsets are for monitoring only, recovery uses the checkpoint and the table.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from ingestion import kafka
from ingestion.config import PipelineConfig
from ingestion.errors import KafkaAccessError, one_line
from ingestion.runtime.listener import ProgressListener
from ingestion.stream.batch import BatchResult, WritePath
from ingestion.stream.metrics import RunMetrics
from ingestion.stream.prometheus import LagRefresher
from ingestion.stream.start_batch import StartBatch

log = logging.getLogger(__name__)

COMMIT_TIMEOUT = 10.0  # seconds a consumer-group commit may take before the next batch tries again


def offsets(text: str | None) -> dict[str, dict[str, int]]:
    """A Kafka source offset of Spark's progress (`{"topic": {"0": 42}}`); empty when Spark reports none: a
    batch replayed after a restart, which Spark did not plan itself, comes without a `latestOffset` JSON."""
    try:
        found = json.loads(text) if text else None
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def topic_lags(end_offset: str | None, latest_offset: str | None) -> dict[str, dict[int, int]]:
    """Per topic and partition, records between where a batch ended and the newest offset Spark saw."""
    end, newest = offsets(end_offset), offsets(latest_offset)
    if not end or not newest:
        return {}
    out: dict[str, dict[int, int]] = {}
    for topic, latest in sorted(newest.items()):
        done = end.get(topic) or {}
        out[topic] = {int(p): max(0, int(n) - int(done.get(p, 0))) for p, n in latest.items() if n is not None}
    return out


def lag_metrics(lags: dict[str, dict[int, int]], single_topic: bool) -> dict[str, float]:
    """`lag_records_p<partition>` for a pipeline of one topic, `lag_records_<topic>_p<partition>` otherwise."""
    return {(f"lag_records_p{p}" if single_topic else f"lag_records_{topic}_p{p}"): float(n)
            for topic, parts in sorted(lags.items()) for p, n in sorted(parts.items())}


def phases(duration_ms: dict[str, int]) -> str:
    """Spark's per-phase milliseconds of a batch (`durationMs`), longest first: `addBatch` is our writer,
    `latestOffset` asks Kafka where each partition ends, `walCommit` and `commitOffsets` write the checkpoint."""
    parts = sorted(((k, int(v)) for k, v in duration_ms.items() if k != "triggerExecution"), key=lambda kv: -kv[1])
    total = duration_ms.get("triggerExecution")
    return (f"{int(total)} ms: " if total is not None else "") + ", ".join(f"{k} {v}" for k, v in parts)


def batch_metrics(progress: Any, result: BatchResult | None, lags: dict[str, dict[int, int]],
                  now: dt.datetime, *, single_topic: bool = True,
                  newest: dt.datetime | None = None) -> dict[str, float]:
    """The MLflow metrics of one batch (names documented in docs/operations.md#mlflow); `lags` per topic and
    partition (`topic_lags`); `newest` the newest record time an earlier batch committed, for a batch that wrote
    nothing (so `lag_seconds` is logged for every batch, alongside `lag_records`)."""
    read, read_rate, processed_rate = (float(progress.numInputRows), float(progress.inputRowsPerSecond or 0.0),
                                       float(progress.processedRowsPerSecond or 0.0))
    if result is not None and result.path is WritePath.DRIVER:  # Spark's source read nothing: the driver fetched
        read = float(result.rows + result.quarantined)
        read_rate = processed_rate = read / max(progress.batchDuration / 1000, 1e-3)
    return _metrics(read, read_rate, processed_rate, float(progress.batchDuration), result, lags, now,
                    single_topic, newest)


def _metrics(read: float, read_rate: float, processed_rate: float, duration_ms: float, result: BatchResult | None,
             lags: dict[str, dict[int, int]], now: dt.datetime, single_topic: bool,
             newest: dt.datetime | None = None) -> dict[str, float]:
    values: dict[str, float] = {
        "input_rows": read,
        "input_rows_per_second": read_rate,
        "processed_rows_per_second": processed_rate,
        "batch_duration_ms": duration_ms,
        "lag_records": float(sum(n for parts in lags.values() for n in parts.values())),
    }
    values.update(lag_metrics(lags, single_topic))
    if result is not None and result.max_timestamp is not None:
        newest = result.max_timestamp
    if newest is not None and newest.tzinfo is None:
        newest = newest.replace(tzinfo=dt.UTC)
    if values["lag_records"] == 0:
        values["lag_seconds"] = 0.0
    elif newest is not None:  # behind by at least the age of the newest record held
        values["lag_seconds"] = max(0.0, (now - newest).total_seconds())
    if result is not None:
        values.update({
            "rows": float(result.rows if result.committed else 0),
            "quarantined_rows": float(result.quarantined if result.committed else 0),
            "input_bytes": float(result.bytes),
            "table_version": float(result.version if result.version is not None else -1),
        })
        for table, (rows, version) in result.tables.items():  # a routed pipeline: each route table's own
            values[f"rows_{table}"] = float(rows)
            values[f"table_version_{table}"] = float(version if version is not None else -1)
        if result.committed and (result.checked or result.violated):  # data-quality expectations
            values["expectation_rows_checked"] = float(result.checked)
            values.update({f"expectation_{name}_violated": float(n) for name, n in result.violated.items()})
    return values


@dataclass
class Progress:
    """Records done of records to do: a bar on a terminal, a log line otherwise."""

    total: int
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    done: int = 0
    started: float = field(default_factory=time.monotonic)
    pipeline: str = ""  # named in the log line: `run --all` logs several pipelines' progress

    def advance(self, records: int) -> None:
        self.done += records
        rate = self.done / max(time.monotonic() - self.started, 1e-9)
        share = min(1.0, self.done / self.total) if self.total else 1.0
        if self.stream.isatty():
            bar = "#" * int(share * 30)
            self.stream.write(f"\r[{bar:<30}] {self.done:,}/{self.total:,} records ({share:.0%}) {rate:,.0f}/s ")
            self.stream.flush()
        else:
            named = f"{self.pipeline} " if self.pipeline else ""
            log.info("%sprogress: %d of %d records (%.0f%%), %.0f records/s", named, self.done, self.total,
                     share * 100, rate)

    def close(self) -> None:
        if self.stream.isatty():
            self.stream.write("\n")


class PipelineMonitor(ProgressListener):
    """Listens to one pipeline's query; `on_batch` is the writer's callback for the same batches."""

    def __init__(self, config: PipelineConfig, settings: Mapping[str, Any], metrics: RunMetrics | None,
                 progress: Progress | None = None, prometheus: LagRefresher | None = None) -> None:
        self.config = config
        self.settings = settings  # the Kafka client settings group commits use
        self.metrics = metrics
        self.progress = progress
        self.prometheus = prometheus
        self.group = config.consumer_group
        self.last_lag: dict[str, dict[int, int]] = {}  # per topic and partition
        self._newest: dt.datetime | None = None  # the newest record time a batch committed (listener thread)
        # Filled by the batch thread, emptied by Spark's listener thread, waited on by `drain`: under one condition.
        self._results: dict[int, BatchResult] = {}
        self._lock = threading.Condition()
        # The group commits' one consumer (not an admin client: see kafka.GroupCommitter), used by the thread that
        # reports a batch (Spark's listener, or the start batch's) and closed by `close` once no commit is inside.
        self._commits = kafka.GroupCommitter(settings, self.group, COMMIT_TIMEOUT)
        self._pending: tuple[int, dict[str, dict[str, int]]] | None = None  # a commit that failed, to retry
        # Kafka refused the consumer group (or the login): the pipeline stops with this error (see pipeline.run).
        self.refused: KafkaAccessError | None = None

    def on_batch(self, result: BatchResult) -> None:
        with self._lock:
            self._results[result.batch_id] = result  # for MLflow, with Spark's progress of the same batch
        if self.prometheus is not None:
            self.prometheus.batch(result)
        if self.progress is not None:
            self.progress.advance(sum(r.count for r in result.ranges))

    def on_start_batches(self, batches: Sequence[StartBatch]) -> None:
        """The start batches (`stream.start_batch`), which Spark never reports: each one's metrics and lag, then
        one consumer-group commit of where the last of them left each partition (one broker round trip for the
        run's tens of start batches, not one each)."""
        ends: dict[str, dict[str, int]] = {}
        for batch in batches:
            result = batch.result
            if self.prometheus is not None:
                self.prometheus.batch(result)
            self.last_lag = batch.lags
            rate = result.rows / max(result.seconds, 1e-3)
            values = _metrics(float(result.rows), rate, rate, 1000 * result.seconds, result, batch.lags,
                              dt.datetime.now(dt.UTC), bool(self.config.topic))
            if self.metrics is not None:
                self.metrics.log(result.batch_id, values)
            log.info("%s start batch: %d rows, lag %d (%s)", self.config.name, result.rows,
                     int(values["lag_records"]), _lag_text(batch.lags))
            for topic, parts in batch.ends.items():
                ends.setdefault(topic, {}).update(parts)
        if self.config.metrics.commit_offsets and ends:
            self._commit(batches[-1].result.batch_id, ends)

    def drain(self, timeout: float = 15.0) -> None:
        """Wait until Spark has reported every batch the writer finished (progress events are asynchronous)."""
        with self._lock:
            self._lock.wait_for(lambda: not self._results, timeout)

    def close(self) -> None:
        """Close the group commits' consumer (its threads would outlive the pipeline and log the broker's absence),
        after a commit in flight on another thread has ended; a batch reported later commits nothing."""
        self._commits.close()

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        if progress.name != self.config.name or not progress.sources:
            return
        try:
            self._observe(progress)
        except Exception as exc:
            log.warning("%s batch %s: could not report it: %s", self.config.name, progress.batchId,
                        one_line(exc))
            log.debug("%s batch %s: report failure", self.config.name, progress.batchId, exc_info=True)

    def _observe(self, progress: Any) -> None:
        source = progress.sources[0]
        with self._lock:
            result = self._results.pop(progress.batchId, None)
            self._lock.notify_all()
        lags = topic_lags(source.endOffset, source.latestOffset)
        self.last_lag = lags
        values = batch_metrics(progress, result, lags, dt.datetime.now(dt.UTC), single_topic=bool(self.config.topic),
                               newest=self._newest)
        if result is not None and result.committed and result.max_timestamp is not None:
            self._newest = result.max_timestamp
        if self.metrics is not None:
            self.metrics.log(progress.batchId, values)
        log.info("%s batch %d: lag %d (%s)", self.config.name, progress.batchId, int(values["lag_records"]),
                 _lag_text(lags))
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s batch %d: Spark's phases %s", self.config.name, progress.batchId,
                      phases(progress.durationMs))
        if self.config.metrics.commit_offsets and source.endOffset:
            self._commit(progress.batchId, offsets(source.endOffset))

    def onQueryIdle(self, event: Any) -> None:
        """Spark says the query is idle (no new data, every 10 s by default): retry a commit that failed."""
        pending = self._pending
        if pending is not None:
            self._commit(*pending)

    def _commit(self, batch_id: int, end: dict[str, dict[str, int]]) -> None:
        """Commit the batch's end offsets to the consumer group. A failure (the broker restarting, say) costs one
        warning line: the commit is retried when the query is idle or done by the next batch's."""
        if not any(end.values()) or self.refused is not None or self._commits.closed:
            return
        self._pending = None
        try:
            self._commits.commit({t: {int(p): int(o) for p, o in parts.items()} for t, parts in end.items()})
        except KafkaAccessError as exc:  # not transient: retrying would only repeat it
            self.refused = exc
            log.error("%s batch %d: offsets not committed: %s", self.config.name, batch_id, exc)
        except Exception as exc:  # noqa: BLE001 - monitoring only; recovery uses the checkpoint and the table
            if self._commits.closed:
                return
            self._pending = (batch_id, end)
            log.warning("%s batch %d: offsets not committed to consumer group %r (%s); retried when the query is "
                        "idle or with the next batch", self.config.name, batch_id, self.group,
                        one_line(exc))


def _lag_text(lags: dict[str, dict[int, int]], shown: int = 12) -> str:
    """`orders/0 3, orders/1 0`: the partitions with the most lag first when there are more than `shown`."""
    items = [(f"{t}/{p}", n) for t, parts in sorted(lags.items()) for p, n in sorted(parts.items())]
    if len(items) > shown:
        items = sorted(items, key=lambda kv: -kv[1])[:shown]
        return ", ".join(f"{k} {n}" for k, n in items) + f", ... ({len(lags)} topics)"
    return ", ".join(f"{k} {n}" for k, n in items)
