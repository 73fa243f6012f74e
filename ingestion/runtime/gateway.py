"""Calls into the JVM through py4j, with as few round trips as they take.

Every py4j call is a round trip to the JVM and back over a local socket, a context switch each way; on a loaded
machine each one costs milliseconds, and a micro-batch's driver work is mostly such calls
(docs/performance.md#py4j-round-trips).
"""

from __future__ import annotations

from typing import Any

_JAVA: dict[str, tuple[Any, Any]] = {}  # dotted name -> (the JVM view it was looked up in, the class or member)


def java(jvm: Any, name: str) -> Any:
    """A JVM class or static member by its dotted name, looked up once per gateway: py4j resolves each dotted step
    of `jvm.a.b.C` with a round trip of its own (7 for a Delta class), and a commit uses about a dozen of them."""
    known = _JAVA.get(name)
    if known is None or known[0] is not jvm:
        value = jvm
        for part in name.split("."):
            value = getattr(value, part)
        known = _JAVA[name] = (jvm, value)
    return known[1]


def java_list(items: Any) -> list[Any]:
    """The elements of a java.util.List, by index. py4j's own iteration ends by letting the JVM throw
    NoSuchElementException, which PySpark's error handler then converts: ~60 more round trips per loop."""
    return [items.get(i) for i in range(items.size())]
