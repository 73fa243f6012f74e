"""A pipeline's shape, decided once from its config: one bronze table (`OneTable`), or a table per route made as
each route's first records come (`RouteTables`, `routing:` in the config, docs/routing.md).

Every step of a run that differs between the two asks the pipeline's shape (`of`): what the run's checks and its
JVM-free preparation read and make, which offsets the tables record, whether the ledger can tell an available-now
run it is caught up, whether a start batch may write before the JVM, what the query's start makes, how a lost
checkpoint is recovered, and which followers (`followers`) a run has. The launch sequence and the run loop hold no
branch on routing; the writer's tables (one table's two paths, or the router's) are chosen in `writer`.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from pyspark.sql import SparkSession

from ingestion.config import PipelineConfig
from ingestion.decode.resolver import SchemaResolver
from ingestion.delta import routed, rs_reads, whole_batches
from ingestion.delta.log_checkpoints import BackgroundCheckpoints
from ingestion.delta.rs_tables import TableState
from ingestion.stream import setup
from ingestion.stream.context import PipelineContext
from ingestion.stream.followers import Follower, LogCheckpoints, Maintenance, Silver
from ingestion.stream.maintenance import ScheduledMaintenance
from ingestion.stream.metrics import RunMetrics
from ingestion.stream.prometheus import LagRefresher

if TYPE_CHECKING:
    from ingestion.stream.facts import Facts, Prepared

log = logging.getLogger(__name__)

Recorded = dict[str, dict[str, int]]  # topic -> partition -> the next offset the tables' ledgers hold


class OneTable:
    """A pipeline writing one bronze table (and its quarantine), made before the query starts."""

    start_batches = True  # a start batch may write the first records before the JVM (`start_batch.allowed`)
    ledger_says_caught_up = True  # one table's ledger tells an available-now run it has nothing to do

    def check(self, ctx: PipelineContext) -> PipelineContext:
        return setup.check(ctx)

    def prepare(self, ctx: PipelineContext) -> SchemaResolver | None:
        return setup.prepare(ctx)

    def recorded(self, config: PipelineConfig, table: TableState | None) -> Recorded | None:
        """Bronze's ledger read with delta-rs; None where only Spark reads the table."""
        if table is None:
            return None
        return rs_reads.recorded_offsets(config) if table.exists else {}

    def ready(self, spark: SparkSession, ctx: PipelineContext, facts: Facts,
              prepared: Prepared) -> SchemaResolver | None:
        """The schemas and tables as the run's checks and its facts read them, where they could (delta-rs); else
        read now with the session. Bronze's columns are the facts' (read under the writer lock)."""
        config = ctx.config
        schemas = prepared.schemas or ctx.checked or setup.resolver(spark, ctx)
        table = facts.table
        if prepared.schemas is None:
            setup.ensure_tables(spark, config, schemas.spec, states=ctx.tables if ctx.checked is schemas else None)
            setup.widen_table(spark, config, schemas, table if table is not None and table.exists else None)
        else:
            setup.ensure_tables(spark, config, schemas.spec, made=True)
            if table is None or table.exists:  # one delta-rs made from these schemas has nothing to widen
                setup.widen_table(spark, config, schemas, table)
        return schemas

    def recovered(self, spark: SparkSession, config: PipelineConfig, facts: Facts, *, resumed: bool) -> Facts:
        """One table commits a batch whole: a new checkpoint resumes after the ledger's offsets as they are."""
        return facts

    def followers(self, spark: SparkSession, ctx: PipelineContext, facts: Facts, *, metrics: RunMetrics | None,
                  pool: str | None, prometheus: LagRefresher | None,
                  available_now: bool) -> tuple[Follower, ...]:
        """Bronze's background log checkpoints (when Delta's own interval is longer than ours), scheduled
        maintenance (when asked for) and the silver table's follower (when there is one)."""
        config = ctx.config
        found: list[Follower] = []
        properties = dict(facts.table.properties) if facts.table is not None and facts.table.exists else \
            setup.table_properties(config)
        checkpoints = BackgroundCheckpoints.for_table(spark, config.table_path, name=config.name,
                                                      properties=properties, options=config.storage_options())
        if checkpoints is not None:
            if not available_now:
                checkpoints.warm_up()  # the JVM's first checkpoint is slow: at start, not beside the steady stream
            found.append(LogCheckpoints(checkpoints))
        schedule = ScheduledMaintenance.for_pipeline(spark, config, metrics)
        if schedule is not None:
            found.append(Maintenance(schedule))
        if config.silver is not None:
            found.append(Silver.of_table(spark, config, pool=pool, metrics=metrics, prometheus=prometheus,
                                         partitions=ctx.partitions))
        return tuple(found)


class RouteTables:
    """A routed pipeline: a table per route, each made by the writer as its route's first records come; no bronze
    of its own, its offsets in its route tables' and quarantine's ledgers."""

    start_batches = False  # its tables are made by the query as routes come
    # Its tables commit a batch one after another: the newest offset one holds does not say the others hold
    # theirs. Spark's checkpoint does; the query decides.
    ledger_says_caught_up = False

    def check(self, ctx: PipelineContext) -> PipelineContext:
        return ctx  # each route's schemas and table are checked as its first records come

    def prepare(self, ctx: PipelineContext) -> SchemaResolver | None:
        return None  # nothing to make before the JVM: the query makes each route's table

    def recorded(self, config: PipelineConfig, table: TableState | None) -> Recorded | None:
        """The route tables' and quarantine's ledgers together."""
        return routed.recorded_offsets(config)

    def ready(self, spark: SparkSession, ctx: PipelineContext, facts: Facts,
              prepared: Prepared) -> SchemaResolver | None:
        return None  # each route's schemas and table are the router's, made as its first records come

    def recovered(self, spark: SparkSession, config: PipelineConfig, facts: Facts, *, resumed: bool) -> Facts:
        """A new checkpoint has a new txnAppId: a batch a lost checkpoint left in some tables only would be written
        again beside them. Its newest batch is undone in every table (after `ingest rewind` each batch is whole
        already), and the run resumes from the tables' offsets."""
        if resumed or not routed.route_tables(config) or routed.rewound(config):
            return facts
        whole_batches.resume_after_lost_checkpoint(spark, config)
        return replace(facts, recorded=routed.recorded_offsets(config))

    def followers(self, spark: SparkSession, ctx: PipelineContext, facts: Facts, *, metrics: RunMetrics | None,
                  pool: str | None, prometheus: LagRefresher | None,
                  available_now: bool) -> tuple[Follower, ...]:
        """The route silvers' followers (`routing.silver`); each route table's log is checkpointed by Delta and
        maintained by `ingest maintain`."""
        if not ctx.config.route_silvers():
            return ()
        return (Silver.of_routes(spark, ctx.config, pool=pool, metrics=metrics),)


ONE_TABLE, ROUTE_TABLES = OneTable(), RouteTables()


def of(config: PipelineConfig) -> OneTable | RouteTables:
    """The pipeline's shape: the one place that asks whether it is routed."""
    return ONE_TABLE if config.routing is None else ROUTE_TABLES
