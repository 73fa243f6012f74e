"""The downstream recipe of docs/downstream.md, run as written: a silver stream from a version found by a Kafka
offset, a batch read of the rows between two versions, and after a rewind of bronze: the silver stream stops, the
redo removes what bronze took back, and silver ends equal to bronze, each record once."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from ingestion.config import load_pipeline
from ingestion.delta import catalog, ledger
from ingestion.dev.samples import produce_orders
from ingestion.ops import rewind
from ingestion.stream import pipeline
from tests.conftest import REPO, pipeline_yaml

pytestmark = pytest.mark.integration


def _recipe() -> dict[str, Any]:
    page = (REPO / "docs" / "downstream.md").read_text()
    namespace: dict[str, Any] = {}
    for block in re.findall(r"^```python\n(.*?)^```", page, re.M | re.S):
        exec(compile(block, "docs/downstream.md", "exec"), namespace)  # the documented recipe, as written
    return namespace


def _coordinates(frame: Any) -> list[tuple[int, int]]:
    return sorted((r["_kafka_partition"], r["_kafka_offset"]) for r in
                  frame.select("_kafka_partition", "_kafka_offset").collect())


def test_silver_reads_bronze_from_a_version_or_an_offset_and_redoes_what_a_rewind_took_back(
        spark, kafka_servers, make_topic, orders_schema, tmp_path: Path) -> None:
    recipe = _recipe()
    topic = make_topic(partitions=2)
    produced = produce_orders(kafka_servers, topic, 90, schema_id=1, schema=orders_schema)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers,
                                         extra="source:\n  maxOffsetsPerTrigger: 30\n"))
    pipeline.run(spark, config, available_now=True)
    records = ledger.history(spark, config.table_path)
    last = records[-1].version
    assert [r.version for r in records] == list(range(1, last + 1)) and last >= 3
    name = f"recipe_{uuid.uuid4().hex[:8]}.orders"
    catalog.register(spark, name, config.table_path)

    # A Kafka offset -> the version that holds it (the ledger), and the rows of versions 2..last two ways.
    second = records[1].ranges[0]
    assert recipe["version_holding"](config.table_path, second.partition, second.last) == 2
    assert recipe["version_holding"](config.table_path, second.partition, 10_000) is None
    wanted = sorted((x.partition, o) for r in records[1:] for x in r.ranges for o in range(x.first, x.last + 1))
    assert _coordinates(recipe["rows_between"](spark, name, 1, last)) == wanted
    silver = str(tmp_path / "silver")
    recipe["silver_stream"](spark, name, 2, str(tmp_path / "silver_cp"), silver)
    assert _coordinates(spark.read.format("delta").load(silver)) == wanted

    # Rewind bronze to version 1: the silver stream stops at the RESTORE instead of reading past it.
    rewind.rewind(spark, config, to_version=1)
    assert recipe["version_holding"](config.table_path, second.partition, second.last) is None  # undone
    with pytest.raises(Exception, match="DELTA_SOURCE_IGNORE_DELETE"):
        recipe["silver_stream"](spark, name, 2, str(tmp_path / "silver_cp"), silver)
    # The redo: drop what bronze took back, re-ingest, restart silver after the RESTORE: each record once.
    assert recipe["undo_rewound"](spark, name, silver) == len(wanted)
    pipeline.run(spark, config, available_now=True)
    restored = recipe["restore_version"](config.table_path)
    assert restored == last + 1
    again = next(r.version for r in ledger.history(spark, config.table_path) if (r.version or 0) > restored and any(
        x.partition == second.partition and x.first <= second.last <= x.last for x in r.ranges))
    assert recipe["version_holding"](config.table_path, second.partition, second.last) == again
    recipe["silver_stream"](spark, name, restored + 1, str(tmp_path / "silver_cp2"), silver)
    # Silver started at version 2: it holds again exactly what versions 2..last held, once; bronze holds every
    # record.
    assert _coordinates(spark.read.format("delta").load(silver)) == wanted
    assert _coordinates(spark.table(name)) == sorted((p.partition, p.offset) for p in produced)
