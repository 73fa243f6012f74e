"""Which engine writes a batch, chosen once per batch from its facts, with the reason (logged when it changes).

The driver-side engine (`driver_write`: the driver fetches, decodes in Python and commits with delta-rs) costs no
Spark job, about 0.3 s less per batch, and decodes at the Python decoder's rate; the Spark engine (`spark_write`)
costs a job and decodes at the JVM's rate on every core. So a batch of at most `sink.directWriteMaxOffsets` offsets
is the driver's, every other one Spark's; where they cross is measured in
docs/performance.md#fixed-costs-seventh-round-small-batches-without-a-spark-job. The driver-side engine can still
decline a batch it was given, for a reason only the write finds (a table delta-rs cannot append to, a schema id not
known yet, records late): the Spark engine then writes it, nothing committed twice.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from ingestion.kafka.fetch import Span
from ingestion.stream.batch import WritePath

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    """The engine of one batch and why."""

    engine: WritePath
    reason: str


def plan(spans: Sequence[Span] | None, max_driver_offsets: int) -> Plan:
    """The engine of a batch of `spans` (None: the batch's offsets are not known to the driver, as when the run has
    no driver-side consumer); `max_driver_offsets`: `sink.directWriteMaxOffsets`, 0 when the driver never writes."""
    if spans is None or max_driver_offsets <= 0:
        return Plan(WritePath.SPARK, "the driver-side path is off (sink.directWriteMaxOffsets 0, or no consumer)")
    offsets = sum(s.until - s.start for s in spans)
    if offsets <= max_driver_offsets:
        return Plan(WritePath.DRIVER, f"{offsets} offsets, at most sink.directWriteMaxOffsets ({max_driver_offsets})")
    return Plan(WritePath.SPARK, f"{offsets} offsets, more than sink.directWriteMaxOffsets ({max_driver_offsets})")


class Planner:
    """One pipeline's planner: `plan` per batch, its reason logged when the engine changes."""

    def __init__(self, name: str, max_driver_offsets: int) -> None:
        self.name = name
        self.max_driver_offsets = max_driver_offsets
        self._last: WritePath | None = None

    def __call__(self, spans: Sequence[Span] | None, batch_id: int) -> Plan:
        chosen = plan(spans, self.max_driver_offsets)
        if chosen.engine is not self._last:
            log.info("%s batch %d: written by %s: %s", self.name, batch_id,
                     "the driver" if chosen.engine is WritePath.DRIVER else "Spark", chosen.reason)
            self._last = chosen.engine
        return chosen
