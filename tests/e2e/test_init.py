"""Onboarding at scale: `ingest init` writes a pipeline file per topic from what the broker and the schemas folder
know, the files inherit conf/defaults.yaml and stay a few lines long, `onboard --all` accepts them unchanged and
`run --all` ingests each topic exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable, QueryBuilder

from ingestion.dev.samples import produce_orders

pytestmark = pytest.mark.e2e

INGEST = str(Path(sys.executable).parent / "ingest")
REPO = Path(__file__).resolve().parents[2]


def _coordinates(table: Path) -> list[tuple[int, int]]:
    rows = pa.table(QueryBuilder().register("t", DeltaTable(str(table))).execute(
        'SELECT "_kafka_partition", "_kafka_offset" FROM t'))
    return sorted(zip(rows["_kafka_partition"].to_pylist(), rows["_kafka_offset"].to_pylist(), strict=True))


def test_init_writes_short_files_that_onboard_and_run_take_unchanged(kafka_servers, make_topic, orders_schema,
                                                                     tmp_path: Path) -> None:
    conf, schemas, lake = tmp_path / "conf", tmp_path / "schemas", tmp_path / "lake"
    conf.mkdir()
    (conf / "defaults.yaml").write_text(json.dumps({
        "kafka": {"bootstrap.servers": kafka_servers},
        "key": {"format": "string"},
        "source": {"maxOffsetsPerTrigger": 100},
        "sink": {"root": str(lake), "trigger": "2 seconds"},
    }))
    topics = [make_topic(partitions=p) for p in (1, 2, 3)]
    produced = {}
    for topic in topics:
        (schemas / f"{topic}-value").mkdir(parents=True)
        (schemas / f"{topic}-value" / "1.avsc").write_text((REPO / "schemas/orders-value/1.avsc").read_text())
        produced[topic] = produce_orders(kafka_servers, topic, 60, schema_id=1, schema=orders_schema)
    keyed = make_topic(partitions=1)
    for subject in (f"{keyed}-value", f"{keyed}-key"):
        (schemas / subject).mkdir()
        (schemas / subject / "1.avsc").write_text((REPO / "schemas/orders-value/1.avsc").read_text())
    env = {**os.environ, "INGEST_CONF_DIR": str(conf), "INGEST_SCHEMAS_DIR": str(schemas)}

    def ingest(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([INGEST, *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)

    done = ingest("init", *topics)
    assert done.returncode == 0, done.stderr
    files = [conf / "pipelines" / f"{topic}.yaml" for topic in topics]
    for path, partitions in zip(files, (1, 2, 3), strict=True):
        text = path.read_text()
        assert len([line for line in text.splitlines() if not line.startswith("#")]) <= 4, text
        assert "#   - {name: " in text, text  # a commented expectation to start from
        assert f": {partitions} partitions; values by subject {path.stem}-value (1 version, newest id 1)" in text, text
    assert "next: ingest onboard" in done.stdout

    before = files[0].read_text()
    example = before.replace("# expectations:", "expectations:").replace("#   - {", "  - {")
    assert yaml.safe_load(example)["expectations"] == [  # uncommented, a rule on the schema's first field
        {"name": "order_id_given", "expect": "order_id IS NOT NULL", "onViolation": "warn"}]
    files[0].write_text(before + "# a user's note\n")
    done = ingest("init", topics[0])
    assert done.returncode == 0 and "exists, left as it is" in done.stdout, done.stdout + done.stderr
    assert files[0].read_text() == before + "# a user's note\n"

    done = ingest("init", topics[0] + "x")  # a typo: the closest topic is named
    assert done.returncode == 1 and f"closest: {topics[0]}" in done.stderr, done.stderr
    assert done.stderr.rstrip().endswith(f"or write {conf / 'pipelines' / topics[0]}x.yaml yourself and run "
                                         f"`ingest onboard {topics[0]}x --create-topic`"), done.stderr
    assert not (conf / "pipelines" / f"{topics[0]}x.yaml").exists()

    done = ingest("init", keyed, "--dry-run")  # a <topic>-key subject makes the key Avro
    assert done.returncode == 0 and f"key: {{format: avro}}  # subject {keyed}-key exists" in done.stdout
    assert not (conf / "pipelines" / f"{keyed}.yaml").exists()

    done = ingest("onboard", "--all")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    done = ingest("run", "--all", "--available-now")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    for topic in topics:
        assert _coordinates(lake / "tables" / topic) == sorted((p.partition, p.offset) for p in produced[topic])
