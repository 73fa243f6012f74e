"""The stages after a batch's decode (`stream/stages.py`), the same for every engine: a `fail` rule refuses the batch
before any commit, `sink.onError: fail` names the first bad record, quarantine commits before bronze, the ledger
records carry the batch's ranges and the outcome counts what was committed."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from ingestion.config import parse_pipeline
from ingestion.decode.resolver import SchemaResolver
from ingestion.delta.ledger import BatchRecord
from ingestion.delta.rs_append import Appended
from ingestion.errors import DecodeError, ExpectationError
from ingestion.schema.registry import SchemaFileSource
from ingestion.stream import stages
from ingestion.stream.batch import Targets, WritePath


def _targets(tmp_path: Path, on_error: str = "quarantine") -> Targets:
    file = tmp_path / "orders.schema.json"
    file.write_text(json.dumps({"type": "object", "properties": {"id": {"type": "integer"}}}))
    config = parse_pipeline({"name": "orders", "topic": "orders",
                             "value": {"format": "json", "schemaFile": str(file)},
                             "sink": {"onError": on_error}}, tmp_path / "orders.yaml")
    return Targets(config, SchemaResolver(config, SchemaFileSource(str(file))), "app")


def _stats(failed: int) -> list[dict[str, Any]]:
    return [{"topic": "orders", "partition": 0, "first": 10, "last": 19, "count": 10, "failed": failed,
             "failed_first": 12 if failed else None, "failed_last": 12 + failed - 1 if failed else None,
             "schema_ids": [0], "unknown_ids": [], "bytes": 500, "max_timestamp": None}]


class _Engine:
    """An engine that records the commits it is asked for (the stages' contract, without a table)."""

    def __init__(self) -> None:
        self.done: list[tuple[str, BatchRecord | None]] = []

    def commits(self) -> stages.Commits:
        def bronze(record: BatchRecord) -> Appended:
            self.done.append(("bronze", record))
            return Appended(7, True)

        return stages.Commits(bronze, lambda record: self.done.append(("quarantine", record)),
                              lambda: self.done.append(("discard", None)))


def test_quarantine_commits_before_bronze_each_with_its_ledger_record(tmp_path: Path) -> None:
    engine = _Engine()
    result = stages.finish(_targets(tmp_path), stages.Decoded(_stats(failed=2)), engine.commits(), batch_id=4,
                           started=time.monotonic(), path=WritePath.DRIVER)
    assert [name for name, _ in engine.done] == ["quarantine", "bronze"]
    quarantine, bronze = (record for _, record in engine.done)
    assert quarantine is not None and bronze is not None
    assert (quarantine.app_id, quarantine.rows, quarantine.ranges[0].first) == ("app.quarantine", 2, 12)
    assert (bronze.app_id, bronze.batch_id, bronze.rows, bronze.quarantined) == ("app", 4, 8, 2)
    assert (result.rows, result.quarantined, result.version, result.committed, result.path, result.bytes) \
        == (8, 2, 7, True, WritePath.DRIVER, 500)


def test_a_batch_without_failures_commits_bronze_only(tmp_path: Path) -> None:
    engine = _Engine()
    result = stages.finish(_targets(tmp_path), stages.Decoded(_stats(failed=0), value_bytes=900),
                           engine.commits(), batch_id=5, started=time.monotonic(), app_id="app.start")
    assert [(name, record.app_id if record else None) for name, record in engine.done] == [("bronze", "app.start")]
    assert (result.rows, result.quarantined, result.bytes) == (10, 0, 900)


def test_a_fail_rule_refuses_the_batch_before_any_commit(tmp_path: Path) -> None:
    engine = _Engine()
    with pytest.raises(ExpectationError, match="positive_id"):
        stages.finish(_targets(tmp_path), stages.Decoded(_stats(failed=0), rule_failure="expectation 'positive_id' "
                                                         "failed for record orders/0@13"),
                      engine.commits(), batch_id=6, started=time.monotonic())
    assert engine.done == [("discard", None)]


def test_on_error_fail_names_the_first_bad_record_and_commits_nothing(tmp_path: Path) -> None:
    engine, asked = _Engine(), []

    def first() -> str:
        asked.append(1)
        return "record orders/0@12: JsonDecodeError: not JSON"

    with pytest.raises(DecodeError, match=r"cannot decode record orders/0@12: JsonDecodeError: not JSON "
                                          r"\(sink.onError: fail\)"):
        stages.finish(_targets(tmp_path, "fail"), stages.Decoded(_stats(failed=1), first_failure=first),
                      engine.commits(), batch_id=7, started=time.monotonic())
    assert engine.done == [("discard", None)] and asked == [1]
    # under the default (quarantine) the first failure is never asked for: a Spark engine computes it by a query
    asked.clear()
    stages.finish(_targets(tmp_path), stages.Decoded(_stats(failed=1), first_failure=first), _Engine().commits(),
                  batch_id=7, started=time.monotonic())
    assert asked == []
