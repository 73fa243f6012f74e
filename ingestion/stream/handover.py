"""Taking over from another consumer: a new pipeline starts each partition where a consumer group left off.

`source.startFromGroup: <group>` applies to a new checkpoint of a table that records no offsets yet: each
partition starts at the group's committed offset (the next record that consumer would have read), a partition the
group never committed at `source.startingOffsets`. Nothing is read twice or skipped at the handover, provided the
other consumer has stopped: a group that still has members is refused unless `source.startFromActiveGroup: true`.
A committed offset Kafka no longer holds (retention) follows `source.failOnDataLoss`. Once the table records
offsets, they win, as after a lost checkpoint.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ingestion import kafka
from ingestion.errors import IngestionError
from ingestion.kafka.groups import group_state

if TYPE_CHECKING:
    from ingestion.stream.context import PipelineContext

log = logging.getLogger(__name__)

EARLIEST, LATEST = -2, -1  # Spark's JSON positions


@dataclass(frozen=True)
class PartitionStart:
    """Where one partition starts: at the group's committed offset, or (`committed` None) at the fallback."""

    topic: str
    partition: int
    committed: int | None  # the group's committed offset, None when it has none
    start: int  # the offset the pipeline starts at; -2 earliest, -1 latest
    low: int  # Kafka's earliest offset now
    high: int  # Kafka's end offset now

    @property
    def group_lag(self) -> int | None:
        """Records the group is behind the end of the partition (None: it never committed)."""
        return None if self.committed is None else max(0, self.high - self.committed)

    def describe(self) -> str:
        where = {EARLIEST: f"earliest ({self.low})", LATEST: f"latest ({self.high})"}.get(self.start, str(self.start))
        if self.committed is None:
            return f"{self.topic}/{self.partition}: no offset committed, starts at {where} (source.startingOffsets)"
        return (f"{self.topic}/{self.partition}: starts at {where}, the group's committed offset; the group is "
                f"{self.group_lag} records behind the end ({self.high})")


@dataclass(frozen=True)
class GroupStart:
    """Where a pipeline taking over from `group` starts, per partition."""

    group: str
    members: tuple[str, ...]
    partitions: tuple[PartitionStart, ...]

    def positions(self) -> str:
        """Spark's `startingOffsets` JSON naming every partition."""
        out: dict[str, dict[str, int]] = {}
        for p in self.partitions:
            out.setdefault(p.topic, {})[str(p.partition)] = p.start
        return json.dumps(out)

    def lines(self) -> list[str]:
        head = f"start from consumer group {self.group!r}" + (
            f" (still active: {', '.join(self.members)})" if self.members else "")
        return [head, *(f"  {p.describe()}" for p in self.partitions)]


def plan(ctx: PipelineContext, *, strict: bool = True) -> GroupStart:
    """Where each partition of the context starts when taking over from `source.startFromGroup`, asked of Kafka
    (the group's offsets in one request, its members, the partitions' bounds). `strict`: refuse an active group
    (unless source.startFromActiveGroup) and a committed offset Kafka no longer holds (when
    source.failOnDataLoss), as a run must; off for `status` and `onboard --dry-run`, which only show it."""
    config, source = ctx.config, ctx.config.source
    group = source.start_from_group
    state = group_state(ctx.kafka.client, group, ctx.partitions, ctx.kafka.timeout)
    if strict and state.active and not source.start_from_active_group:
        raise IngestionError(f"{config.file}: source.startFromGroup: consumer group {group!r} is still active "
                             f"(members: {', '.join(state.members)}); stop that consumer first (both would read "
                             "the same records), or set source.startFromActiveGroup: true")
    if state.active:
        log.warning("%s: consumer group %r still has members (%s): records it reads after now are read by both",
                    config.name, group, ", ".join(state.members))
    if not any(state.committed.values()):
        log.warning("%s: consumer group %r has committed no offset of %s: every partition starts at "
                    "source.startingOffsets", config.name, group, config.reads)
    marks = kafka.watermarks_of(ctx.kafka.client, ctx.partitions)
    starts: list[PartitionStart] = []
    for topic, parts in marks.items():
        for partition, (low, high) in sorted(parts.items()):
            committed = state.committed.get(topic, {}).get(partition)
            start = _fallback(ctx, topic, partition) if committed is None else committed
            if committed is not None and not low <= committed <= high:
                start = low if committed < low else high
                why = (f"source.startFromGroup: group {group!r} committed offset {committed} of {topic}/{partition}, "
                       f"but Kafka holds offsets {low} to {high - 1}")
                if strict and source.fail_on_data_loss:
                    raise IngestionError(f"{config.file}: {why} (deleted by retention, or the topic was made "
                                         f"again); set source.failOnDataLoss: false to start at {start}")
                log.warning("%s: %s; starting at %d (source.failOnDataLoss is false)", config.name, why, start)
            starts.append(PartitionStart(topic, partition, committed, start, low, high))
    return GroupStart(group, state.members, tuple(starts))


def _fallback(ctx: PipelineContext, topic: str, partition: int) -> int:
    """Where a partition the group never committed starts: source.startingOffsets (earliest, latest, or its JSON
    position for the partition, earliest when the JSON does not name it)."""
    text = ctx.config.source.starting_offsets
    if text == "latest":
        return LATEST
    if text == "earliest":
        return EARLIEST
    return int(json.loads(text).get(topic, {}).get(str(partition), EARLIEST))
