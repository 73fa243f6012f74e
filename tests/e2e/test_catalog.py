"""Tables by name: two pipelines with `sink.catalogTable` onboarded and run as a user runs them; then, in new
processes, `spark.table("bronze.orders")`, `ingest sql ... VERSION AS OF 1` and a Thrift client of
`ingest sql-server` (PyHive) all find them in the persistent catalog, while the SQL server holds it too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder

from ingestion.dev.samples import load_schema, produce_orders
from ingestion.kafka.clients import create_topic
from ingestion.processes import alive, free_port
from tests.conftest import REPO

pytestmark = pytest.mark.e2e

INGEST = str(Path(sys.executable).parent / "ingest")
COUNTS = {"orders": 120, "payments": 45}


def _config(folder: Path, name: str, topic: str, servers: str) -> dict[str, Any]:
    return {"name": name, "topic": topic, "kafka": {"bootstrap.servers": servers},
            "value": {"format": "confluent", "subject": "orders-value"}, "key": {"format": "string"},
            "source": {"maxOffsetsPerTrigger": 50},
            "sink": {"table": str(folder / "tables" / name), "checkpointLocation": str(folder / "checkpoints" / name),
                     "quarantineTable": str(folder / "tables" / f"{name}_quarantine"),
                     "catalogTable": f"bronze.{name}"}}


@pytest.fixture(scope="module")
def lakehouse(kafka_servers: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """A working folder with two onboarded and ingested pipelines, its own state folder (metastore included) and
    the environment of the commands run there; the metastore's server is stopped by its pid afterwards."""
    folder = tmp_path_factory.mktemp("catalog")
    env = {**os.environ, "INGEST_HOME": str(folder / ".ingest")}
    (folder / "conf" / "pipelines").mkdir(parents=True)
    schema = load_schema(str(REPO / "schemas" / "orders-value" / "1.avsc"))
    for name, count in COUNTS.items():
        topic = f"catalog-{name}-{os.urandom(3).hex()}"
        create_topic({"bootstrap.servers": kafka_servers}, topic, 3)
        produce_orders(kafka_servers, topic, count, schema_id=1, schema=schema)
        (folder / "conf" / "pipelines" / f"{name}.yaml").write_text(json.dumps(_config(folder, name, topic,
                                                                                       kafka_servers)))
    try:
        onboarded = _ingest(folder, env, "onboard", "--all")
        assert "catalog table bronze.orders: registered for" in onboarded.stdout
        assert "catalog table bronze.payments_quarantine: registered for" in onboarded.stdout
        _ingest(folder, env, "run", "--all", "--available-now")
        yield folder, env
    finally:
        _ingest(folder, env, "sql-server", "stop", check=False)
        _ingest(folder, env, "metastore", "stop", check=False)


def _ingest(folder: Path, env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([INGEST, *args], capture_output=True, text=True, cwd=folder, env=env, timeout=600)
    assert not check or done.returncode == 0, f"ingest {' '.join(args)}: {done.stdout}\n{done.stderr}"
    return done


def _rows(path: Path, version: int | None = None) -> int:
    table = DeltaTable(str(path), version=version)
    return int(pa.table(QueryBuilder().register("t", table).execute("SELECT count(*) AS n FROM t"))["n"][0].as_py())


NEW_SESSION = """
import json
from ingestion import get_session, load_pipeline
from ingestion.delta import catalog
from ingestion.errors import CatalogError
spark = get_session("analyst")
out = {name: spark.table(f"bronze.{name}").count() for name in ("orders", "payments")}
out["quarantine"] = spark.table("bronze.orders_quarantine").count()
out["offsets"] = sorted(r[0] for r in spark.table("bronze.orders").select("_kafka_offset").collect())[-1]
out["comment"] = catalog.details(spark, "bronze.orders")["Comment"]
out["properties"] = {r.key: r.value for r in spark.sql("SHOW TBLPROPERTIES bronze.orders").collect()}
out["again"] = [r.state for r in catalog.register_pipeline(spark, load_pipeline("orders"))]
try:
    catalog.register(spark, "bronze.orders", "/somewhere/else")
except CatalogError as exc:
    out["clash"] = str(exc)
print(json.dumps(out))
"""


def test_a_new_process_finds_the_tables_by_name(lakehouse: tuple[Path, dict[str, str]]) -> None:
    folder, env = lakehouse
    done = subprocess.run([sys.executable, "-c", NEW_SESSION], capture_output=True, text=True, cwd=folder, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert (found["orders"], found["payments"], found["quarantine"]) == (120, 45, 0)
    assert "ingest pipeline 'orders'" in found["comment"]
    assert found["properties"]["delta.dataSkippingStatsColumns"].startswith("_kafka_topic,_kafka_partition")
    assert found["again"] == ["exists", "exists"]  # registering again changes nothing
    assert found["clash"].startswith("catalog table 'bronze.orders' is taken by the table at ")
    assert str(folder / "tables" / "orders") in found["clash"] and "/somewhere/else" in found["clash"]


def test_ingest_sql_and_the_sql_server_answer_by_name_and_the_server_stops_by_its_pid(
        lakehouse: tuple[Path, dict[str, str]]) -> None:
    from pyhive import hive

    folder, env = lakehouse
    port = free_port()
    started = _ingest(folder, env, "sql-server", "--port", str(port))
    line = started.stdout.strip().splitlines()[-1]
    assert f"jdbc:hive2://127.0.0.1:{port}/default" in line
    pid = int(line.split("pid ")[1].split(",")[0])
    status = _ingest(folder, env, "sql-server", "status")
    assert f"pid {pid}" in status.stdout

    # While the server holds the catalog, `ingest sql` (another JVM) uses it too.
    first = _rows(folder / "tables" / "orders", version=1)
    assert 0 < first < 120
    _ingest(folder, env, "sql", "SELECT count(*) AS n, count(DISTINCT _kafka_offset, _kafka_partition) AS d "
            "FROM bronze.orders VERSION AS OF 1", "--output", str(folder / "v1.csv"))
    assert (folder / "v1.csv").read_text().split() == ["n,d", f"{first},{first}"]

    connection = hive.connect(host="127.0.0.1", port=port, username="analyst", auth="NONE")
    try:
        cursor = connection.cursor()
        cursor.execute("SELECT count(*) FROM bronze.orders")
        assert cursor.fetchall() == [(120,)]
        cursor.execute("SELECT count(*) FROM bronze.orders VERSION AS OF 1")
        assert cursor.fetchall() == [(first,)]
        cursor.execute("SELECT _kafka_partition, count(*) FROM bronze.payments GROUP BY 1 ORDER BY 1")
        by_partition = cursor.fetchall()
        assert sum(n for _, n in by_partition) == 45 and [p for p, _ in by_partition] == [0, 1, 2]
        cursor.execute("SHOW TABLES IN bronze")
        assert {row[1] for row in cursor.fetchall()} == {"orders", "orders_quarantine", "payments",
                                                         "payments_quarantine"}
    finally:
        connection.close()

    stopped = _ingest(folder, env, "sql-server", "stop")
    assert stopped.stdout.strip() == f"stopped (pid {pid})"
    assert not alive(pid)
    assert _ingest(folder, env, "sql-server", "status", check=False).returncode == 1
