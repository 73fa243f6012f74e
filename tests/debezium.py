"""A real CDC source for the tests: Debian's PostgreSQL (a cluster of its own in a temporary folder,
`wal_level=logical`, on a free 127.0.0.1 port) and Debezium's Postgres connector (pgoutput) in Kafka Connect
standalone, writing with Kafka's own JsonConverter (`schemas.enable=true`) to a topic of the test broker. Both are
started and stopped by their pids. PostgreSQL's binaries come from `make postgresql` (Debian's package); Connect's
and Debezium's jars from the project's Maven resolution (`runtime/jars.py`, set `debezium`: resolved on first use,
or by `ingest jars --debezium`).

Every expectation of a test is read back with `SELECT` through `psql` (`Postgres.query`), never from a model of
what the statements should have done.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from ingestion.processes import free_port
from ingestion.runtime import jars

PG_USER = "postgres"  # the OS user the server runs as when the tests run as root (PostgreSQL refuses root)


def postgres_bin() -> Path | None:
    """The folder of PostgreSQL's server binaries: where `initdb` is on PATH, else Debian's newest
    /usr/lib/postgresql/<major>/bin (Debian keeps them off PATH)."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    majors = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    return majors[-1].parent if majors else None


def _stop(proc: subprocess.Popen[bytes], sig: int, timeout: float = 30) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


