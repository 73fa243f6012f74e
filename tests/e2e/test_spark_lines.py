"""The packaged job on the other Spark lines than the local one: `ingest package --spark-version` picks that line's
Delta and Kafka connector jars, and spark-submit of that line's own pyspark (installed by the fixture into a
virtualenv of its own, built once per machine) runs the job on a local master. On the line next to the local one
the job writes the pipeline's bronze exactly once, as the project's own `verify` reads it back, after the job
packaged for the local line is refused there in one line. Its pipeline has `sink.catalogTable`, as the pipeline of
every other line of the jar table has: the submitted driver starts the local metastore's Derby server (whose
classpath is Derby's own jars from the jar cache: a submitted driver's `pyspark` module, imported from
spark-submit's pyspark.zip, points at no jars folder), loads Derby's client into a JVM whose classpath spark-submit
fixed, registers its tables, and that line's Spark SQL reads the exact rows back by their catalog name. (The local
line's catalog is `test_catalog.py`'s, its spark-submit `test_standalone_cluster.py`'s.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from ingestion.dev.samples import produce_orders
from ingestion.runtime import jars, metastore
from tests.conftest import pipeline_yaml, submit_conf

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent
# The other line: 4.1 beside a local 4.2 (4.2 beside anything older), at the release of it the jar table names.
OTHER_LINE = "4.1" if jars.local_line() != "4.1" else "4.2"
OTHER_PYSPARK = jars.SPARK_LINES[OTHER_LINE].spark


def _line_pyspark(line: str) -> Path:
    """The virtualenv with pyspark of `line`: the test's own for the local line; else one with pyspark of the
    release the jar table names, its own py4j and spark-submit, every other package lent by the test's environment
    through a .pth file (read after the virtualenv's own folder, so its pyspark wins). Built once per machine,
    outside the clone (tests/venvs.py: pyspark is a 450 MB download)."""
    if line == jars.local_line():
        return Path(sys.prefix)
    from tests.venvs import cached_venv

    venv = cached_venv("pyspark", [f"pyspark=={jars.SPARK_LINES[line].spark}"], timeout=1500)
    python = venv / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # Written on every use: the environment running the tests may differ from the one that built the virtualenv.
    Path(purelib, "test-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return venv


@pytest.fixture(scope="session")
def other_pyspark() -> Path:
    return _line_pyspark(OTHER_LINE)


# The lines of the jar table (docs/cluster.md#which-spark) neither local nor the other line above.
CATALOG_LINES = sorted(set(jars.SPARK_LINES) - {jars.local_line(), OTHER_LINE})


@pytest.fixture(scope="session", params=CATALOG_LINES, ids=lambda line: f"spark-{line}")
def line_pyspark(request: pytest.FixtureRequest) -> tuple[str, Path]:
    """(line, its pyspark's virtualenv) for each of CATALOG_LINES."""
    return request.param, _line_pyspark(request.param)


@pytest.fixture(scope="module")
def catalog_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A state folder for the catalog pipelines of every line: one metastore (its tables created once), whose Derby
    server the first submitted driver starts; stopped by its pid afterwards."""
    state = tmp_path_factory.mktemp("lines-state")
    try:
        yield state
    finally:
        metastore.stop(state / "metastore")


def _spark_home(venv: Path) -> str:
    """The folder of the virtualenv's pyspark (its jars/ and bin/): SPARK_HOME of its spark-submit."""
    python = venv / "bin" / "python"
    found = subprocess.run([python, "-c", "import pyspark, os; print(os.path.dirname(pyspark.__file__), "
                                          "pyspark.__version__)"],
                           capture_output=True, text=True, check=True).stdout.split()
    spark_home, version = found
    assert (Path(spark_home) / "jars" / f"spark-core_2.13-{version}.jar").is_file(), spark_home
    return spark_home


def _submit_env(venv: Path, **more: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")},
            "SPARK_HOME": _spark_home(venv), "PYSPARK_PYTHON": str(venv / "bin" / "python"),
            "SPARK_LOCAL_IP": "127.0.0.1", **more}


def _submit(venv: Path, folder: Path, args: list[str], env: dict[str, str],
            cwd: Path) -> subprocess.CompletedProcess[str]:
    """spark-submit of the virtualenv's pyspark, on a local master, of the job packaged into `folder`."""
    command = [str(venv / "bin" / "spark-submit"), "--master", "local[2]", *submit_conf(),
               "--py-files", str(next(folder.glob("ingestion-*.zip"))),
               "--jars", ",".join(map(str, sorted((folder / "jars").glob("*.jar")))),
               str(folder / "ingest_main.py"), *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=900)


def _package(config: Path, out: Path, line: str) -> None:
    packaged = subprocess.run([str(BIN / "ingest"), "package", str(config), "--out", str(out),
                               "--spark-version", line, "--master", "local[2]"],
                              capture_output=True, text=True, timeout=300)
    assert packaged.returncode == 0, packaged.stderr[-3000:]
    assert f"for Spark {line}" in packaged.stdout, packaged.stdout


def test_the_job_packaged_for_the_other_spark_line_runs_on_it_exactly_once_and_reads_back_by_name(
        other_pyspark: Path, catalog_home: Path, kafka_servers: str, make_topic, orders_schema,
        tmp_path: Path) -> None:

    topic = make_topic(partitions=3)
    produced = produce_orders(kafka_servers, topic, 300, schema_id=1, schema=orders_schema)
    # Every batch through Spark (no driver writes, no start batch): Delta's transaction API of that line's jar.
    config = pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers, name="on_other_spark",
                           sink="  directWriteMaxOffsets: 0\n  startBatchMaxOffsets: 0\n"
                                "  catalogTable: lines.on_other_spark\n",
                           extra="source:\n  maxOffsetsPerTrigger: 120\n")

    dist = tmp_path / "dist"
    _package(config, dist, OTHER_LINE)
    bundled = sorted((dist / "jars").glob("*.jar"))
    names = {jar.name for jar in bundled}
    assert f"delta-spark_{OTHER_LINE}_2.13-{jars.DELTA_VERSION}.jar" in names, names
    assert f"spark-sql-kafka-0-10_2.13-{OTHER_PYSPARK}.jar" in names, names

    # The submitted driver has a jar cache of its own (Derby's jars resolved into it), not the machine's.
    env = _submit_env(other_pyspark, INGEST_JAR_CACHE=str(tmp_path / "driver-cache"),
                      INGEST_HOME=str(catalog_home))

    def submit(folder: Path) -> subprocess.CompletedProcess[str]:
        return _submit(other_pyspark, folder, ["run", str(config), "--available-now"], env, tmp_path)

    # The job packaged for the local line (the default) is refused by that Spark at once, in one line.
    local = subprocess.run([str(BIN / "ingest"), "package", str(config), "--out", str(tmp_path / "dist-local")],
                           capture_output=True, text=True, timeout=300)
    assert local.returncode == 0 and f"for Spark {jars.local_line()}" in local.stdout, local.stdout + local.stderr
    refused = submit(tmp_path / "dist-local")
    said = refused.stdout + refused.stderr  # spark-submit passes the Python driver's stderr on as its stdout
    assert refused.returncode == 1, said[-3000:]
    refusal = (f"error: the job's Delta jar is built for Spark {jars.local_line()}, the cluster runs Spark "
               f"{OTHER_PYSPARK}: package the job with `ingest package --spark-version {OTHER_LINE}`")
    assert refusal in said, said[-3000:]
    assert "ClassNotFound" not in said and "Traceback" not in said, said[-3000:]
    assert not (tmp_path / "tables" / "on_other_spark" / "_delta_log").exists() or not any(
        adds for _, adds in _commits(str(tmp_path / "tables" / "on_other_spark")))

    run = submit(dist)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    # Every internal class the project reaches is there on that line: no fallback was announced.
    assert "differs" not in run.stderr, run.stderr[-3000:]

    table = DeltaTable(str(tmp_path / "tables" / "on_other_spark"))
    # Every commit that added rows is that Spark's (the empty table was created by delta-rs, before the JVM).
    engines = [engine for engine, adds in _commits(table.table_uri) if adds]
    assert len(engines) >= 3 and set(engines) == {f"Apache-Spark/{OTHER_PYSPARK} Delta-Lake/{jars.DELTA_VERSION}"}, \
        engines
    rows = table.to_pyarrow_table(columns=["_kafka_partition", "_kafka_offset", "order_id"]).to_pylist()
    assert sorted((r["_kafka_partition"], r["_kafka_offset"], r["order_id"]) for r in rows) == \
        sorted((p.partition, p.offset, p.record["order_id"]) for p in produced)

    verified = subprocess.run([str(BIN / "ingest"), "verify", str(config)], capture_output=True, text=True,
                              timeout=300)
    assert verified.returncode == 0, verified.stdout[-2000:] + verified.stderr[-2000:]
    _read_back_by_name(other_pyspark, dist, env, tmp_path, "lines.on_other_spark", produced)


def test_a_catalog_pipeline_packaged_for_each_spark_line_runs_on_it_and_reads_back_by_name(
        line_pyspark: tuple[str, Path], catalog_home: Path, kafka_servers: str, make_topic, orders_schema,
        tmp_path: Path) -> None:
    line, venv = line_pyspark
    topic = make_topic(partitions=2)
    produced = produce_orders(kafka_servers, topic, 40, schema_id=1, schema=orders_schema)
    name = f"catalog_on_spark_{line.replace('.', '_')}"
    config = pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers, name=name,
                           sink=f"  catalogTable: lines.{name}\n")
    dist = tmp_path / "dist"
    _package(config, dist, line)
    env = _submit_env(venv, INGEST_HOME=str(catalog_home))
    run = _submit(venv, dist, ["run", str(config), "--available-now"], env, tmp_path)
    said = run.stdout + run.stderr
    assert run.returncode == 0, said[-5000:]
    assert "ClassNotFound" not in said and "Traceback" not in said, said[-3000:]
    assert (catalog_home / "metastore" / "derby.pid").is_file()  # the driver started the server, or found it

    _read_back_by_name(venv, dist, env, tmp_path, f"lines.{name}", produced)


