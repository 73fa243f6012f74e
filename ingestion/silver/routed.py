"""The silver tables of a routed pipeline (`routing.silver`, docs/routing.md#silver-over-a-route-table): one
`SilverFollower` per route with a silver section, over that route's table, each exactly as a pipeline's silver
over its bronze (its own ledger, epochs, txnAppIds and change feed).

A route's table may not exist when the run starts (its first record has not come yet): its follower is made once
the writer has made the table, which it creates with the change feed on (the route's config has the silver
section), so no version of it is missed. Inside `ingest run` each follower steps in its own thread after each
batch; an available-now run drains them all once the routes are written.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping

from pyspark.sql import SparkSession

from ingestion.config import PipelineConfig
from ingestion.runtime.delta_txn import is_table
from ingestion.silver.follower import Lag, SilverFollower
from ingestion.silver.ledger import SilverRecord

log = logging.getLogger(__name__)


class RouteSilvers:
    """The followers of a routed pipeline's route silvers, made as their route tables appear; the interface of one
    `SilverFollower` (notify, start, stop, drain, error) over all of them."""

    def __init__(self, spark: SparkSession, routes: Mapping[str, PipelineConfig], *, pool: str | None = None,
                 on_step: Callable[[str, SilverRecord, Lag], None] | None = None) -> None:
        self.spark = spark
        self.routes = dict(routes)  # route table -> the route's config (its silver section)
        self.pool = pool
        self.on_step = on_step
        self.followers: dict[str, SilverFollower] = {}
        self.started = False
        self._error: BaseException | None = None

    @property
    def error(self) -> BaseException | None:
        """The first failure of a route's silver (or of draining them: set by the run)."""
        return self._error or next((f.error for f in self.followers.values() if f.error is not None), None)

    @error.setter
    def error(self, value: BaseException | None) -> None:
        self._error = value

    def prepare(self) -> None:
        """The followers of the route tables that exist, each prepared (its bronze's change feed on) before the
        query writes."""
        self._find()

    def _find(self) -> list[SilverFollower]:
        """Followers for the route tables made since the last look."""
        made = []
        for table, config in self.routes.items():
            if table in self.followers or not is_table(self.spark, config.table_path):
                continue
            follower = SilverFollower(self.spark, config, pool=self.pool, on_step=functools.partial(self._step, table))
            follower.prepare()
            self.followers[table] = follower
            made.append(follower)
            log.info("%s: route table %s keeps silver %s (%s)", config.name, table, follower.spec.path,
                     follower.spec.mode)
        return made

    def _step(self, table: str, record: SilverRecord, lag: Lag) -> None:
        if self.on_step is not None:
            self.on_step(table, record, lag)

    def notify(self) -> None:
        """After a batch: followers for route tables it made (started in a streaming run), then each one woken. A
        route silver that cannot follow its table (its key is no column of it) is the run's error: it stops."""
        try:
            made = self._find()
        except Exception as exc:  # noqa: BLE001 - the run reports it in one line and stops
            log.error("silver of a route failed: %s", exc)
            self._error = exc
            return
        for follower in made:
            if self.started:
                follower.start()
        for follower in self.followers.values():
            follower.notify()

    def start(self) -> None:
        self.started = True
        for follower in self.followers.values():
            follower.start()

    def stop(self) -> None:
        for follower in self.followers.values():
            follower.stop()

    def drain(self) -> int:
        """Every route silver stepped until it holds every version its route table has now; the steps taken."""
        self._find()
        return sum(follower.drain() for follower in self.followers.values())
