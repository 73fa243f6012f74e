"""The persistent table catalog of local sessions: a Hive metastore in a Derby database under the state folder,
served by a Derby network server on 127.0.0.1 that the project starts (and stops) by pid.

Why a server: embedded Derby admits one JVM at a time, so an `ingest run` holding the metastore would lock out an
analyst's `ingest sql`, a notebook and `ingest sql-server`. Every Spark session is a client of the one server
instead, and any number of them can use the catalog at once. It starts on the first session that needs it; each
session's process registers its pid under `clients/`, and a server started that way ends itself once no registered
process is alive and no connection is open for `INGEST_METASTORE_IDLE_SECONDS` (default 600; 0: never). One
started by `ingest metastore start` runs until `ingest metastore stop`. Either ends at once when its folder is
deleted (`data/derby/MetastoreServer.java`), so no server outlives the state it serves. It listens on loopback
only and has no users or passwords, so it is for one machine's local state. On a cluster, point
`spark.hadoop.hive.metastore.uris` at the cluster's metastore instead (docs/catalog.md): then no Derby server starts.

Its folder (`<state>/metastore/`) holds `derby.pid`, `port`, `clients/`, `derby.log` and `db/metastore_db`; Spark's
managed tables and databases (`spark.sql.warehouse.dir`) go to `<state>/warehouse/`.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ingestion.errors import IngestionError, one_line
from ingestion.paths import jvm_error_file, state_dir
from ingestion.processes import PidFile, free_port, port_open, wait_for_port
from ingestion.runtime import data_files, jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# derbyclient's own driver class (the one its java.sql.Driver service names). Not `org.apache.derby.jdbc.ClientDriver`:
# in Derby 10.15 and later that is a subclass of this one in derbytools, which every pyspark's jars folder holds, so a
# driver whose JVM classpath lacks derbyclient (spark-submit's: `load_client_driver`) would load it from there and
# fail on its missing superclass.
DERBY_CLIENT_DRIVER = "org.apache.derby.client.ClientAutoloadedDriver"
CATALOG_IMPLEMENTATION = "spark.sql.catalogImplementation"
# Settings that say a session has its own metastore (a cluster's): then the local server is not used.
SERVER_SOURCE = "derby/MetastoreServer.java"  # run by `java` as a single source file: no build step
IDLE_SECONDS_ENV = "INGEST_METASTORE_IDLE_SECONDS"
IDLE_SECONDS = 600
EXTERNAL_METASTORE_KEYS = ("spark.hadoop.hive.metastore.uris", "spark.hive.metastore.uris",
                           "spark.hadoop.javax.jdo.option.ConnectionURL", "spark.sql.hive.metastore.jars")


def home() -> Path:
    return state_dir() / "metastore"


def warehouse() -> Path:
    return state_dir() / "warehouse"


def _pid_file(folder: Path) -> PidFile:
    return PidFile(folder / "derby.pid", marker=f"-Dderby.system.home={folder / 'db'}")


def running(folder: Path | None = None) -> tuple[int, int] | None:
    """(pid, port) of the local metastore's server when it runs, else None."""
    folder = folder or home()
    pid = _pid_file(folder).pid()
    if pid is None:
        return None
    try:  # an idle server deletes it as it decides to end
        return pid, int((folder / "port").read_text().strip())
    except (OSError, ValueError):
        return None


@contextmanager
def _start_lock(folder: Path) -> Iterator[None]:
    """Two processes opening sessions at once start one server between them."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def idle_seconds() -> int:
    """How long an auto-started server waits without a client before it ends (`INGEST_METASTORE_IDLE_SECONDS`)."""
    text = os.environ.get(IDLE_SECONDS_ENV, "").strip()
    if not text:
        return IDLE_SECONDS
    try:
        return max(0, int(text))
    except ValueError:
        raise IngestionError(f"environment variable {IDLE_SECONDS_ENV}: expected whole seconds (0: never), got "
                             f"{text!r}") from None


def start(port: int | None = None, timeout: float = 60.0, folder: Path | None = None, *, idle: int = 0,
          client: int | None = None) -> int:
    """Start the Derby network server (or find it running); its port once it accepts connections. `client`: the
    pid of a process that uses it (registered first: the server does not end while it lives); `idle`: seconds
    without a client after which a server started here ends itself (0: it runs until stopped)."""
    folder = folder or home()
    with _start_lock(folder):
        if client is not None:
            (folder / "clients").mkdir(exist_ok=True)
            (folder / "clients" / str(client)).touch()
        found = running(folder)
        if found is not None and port_open(found[1]):
            return found[1]
        port = port or free_port()
        classpath = jars.resolve(jars.DERBY_JARS)  # the whole of Derby, one version (jars.py: why not pyspark's)
        logfile = folder / "derby.log"
        command = ["java", "-Xmx256m", "-XX:+UseSerialGC", jvm_error_file(), f"-Dderby.system.home={folder / 'db'}",
                   f"-Dderby.stream.error.file={logfile}", "-Dderby.drda.host=127.0.0.1",
                   "-cp", os.pathsep.join(map(str, classpath)), str(data_files.path(SERVER_SOURCE)),
                   str(folder / "db"), str(port), str(idle), str(folder / "clients"), str(folder / "port")]
        (folder / "db").mkdir(parents=True, exist_ok=True)
        with open(folder / "server.out", "ab") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True, preexec_fn=_default_signals)
        _pid_file(folder).write(process.pid)
        (folder / "port").write_text(str(port))
        try:
            wait_for_port(port, process, timeout, "the metastore's Derby server", folder / "server.out")
        except Exception:
            _pid_file(folder).stop()
            raise
        log.info("metastore: Derby network server started (pid %d) on 127.0.0.1:%d, database in %s, %s",
                 process.pid, port, folder / "db", f"ends after {idle}s without a client" if idle else
                 "runs until `ingest metastore stop`")
        return port


def _default_signals() -> None:
    """The server's stop signal is SIGTERM: a session factory starts it while its own JVM ignores that."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def stop(folder: Path | None = None) -> int | None:
    """Stop the local metastore's server by its pid; the pid, or None when none was running."""
    folder = folder or home()
    return _pid_file(folder).stop()


