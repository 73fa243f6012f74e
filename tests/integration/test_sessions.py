"""Values built once per Spark session, as `foreachBatch` presents sessions: a new Python object every batch."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession

from ingestion.runtime import helper
from ingestion.runtime import session_cache as sessions


def test_once_per_jvm_session_whatever_python_object_wraps_it(spark: Any) -> None:
    built: list[int] = []

    def build() -> int:
        built.append(1)
        return len(built)

    # What foreachBatch hands each batch: another Python SparkSession over the same JVM session.
    rewrapped = SparkSession(spark.sparkContext, spark._jsparkSession)
    assert rewrapped is not spark
    assert sessions.once(spark, "k", build) == sessions.once(rewrapped, "k", build) == 1
    assert sessions.once(spark, "other key", build) == 2
    other = spark.newSession()  # another JVM session: its own functions, its own values
    assert sessions.once(other, "k", build) == 3
    assert built == [1, 1, 1]


def test_the_summary_function_is_registered_once_per_session(spark: Any) -> None:
    rewrapped = SparkSession(spark.sparkContext, spark._jsparkSession)
    first = helper.partition_summary(spark)
    assert helper.partition_summary(rewrapped) is first
    assert spark.catalog.functionExists(helper.SUMMARY_FUNCTION)
