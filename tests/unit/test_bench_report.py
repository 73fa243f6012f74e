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


def _results(ratio: float, p99_ms: float, rate_from: str, rss_ratio: float, *, source: float = 0.4,
             total_mb: float = 1200.0, admin_s: float = 0.9) -> dict[str, Any]:
    return {
        "ratios": {"ours/baseline": {"records_per_s": ratio}, "ours/limit_spark": {"records_per_s": source}},
        "runs": [{"kind": "ours", "peak_total_rss_mb": total_mb - 100}, {"kind": "baseline", "peak_total_rss_mb": 9e9}],
        "freshness": [{"trigger": "1 second", "target_rate": 44664.4, "rate_from": rate_from,
                       "latency": {"to_commit_visible": {"p99_ms": p99_ms}}}],
        "memory": {"max_offsets_per_trigger": 50_000, "ratio_large_to_small": {"peak_jvm_rss_mb": rss_ratio},
                   "runs": [{"records": 1_000_000, "peak_total_rss_mb": total_mb - 50},
                            {"records": 10_000_000, "peak_total_rss_mb": total_mb}]},
        "admin": {"runs": 5, "commits": 2000, "quarantined": 120, "commands": {
            "status": {"delta-rs": {"median_s": admin_s}, "spark": {"median_s": 15.2}},
            "history": {"delta-rs": {"median_s": admin_s / 2}}}},
    }


def test_targets_met_and_missed() -> None:
    half = "half of ours' median records/s in this run"
    met = bench_report.targets(_results(1.6, 2216.0, half, 0.98, source=0.52))
    assert [(t["measured"], t["met"]) for t in met] == [
        ("1.60", True), ("0.52", True), ("1,200 MiB (the largest of 3 runs)", True),
        ("0.90 s (Spark: 15.20 s)", True), ("0.45 s (Spark: – s)", True),
        (f"2.22 s at 44,664 records/s ({half})", True), ("0.98x", True)]
    assert met[2]["target"] == "ours' peak RSS (JVM, Python driver and workers) <= 1,536 MiB"
    assert met[3]["target"] == "`ingest status` median of 5 <= 2 s on 2,000 commits, 120 quarantined rows"
    assert met[5]["target"] == "freshness p99 <= trigger + 2 s = 3 s at half of ours' rate"
    assert met[6]["target"] == ("peak JVM RSS flat (within 10%) from 1,000,000 to 10,000,000 records at "
                                "maxOffsetsPerTrigger 50,000")

    missed = bench_report.targets(_results(1.16, 3900.0, half, 1.63, total_mb=1600, admin_s=3.0))
    assert [t["met"] for t in missed] == [False, False, False, False, True, False, False]  # history: 1.5 s
    table = "\n".join(bench_report.markdown_targets(missed))
    assert "| freshness p99 <= trigger + 2 s = 3 s at half of ours' rate | 3.90 s at 44,664" in table
    assert table.count("| **no** |") == 6


def test_ratios_are_reported_for_every_comparison_both_sides_of_which_ran() -> None:
    summary = {kind: {"records_per_s": rate, "steady_records_per_s": None, "wall_records_per_s": rate / 2,
                      "cpu_s": 1000 / rate}
               for kind, rate in (("ours", 90.0), ("baseline", 60.0), ("peer", 45.0), ("ours_1core", 50.0),
                                  ("peer_1core", 25.0))}
    found = bench_report.ratios(summary)
    assert found["ours/baseline"] == {"records_per_s": 1.5, "steady_records_per_s": None, "wall_records_per_s": 1.5,
                                      "cpu_s": 0.667}  # whole-tree CPU seconds, the steadier measure
    assert found["ours/peer"]["records_per_s"] == 2.0
    assert found["ours_1core/peer_1core"]["records_per_s"] == 2.0
    assert "ours/limit_spark" not in found


def test_a_rate_given_by_hand_is_not_judged() -> None:
    found = [t for t in bench_report.targets(_results(1.2, 9000.0, "--fresh-rate", 1.0))
             if t["target"].startswith("freshness")]
    assert found[0]["met"] is None
    assert "| 9.00 s at 44,664 records/s (--fresh-rate) | n/a (not the issue's load) |" in "\n".join(
        bench_report.markdown_targets(found))


def test_the_fixed_cost_and_rate_are_fitted_over_every_run() -> None:
    fit = bench_report.fit_fixed_cost([(200_000, 13.8), (1_000_000, 30.2), (200_000, 14.2), (1_000_000, 29.8)])
    assert (fit["fixed_s"], fit["records_per_s"], fit["points"]) == (10.0, 50_000.0, 4)
    assert bench_report.fit_fixed_cost([(1_000_000, 30.0)]) == {"points": 1}  # one size: no line


def test_the_dirty_topic_is_compared_with_the_clean_one() -> None:
    runs = [{"kind": "ours", "ok": True, "records_per_s": 60_000.0}, {"kind": "ours_dirty", "ok": True,
                                                                       "records_per_s": 57_000.0}]
    ratios = bench_report.ratios(bench_report.summarize(runs))
    assert ratios["ours_dirty/ours"]["records_per_s"] == 0.95
