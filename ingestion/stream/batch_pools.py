"""The scheduler pools `run --all`'s batches take in turn.

Spark's FAIR scheduler gives a free core to the pool with the fewest running tasks and, among pools with as many,
to the one whose name sorts first. With a pool per pipeline and more pipelines than cores, most pools have no task
running when a core frees up, so the names decided who went first: at 100 pipelines and a 10 s trigger the first
twenty by name kept a freshness p99 of 22 to 28 s while most of the others waited 100 s and more
(docs/performance.md#batch-pools-taken-in-turn). So each batch takes the next pool of a ring, one pool per
pipeline, named in the ring's order: among pools with no task running, the batch that started first is served
first, and a busy pipeline's batch with tasks running still yields a free core to the others.
"""

from __future__ import annotations

import itertools

from pyspark.sql import SparkSession

PREFIX = "batches-"


def names(size: int) -> list[str]:
    """The ring's pools for `size` pipelines, in the order their names sort."""
    count = max(size, 1)
    width = len(str(count - 1))
    return [f"{PREFIX}{i:0{width}d}" for i in range(count)]


class BatchPools:
    """A ring of FAIR pools that batches take in turn (declare `names` with the session's pools)."""

    def __init__(self, size: int) -> None:
        self.names = names(size)
        self._turns = itertools.count()  # next() of a count is atomic under the GIL: one turn per batch

    def take(self) -> str:
        return self.names[next(self._turns) % len(self.names)]

    def enter(self, spark: SparkSession) -> str:
        """Run the jobs this thread starts from now on (the calling batch's) in the next pool; its name."""
        pool = self.take()
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", pool)
        return pool