class Postgres:
    """One PostgreSQL cluster in a temporary folder of its own (removed by `stop`), superuser `postgres` without
    password (trust, on loopback only)."""

    def __init__(self, database: str = "shop") -> None:
        binaries = postgres_bin()
        if binaries is None:
            raise RuntimeError("PostgreSQL's initdb is missing: `make postgresql` installs Debian's postgresql")
        self.bin = binaries
        # Its own folder below the system's temporary one, which every user can reach (pytest's are private).
        self.folder = folder = Path(tempfile.mkdtemp(prefix="ingest-postgres-"))
        self.database = database
        self.port = free_port()
        self.log = folder / "postgres.log"
        data = folder / "data"
        run_as: dict[str, Any] = {}
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root: its folder and processes belong to `postgres`
            account = pwd.getpwnam(PG_USER)
            os.chown(folder, account.pw_uid, account.pw_gid)
            run_as = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": [],
                      "env": {**os.environ, "HOME": str(folder)}}
        done = subprocess.run([str(self.bin / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                               "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"], capture_output=True, text=True,
                              check=False, cwd=folder, **run_as)
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr[-2000:]}")
        settings = {"listen_addresses": "127.0.0.1", "port": str(self.port), "unix_socket_directories": str(folder),
                    "wal_level": "logical", "max_wal_senders": "4", "max_replication_slots": "4",
                    "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off", "timezone": "UTC",
                    "shared_buffers": "32MB"}
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [str(self.bin / "postgres"), "-D", str(data), *(f"-c{k}={v}" for k, v in settings.items())],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, cwd=folder,
                **run_as)
        deadline = time.monotonic() + 60
        while subprocess.run(self._psql("postgres", "-c", "SELECT 1"), capture_output=True).returncode != 0:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"postgres did not start:\n{self.log.read_text()[-2000:]}")
            time.sleep(0.1)
        self.execute(f"CREATE DATABASE {database}", database="postgres")

    def _psql(self, database: str, *args: str) -> list[str]:
        psql = shutil.which("psql") or str(self.bin / "psql")
        return [psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                "-d", database, *args]

    def execute(self, sql: str, *, database: str | None = None) -> None:
        """Run a script of statements (its transactions as written) in one session."""
        done = subprocess.run(self._psql(database or self.database), input=sql, capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            raise RuntimeError(f"psql failed: {done.stderr[-2000:]}")

    def query(self, select: str) -> list[dict[str, Any]]:
        """The rows of a SELECT, as PostgreSQL's own `to_json` renders each (numerics exact, as Decimal)."""
        done = subprocess.run(self._psql(self.database, "-A", "-t", "-c",
                                         f"SELECT coalesce(json_agg(to_json(q)), '[]') FROM ({select}) q"),
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"psql failed: {done.stderr[-2000:]}")
        return list(json.loads(done.stdout, parse_float=Decimal))

    def stop(self) -> None:
        _stop(self.proc, signal.SIGINT)  # PostgreSQL's fast shutdown
        shutil.rmtree(self.folder, ignore_errors=True)


_CONNECT_LOG4J = """status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = org.apache.kafka
logger.kafka.level = WARN
logger.runtime.name = org.apache.kafka.connect.runtime.Worker
logger.runtime.level = INFO
"""


class DebeziumConnect:
    """Kafka Connect standalone running one Debezium Postgres connector (`name`) over `postgres`'s table `table`,
    to the topic `<prefix>.public.<table>` (create it beforehand with the partitions wanted); its REST API on a free
    loopback port."""

    def __init__(self, folder: Path, *, servers: str, postgres: Postgres, prefix: str, tables: Sequence[str],
                 name: str = "shop-connector", extra: dict[str, str] | None = None) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / "connect.log"
        worker = {
            "bootstrap.servers": servers,
            "key.converter": "org.apache.kafka.connect.json.JsonConverter", "key.converter.schemas.enable": "true",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable": "true",
            "offset.storage.file.filename": str(folder / "offsets"), "offset.flush.interval.ms": "1000",
            # plugins found by their ServiceLoader manifests, not by scanning every class: half the start time
            "listeners": self.url, "plugin.discovery": "service_load",
        }
        connector = {
            "name": name, "connector.class": "io.debezium.connector.postgresql.PostgresConnector", "tasks.max": "1",
            "database.hostname": "127.0.0.1", "database.port": str(postgres.port), "database.user": "postgres",
            "database.password": "", "database.dbname": postgres.database, "topic.prefix": prefix,
            "plugin.name": "pgoutput", "slot.name": f"{prefix.replace('-', '_').replace('.', '_')}_slot",
            "publication.autocreate.mode": "filtered",
            "table.include.list": ",".join(f"public.{t}" for t in tables),
            "skipped.operations": "none",  # Debezium skips truncates (`t`) unless told otherwise
            **(extra or {}),
        }
        (folder / "worker.properties").write_text("".join(f"{k}={v}\n" for k, v in worker.items()))
        (folder / "connector.properties").write_text("".join(f"{k}={v}\n" for k, v in connector.items()))
        (folder / "log4j2.properties").write_text(_CONNECT_LOG4J.format(log=self.log))
        classpath = jars.classpath(jars.DEBEZIUM_JARS)
        java = ["java", "-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                f"-Dlog4j2.configurationFile={folder / 'log4j2.properties'}", "-cp", classpath]
        self.started = time.monotonic()
        with open(folder / "connect.out", "wb") as out:
            self.proc = subprocess.Popen(
                [*java, "org.apache.kafka.connect.cli.ConnectStandalone", str(folder / "worker.properties"),
                 str(folder / "connector.properties")],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, cwd=folder)
        try:
            self.wait_running(timeout=120)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - self.started

    def status(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"{self.url}/connectors/{self.name}/status", timeout=5) as answer:
                return dict(json.loads(answer.read()))
        except OSError:
            return None

    def wait_running(self, timeout: float) -> None:
        """Until the connector's task is RUNNING; fail with the log's end when it fails or Connect exits."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.status()
            tasks = (found or {}).get("tasks", [])
            if tasks and all(t["state"] == "RUNNING" for t in tasks):
                return
            if any(t["state"] == "FAILED" for t in tasks) or self.proc.poll() is not None \
                    or time.monotonic() > deadline:
                raise RuntimeError(f"Debezium's connector is not running ({found}):\n{self.tail()}")
            time.sleep(0.2)

    def tail(self, chars: int = 4000) -> str:
        return "".join(p.read_text(errors="replace")[-chars:] for p in (self.folder / "connect.out", self.log)
                       if p.exists())

    def stop(self) -> None:
        _stop(self.proc, signal.SIGTERM)
