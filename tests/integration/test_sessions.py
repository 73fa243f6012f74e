"""Values built once per Spark session, as `foreachBatch` presents sessions: a new Python object every batch."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
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



def test_threads_asking_at_once_build_once_and_register_once(spark: Any) -> None:
    """`run --all` starts pipelines from several threads, and their batches run on threads of their own: a value
    asked for by many at once is built once (a nested build of another key is fine), a function registered once
    (a second registration makes Spark warn that it replaced the first)."""
    session = spark.newSession()
    built: list[str] = []
    registered: list[str] = []
    gate = threading.Barrier(8)
    schema = '{"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]}'

    def build() -> int:
        built.append(threading.current_thread().name)
        time.sleep(0.2)  # the others arrive meanwhile
        return sessions.once(session, "inner", lambda: 41) + 1

    def counted(add: Any) -> Any:
        def register(udf: Any) -> object:
            registered.append(threading.current_thread().name)
            time.sleep(0.2)
            return add(udf)
        return register

    original = sessions.register

    def ask(_: int) -> tuple[int, str]:
        gate.wait()
        return sessions.once(session, "outer", build), helper.body_check(session, schema, 5)

    sessions.register = lambda spark, name, add: original(spark, name, counted(add))  # type: ignore[assignment]
    try:
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(ask, range(8)))
    finally:
        sessions.register = original  # type: ignore[assignment]
    assert {value for value, _ in answers} == {42} and len(built) == 1
    assert len({name for _, name in answers}) == 1 and len(registered) == 1
    assert session.catalog.functionExists(answers[0][1])
