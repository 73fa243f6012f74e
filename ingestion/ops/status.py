"""Where a pipeline stands, per partition: Kafka's end offset against the offsets the table records.

Everything comes from the table and from Kafka, not from the checkpoint or a running process, so `ingest
status` answers the same whether the pipeline runs or not.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from ingestion import kafka
from ingestion.config import PipelineConfig
from ingestion.delta import ledger, reads
from ingestion.delta.ledger import BatchKind


@dataclass(frozen=True)
class PartitionStatus:
    topic: str
    partition: int
    latest_offset: int  # Kafka's end offset: the offset the next record will get
    ingested_up_to: int  # the next offset the table expects (last recorded + 1), 0 when none
    lag_records: int
    lag_seconds: float | None  # age of the oldest record not yet ingested; 0 when caught up
    quarantined: int


@dataclass(frozen=True)
class PipelineStatus:
    pipeline: str
    topic: str
    table: str
    table_version: int | None
    last_batch_id: int | None
    last_batch_at: str | None
    lag_records: int
    partitions: list[PartitionStatus]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def pipeline_status(spark: SparkSession, config: PipelineConfig, now: dt.datetime | None = None) -> PipelineStatus:
    now = now or dt.datetime.now(dt.UTC)
    settings = config.kafka_client_settings()
    records = ledger.history(spark, config.table_path)
    ingested = ledger.next_offsets(records).get(config.topic, {})
    marks = kafka.watermarks(settings, config.topic)
    quarantined = _quarantined(spark, config)
    behind = {p: max(0, high - ingested.get(str(p), low)) for p, (low, high) in marks.items()}
    ages = _ages(settings, config.topic, {p: ingested.get(str(p), low) for p, (low, _) in marks.items()
                                          if behind[p]}, now)
    partitions = [
        PartitionStatus(config.topic, p, high, ingested.get(str(p), 0), behind[p],
                        ages.get(p) if behind[p] else 0.0, quarantined.get(p, 0))
        for p, (low, high) in sorted(marks.items())
    ]
    stream = [r for r in records if r.kind == BatchKind.STREAM]
    last = stream[-1] if stream else None
    return PipelineStatus(
        config.name, config.topic, config.table_path, ledger.table_version(spark, config.table_path),
        last.batch_id if last else None,
        last.committed_at.isoformat() if last and last.committed_at else None,
        sum(behind.values()), partitions,
    )


def _quarantined(spark: SparkSession, config: PipelineConfig) -> dict[int, int]:
    table = reads.read_table(spark, config.quarantine_path)
    if table is None:
        return {}
    rows = (table.where(F.col("_kafka_topic") == config.topic).groupBy("_kafka_partition").count().collect())
    return {int(r["_kafka_partition"]): int(r["count"]) for r in rows}


def _ages(settings: dict[str, Any], topic: str, next_offsets: dict[int, int], now: dt.datetime) -> dict[int, float]:
    """Seconds since the Kafka timestamp of the first record not ingested yet, per lagging partition."""
    if not next_offsets:
        return {}
    from confluent_kafka import TopicPartition

    consumer = kafka.consumer(settings, "ingest-status", **{"enable.partition.eof": True})
    ages: dict[int, float] = {}
    try:
        consumer.assign([TopicPartition(topic, p, o) for p, o in next_offsets.items()])
        deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=10)
        while len(ages) < len(next_offsets) and dt.datetime.now(dt.UTC) < deadline:
            msg = consumer.poll(1.0)
            partition = msg.partition() if msg is not None and not msg.error() else None
            if msg is None or partition is None or partition in ages:
                continue
            _, millis = msg.timestamp()
            ages[partition] = max(0.0, now.timestamp() - millis / 1000)
            consumer.pause([TopicPartition(topic, partition)])
    finally:
        consumer.close()
    return ages


def render(status: PipelineStatus) -> str:
    lines = [f"{status.pipeline}: topic {status.topic}, table version {status.table_version}, "
             f"last batch {status.last_batch_id} at {status.last_batch_at}, lag {status.lag_records} records",
             f"  {'partition':>9} {'latest':>10} {'ingested':>10} {'lag':>8} {'lag s':>8} {'quarantined':>11}"]
    for p in status.partitions:
        seconds = "-" if p.lag_seconds is None else f"{p.lag_seconds:.1f}"
        lines.append(f"  {p.partition:>9} {p.latest_offset:>10} {p.ingested_up_to:>10} {p.lag_records:>8} "
                     f"{seconds:>8} {p.quarantined:>11}")
    return "\n".join(lines)
