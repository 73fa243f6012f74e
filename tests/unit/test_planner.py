"""The planner: a batch's engine, chosen once from its offsets, with the reason."""

from __future__ import annotations

import logging

import pytest

from ingestion.runtime.batch_plan import OffsetRange
from ingestion.stream.batch import WritePath
from ingestion.stream.planner import Planner, plan


def _spans(*sizes: int) -> list[OffsetRange]:
    return [OffsetRange("t", p, 100, 100 + n) for p, n in enumerate(sizes)]


def test_a_batch_up_to_the_limit_is_the_drivers_and_a_larger_one_sparks() -> None:
    assert plan(_spans(600, 400), 1000) == plan(_spans(1000), 1000)
    assert plan(_spans(600, 400), 1000).engine is WritePath.DRIVER
    larger = plan(_spans(600, 401), 1000)
    assert larger.engine is WritePath.SPARK
    assert larger.reason == "1001 offsets, more than sink.directWriteMaxOffsets (1000)"
    assert plan(_spans(1), 0).engine is WritePath.SPARK and plan(None, 1000).engine is WritePath.SPARK


def test_the_reason_is_logged_when_the_engine_changes(caplog: pytest.LogCaptureFixture) -> None:
    planner = Planner("orders", 1000)
    with caplog.at_level(logging.INFO, logger="ingestion.stream.planner"):
        for batch_id, size in enumerate((5, 7, 5000, 6000, 3)):
            planner(_spans(size), batch_id)
    assert [r.getMessage() for r in caplog.records] == [
        "orders batch 0: written by the driver: 5 offsets, at most sink.directWriteMaxOffsets (1000)",
        "orders batch 2: written by Spark: 5000 offsets, more than sink.directWriteMaxOffsets (1000)",
        "orders batch 4: written by the driver: 3 offsets, at most sink.directWriteMaxOffsets (1000)"]
