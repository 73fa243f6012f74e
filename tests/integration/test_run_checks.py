"""`ingest run` makes `onboard --dry-run`'s checks before it creates anything: a config mistake found by them
leaves no table, checkpoint, catalog entry or MLflow run behind, and no JVM was started to find it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ingestion.dev.samples import produce_orders
from tests.conftest import pipeline_yaml
from tests.helpers import ingest_here

pytestmark = pytest.mark.integration

INGEST = str(Path(sys.executable).parent / "ingest")


@pytest.mark.parametrize(("section", "message"), [
    ("  catalogTable: orders_bronze\nsilver:\n  key: [customer]\n  catalogTable: silver_orders\n",
     "key 'silver.key' names 'customer', which is not a field of the row"),
    ("silver:\n  key: [order_id]\n  sequenceBy: version\n", "key 'silver.sequenceBy' names 'version'"),
])
def test_a_wrong_silver_section_stops_a_run_before_anything_exists(
        kafka_servers, make_topic, orders_schema, tmp_path: Path, section: str, message: str) -> None:
    topic = make_topic(partitions=1)
    produce_orders(kafka_servers, topic, 5, schema_id=1, schema=orders_schema)
    path = pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers, extra=section)
    home = tmp_path / "home"
    env = {**os.environ, "JAVA_HOME": "/nonexistent-java", "INGEST_HOME": str(home)}  # a JVM started would fail
    env.pop("MLFLOW_TRACKING_URI", None)
    done = subprocess.run([INGEST, "run", str(path), "--available-now"], capture_output=True, text=True, env=env,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: ") and message in lines[0], done.stderr
    assert not (tmp_path / "tables").exists()  # no bronze, quarantine or silver table
    assert not (tmp_path / "checkpoints").exists()  # no checkpoint, no writer lease
    assert not (home / "mlflow").exists()  # no MLflow run (nor its store)
    assert not (home / "metastore").exists() and not (home / "warehouse").exists()  # no catalog entry

    if "catalogTable" in section:
        return  # (onboard checks catalog names with the JVM before the silver section)
    # The same section on `onboard --dry-run` says the same line.
    dry = subprocess.run([INGEST, "onboard", str(path), "--dry-run"], capture_output=True, text=True, env=env,
                         timeout=120, cwd=tmp_path)
    assert dry.returncode == 1 and dry.stderr.strip().splitlines() == lines, dry.stdout + dry.stderr


def test_a_topic_that_does_not_exist_stops_a_run_before_anything_exists_naming_the_closest_and_the_cure(
        kafka_servers, make_topic, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topic = make_topic(partitions=1)
    path = pipeline_yaml(tmp_path, topic=topic + "x", servers=kafka_servers, name="typo")
    code, _, err = ingest_here(capsys, "run", str(path), "--available-now")
    assert code == 1
    assert err.strip().splitlines() == [
        f"error: topic '{topic}x' does not exist on {kafka_servers} (Broker: Unknown topic or partition); closest: "
        f"{topic}; create it, or run `ingest onboard typo --create-topic`"], err
    assert not (tmp_path / "tables").exists() and not (tmp_path / "checkpoints").exists()
    code, _, err = ingest_here(capsys, "onboard", str(path))  # onboard's own cure
    assert code == 1 and err.strip().endswith("create it, or pass --create-topic (3 partitions, replication 1 from "
                                              "topicSettings)"), err
