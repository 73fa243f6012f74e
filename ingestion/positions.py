"""Kafka positions as `ingest replay --from/--to` write them, read and checked without Kafka or a JVM.

A position is earliest, latest, per-partition offsets of the one topic read (`0:100,1:250`), Spark's JSON form per
topic (`{"orders": {"0": 100, "1": -2}}`), or a time (`units.parse_time`: ISO 8601 or epoch milliseconds). What
Spark's batch source would refuse later, with a Java exception, is refused here in one line: latest as a start,
earliest as an end, a partition named twice, a negative offset, a start after its end. `ops.replay` turns a
position into the Kafka source's options against what Kafka holds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ingestion.errors import UsageError
from ingestion.units import TIME_FORMS, parse_time

EARLIEST, LATEST = -2, -1  # Spark's JSON form of the ends, per partition

FORMS = ("earliest, latest, partition:offset pairs like 0:100,1:250, Spark's JSON form like "
         f'{{"orders": {{"0": 100}}}}, or {TIME_FORMS}')

_PAIRS = re.compile(r"\s*\d+\s*:")  # `0:...`: no time starts so


@dataclass(frozen=True)
class Position:
    """A position as written (`text`) and read: an end of the log (`edge`), offsets by topic (None: the one topic
    read) and partition, with EARLIEST and LATEST in Spark's JSON form, or a time in epoch milliseconds."""

    text: str
    ending: bool
    edge: str | None = None
    offsets: Mapping[str | None, Mapping[int, int]] | None = None
    millis: int | None = None

    def __str__(self) -> str:
        return self.text

    @property
    def topics(self) -> list[str]:
        """The topics Spark's JSON form names."""
        return sorted(t for t in self.offsets or {} if t is not None)


def starting(text: str) -> Position:
    """The position `--from` names. UsageError naming the value and what is allowed."""
    return _read(text, ending=False)


def ending(text: str) -> Position:
    """The position `--to` names (offsets are exclusive ends, as Spark's endingOffsets)."""
    return _read(text, ending=True)


def replay_range(start: str | Position, end: str | Position = "latest") -> tuple[Position, Position]:
    """The two positions of a replay, read (when given as text) and checked together: a start after its end is
    refused naming both, where they can be compared without Kafka (two times; offsets of the same partition)."""
    first = start if isinstance(start, Position) else starting(start)
    last = end if isinstance(end, Position) else ending(end)
    if first.millis is not None and last.millis is not None and first.millis > last.millis:
        raise UsageError(f"--from {first} is after --to {last}: a replay reads from the earlier time to the later")
    for (topic, partition), offset in _by_partition(first).items():
        for (other, part), end_offset in _by_partition(last).items():
            same = part == partition and (topic == other or None in (topic, other))
            if same and offset >= 0 and end_offset >= 0 and offset > end_offset:
                raise UsageError(f"--from {first} is after --to {last}: partition {partition} starts at offset "
                                 f"{offset} and ends at {end_offset} (an end is exclusive)")
    return first, last


def _by_partition(position: Position) -> dict[tuple[str | None, int], int]:
    return {(t, p): o for t, parts in (position.offsets or {}).items() for p, o in parts.items()}


def _read(text: str, *, ending: bool) -> Position:
    edge, other = ("earliest", "latest") if ending else ("latest", "earliest")
    stripped = text.strip()
    if stripped == edge:
        raise UsageError(f"{edge} cannot {'end' if ending else 'start'} a replay: a replay reads a bounded range, and "
                         f"{'ending at the start' if ending else 'starting at the end'} of the log reads nothing; "
                         f"use {other}, an offset or a time")
    if stripped in ("earliest", "latest"):
        return Position(text, ending, edge=stripped)
    if stripped.startswith("{"):
        return Position(text, ending, offsets=_json(stripped, ending))
    if _PAIRS.match(stripped):
        return Position(text, ending, offsets={None: _pairs(stripped)})
    try:
        when = parse_time(stripped)
    except ValueError:  # not a time either: name every form
        raise UsageError(f"cannot read {text!r} as a position: use {FORMS}") from None
    return Position(text, ending, millis=int(when.timestamp() * 1000))


def _pairs(text: str) -> dict[int, int]:
    """`0:100,1:250` as {partition: offset}: offsets 0 or more, each partition once."""
    found: dict[int, int] = {}
    for part in text.split(","):
        partition, _, offset = part.partition(":")
        if not (partition.strip().isdigit() and offset.strip().lstrip("-").isdigit()):
            which = "" if part.strip() == text else f" ({part.strip()!r})"
            raise UsageError(f"cannot read {text!r} as partition:offset pairs like 0:100,1:250{which}: both are "
                             "whole numbers")
        p, o = int(partition), int(offset)
        if o < 0:
            raise UsageError(f"offset {o} of partition {p} in {text!r}: offsets are 0 or more (earliest and latest "
                             "name the ends)")
        if p in found:
            raise UsageError(f"partition {p} is named twice in {text!r}: name each partition once")
        found[p] = o
    return found



def _whole(offset: object) -> int:
    """An offset of Spark's JSON form: a whole number (JSON's 1.7 or true is no offset), else TypeError."""
    if type(offset) is not int:
        raise TypeError(offset)
    return offset

def _json(text: str, ending: bool) -> dict[str | None, dict[int, int]]:
    """Spark's JSON form, `{"topic": {"partition": offset}}`: offsets 0 or more, or -2 (earliest) when starting,
    -1 (latest) when ending; each topic and partition once."""

    def unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
        keys = [k for k, _ in pairs]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:  # json.loads would keep the last silently
            raise UsageError(f"{twice[0]!r} is named twice in {text!r}: name each topic and partition once")
        return dict(pairs)

    end, named = (LATEST, "latest") if ending else (EARLIEST, "earliest")
    form = f'Spark\'s JSON form is {{"topic": {{"0": 100, "1": {end}}}}} ({end}: {named})'
    try:
        data = json.loads(text, object_pairs_hook=unique)
        found: dict[str | None, dict[int, int]] = {
            str(t): {int(p): _whole(o) for p, o in parts.items()} for t, parts in data.items()}
    except (ValueError, AttributeError, TypeError):
        raise UsageError(f"cannot read {text!r} as a position: {form}") from None
    for topic, parts in found.items():
        wrong = {p: o for p, o in parts.items() if o < 0 and o != end}
        if wrong:
            raise UsageError(f"{text!r}: partition(s) {sorted(wrong)} of {topic!r} at {sorted(set(wrong.values()))}: "
                             f"a replay {'ends' if ending else 'starts'} at an offset (0 or more) or at {end} "
                             f"({named})")
    return found
