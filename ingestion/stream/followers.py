"""What follows a bronze commit: the run's followers, each told of every batch the run commits, in one list.

A follower is a listener of the batch's outcome (`BatchResult`) with a life of its own beside the query: the
background Delta log checkpoints (`LogCheckpoints`), scheduled maintenance (`Maintenance`) and the silver table's
follower (`Silver`, one table's or each route table's). The pipeline's shape (`shape`) says which a run has; the
run loop (`pipeline`) tells them all of each batch, starts them with the query, asks them for a failure and
closes them, branching on none. A new thing to do after each commit is a follower added in `shape`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from pyspark.sql import SparkSession

from ingestion.config import PipelineConfig
from ingestion.delta.log_checkpoints import BackgroundCheckpoints
from ingestion.errors import one_line
from ingestion.silver.follower import Lag, SilverFollower
from ingestion.silver.ledger import SilverRecord
from ingestion.silver.routed import RouteSilvers
from ingestion.stream.batch import BatchResult
from ingestion.stream.maintenance import ScheduledMaintenance
from ingestion.stream.metrics import RunMetrics
from ingestion.stream.prometheus import LagRefresher

log = logging.getLogger(__name__)


class Follower(Protocol):
    """A listener of the run's commits, alive from the query's start to the run's end."""

    what: str  # its name in the run's messages ("silver: <why it failed>")

    def committed(self, result: BatchResult) -> None:
        """A batch ended (a start batch or the query's); `result.committed` says whether it wrote anything."""

    def began(self) -> None:
        """The streaming query has started (not called for an available-now run)."""

    def failure(self) -> BaseException | None:
        """Why the follower cannot go on, once it cannot: the run stops and says so."""

    def close(self, *, drain: bool) -> None:
        """The run ends; `drain`: it finished an available-now run, and the follower catches up first."""


@dataclass(frozen=True)
class LogCheckpoints:
    """Bronze's Delta log checkpoints, written beside the batches (`BackgroundCheckpoints`)."""

    what = "Delta log checkpoints"

    checkpoints: BackgroundCheckpoints

    def committed(self, result: BatchResult) -> None:
        if result.committed and result.version is not None:
            self.checkpoints.committed(result.version)

    def began(self) -> None:
        return None

    def failure(self) -> BaseException | None:
        return None

    def close(self, *, drain: bool) -> None:
        self.checkpoints.close()


@dataclass(frozen=True)
class Maintenance:
    """OPTIMIZE and VACUUM every so many batches or seconds (`maintenance.everyBatches`, `.every`)."""

    what = "maintenance"

    schedule: ScheduledMaintenance

    def committed(self, result: BatchResult) -> None:
        if result.committed:
            self.schedule.committed(result.batch_id)

    def began(self) -> None:
        return None

    def failure(self) -> BaseException | None:
        return None  # a failed maintenance run is logged and tried again when due: the stream goes on

    def close(self, *, drain: bool) -> None:
        self.schedule.close()


@dataclass(frozen=True)
class Silver:
    """The current-state table(s) kept from bronze's versions: woken by each commit, merging on its own thread."""

    what = "silver"

    follower: SilverFollower | RouteSilvers

    def committed(self, result: BatchResult) -> None:
        if result.committed:
            self.follower.notify()

    def began(self) -> None:
        self.follower.start()

    def failure(self) -> BaseException | None:
        return self.follower.error

    def close(self, *, drain: bool) -> None:
        """Stop its thread; a finished available-now run drains it first (silver then holds every bronze version
        the run committed), a failure kept as the follower's error for the run to report."""
        self.follower.stop()
        if drain and self.follower.error is None:
            try:
                self.follower.drain()
            except Exception as exc:  # noqa: BLE001 (the run reports it: bronze is done, silver failed)
                self.follower.error = exc
                log.error("silver failed: %s", one_line(exc))

    @classmethod
    def of_table(cls, spark: SparkSession, config: PipelineConfig, *, pool: str | None, metrics: RunMetrics | None,
                 prometheus: LagRefresher | None, partitions: dict[str, list[int]] | None = None) -> Silver:
        """The follower of a pipeline's silver table, its bronze's change feed turned on before bronze's query
        writes; each step's figures to MLflow and Prometheus."""
        def on_step(record: SilverRecord, lag: Lag) -> None:
            if metrics is not None:
                metrics.log(follower.steps, silver_metrics(record, lag))
            if prometheus is not None:
                prometheus.metrics.silver(record.changes, record.inserted, record.updated, record.deleted,
                                          record.cross_partition_keys, lag.versions, lag.seconds,
                                          lag.step_seconds, lag.slow_steps)

        follower = SilverFollower(spark, config, pool=pool, on_step=on_step)
        follower.prepare(partitions)  # warns of Kafka's order set over several partitions
        return cls(follower)

    @classmethod
    def of_routes(cls, spark: SparkSession, config: PipelineConfig, *, pool: str | None,
                  metrics: RunMetrics | None) -> Silver:
        """The followers of a routed pipeline's route silvers (`routing.silver`), each route's metrics suffixed
        with its table as its rows are (`silver_changes_<table>`)."""
        def on_route_step(table: str, record: SilverRecord, lag: Lag) -> None:
            if metrics is not None:
                metrics.log(routes.followers[table].steps, silver_metrics(record, lag, f"_{table}"))

        routes = RouteSilvers(spark, config.route_silvers(), pool=pool, on_step=on_route_step)
        routes.prepare()
        return cls(routes)


def silver_metrics(record: SilverRecord, lag: Lag, suffix: str = "") -> dict[str, float]:
    """A silver step's MLflow metrics (docs/cdc.md), a route table's suffixed with its name."""
    found = {"silver_changes": record.changes, "silver_inserted": record.inserted,
             "silver_updated": record.updated, "silver_deleted": record.deleted,
             "silver_cross_partition_keys": record.cross_partition_keys,
             "silver_lag_versions": lag.versions, "silver_lag_seconds": lag.seconds,
             "silver_step_seconds": lag.step_seconds, "silver_slow_steps": lag.slow_steps,
             "silver_bronze_version": record.bronze_version}
    return {f"{k}{suffix}": v for k, v in found.items()}
