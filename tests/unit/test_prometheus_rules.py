"""The shipped alert rules are valid Prometheus rules, and every alert passes its promtool unit tests
(tests/prometheus/rules_test.yml): `promtool` comes with Debian's prometheus package (`make prometheus`)."""

from __future__ import annotations

import shutil
import subprocess
from importlib import resources
from pathlib import Path

import pytest
import yaml

RULES = Path(str(resources.files("ingestion.stream") / "data" / "prometheus-rules.yml"))
TESTS = Path(__file__).parents[1] / "prometheus" / "rules_test.yml"

pytestmark = pytest.mark.debian  # promtool: in `make test`, not in `make test-unit` or `make test-fast`


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail("promtool is missing: `make prometheus` installs Debian's prometheus package")
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=120)


def test_promtool_checks_the_shipped_rules() -> None:
    done = _promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 6 rules found" in done.stdout


def test_every_alert_has_a_passing_promtool_unit_test() -> None:
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    tested = {t["alertname"] for case in yaml.safe_load(TESTS.read_text())["tests"] for t in case["alert_rule_test"]
              if t["exp_alerts"]}
    assert tested == alerts == {"IngestLagGrowing", "IngestNoCommit", "IngestQuarantineRate", "IngestPipelineFailed",
                                "IngestPipelineDown", "IngestSilverBehind"}
    done = _promtool("test", "rules", str(TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def _exported_names() -> set[str]:
    """Every sample name the exporter serves (with the `_total`, `_bucket`, ... suffixes)."""
    from ingestion.stream.batch import BatchResult
    from ingestion.stream.prometheus import Exporter

    exporter = Exporter()
    pipeline = exporter.pipeline("p", 1.0)
    pipeline.lag([("t", 0, 1, 1, 0, 0.0)])
    pipeline.batch(BatchResult(batch_id=0, rows=1, quarantined=0, bytes=1, version=1, committed=True, ranges=(),
                               max_timestamp=None, seconds=0.1))
    pipeline.silver(changes=3, inserted=1, updated=1, deleted=1, cross_partition_keys=0, lag_versions=0,
                    lag_seconds=0.0)
    return {s.name for family in exporter.registry.collect() for s in family.samples}


def test_the_rules_and_the_dashboard_use_only_metrics_the_exporter_serves() -> None:
    import json
    import re

    served = _exported_names()
    dashboard = json.loads((RULES.parent / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    used = {name for e in exprs for name in re.findall(r"\bingest_[a-z_]+\b", e)}
    assert used - served == set()
    assert {"ingest_lag_records", "ingest_lag_seconds", "ingest_rows_total", "ingest_quarantined_rows_total",
            "ingest_last_commit_timestamp_seconds", "ingest_batch_duration_seconds_bucket"} <= used
