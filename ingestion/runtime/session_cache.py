"""Values built once per Spark session: registered functions and the expressions that call them.

`foreachBatch` hands every batch a new Python `SparkSession` over the same JVM session, so a session is known by
its JVM object, not by the Python one (keyed on the Python object, a cache would miss and grow every batch).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from pyspark.sql import Column, DataFrame, SparkSession

T = TypeVar("T")

_BUILT: dict[tuple[int, Hashable], tuple[Any, Any]] = {}  # (JVM identity hash, key) -> (JVM session, value)
# One build at a time, in any session: batches and `run --all`'s starts ask from many threads at once. A lock per
# key and session measured slower: 100 pipelines' first batches then built their sessions' values all at once,
# 133 s for `run --all` of 100 pipelines against 109-115 s
# (docs/performance.md#fixed-costs-third-round-the-first-checksum-and-starts-together).
_BUILDING = threading.RLock()


def once(spark: SparkSession, key: Hashable, build: Callable[[], T]) -> T:
    """`build()` the first time `key` is asked for in this JVM session, the same value after that, also when
    several threads ask at once (a build may ask for other keys). Keys should not hold objects that can die and
    be replaced by others with the same key (hold them in the value)."""
    session: Any = spark._jsparkSession
    slot = (int(session.hashCode()), key)
    known = _BUILT.get(slot)
    if known is None or not known[0].equals(session):
        with _BUILDING:
            known = _BUILT.get(slot)
            if known is None or not known[0].equals(session):
                known = _BUILT[slot] = (session, build())
    return known[1]  # type: ignore[no-any-return]


def column_seq(spark: SparkSession, key: Hashable, build: Callable[[], list[Column]]) -> Any:
    """The JVM Seq of the columns `build()` gives, made once per session for `select`: PySpark hands a list of
    columns to the JVM with a py4j round trip per column (py4j fills a Java list element by element), every time
    (docs/performance.md#py4j-round-trips)."""
    from pyspark.sql.classic.column import _to_java_column, _to_seq

    return once(spark, ("column seq", key), lambda: _to_seq(spark.sparkContext, build(), _to_java_column))


def select(rows: DataFrame, columns: Any) -> DataFrame:
    """`rows.select(...)` of a Seq from `column_seq`: one round trip."""
    from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

    return ClassicDataFrame(rows._jdf.select(columns), rows.sparkSession)


def register(spark: SparkSession, name: str, add: Callable[[Any], object]) -> None:
    """Register a JVM function as `name` with `add(spark's UDFRegistration)`, unless the session has it already
    (a streaming query's session starts with its parent's functions; registering again logs a WARN). Two threads
    registering the same name at once register it once."""
    with _BUILDING:
        if not spark.catalog.functionExists(name):
            add(spark._jsparkSession.udf())
