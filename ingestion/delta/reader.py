"""What the read-only commands (`status`, `history`, `verify`, `quarantine list|show`) need from a pipeline's
tables, and the one interface both ways of reading them implement:

* `rs_reads.DeltaRsReader`: delta-rs (`deltalake`) and pyarrow, no JVM; what the commands use, answering in a
  fraction of a second instead of after a Spark session boots;
* `reads.SparkReader`: Spark; the fallback where delta-rs cannot read a table (it raises `JvmFreeReadError`), and
  what the tests hold the first one equal to.

Both return the same plain Python values for the same table, so the commands' logic over them is written once.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ingestion.delta.ledger import BatchRecord
from ingestion.errors import IngestionError

Bounds = Mapping[int, tuple[int, int]]  # partition -> (first, last) offsets, inclusive


class JvmFreeReadError(IngestionError):
    """delta-rs cannot read this table (a feature it does not support, a store it cannot reach); the message says
    why, and the caller reads with Spark instead."""


@dataclass(frozen=True)
class HeldPartition:
    """What bronze and quarantine together hold of one partition of a topic."""

    partition: int
    rows: int  # distinct offsets held
    duplicates: tuple[int, ...]  # offsets held more than once, smallest first, at most the reader's limit
    gaps: tuple[tuple[int, int], ...]  # [first, last] ranges missing between the bounds, in order


@dataclass(frozen=True)
class QuarantineGroup:
    """Quarantined records of one error class in one partition."""

    error_class: str
    topic: str
    partition: int
    records: int
    first_offset: int
    last_offset: int
    newest: dt.datetime | None  # the newest Kafka timestamp, UTC without tzinfo (as Spark gives it)


@dataclass(frozen=True)
class QuarantinedRecord:
    topic: str
    partition: int
    offset: int
    timestamp: dt.datetime | None
    schema_id: int | None
    error_class: str
    error_message: str
    value: bytes | None
    key: bytes | None = None


@dataclass(frozen=True)
class TableLayout:
    """A table's data files now, and the oldest version time travel and rewind still reach (`restorable`)."""

    files: int
    bytes: int
    oldest_restorable: int | None

    @property
    def average_file_bytes(self) -> int:
        return self.bytes // self.files if self.files else 0


class TableReader(Protocol):
    """Reads of a pipeline's Delta tables. `None` or empty results mean there is no table at the path."""

    name: str

    def history(self, path: str) -> list[BatchRecord]:
        """Every commit of the table that records offsets, oldest first (`ledger.history`)."""
        ...

    def version(self, path: str) -> int | None:
        """The table's latest version, None when there is no table."""
        ...

    def held(self, paths: Sequence[str], topic: str, bounds: Bounds, limit: int) -> dict[int, HeldPartition]:
        """Per partition of `topic` held by the tables at `paths` (bronze and quarantine): the distinct offsets,
        the duplicated ones, and the gaps within `bounds` (a partition of `bounds` the tables lack is one gap)."""
        ...

    def held_between(self, paths: Sequence[str], topic: str, partition: int, first: int, last: int) -> set[int]:
        """The offsets in [first, last] of one partition that the tables hold."""
        ...

    def quarantined_per_partition(self, path: str, topic: str) -> dict[int, int]:
        """Records of `topic` in the quarantine table at `path`, per partition."""
        ...

    def quarantine_groups(self, path: str) -> list[QuarantineGroup]:
        """Counts per error class, topic and partition, ordered by them."""
        ...

    def quarantined(self, path: str, *, limit: int, error_class: str | None = None) -> list[QuarantinedRecord]:
        """The first `limit` quarantined records by (partition, offset), of one error class when given."""
        ...

    def layout(self, path: str) -> TableLayout | None:
        """The table's data files and its oldest restorable version; None when there is no table."""
        ...
