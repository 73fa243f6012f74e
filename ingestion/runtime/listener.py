"""The streaming listener bridge: Spark's progress events reach Python as one JSON string each.

PySpark's own bridge converts a `StreamingQueryProgress` field by field, about 500 py4j round trips per batch on the
listener thread, beside the next batch's driver work; this one reads `progress().json()` once
(docs/performance.md#py4j-round-trips). Subclass `ProgressListener` and register it with
`spark.streams.addListener` as usual, or, for one query of many, with `routes(spark).add(query name, listener)`:
one listener per session then takes every event across py4j once and hands it to its query's listener only.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, ClassVar

from py4j.protocol import Py4JError
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import QueryIdleEvent, QueryProgressEvent, StreamingQueryProgress

from ingestion.errors import one_line
from ingestion.runtime import session_cache

log = logging.getLogger(__name__)

_OFFSETS = ("startOffset", "endOffset", "latestOffset")


def progress_from_json(text: str) -> StreamingQueryProgress:
    """A batch's progress from Spark's JSON of it, with each source's offsets as the JSON strings that PySpark's
    own conversion gives (and the rates Spark leaves out of the JSON when they are not numbers, as NaN). Spark
    4.2's JSON rounds the rates to one decimal."""
    data = json.loads(text)
    for source in data.get("sources", []):
        for key in _OFFSETS:
            if source.get(key) is not None and not isinstance(source[key], str):
                source[key] = json.dumps(source[key], separators=(",", ":"))
        for key in ("inputRowsPerSecond", "processedRowsPerSecond"):
            source.setdefault(key, float("nan"))
    return StreamingQueryProgress.fromJson(data)


class _JsonEvents:
    """The JVM's side of a Python StreamingQueryListener, as PySpark's `JStreamingQueryListener` is, but reading a
    progress event as one JSON string: PySpark converts it field by field, about 500 py4j round trips per batch on
    the listener thread, beside the next batch's driver work. Only progress events are passed on (the monitor
    ignores the others, and only needs to know that an idle event came)."""

    def __init__(self, listener: StreamingQueryListener) -> None:
        self.listener = listener

    def onQueryStarted(self, jevent: Any) -> None:
        pass

    def onQueryProgress(self, jevent: Any) -> None:
        self.listener.onQueryProgress(QueryProgressEvent(progress=progress_from_json(jevent.progress().json())))

    def onQueryIdle(self, jevent: Any) -> None:
        self.listener.onQueryIdle(QueryIdleEvent.fromJObject(jevent))  # every 10 s of an idle query

    def onQueryTerminated(self, jevent: Any) -> None:
        pass

    class Java:
        implements: ClassVar[list[str]] = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]



class ProgressListener(StreamingQueryListener):
    """A StreamingQueryListener whose JVM side is `_JsonEvents`: only `onQueryProgress` is called, with a progress
    event built from Spark's JSON."""

    @property
    def _jlistener(self) -> Any:
        """What `spark.streams.addListener` registers in the JVM: PySpark's wrapper around `_JsonEvents`."""
        from pyspark import SparkContext

        if not hasattr(self, "_jlistenerobj"):
            jvm: Any = SparkContext._jvm
            self._jlistenerobj = jvm.PythonStreamingQueryListenerWrapper(_JsonEvents(self))
        return self._jlistenerobj

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


class ProgressRouter(ProgressListener):
    """The one listener of a session's pipelines (`routes`): each progress event goes to the listener added under
    its query's name, an idle event to the listener of the query it names. With a listener per query, Spark would
    hand every event to each of them, each a py4j callback and a JSON read: with 100 pipelines, 100 callbacks per
    batch, all on Spark's one listener thread (docs/performance.md#one-listener-for-every-query)."""

    def __init__(self) -> None:
        self._by_name: dict[str, StreamingQueryListener] = {}
        self._name_of: dict[str, str] = {}  # query id -> name, learnt from progress events (idle events carry ids)
        self._lock = threading.Lock()

    def add(self, name: str, listener: StreamingQueryListener) -> None:
        """Route `name`'s events to `listener` (instead of any listener added under that name before)."""
        with self._lock:
            self._by_name[name] = listener

    def remove(self, name: str) -> None:
        with self._lock:
            self._by_name.pop(name, None)
            self._name_of = {i: n for i, n in self._name_of.items() if n != name}

    def _listener(self, name: str | None) -> StreamingQueryListener | None:
        with self._lock:
            return self._by_name.get(name) if name is not None else None

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        with self._lock:
            self._name_of[str(progress.id)] = progress.name
        listener = self._listener(progress.name)
        if listener is not None:
            listener.onQueryProgress(event)

    def onQueryIdle(self, event: Any) -> None:
        with self._lock:
            name = self._name_of.get(str(event.id))
        listener = self._listener(name)
        if listener is not None:
            listener.onQueryIdle(event)


def routes(spark: SparkSession) -> ProgressRouter:
    """The session's router, registered with its streaming query manager the first time it is asked for."""
    def build() -> ProgressRouter:
        router = ProgressRouter()
        spark.streams.addListener(router)
        return router

    return session_cache.once(spark, "progress router", build)


def wait_for_listener_events(spark: SparkSession, timeout_ms: int = 10_000) -> None:
    """Let Spark hand its listeners every event posted so far: a progress event the query posted as it ended
    would otherwise reach a listener after it is removed, or after Python has gone (a py4j error at exit)."""
    try:
        spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(timeout_ms)  # type: ignore[union-attr]
    except Py4JError as exc:  # a timeout (another query keeps it busy) or another Spark's internals
        log.debug("Spark's listener bus was not empty: %s", one_line(exc))
