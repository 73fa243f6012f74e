"""A run reads each table's state once where it can: the run's checks read bronze and quarantine with delta-rs and
hand them down (the schemas resolved against bronze's columns, the tables' plans, the tables `prepare` makes),
and the facts read bronze again under the writer lock; nothing before the first batch reads them again. Counted by
a spy on delta-rs's table opens (each still opens the table)."""

from __future__ import annotations

import collections
import traceback
from pathlib import Path
from typing import Any

import pytest

from ingestion.config import load_pipeline
from ingestion.dev.samples import produce_orders
from ingestion.stream import launch
from tests.conftest import pipeline_yaml

pytestmark = pytest.mark.integration


def test_a_run_reads_bronzes_state_twice_before_its_first_batch(spark: Any, kafka_servers: str, make_topic: Any,
                                                                 orders_schema: Any, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import deltalake

    opened: collections.Counter[tuple[str, str]] = collections.Counter()
    table_init = deltalake.DeltaTable.__init__

    def spied(self: Any, table_uri: Any, *args: Any, **kwargs: Any) -> None:
        callers = [f.name for f in traceback.extract_stack()[:-1] if "/ingestion/" in f.filename]
        opened[(Path(str(table_uri)).name, callers[-1] if callers else "?")] += 1
        table_init(self, table_uri, *args, **kwargs)

    monkeypatch.setattr(deltalake.DeltaTable, "__init__", spied)
    topic = make_topic(partitions=2)
    config = load_pipeline(pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers))
    for run in range(2):
        produce_orders(kafka_servers, topic, 20, schema_id=1, schema=orders_schema, first_seq=run * 20)
        opened.clear()
        ran = launch.run(spark, config, available_now=True)
        assert sum(r.rows for r in ran.batches) == 20
    # the second run, on tables that exist: bronze's state read by the checks and by the facts, nothing else
    states = {name: n for (name, caller), n in opened.items() if caller == "state"}
    assert states == {"orders": 2, "orders_quarantine": 1}, dict(opened)
