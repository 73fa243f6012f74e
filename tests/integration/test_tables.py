"""The bronze table a pipeline creates: Delta statistics on the columns that skip files, not on every column."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from delta.tables import DeltaTable

from ingestion.config import load_pipeline
from ingestion.delta import tables
from ingestion.dev.samples import produce_orders
from ingestion.stream import context, pipeline, setup
from tests.conftest import pipeline_yaml

pytestmark = pytest.mark.integration

# The orders schema's whole numbers and times (customer_id, placed_at), after the Kafka and ingest columns; not its
# strings, enum, decimal, array or optional note.
ORDERS_STATS = ["_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_batch_id",
                "_ingested_at", "customer_id", "placed_at"]


def _file_stats(table: str) -> list[dict[str, object]]:
    """The statistics of every data file added to the table, as its commits wrote them."""
    found = []
    for commit in sorted(Path(table, "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            add = json.loads(line).get("add")
            if add and add.get("stats"):
                found.append(json.loads(add["stats"]))
    return found


def test_bronze_has_statistics_on_coordinates_times_and_whole_numbers(spark, kafka_servers, make_topic,
                                                                      orders_schema, tmp_path: Path) -> None:
    topic = make_topic(partitions=2)
    produce_orders(kafka_servers, topic, 40, schema_id=1, schema=orders_schema)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers))

    pipeline.run(spark, config, available_now=True)

    properties = DeltaTable.forPath(spark, config.table_path).detail().first()["properties"]
    assert properties[tables.STATS_PROPERTY] == ",".join(ORDERS_STATS)
    stats = _file_stats(config.table_path)
    assert stats and sum(int(s["numRecords"]) for s in stats) == 40  # the writer's count check reads these
    for s in stats:
        assert sorted(s["minValues"]) == sorted(ORDERS_STATS)
        assert sorted(s["nullCount"]) == sorted(ORDERS_STATS)
    quarantine = DeltaTable.forPath(spark, config.quarantine_path).detail().first()["properties"]
    assert tables.STATS_PROPERTY not in quarantine  # few rows, Delta's defaults


def test_partition_columns_and_configured_statistics_are_left_out(spark, kafka_servers, tmp_path: Path) -> None:
    spec = setup.resolver(spark, context.known(load_pipeline(pipeline_yaml(tmp_path / "a", topic="t",
                                                                        servers=kafka_servers)))).spec
    partitioned = load_pipeline(pipeline_yaml(tmp_path / "b", topic="t", servers=kafka_servers,
                                              sink="  partitionBy: [_kafka_partition]\n"))
    bronze_plan = setup.plans(spark, partitioned, spec)[0]
    assert bronze_plan.properties[tables.STATS_PROPERTY] == ",".join(c for c in ORDERS_STATS
                                                                     if c != "_kafka_partition")

    for key in tables.STATS_PROPERTIES:  # either of Delta's two settings means the user chose
        configured = load_pipeline(pipeline_yaml(tmp_path / key, topic="t", servers=kafka_servers,
                                                 sink=f"  tableProperties:\n    {key}: '5'\n"))
        properties = setup.plans(spark, configured, spec)[0].properties
        assert properties.get(key) == "5"
        assert set(properties) & set(tables.STATS_PROPERTIES) == {key}
