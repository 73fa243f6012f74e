"""The packaged job on another Spark line than the local one: `ingest package --spark-version` picks that line's
Delta and Kafka connector jars, and spark-submit of that line's own pyspark (installed by the fixture into a
virtualenv of its own, built once per machine) runs the job on a local master, writing the pipeline's
bronze exactly once, as the project's own `verify` reads it back; the job packaged for the local line is refused
there in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from deltalake import DeltaTable

from ingestion.dev.samples import produce_orders
from ingestion.runtime import jars
from tests.conftest import pipeline_yaml

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent
# The other line: 4.1 beside a local 4.2 (4.2 beside anything older), at the release of it the jar table names.
OTHER_LINE = "4.1" if jars.local_line() != "4.1" else "4.2"
OTHER_PYSPARK = jars.SPARK_LINES[OTHER_LINE].spark


@pytest.fixture(scope="session")
def other_pyspark() -> Path:
    """A virtualenv with pyspark of the other line, its own py4j and spark-submit; every other package lent by the
    test's environment through a .pth file (read after the virtualenv's own folder, so its pyspark wins). Built
    once per machine, outside the clone (tests/venvs.py: pyspark is a 450 MB download)."""
    from tests.venvs import cached_venv

    venv = cached_venv("pyspark", [f"pyspark=={OTHER_PYSPARK}"], timeout=1500)
    python = venv / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # Written on every use: the environment running the tests may differ from the one that built the virtualenv.
    Path(purelib, "test-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return venv


def test_the_job_packaged_for_the_other_spark_line_runs_on_it_exactly_once(
        other_pyspark: Path, kafka_servers: str, make_topic, orders_schema, tmp_path: Path) -> None:
    python = other_pyspark / "bin" / "python"
    spark_home = subprocess.run([python, "-c", "import pyspark, os; print(os.path.dirname(pyspark.__file__))"],
                                capture_output=True, text=True, check=True).stdout.strip()
    assert (Path(spark_home) / "jars" / f"spark-core_2.13-{OTHER_PYSPARK}.jar").is_file(), spark_home

    topic = make_topic(partitions=3)
    produced = produce_orders(kafka_servers, topic, 300, schema_id=1, schema=orders_schema)
    # Every batch through Spark (no driver writes, no start batch): Delta's transaction API of that line's jar.
    config = pipeline_yaml(tmp_path, topic=topic, servers=kafka_servers, name="on_other_spark",
                           sink="  directWriteMaxOffsets: 0\n  startBatchMaxOffsets: 0\n",
                           extra="source:\n  maxOffsetsPerTrigger: 120\n")

    packaged = subprocess.run([str(BIN / "ingest"), "package", str(config), "--out", str(tmp_path / "dist"),
                               "--spark-version", OTHER_LINE, "--master", "local[2]"],
                              capture_output=True, text=True, timeout=300)
    assert packaged.returncode == 0, packaged.stderr[-3000:]
    assert f"for Spark {OTHER_LINE}" in packaged.stdout, packaged.stdout
    dist = tmp_path / "dist"
    bundled = sorted((dist / "jars").glob("*.jar"))
    names = {jar.name for jar in bundled}
    assert f"delta-spark_{OTHER_LINE}_2.13-{jars.DELTA_VERSION}.jar" in names, names
    assert f"spark-sql-kafka-0-10_2.13-{OTHER_PYSPARK}.jar" in names, names

    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")},
           "SPARK_HOME": spark_home, "PYSPARK_PYTHON": str(python), "SPARK_LOCAL_IP": "127.0.0.1",
           "INGEST_JAR_CACHE": str(tmp_path / "driver-cache")}

    def submit(folder: Path) -> subprocess.CompletedProcess[str]:
        command = [str(other_pyspark / "bin" / "spark-submit"), "--master", "local[2]",
                   "--py-files", str(next(folder.glob("ingestion-*.zip"))),
                   "--jars", ",".join(map(str, sorted((folder / "jars").glob("*.jar")))),
                   str(folder / "ingest_main.py"), "run", str(config), "--available-now"]
        return subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)

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


def _commits(table_uri: str) -> list[tuple[str, int]]:
    """(engineInfo, number of files added) of each commit of the table's log."""
    found = []
    for commit in sorted((Path(table_uri.removeprefix("file://")) / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in commit.read_text().splitlines() if line.strip()]
        engine = next(a["commitInfo"].get("engineInfo", "") for a in actions if "commitInfo" in a)
        found.append((engine, sum("add" in a for a in actions)))
    return found
