"""Tables by name: two pipelines with `sink.catalogTable` onboarded and run as a user runs them; then, in new
processes at the same time, `spark.table("bronze.orders")`, `ingest sql ... VERSION AS OF 1` and the SQL server
of `ingest sql-server` starting, all on the one persistent catalog; a Thrift client (PyHive) of the server gets
Spark's counts, and the server stops by its pid; so does a `pyspark-client` of `ingest connect-server`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder

from ingestion.dev.samples import load_schema, produce_orders
from ingestion.kafka.clients import create_topic
from ingestion.processes import alive, free_port
from tests.conftest import REPO
from tests.helpers import jvm_noise

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


@dataclass(frozen=True)
class Lakehouse:
    folder: Path
    env: dict[str, str]
    server: subprocess.Popen[str]  # `ingest sql-server --port <port>`, started after the run: it returns once up
    port: int


@pytest.fixture(scope="module")
def lakehouse(kafka_servers: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lakehouse]:
    """A working folder with two onboarded and ingested pipelines, its own state folder (metastore included) and
    the environment of the commands run there, with the SQL server starting; the servers are stopped by their
    pids afterwards."""
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
        for name in ("orders", "orders_quarantine", "payments", "payments_quarantine"):
            assert f"catalog table bronze.{name}: registered for {folder / 'tables' / name}\n" in onboarded.stdout
        # four tables in one new database: the metastore is asked to create it once, with nothing on the screen
        assert jvm_noise(onboarded.stdout, onboarded.stderr) == [], onboarded.stderr[-3000:]
        _ingest(folder, env, "run", "--all", "--available-now")
        port = free_port()
        server = subprocess.Popen([INGEST, "sql-server", "--port", str(port)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, cwd=folder, env=env)
        try:
            yield Lakehouse(folder, env, server, port)
        finally:
            server.communicate(timeout=600)
    finally:
        _ingest(folder, env, "sql-server", "stop", check=False)
        _ingest(folder, env, "connect-server", "stop", check=False)
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


def test_a_new_process_and_ingest_sql_find_the_tables_by_name_while_the_sql_server_starts(
        lakehouse: Lakehouse) -> None:
    folder, env = lakehouse.folder, lakehouse.env
    session = subprocess.Popen([sys.executable, "-c", NEW_SESSION], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=folder, env=env)
    query = ("SELECT count(*) AS n, count(DISTINCT _kafka_partition * 1000000 + _kafka_offset) AS d "
             "FROM bronze.orders VERSION AS OF 1")  # SQL both engines read alike
    sql = subprocess.Popen([INGEST, "sql", "--engine", "duckdb", query, "--output", str(folder / "v1.csv")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=folder, env=env)
    by_spark = subprocess.Popen([INGEST, "sql", "--engine", "spark", query, "--output", str(folder / "v1.parquet")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=folder, env=env)
    out, err = session.communicate(timeout=600)
    assert session.returncode == 0, err
    found = json.loads(out.strip().splitlines()[-1])
    assert (found["orders"], found["payments"], found["quarantine"]) == (120, 45, 0)
    assert "ingest pipeline 'orders'" in found["comment"]
    assert found["properties"]["delta.dataSkippingStatsColumns"].startswith("_kafka_topic,_kafka_partition")
    assert found["again"] == ["exists", "exists"]  # registering again changes nothing
    assert found["clash"].startswith("catalog table 'bronze.orders' is taken by the table at ")
    assert str(folder / "tables" / "orders") in found["clash"] and "/somewhere/else" in found["clash"]

    out, err = sql.communicate(timeout=600)
    assert sql.returncode == 0, err
    first = _rows(folder / "tables" / "orders", version=1)
    assert 0 < first < 120
    assert (folder / "v1.csv").read_text().split() == ["n,d", f"{first},{first}"]
    assert err == ""  # DuckDB answered (--engine duckdb fails rather than start a JVM): nothing on stderr
    out, err = by_spark.communicate(timeout=600)
    assert by_spark.returncode == 0, err
    assert pq.read_table(folder / "v1.parquet").to_pylist() == [{"n": first, "d": first}]
    assert "incubator" not in err and "WARNING" not in err, err  # the JVM's noise stays off the screen


def test_the_sql_server_answers_a_thrift_client_as_spark_does_and_stops_by_its_pid(lakehouse: Lakehouse) -> None:
    from pyhive import hive

    folder, env, port = lakehouse.folder, lakehouse.env, lakehouse.port
    out, err = lakehouse.server.communicate(timeout=600)
    assert lakehouse.server.returncode == 0, err
    line = out.strip().splitlines()[-1]
    assert f"jdbc:hive2://127.0.0.1:{port}/default" in line
    pid = int(line.split("pid ")[1].split(",")[0])
    status = _ingest(folder, env, "sql-server", "status")
    assert f"pid {pid}" in status.stdout

    connection = hive.connect(host="127.0.0.1", port=port, username="analyst", auth="NONE")
    try:
        cursor = connection.cursor()
        cursor.execute("SELECT count(*) FROM bronze.orders")
        assert cursor.fetchall() == [(120,)]
        cursor.execute("SELECT count(*) FROM bronze.orders VERSION AS OF 1")
        assert cursor.fetchall() == [(_rows(folder / "tables" / "orders", version=1),)]
        cursor.execute("SELECT _kafka_partition, count(*) FROM bronze.payments GROUP BY 1 ORDER BY 1")
        by_partition = cursor.fetchall()
        assert sum(n for _, n in by_partition) == 45 and [p for p, _ in by_partition] == [0, 1, 2]
        cursor.execute("SHOW TABLES IN bronze")
        assert {row[1] for row in cursor.fetchall()} == {"orders", "orders_quarantine", "payments",
                                                         "payments_quarantine"}
    finally:
        connection.close()

    # Five clients at once, as a BI tool opens them: the documented PyHive snippet in three threads and the
    # documented beeline command (Hive's JDBC driver) in two processes, each a new session running VERSION AS OF.
    expected = _rows(folder / "tables" / "orders", version=1)
    assert _concurrent_sessions(port, env, pyhive=3, beeline=2) == [expected] * 5

    stopped = _ingest(folder, env, "sql-server", "stop")
    assert stopped.stdout.strip() == f"stopped (pid {pid})"
    assert not alive(pid)
    assert _ingest(folder, env, "sql-server", "status", check=False).returncode == 1


@pytest.fixture(scope="session")
def connect_client() -> Path:
    """The Python of a virtualenv holding `pyspark-client` of the local pyspark's version and its own dependencies
    alone (pure Python: no JVM, no jars), as an analyst's notebook has it; built once per machine, outside the
    clone (tests/venvs.py)."""
    import pyspark

    from tests.venvs import cached_venv

    venv = cached_venv("pyspark-client", [f"pyspark-client=={pyspark.__version__}", "pandas<3"], timeout=900)
    return venv / "bin" / "python"


def test_a_pyspark_client_of_its_own_reads_bronze_by_name_and_as_of_a_version_through_the_connect_server(
        lakehouse: Lakehouse, connect_client: Path) -> None:
    folder, env = lakehouse.folder, lakehouse.env
    port = free_port()
    started = _ingest(folder, env, "connect-server", "--port", str(port))
    line = started.stdout.strip().splitlines()[-1]
    assert f"sc://127.0.0.1:{port} (stop: ingest connect-server stop)" in line, line
    pid = int(line.split("pid ")[1].split(",")[0])
    assert f"pid {pid}, sc://127.0.0.1:{port}" in _ingest(folder, env, "connect-server", "status").stdout

    client = subprocess.run([str(connect_client), "-c", "import pyspark, importlib.util; "
                             "print(importlib.util.find_spec('py4j') is None, pyspark.__file__)"],
                            capture_output=True, text=True, env={"PATH": os.environ["PATH"]}, timeout=120)
    assert client.stdout.startswith(f"True {connect_client.parent.parent}"), client.stdout + client.stderr
    # A script, as a notebook's cell or a job runs it (pyspark's Connect client takes `python -c` for a doctest run).
    script = folder / "analyst.py"
    script.write_text(_documented("python", 'builder.remote("sc://').replace(":15002", f":{port}"))
    done = subprocess.run([str(connect_client), str(script)], capture_output=True, text=True, cwd=folder,
                          env={"PATH": os.environ["PATH"], "TZ": "UTC"}, timeout=600)
    assert done.returncode == 0 and done.stderr == "", done.stdout[-2000:] + done.stderr[-3000:]
    first = _rows(folder / "tables" / "orders", version=1)
    assert 0 < first < COUNTS["orders"]
    assert done.stdout.split() == [str(COUNTS["orders"]), str(first), str(first)], done.stdout

    stopped = _ingest(folder, env, "connect-server", "stop")
    assert stopped.stdout.strip() == f"stopped (pid {pid})"
    assert not alive(pid)
    assert _ingest(folder, env, "connect-server", "status", check=False).returncode == 1


CATALOG_PAGE = REPO / "docs" / "catalog.md"


def _documented(language: str, marker: str) -> str:
    """The code block of docs/catalog.md in `language` that contains `marker`."""
    blocks = re.findall(rf"^```{language}\n(.*?)^```", CATALOG_PAGE.read_text(), re.M | re.S)
    return next(block for block in blocks if marker in block)


def _concurrent_sessions(port: int, env: dict[str, str], *, pyhive: int, beeline: int) -> list[int]:
    """Sessions of the documented clients started together, each counting bronze.orders VERSION AS OF 1; the
    counts, PyHive's first."""
    query = "SELECT count(*) FROM bronze.orders VERSION AS OF 1"
    python = _documented("python", "from pyhive import hive").replace("port=10000", f"port={port}")
    assert f'cursor.execute("{query}")' in python
    shell = _documented("bash", "BeeLine").replace("127.0.0.1:10000", f"127.0.0.1:{port}")
    assert f"-e '{query}'" in shell
    path = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # `python` is this environment's
    clients = [subprocess.Popen(["bash", "-c", shell], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**env, "PATH": path}) for _ in range(beeline)]
    answers: dict[int, Any] = {}

    def run(i: int) -> None:
        printed: list[Any] = []
        namespace: dict[str, Any] = {"print": printed.append}  # what the snippet prints, per thread
        try:
            exec(compile(python, str(CATALOG_PAGE), "exec"), namespace)  # the documented snippet, as written
            answers[i] = printed
        except Exception as exc:  # noqa: BLE001 - the test reports which session failed and how
            answers[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(pyhive)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    counts = []
    for i in range(pyhive):
        assert isinstance(answers.get(i), list), f"PyHive session {i}: {answers.get(i)!r}"
        assert len(answers[i]) == 1, answers[i]
        counts.append(answers[i][0][0][0])
    for client in clients:
        out, err = client.communicate(timeout=600)
        assert client.returncode == 0, f"beeline: {out}\n{err}"
        found = re.findall(r"^\|\s*(\d+)\s*\|$", out, re.M)
        assert len(found) == 1, f"beeline: {out}\n{err}"
        counts.append(int(found[0]))
    return counts
