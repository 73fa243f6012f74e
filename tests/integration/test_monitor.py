"""The monitor's view of Spark's progress events: the same values as PySpark's conversion, at a fraction of the
py4j round trips (they run on the listener thread, beside the next batch)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryProgress

from ingestion.config import load_pipeline
from ingestion.dev.samples import produce_orders
from ingestion.runtime.listener import _JsonEvents, progress_from_json
from ingestion.stream import pipeline
from ingestion.stream.monitor import topic_lags
from tests.conftest import pipeline_yaml
from tests.helpers import py4j_commands


def test_progress_events_are_read_as_json_with_the_values_pyspark_gives(spark, kafka_servers, make_topic,
                                                                          orders_schema, tmp_path: Path) -> None:
    topic = make_topic(partitions=3)
    produce_orders(kafka_servers, topic, 90, schema_id=1, schema=orders_schema)
    # written by Spark (not directly: Spark's source would read no rows, and numInputRows be 0)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers,
                                         extra="source:\n  maxOffsetsPerTrigger: 60\n",
                                         sink="  directWriteMaxOffsets: 0\n"))
    running = pipeline.run(spark, config, available_now=True)
    jprogress = running.query._jsq.lastProgress()
    assert jprogress is not None

    ours, theirs = progress_from_json(jprogress.json()), StreamingQueryProgress.fromJObject(jprogress)
    assert (ours.batchId, ours.name, ours.numInputRows, ours.batchDuration) == \
        (theirs.batchId, theirs.name, theirs.numInputRows, theirs.batchDuration)
    assert (ours.batchId, ours.name) == (len(running.batches) - 1, config.name) and ours.numInputRows > 0
    assert ours.durationMs == dict(theirs.durationMs)
    (source,), (their_source,) = ours.sources, theirs.sources
    for key in ("startOffset", "endOffset", "latestOffset"):
        assert json.loads(getattr(source, key)) == json.loads(getattr(their_source, key))
    assert sum(json.loads(source.endOffset)[topic].values()) == 90
    assert topic_lags(source.endOffset, source.latestOffset).get(topic, {}) == {0: 0, 1: 0, 2: 0}
    assert source.numInputRows == their_source.numInputRows == ours.numInputRows
    for key in ("inputRowsPerSecond", "processedRowsPerSecond"):
        value, theirs_value = getattr(source, key), getattr(their_source, key)
        # Spark 4.2's JSON gives a rate to one decimal; the object PySpark converts keeps every digit
        assert value in (theirs_value, round(theirs_value, 1)) or (math.isnan(value) and math.isnan(theirs_value))

    # The listener bridge reads an event with a few round trips; PySpark's conversion takes hundreds.
    jvm: Any = spark._jvm
    event = getattr(jvm.org.apache.spark.sql.streaming, "StreamingQueryListener$QueryProgressEvent")(jprogress)
    seen: list[Any] = []
    bridge = _JsonEvents(type("Listener", (), {"onQueryProgress": lambda self, e: seen.append(e.progress)})())
    assert _round_trips(lambda: bridge.onQueryProgress(event)) <= 5
    assert [p.batchId for p in seen] == [ours.batchId]
    assert _round_trips(lambda: StreamingQueryProgress.fromJObject(jprogress)) > 50


def _round_trips(call: Any) -> int:
    with py4j_commands() as commands:
        call()
    return len(commands)
