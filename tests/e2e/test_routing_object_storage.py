"""A routed pipeline whose route tables live in a bucket (`s3a://` on the local S3 server, tests/s3_server.py):
`ingest run` writes two route tables and the quarantine there, and the read-only commands find and read them without
a JVM (in this process, which has none of its own): `status --json` lists both tables with their paths, versions
and rows, `verify` proves every offset once (and exits 1 once a row lands in the wrong table behind the pipeline's
back), `history` gives each table's commits, and a restart's Prometheus series of the tables come from their ledgers
there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable, write_deltalake

pytestmark = pytest.mark.e2e


def _read_only(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """A read-only command run in this process: exit code, stdout, stderr."""
    from ingestion.cli import main

    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_route_tables_in_s3_are_listed_verified_and_shown_by_the_read_only_commands(
        kafka_servers: str, make_topic: Any, make_bucket: Any, s3_server: Any, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    bucket, topic = make_bucket(), make_topic(partitions=2)
    schema = tmp_path / "event.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"kind": {"type": "string"},
                                                                   "id": {"type": "integer"}}}))
    producer = Producer({"bootstrap.servers": kafka_servers})
    for i in range(12):  # 8 sales, 3 refunds, 1 without a kind (quarantined)
        doc = {"id": i} if i == 11 else {"kind": "Refund" if i % 4 == 0 else "Sale", "id": i}
        producer.produce(topic, value=json.dumps(doc).encode(), partition=i % 2)
    producer.flush(30)
    config = tmp_path / "outbox.yaml"
    config.write_text(json.dumps({  # JSON is YAML
        "name": "outbox", "topic": topic, "kafka": {"bootstrap.servers": kafka_servers},
        "value": {"format": "json", "schemaFile": str(schema)},
        "sink": {"root": f"s3a://{bucket}/lake"}, "spark": s3_server.spark_settings(),
        "routing": {"by": "field", "field": "kind", "tables": {"Refund": "refunds"}},
    }))
    done = subprocess.run([sys.executable, "-m", "ingestion.cli", "run", str(config), "--available-now"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    paths = {t: f"s3a://{bucket}/lake/tables/{t}" for t in ("outbox_sale", "refunds")}

    code, out, err = _read_only(capsys, "status", str(config), "--json")
    assert code == 0, err
    [found] = json.loads(out)
    options = s3_server.storage_options()
    assert {r["table"]: (r["path"], r["table_version"], r["rows"]) for r in found["routes"]} == {
        t: (p, DeltaTable(p, storage_options=options).version(), n)
        for (t, p), n in zip(sorted(paths.items()), (8, 3), strict=True)}
    assert found["lag_records"] == 0
    assert all(r["ingested_up_to"] and r["last_batch_at"] for r in found["routes"])

    # A restart's Prometheus series of the route tables, from their ledgers in the bucket (delta-rs, no JVM).
    from ingestion.config import load_pipeline
    from ingestion.stream import context
    from ingestion.stream.prometheus import Exporter, watch

    exporter = Exporter()
    watch(exporter, context.resolve(load_pipeline(config)), available_now=True).refresh()
    assert {t: exporter.registry.get_sample_value("ingest_route_table_version", {"pipeline": "outbox", "table": t})
            for t in paths} == {r["table"]: r["table_version"] for r in found["routes"]}

    code, out, err = _read_only(capsys, "history", str(config), "--json")
    assert code == 0, err
    history = json.loads(out)
    assert sorted(history) == ["outbox_sale", "quarantine", "refunds"]
    assert sum(r["rows"] for r in history["outbox_sale"]) == 8 and sum(r["rows"] for r in history["refunds"]) == 3
    assert sum(r["quarantined"] for r in history["quarantine"]) == 1

    code, out, err = _read_only(capsys, "verify", str(config), "--json")
    assert code == 0, out[-2000:] + err
    assert sum(p["rows"] for p in json.loads(out)["partitions"]) == 12

    # A sale's row copied into the refunds table behind the pipeline's back: verify names it.
    sale = DeltaTable(paths["outbox_sale"], storage_options=options).to_pyarrow_table().slice(0, 1)
    refunds = DeltaTable(paths["refunds"], storage_options=options)
    write_deltalake(paths["refunds"], sale.cast(pa.schema(refunds.schema().to_arrow())), mode="append",
                    storage_options={**options, "conditional_put": "etag"})
    done = subprocess.run([sys.executable, "-m", "ingestion.cli", "verify", str(config)], capture_output=True,
                          text=True, cwd=tmp_path, timeout=300)  # as a user runs it: its exit code, not a crash's
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "route table refunds: 1 row(s) not in the table their route names" in done.stdout, done.stdout
