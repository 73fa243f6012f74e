"""py4j calls with fewer round trips (ingestion/gateway.py), counted on the session's real gateway."""

from __future__ import annotations

from typing import Any

from ingestion.runtime.gateway import java, java_list
from tests.helpers import py4j_commands


def test_a_class_is_looked_up_once_per_gateway(spark) -> None:
    jvm: Any = spark._jvm
    with py4j_commands() as first:
        array_list = java(jvm, "java.util.concurrent.CopyOnWriteArrayList")
    with py4j_commands() as again:
        assert java(jvm, "java.util.concurrent.CopyOnWriteArrayList") is array_list
    assert len(first) >= 4 and again == []  # one round trip per dotted step, then none
    assert java(jvm, "java.lang.Long").MAX_VALUE == 2**63 - 1


def test_a_java_list_is_read_by_index_without_an_exception_at_its_end(spark) -> None:
    jvm: Any = spark._jvm
    items = java(jvm, "java.util.ArrayList")()
    for value in ("a", "b", "c"):
        items.add(value)
    with py4j_commands() as by_index:
        assert java_list(items) == ["a", "b", "c"]
    with py4j_commands() as iterated:
        assert list(items) == ["a", "b", "c"]
    assert len(by_index) == 4  # size() and one get(i) per element
    assert len(iterated) > 20  # py4j's iterator: the JVM's NoSuchElementException, converted by PySpark
    assert java_list(java(jvm, "java.util.ArrayList")()) == []
