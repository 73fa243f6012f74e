"""Which `TableReader` a read-only command uses: delta-rs first (no JVM), Spark where delta-rs cannot read a table
(said once, in one line). Callers of the public API may pass a SparkSession instead, as before."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from pyspark.sql import SparkSession

from ingestion.delta.reader import JvmFreeReadError, TableReader
from ingestion.delta.reads import SparkReader
from ingestion.delta.rs_reads import DeltaRsReader

log = logging.getLogger(__name__)

T = TypeVar("T")
Source = SparkSession | TableReader


def as_reader(source: Source) -> TableReader:
    """A reader from a SparkSession (reads through Spark) or a reader as it is."""
    return SparkReader(source) if isinstance(source, SparkSession) else source


def without_jvm(answer: Callable[[TableReader], T], spark: Callable[[], SparkSession],
                storage_options: dict[str, str] | None = None) -> T:
    """`answer` from delta-rs (with these storage options for object stores); when delta-rs cannot read a table,
    from Spark (`spark()` makes the session)."""
    try:
        return answer(DeltaRsReader(storage_options or None))
    except JvmFreeReadError as exc:
        log.warning("%s; reading with Spark instead", exc)
        return answer(SparkReader(spark()))
