"""Reading a pipeline's tables with Spark: every Spark read of a Delta table goes through `read_table`; `SparkReader`
is the read-only commands' `TableReader` on Spark (see `reader`)."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Sequence
from dataclasses import replace

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from ingestion.config import PipelineConfig
from ingestion.delta import ledger, routed
from ingestion.delta.ledger import BatchRecord
from ingestion.delta.reader import Bounds, HeldPartition, QuarantinedRecord, QuarantineGroup, TableLayout
from ingestion.delta.restorable import Commit, oldest_restorable
from ingestion.runtime.delta_txn import is_table


def read_table(spark: SparkSession, path: str) -> DataFrame | None:
    """The Delta table at `path` (its latest version), or None when there is no table there."""
    if not is_table(spark, path):
        return None
    return spark.read.format("delta").load(path)


def held_coordinates(spark: SparkSession, config: PipelineConfig) -> DataFrame | None:
    """(topic, partition, offset) of every row bronze (a routed pipeline's: every route table) and quarantine hold,
    duplicates kept; None without tables."""
    tables = [read_table(spark, path) for path in routed.data_paths(config)]
    frames = [table.select(F.col("_kafka_topic").alias("topic"), F.col("_kafka_partition").alias("partition"),
                           F.col("_kafka_offset").alias("offset"))
              for table in tables if table is not None]
    if not frames:
        return None
    held = frames[0]
    for frame in frames[1:]:
        held = held.unionByName(frame)
    return held


class SparkReader:
    """The read-only commands' `TableReader` through Spark: the fallback where delta-rs cannot read a table, and
    what the tests hold `rs_reads.DeltaRsReader` equal to."""

    name = "spark"

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def history(self, path: str) -> list[BatchRecord]:
        return [replace(r, committed_at=naive_utc(r.committed_at)) for r in ledger.history(self.spark, path)]

    def version(self, path: str) -> int | None:
        return ledger.table_version(self.spark, path)

    def layout(self, path: str) -> TableLayout | None:
        return spark_layout(self.spark, path)

    def _coordinates(self, paths: Sequence[str], topic: str) -> DataFrame | None:
        frames = [t.where(F.col("_kafka_topic") == topic)
                  .select(F.col("_kafka_partition").alias("partition"), F.col("_kafka_offset").alias("offset"))
                  for p in paths if (t := read_table(self.spark, p)) is not None]
        return functools.reduce(DataFrame.unionByName, frames) if frames else None

    def held(self, paths: Sequence[str], topic: str, bounds: Bounds, limit: int) -> dict[int, HeldPartition]:
        held = self._coordinates(paths, topic)
        out: dict[int, HeldPartition] = {}
        if held is not None:
            counts = held.groupBy("partition", "offset").count()
            rank = F.row_number().over(Window.partitionBy("partition").orderBy("offset"))
            duplicates: dict[int, list[int]] = {}
            for r in (counts.where(F.col("count") > 1).withColumn("rank", rank).where(F.col("rank") <= limit)
                      .orderBy("partition", "offset").collect()):
                duplicates.setdefault(int(r["partition"]), []).append(int(r["offset"]))
            previous = F.lag("offset").over(Window.partitionBy("partition").orderBy("offset"))
            inner: dict[int, list[tuple[int, int]]] = {}
            for r in (counts.withColumn("prev", previous).where(F.col("offset") - F.col("prev") > 1)
                      .select("partition", (F.col("prev") + 1).alias("a"), (F.col("offset") - 1).alias("b"))
                      .collect()):
                inner.setdefault(int(r["partition"]), []).append((int(r["a"]), int(r["b"])))
            for r in counts.groupBy("partition").agg(F.count(F.lit(1)).alias("n"), F.min("offset").alias("lo"),
                                                     F.max("offset").alias("hi")).collect():
                partition, lo, hi = int(r["partition"]), int(r["lo"]), int(r["hi"])
                gaps: list[tuple[int, int]] = []
                if partition in bounds:
                    first, last = bounds[partition]
                    gaps = inner.get(partition, []) + ([(first, lo - 1)] if lo > first else []) + (
                        [(hi + 1, last)] if hi < last else [])
                out[partition] = HeldPartition(partition, int(r["n"]), tuple(duplicates.get(partition, [])),
                                               tuple(sorted(gaps)))
        for partition, (first, last) in bounds.items():
            out.setdefault(partition, HeldPartition(partition, 0, (), ((first, last),)))
        return out

    def held_between(self, paths: Sequence[str], topic: str, partition: int, first: int, last: int) -> set[int]:
        held = self._coordinates(paths, topic)
        if held is None:
            return set()
        rows = (held.where((F.col("partition") == partition) & F.col("offset").between(first, last))
                .select("offset").distinct().collect())
        return {int(r["offset"]) for r in rows}

    def quarantined_per_partition(self, path: str, topic: str) -> dict[int, int]:
        table = read_table(self.spark, path)
        if table is None:
            return {}
        rows = table.where(F.col("_kafka_topic") == topic).groupBy("_kafka_partition").count().collect()
        return {int(r["_kafka_partition"]): int(r["count"]) for r in rows}

    def quarantine_groups(self, path: str) -> list[QuarantineGroup]:
        table = read_table(self.spark, path)
        if table is None:
            return []
        rows = (table.groupBy("_error_class", "_kafka_topic", "_kafka_partition")
                .agg(F.count(F.lit(1)).alias("records"), F.min("_kafka_offset").alias("first"),
                     F.max("_kafka_offset").alias("last"), F.max("_kafka_timestamp").alias("newest"))
                .orderBy("_error_class", "_kafka_topic", "_kafka_partition").collect())
        return [QuarantineGroup(r["_error_class"], r["_kafka_topic"], int(r["_kafka_partition"]), int(r["records"]),
                                int(r["first"]), int(r["last"]), naive_utc(r["newest"])) for r in rows]

    def quarantined(self, path: str, *, limit: int, error_class: str | None = None) -> list[QuarantinedRecord]:
        table = read_table(self.spark, path)
        if table is None:
            return []
        if error_class is not None:
            table = table.where(F.col("_error_class") == error_class)
        rows = table.orderBy("_kafka_partition", "_kafka_offset", "_kafka_topic").limit(limit).collect()
        return [QuarantinedRecord(r["_kafka_topic"], int(r["_kafka_partition"]), int(r["_kafka_offset"]),
                                  naive_utc(r["_kafka_timestamp"]), r["_schema_id"], r["_error_class"],
                                  r["_error_message"], _bytes(r["_kafka_value"]), _bytes(r["_kafka_key"]))
                for r in rows]


def _bytes(value: bytearray | bytes | None) -> bytes | None:
    return None if value is None else bytes(value)


def spark_layout(spark: SparkSession, path: str) -> TableLayout | None:
    """`TableReader.layout` through Spark: DESCRIBE DETAIL and the commit history."""
    import time

    from delta.tables import DeltaTable

    if not is_table(spark, path):
        return None
    name = "delta.`{}`".format(path.replace("`", "``"))
    detail = spark.sql(f"DESCRIBE DETAIL {name}").select("numFiles", "sizeInBytes", "properties").first()
    commits = [Commit(int(r["version"]), _millis(r["timestamp"]), str(r["operation"]),
                      dict(r["operationParameters"] or {}))
               for r in DeltaTable.forPath(spark, path).history()
               .select("version", "timestamp", "operation", "operationParameters").collect()]
    assert detail is not None
    return TableLayout(int(detail["numFiles"] or 0), int(detail["sizeInBytes"] or 0),
                       oldest_restorable(commits, dict(detail["properties"] or {}), int(time.time() * 1000)))


def _millis(value: dt.datetime) -> int:
    return int(value.astimezone(dt.UTC).timestamp() * 1000)


def naive_utc(value: dt.datetime | None) -> dt.datetime | None:
    """A timestamp Spark collected (naive, in the Python process's local time) as naive UTC."""
    return None if value is None else value.astimezone(dt.UTC).replace(tzinfo=None)
