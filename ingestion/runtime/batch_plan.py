"""What a micro-batch's plan says before anything runs: the Kafka offset ranges it will read.

`foreachBatch` hands the writer a DataFrame over the RDD Spark planned for the batch; its Kafka partitions carry
the offset range each reads (`KafkaBatchInputPartition.offsetRange`: topic partition, from, until). Reading them
takes a few py4j calls and no Spark job, so the writer can choose how to write a batch by its size first.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Any

from py4j.protocol import Py4JError
from pyspark.sql import DataFrame

from ingestion.errors import one_line

log = logging.getLogger(__name__)

_SCAN_RDD = "org.apache.spark.sql.execution.datasources.v2.DataSourceRDD"
_KAFKA_PARTITION = "org.apache.spark.sql.kafka010.KafkaBatchInputPartition"
_DEPTH = 16  # RDDs between the batch's DataFrame and its scan: 3 in Spark 4.0 to 4.2
_SINGLE_INPUT: list[bool] = []  # the JVM's Spark gives each RDD partition one input partition (4.2 and later)
_WARNED: list[str] = []  # the one warning of a Spark whose classes differ, once per process


@dataclass(frozen=True)
class OffsetRange:
    """Offsets `start` (included) to `until` (excluded) of one topic partition: Spark's KafkaOffsetRange."""

    topic: str
    partition: int
    start: int
    until: int

    @property
    def size(self) -> int:
        return self.until - self.start


def kafka_offset_ranges(kafka_rows: DataFrame) -> list[OffsetRange] | None:
    """The offset ranges the batch will read, sorted by (topic, partition), one per topic partition; None when the
    rows are not one Kafka scan's as Spark 4.0 to 4.2 plan it (a test's own rows; another Spark, said once)."""
    try:
        rdd = kafka_rows._jdf.queryExecution().logical().rdd()
        for _ in range(_DEPTH):
            if rdd.getClass().getName() == _SCAN_RDD:
                return _ranges(rdd)
            dependencies = rdd.dependencies()
            if dependencies.size() != 1:
                return None
            rdd = dependencies.head().rdd()
    except Py4JError as exc:  # not a LogicalRDD, or Spark's classes differ: the batch is written the usual way
        if not _WARNED:
            _WARNED.append(one_line(exc))
            log.warning("Spark's plan of a Kafka batch differs from Spark 4.0-4.2's, so every batch is written by a "
                        "Spark job (no driver write of small batches): %s", _WARNED[0])
        return None
    return None


def _input_partitions(partition: Any) -> list[Any]:
    """The input partitions of one `DataSourceRDDPartition`: a Seq of them up to Spark 4.1 (`inputPartitions`), an
    Option of one from Spark 4.2 (`inputPartition`)."""
    if _SINGLE_INPUT:
        option = partition.inputPartition()
        return [option.get()] if option.isDefined() else []
    try:
        inputs = partition.inputPartitions()
    except Py4JError:
        _SINGLE_INPUT.append(True)
        return _input_partitions(partition)
    return [inputs.apply(i) for i in range(inputs.size())]


def _ranges(scan: Any) -> list[OffsetRange] | None:
    spans: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for partition in scan.partitions():
        for split in _input_partitions(partition):
            if split.getClass().getName() != _KAFKA_PARTITION:
                return None
            offsets = split.offsetRange()
            topic_partition = offsets.topicPartition()
            spans.setdefault((topic_partition.topic(), topic_partition.partition()), []).append(
                (offsets.fromOffset(), offsets.untilOffset()))
    out = []
    for (topic, number), pieces in sorted(spans.items()):
        pieces.sort()
        # minPartitions splits a topic partition's range into adjacent pieces: they join into one
        if any(a[1] != b[0] for a, b in itertools.pairwise(pieces)):
            return None
        out.append(OffsetRange(topic, number, pieces[0][0], pieces[-1][1]))
    return out
