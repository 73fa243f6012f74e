"""The benchmark report's verdict on the issue's targets (benchmarks/bench_report.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench_report


@pytest.mark.parametrize(("trigger", "seconds"), [("1 second", 1.0), ("10 seconds", 10.0), ("500 ms", 0.5),
                                                  ("2 minutes", 120.0), ("250 milliseconds", 0.25)])
def test_trigger_seconds(trigger: str, seconds: float) -> None:
    assert bench_report.trigger_seconds(trigger) == seconds


def _results(ratio: float, p99_ms: float, rate_from: str, rss_ratio: float) -> dict[str, Any]:
    return {
        "ratios": {"ours/baseline": {"records_per_s": ratio}},
        "freshness": [{"trigger": "1 second", "target_rate": 44664.4, "rate_from": rate_from,
                       "latency": {"to_commit_visible": {"p99_ms": p99_ms}}}],
        "memory": {"max_offsets_per_trigger": 50_000, "ratio_large_to_small": {"peak_jvm_rss_mb": rss_ratio},
                   "runs": [{"records": 1_000_000}, {"records": 10_000_000}]},
    }


def test_targets_met_and_missed() -> None:
    half = "half of ours' median records/s in this run"
    met = bench_report.targets(_results(1.09, 2216.0, half, 0.98))
    assert [(t["measured"], t["met"]) for t in met] == [
        ("1.09", True), (f"2.22 s at 44,664 records/s ({half})", True), ("0.98x", True)]
    assert met[1]["target"] == "freshness p99 <= trigger + 2 s = 3 s at half of ours' rate"
    assert met[2]["target"] == ("peak JVM RSS flat (within 10%) from 1,000,000 to 10,000,000 records at "
                                "maxOffsetsPerTrigger 50,000")

    missed = bench_report.targets(_results(0.95, 3900.0, half, 1.63))
    assert [t["met"] for t in missed] == [False, False, False]
    table = "\n".join(bench_report.markdown_targets(missed))
    assert "| freshness p99 <= trigger + 2 s = 3 s at half of ours' rate | 3.90 s at 44,664" in table
    assert table.count("| **no** |") == 3


def test_a_rate_given_by_hand_is_not_judged() -> None:
    found = bench_report.targets(_results(1.2, 9000.0, "--fresh-rate", 1.0))
    assert found[1]["met"] is None
    assert "| 9.00 s at 44,664 records/s (--fresh-rate) | n/a (not the issue's load) |" in "\n".join(
        bench_report.markdown_targets(found))