def _read_back_by_name(venv: Path, dist: Path, env: dict[str, str], tmp_path: Path, table: str,
                       produced: list[Any]) -> None:
    """That line's Spark SQL, by the catalog name alone (no pipeline file where it runs names the table), reads
    back exactly the `produced` records' (partition, offset, order_id)."""
    asker = tmp_path / "asker"
    asker.mkdir()
    out = tmp_path / "rows.parquet"
    read = _submit(venv, dist, ["sql", "--engine", "spark", "--output", str(out),
                                f"SELECT _kafka_partition, _kafka_offset, order_id FROM {table}"], env, asker)
    assert read.returncode == 0, (read.stdout + read.stderr)[-5000:]
    assert f"{len(produced)} rows written to {out}" in read.stdout, read.stdout[-2000:]
    rows = pq.read_table(out).to_pylist()
    assert sorted((r["_kafka_partition"], r["_kafka_offset"], r["order_id"]) for r in rows) == \
        sorted((p.partition, p.offset, p.record["order_id"]) for p in produced)


def _commits(table_uri: str) -> list[tuple[str, int]]:
    """(engineInfo, number of files added) of each commit of the table's log."""
    found = []
    for commit in sorted((Path(table_uri.removeprefix("file://")) / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in commit.read_text().splitlines() if line.strip()]
        engine = next(a["commitInfo"].get("engineInfo", "") for a in actions if "commitInfo" in a)
        found.append((engine, sum("add" in a for a in actions)))
    return found
