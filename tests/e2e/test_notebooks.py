"""The analyst notebooks run headless, top to bottom, against a table the test fills, and find what is there."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from ingestion.config import load_pipeline
from ingestion.delta import ledger
from ingestion.dev.samples import produce_orders
from ingestion.runtime import metastore
from ingestion.stream import pipeline
from tests.conftest import REPO, pipeline_yaml

pytestmark = pytest.mark.e2e


def _execute(name: str, summary: Path) -> dict[str, Any]:
    notebook = nbformat.read(REPO / "notebooks" / name, as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(REPO)}}).execute()
    return dict(json.loads(summary.read_text()))


def test_analyst_notebooks_execute_against_a_fresh_table(spark, kafka_servers, make_topic, orders_schema,
                                                         tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    topic = make_topic(partitions=3)
    produced = produce_orders(kafka_servers, topic, 150, schema_id=1, schema=orders_schema)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers,
                                         extra="source:\n  maxOffsetsPerTrigger: 50\n"))
    pipeline.run(spark, config, available_now=True)
    records = ledger.history(spark, config.table_path)
    # The notebooks find the table by name in the persistent catalog (their kernel's session); INGEST_TABLE gives
    # the test's table that name first. The metastore's server they start is stopped by its pid below.
    name = f"nb_{uuid.uuid4().hex[:8]}.orders"
    monkeypatch.setenv("INGEST_TABLE_NAME", name)
    monkeypatch.setenv("INGEST_TABLE", config.table_path)
    try:
        _both(tmp_path, produced, records, monkeypatch)
    finally:
        metastore.stop()


def _both(tmp_path: Path, produced: list[Any], records: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INGEST_NOTEBOOK_SUMMARY", str(tmp_path / "querying.json"))
    querying = _execute("querying_bronze.ipynb", tmp_path / "querying.json")
    assert querying["rows"] == 150
    assert querying["by_partition"] == {str(p): n for p, n in Counter(x.partition for x in produced).items()}
    assert querying["keys"] == len({x.key for x in produced})
    assert querying["minutes"] >= 1

    monkeypatch.setenv("INGEST_NOTEBOOK_SUMMARY", str(tmp_path / "travel.json"))
    travel = _execute("time_travel.ipynb", tmp_path / "travel.json")
    assert travel["versions"] == [r.version for r in records] == list(range(1, len(records) + 1))
    assert travel["rows_as_of_first_version"] == travel["rows_as_of_first_commit_time"] == records[0].rows
    assert travel["added_between_first_and_last"] == 150 - records[0].rows
    assert travel["removed_between_first_and_last"] == 0
    assert travel["silver_rows_from_last_version"] == records[-1].rows > 0
