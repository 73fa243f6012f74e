"""The project as a user installs it: the built wheel in a fresh virtualenv (its dependencies lent by the test's
own environment through a .pth file, the project itself only from the wheel), `ingest new` laying out a project,
and `ingest demo` in an empty folder with the pipeline and schema it brings as package data, leaving no process
of its own running."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers import jvm_noise, processes_left, processes_of

pytestmark = pytest.mark.e2e

# Set by the test session (conftest.py) or the caller for the test's own commands; a user's shell has none of them.
_SESSION_ONLY = ("INGEST_HOME", "INGEST_CONF_DIR", "INGEST_SCHEMAS_DIR", "MLFLOW_TRACKING_URI",
                 "KAFKA_BOOTSTRAP_SERVERS", "PYSPARK_PYTHON", "PYTHONPATH", "INGEST_TEST_FAULT",
                 "INGEST_TEST_FAULT_FILE", "PYSPARK_SUBMIT_ARGS")


def _installed(tmp_path: Path) -> Path:
    """A fresh virtualenv holding the built wheel; its bin folder."""
    source = tmp_path / "source"  # built from a copy, so the build leaves nothing in the repository
    shutil.copytree(REPO / "ingestion", source / "ingestion", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(wheels), str(source)], check=True, timeout=300)
    (wheel,) = wheels.glob("*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # The dependencies come from the test's environment; its .pth files (the editable install of the sources)
    # are not read from a folder a .pth file names, so the project can only come from the wheel.
    Path(purelib, "test-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    # --force-reinstall: pip 26 finds the project's editable install among the lent dependencies and would
    # otherwise call the wheel installed already.
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    "--force-reinstall", str(wheel)], check=True, timeout=300)
    return venv / "bin"


def test_the_wheel_lays_out_a_project_and_runs_the_demo_in_an_empty_folder_leaving_nothing_running(
        tmp_path: Path) -> None:
    bin_dir = _installed(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in _SESSION_ONLY}
    env["INGEST_JAR_CACHE"] = os.environ["INGEST_JAR_CACHE"]  # the jars, resolved once per machine
    where = subprocess.run([bin_dir / "python", "-c", "import ingestion; print(ingestion.__file__)"],
                           capture_output=True, text=True, check=True, env=env, cwd=tmp_path).stdout.strip()
    assert Path(where).is_relative_to(tmp_path / "venv"), where

    project = tmp_path / "project"
    made = subprocess.run([bin_dir / "ingest", "new", str(project)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    assert made.returncode == 0, made.stderr
    assert sorted(str(p.relative_to(project)) for p in project.rglob("*")) == [
        ".gitignore", "conf", "conf/defaults.yaml", "conf/pipelines", "schemas"]
    assert ".ingest/\n" in (project / ".gitignore").read_text()
    again = subprocess.run([bin_dir / "ingest", "new", str(project)], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=120)
    assert again.stdout.count("exists, left as it is") == 4, again.stdout

    empty = tmp_path / "empty"
    empty.mkdir()
    demo = subprocess.run([bin_dir / "ingest", "demo", "--records", "300"], capture_output=True, text=True,
                          env=env, cwd=empty, timeout=600, start_new_session=True)
    try:
        assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
        assert f"bronze table   {empty / '.ingest' / 'tables' / 'orders'}  (300 rows" in demo.stdout, demo.stdout
        assert "total          300 records in Kafka, 300 rows in bronze" in demo.stdout, demo.stdout
        # A new user's first run shows the product's lines only: no warning or error of the JVM's (log4j's
        # `HH:MM:SS LEVEL Class:`), no Java stack trace (the catalog's second table in `bronze` once logged the
        # metastore's AlreadyExistsException with 95 lines of trace).
        assert jvm_noise(demo.stdout, demo.stderr) == [], "\n".join(jvm_noise(demo.stdout, demo.stderr)[:20])
        # The demo left its pipeline and schema in the folder: what its summary says to run next finds the table
        # (ingest sql answers from the table's files with DuckDB: no broker, no JVM).
        assert (empty / "conf" / "pipelines" / "orders.yaml").is_file()
        assert (empty / "schemas" / "orders-value").is_dir()
        counted = subprocess.run([bin_dir / "ingest", "sql", "SELECT count(*) AS n FROM bronze.orders"],
                                 capture_output=True, text=True, cwd=empty, env=env, timeout=120)
        assert counted.returncode == 0 and counted.stdout.split() == ["n", "300"], counted.stdout + counted.stderr
        # The broker and the catalog's Derby server it started (both name the state folder) are gone.
        assert processes_left(empty) == {}
    finally:
        for pid in processes_of(empty):  # whatever a failed demo left, by pid
            os.kill(pid, 9)
