"""The Kafka side of a pipeline: Spark Kafka source options, under the names Spark documents."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from ingestion.kafka.clients import ISOLATION, READ_COMMITTED
from ingestion.stream.context import PipelineContext

# How long the broker may hold a fetch that finds no new record (the Java client's default is 500 ms). A task's
# consumer prefetches past the batch's end; the next batch seeks it back and must first wait for that fetch's
# answer, so every batch of a caught-up stream waited about 500 ms (docs/performance.md#fetches-held-at-the-end).
# Only a consumer inside a task fetches, so a short wait costs no steady stream of empty fetches.
FETCH_MAX_WAIT_MS = "20"

# Options the Spark Kafka source manages itself and refuses as `kafka.*` (see its integration guide).
SPARK_MANAGED = ("group.id", "auto.offset.reset", "key.deserializer", "value.deserializer",
                 "enable.auto.commit", "interceptor.classes")


def with_timestamp_strategy(options: dict[str, str]) -> dict[str, str]:
    """With a start by time, a partition without a record at or after it starts at its end
    (`startingOffsetsByTimestampStrategy: latest`): Spark's default, `error`, fails the query, and with many
    topics a quiet one would stop them all."""
    if "startingTimestamp" in options or "startingOffsetsByTimestamp" in options:
        options["startingOffsetsByTimestampStrategy"] = "latest"
    return options


def kafka_options(ctx: PipelineContext, starting_offsets: str | None = None) -> dict[str, str]:
    """Options for `spark.readStream.format("kafka")`: the context's Java client settings as `kafka.*` (SASL
    credentials as a JAAS line, PEM trust and key stores: `security.java_settings`, bootstrap resolved)."""
    config = ctx.config
    options = {f"kafka.{key}": value for key, value in ctx.kafka.java.items() if key not in SPARK_MANAGED}
    # Records of aborted transactions never land: Kafka's Java client reads uncommitted records by default.
    options.setdefault(f"kafka.{ISOLATION}", READ_COMMITTED)
    options.setdefault("kafka.fetch.max.wait.ms", FETCH_MAX_WAIT_MS)
    if config.topic_pattern:  # topics created later that match are read from their start, at the next trigger
        options["subscribePattern"] = config.topic_pattern
    else:
        options["subscribe"] = ",".join(config.topics)
    if starting_offsets:  # a position the table or a rewind decided: it wins over the configured start
        options["startingOffsets"] = starting_offsets
    elif config.source.starting_timestamp is not None:
        options["startingTimestamp"] = str(config.source.starting_timestamp)
    elif config.source.starting_offsets_by_timestamp:
        options["startingOffsetsByTimestamp"] = config.source.starting_offsets_by_timestamp
    else:
        options["startingOffsets"] = config.source.starting_offsets
    with_timestamp_strategy(options)
    options["failOnDataLoss"] = str(config.source.fail_on_data_loss).lower()
    options["includeHeaders"] = "true"
    if config.source.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(config.source.max_offsets_per_trigger)
    if config.source.min_partitions:
        options["minPartitions"] = str(config.source.min_partitions)
    return options


def read_stream(spark: SparkSession, ctx: PipelineContext, starting_offsets: str | None = None) -> DataFrame:
    reader = spark.readStream.format("kafka")
    for key, value in kafka_options(ctx, starting_offsets).items():
        reader = reader.option(key, value)
    return reader.load()