def uses_external(conf: Mapping[str, str]) -> bool:
    """Whether these settings name a metastore of their own (a cluster's) or turn the Hive catalog off."""
    return conf.get(CATALOG_IMPLEMENTATION) == "in-memory" or any(key in conf for key in EXTERNAL_METASTORE_KEYS)


def session_settings(conf: Mapping[str, str]) -> dict[str, str]:
    """Spark settings for a session over the persistent catalog. With a metastore of the caller's (`conf`), only
    the Hive catalog itself; else the local one, its server started when needed."""
    if conf.get(CATALOG_IMPLEMENTATION) == "in-memory":
        return {}
    if uses_external(conf):
        return {CATALOG_IMPLEMENTATION: "hive"}
    port = start(idle=idle_seconds(), client=os.getpid())
    return {
        CATALOG_IMPLEMENTATION: "hive",
        "spark.sql.warehouse.dir": str(warehouse()),
        "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby://127.0.0.1:{port}/metastore_db;create=true",
        "spark.hadoop.javax.jdo.option.ConnectionDriverName": DERBY_CLIENT_DRIVER,
        # A new database gets the metastore's tables on first use; no schema version check against a Hive install.
        "spark.hadoop.datanucleus.schema.autoCreateAll": "true",
        "spark.hadoop.hive.metastore.schema.verification": "false",
    }


def client_classpath(conf: Mapping[str, str]) -> list[Path]:
    """What the driver needs on its classpath for the local metastore: Derby's network client."""
    if uses_external(conf):
        return []
    return [jar for jar in jars.resolve(jars.DERBY_JARS) if jar.name.startswith("derbyclient")]


def load_client_driver(spark: SparkSession, conf: Mapping[str, str]) -> None:
    """Make Derby's network client usable by a session whose JVM spark-submit started (so `client_classpath` could
    not go on its classpath), before its Hive client first connects: derbyclient (from the jar cache, unless --jars
    brought it) joins the driver's class loader, and its driver is registered with DriverManager through Spark's
    driver registry, as Spark's JDBC source registers a driver of --jars."""
    if uses_external(conf):
        return
    jvm = spark._jvm
    client = client_classpath(conf)
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()  # type: ignore[union-attr]
        try:
            jvm.java.lang.Class.forName(DERBY_CLIENT_DRIVER, False, loader)  # type: ignore[union-attr]
        except Exception:  # noqa: BLE001 - py4j raises its own error type for a ClassNotFoundException
            for jar in client:  # spark-submit's class loader of --jars: a MutableURLClassLoader
                loader.addURL(jvm.java.io.File(str(jar)).toURI().toURL())  # type: ignore[union-attr]
        # Spark's registry of JDBC drivers of a child class loader hands DriverManager a wrapper of the driver from
        # Spark's own jar, which the metastore's connection pool (of the JVM's class loader) is allowed to use.
        jvm.org.apache.spark.sql.execution.datasources.jdbc.DriverRegistry.register(  # type: ignore[union-attr]
            DERBY_CLIENT_DRIVER)
    except Exception as exc:  # noqa: BLE001 - py4j's error: a class loader without addURL, a registry moved
        raise IngestionError(f"the local metastore's JDBC client ({DERBY_CLIENT_DRIVER}) cannot be loaded into this "
                             f"spark-submit driver ({one_line(exc)}): "
                             f"pass {', '.join(map(str, client))} with --driver-class-path, or point "
                             "spark.hadoop.hive.metastore.uris at a metastore (docs/catalog.md)") from None
