"""Truncates: bronze rows that empty the table (`silver.truncateWhen`; Debezium's `op = 't'` by default), as pure
DataFrame functions shared by the fold, the merge of each step and the rebuild (`fold_sql` has their DuckDB twins).

A truncate removes every change ordered before it (docs/cdc.md, "Truncates"). The order is the one silver already
uses, extended to a record that belongs to no key: with a sequence (`sequenceBy`'s field, or the Debezium connector's
position, `order.py`), a change is before the truncate when its value is lower (or null), or equal and before it in
Kafka order; a truncate whose own value is null (a field of the row's image, which a truncate has none of, or a
truncate without a source position) falls back to Kafka order. In Kafka order a change is before the truncate when
it is in the truncate's partition at a lower offset, or in another partition with an earlier Kafka timestamp (Kafka
orders no two partitions; the timestamps of one producer, such as Debezium's connector, do).

Upsert mode drops the changes before a truncate; history mode keeps them and ends, at the truncate's time, each row
the truncate finds current (`_closed_at`). The positions of the truncates silver has applied ride in its ledger
record (`positions` / `frame`), so a change older than a truncate that bronze receives later is dropped, or closed,
by every later step.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession, WindowSpec
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ingestion.silver.spec import SEQUENCE, SilverSpec

# A truncate's columns, named apart from a change's so the two join without aliases.
TOPIC, PARTITION, OFFSET, TIMESTAMP, TSEQUENCE, AT = ("_t_topic", "_t_partition", "_t_offset", "_t_timestamp",
                                                      "_t_sequence", "_t_at")
CLOSED = "_closed_at"  # history: the time a truncate ended the row (null: none did)
NEXT = "_next"  # the prefix of the next change's ordering columns

# A truncate as the ledger records it: topic, partition, offset, Kafka timestamp (µs), the sequence as text (a
# record's as JSON; None: null, or Kafka order) and its time (µs).
Position = tuple[str, int, int, int, str | None, int]


def of(bronze: DataFrame, spec: SilverSpec, valid_from: Column, sequence: Column | None) -> DataFrame | None:
    """The truncate rows of `bronze` (None when nothing truncates): their coordinates, sequence and time."""
    if not spec.truncate_when:
        return None
    # The bare condition (a null drops the row as false does), which Spark can push down to the Parquet scan.
    return bronze.where(F.expr(spec.truncate_when)).select(
        F.col("_kafka_topic").alias(TOPIC), F.col("_kafka_partition").alias(PARTITION),
        F.col("_kafka_offset").alias(OFFSET), F.col("_kafka_timestamp").alias(TIMESTAMP),
        (sequence if sequence is not None else F.lit(None).cast("string")).alias(TSEQUENCE),
        valid_from.alias(AT))


def before(spec: SilverSpec, prefix: str = "") -> Column:
    """The change (its columns, `prefix`ed: the next change's with NEXT) is ordered before the truncate."""
    topic, partition = F.col(f"{prefix}_kafka_topic"), F.col(f"{prefix}_kafka_partition")
    same = (topic == F.col(TOPIC)) & (partition == F.col(PARTITION))
    kafka = ((same & (F.col(f"{prefix}_kafka_offset") < F.col(OFFSET)))
             | (~same & (F.col(f"{prefix}_kafka_timestamp") < F.col(TIMESTAMP))))
    if not spec.sequenced:
        return kafka
    mine, theirs = F.col(f"{prefix}{SEQUENCE}"), F.col(TSEQUENCE)
    return F.when(theirs.isNull(), kafka).otherwise(mine.isNull() | (mine < theirs) | ((mine == theirs) & kafka))


def surviving(rows: DataFrame, spec: SilverSpec, cut: DataFrame | None) -> DataFrame:
    """Upsert: the change rows no truncate removes."""
    if cut is None:
        return rows
    return rows.join(F.broadcast(cut), before(spec), "left_anti")


def closed(rows: DataFrame, spec: SilverSpec, cut: DataFrame | None, ordered: WindowSpec) -> DataFrame:
    """History: the change rows with CLOSED, the time of the first truncate between the change and the key's next
    one (`ordered`: the key's changes in order)."""
    if cut is None:
        return rows.withColumn(CLOSED, F.lit(None).cast("timestamp"))
    ordering = ["_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp",
                *([SEQUENCE] if spec.sequenced else [])]
    coordinates = ["_kafka_topic", "_kafka_partition", "_kafka_offset"]
    nexts = rows.select(*ordering, *[F.lead(c).over(ordered).alias(f"{NEXT}{c}") for c in ordering])
    ends = (nexts.join(F.broadcast(cut), before(spec) & (F.col(f"{NEXT}_kafka_offset").isNull()
                                                         | ~before(spec, NEXT)))
            .groupBy(*coordinates).agg(F.min(AT).alias(CLOSED)))
    return rows.join(ends, coordinates, "left").select(*rows.columns, CLOSED)


def positions(cut: DataFrame) -> tuple[Position, ...]:
    """The truncates of `cut`, as the ledger records them, in Kafka order: a sequence that is a record (the
    connector's position, `order.py`) as its JSON, `{"lsn":42}`, any other as its text."""
    sequence = F.col(TSEQUENCE)
    text = F.to_json(sequence) if isinstance(cut.schema[TSEQUENCE].dataType, T.StructType) else sequence.cast("string")
    rows = cut.select(TOPIC, PARTITION, OFFSET, F.unix_micros(TIMESTAMP), text,
                      F.unix_micros(AT)).collect()
    return tuple(sorted((str(r[0]), int(r[1]), int(r[2]), int(r[3]), None if r[4] is None else str(r[4]), int(r[5]))
                        for r in rows))


def frame(session: SparkSession, found: tuple[Position, ...], sequence: T.DataType | None) -> DataFrame | None:
    """The truncates the ledger records, as `of` gives them (None: none); `sequence`, the `_sequence` type."""
    if not found:
        return None
    raw = session.createDataFrame(
        [list(p) for p in found],
        "t string, p int, o long, ts long, seq string, at long")
    return raw.select(F.col("t").alias(TOPIC), F.col("p").alias(PARTITION), F.col("o").alias(OFFSET),
                      F.timestamp_micros("ts").alias(TIMESTAMP),
                      (F.from_json("seq", sequence) if isinstance(sequence, T.StructType)
                       else F.col("seq").cast(sequence or T.StringType())).alias(TSEQUENCE),
                      F.timestamp_micros("at").alias(AT))
