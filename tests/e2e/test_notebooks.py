"""The analyst notebooks run headless, top to bottom, against a table the test fills, and find what is there.

Both run in one kernel, one after the other, each from an empty namespace (`%reset -f`), so the kernel's start and
its Spark session (the JVM, the catalog's connection) are paid once: the second notebook's `get_session` cell is
the first one's, and a name it used without defining still fails it."""

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


def _execute(*runs: tuple[str, Path]) -> list[dict[str, Any]]:
    """Run the notebooks (name, summary file) in one kernel, in order, each from an empty namespace, with
    INGEST_NOTEBOOK_SUMMARY naming its summary file; the summaries they wrote."""
    cells = []
    for name, summary in runs:
        cells.append(nbformat.v4.new_code_cell(
            f"%reset -f\nimport os\nos.environ['INGEST_NOTEBOOK_SUMMARY'] = {str(summary)!r}\ndel os"))
        cells += nbformat.read(REPO / "notebooks" / name, as_version=4).cells
    first = nbformat.read(REPO / "notebooks" / runs[0][0], as_version=4)
    NotebookClient(nbformat.v4.new_notebook(cells=cells, metadata=first.metadata), timeout=300,
                   kernel_name="python3", resources={"metadata": {"path": str(REPO)}}).execute()
    return [dict(json.loads(summary.read_text())) for _, summary in runs]


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
        _both(tmp_path, produced, records)
    finally:
        metastore.stop()


def _both(tmp_path: Path, produced: list[Any], records: list[Any]) -> None:
    querying, travel = _execute(("querying_bronze.ipynb", tmp_path / "querying.json"),
                                ("time_travel.ipynb", tmp_path / "travel.json"))
    assert querying["rows"] == 150
    assert querying["by_partition"] == {str(p): n for p, n in Counter(x.partition for x in produced).items()}
    assert querying["keys"] == len({x.key for x in produced})
    assert querying["minutes"] >= 1

    assert travel["versions"] == [r.version for r in records] == list(range(1, len(records) + 1))
    assert travel["rows_as_of_first_version"] == travel["rows_as_of_first_commit_time"] == records[0].rows
    assert travel["added_between_first_and_last"] == 150 - records[0].rows
    assert travel["removed_between_first_and_last"] == 0
    assert travel["silver_rows_from_last_version"] == records[-1].rows > 0
