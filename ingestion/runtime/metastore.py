"""The persistent table catalog of local sessions: a Hive metastore in a Derby database under the state folder,
served by a Derby network server on 127.0.0.1 that the project starts (and stops) by pid.

Why a server: embedded Derby admits one JVM at a time, so an `ingest run` holding the metastore would lock out an
analyst's `ingest sql`, a notebook and `ingest sql-server`. Every Spark session is a client of the one server
instead, and any number of them can use the catalog at once. It starts on the first session that needs it and
keeps running (`ingest metastore stop|status`); it listens on loopback only and has no users or passwords, so it
is for one machine's local state. On a cluster, point `spark.hadoop.hive.metastore.uris` at the cluster's metastore
instead (docs/catalog.md): then no Derby server starts.

Its folder (`<state>/metastore/`) holds `derby.pid`, `port`, `derby.log` and `db/metastore_db`; Spark's managed
tables and databases (`spark.sql.warehouse.dir`) go to `<state>/warehouse/`.
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

from ingestion.paths import state_dir
from ingestion.processes import PidFile, free_port, port_open, wait_for_port
from ingestion.runtime import jars

log = logging.getLogger(__name__)

DERBY_CLIENT_DRIVER = "org.apache.derby.jdbc.ClientDriver"
CATALOG_IMPLEMENTATION = "spark.sql.catalogImplementation"
# Settings that say a session has its own metastore (a cluster's): then the local server is not used.
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
    port_file = folder / "port"
    if pid is None or not port_file.is_file():
        return None
    return pid, int(port_file.read_text().strip())


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


def start(port: int | None = None, timeout: float = 60.0, folder: Path | None = None) -> int:
    """Start the Derby network server (or find it running); its port once it accepts connections."""
    folder = folder or home()
    with _start_lock(folder):
        found = running(folder)
        if found is not None and port_open(found[1]):
            return found[1]
        port = port or free_port()
        classpath = [*jars.resolve(jars.DERBY_JARS), *jars.pyspark_jars("derby-*.jar", "derbyshared-*.jar",
                                                                       "derbytools-*.jar")]
        logfile = folder / "derby.log"
        command = ["java", "-Xmx256m", f"-Dderby.system.home={folder / 'db'}", f"-Dderby.stream.error.file={logfile}",
                   "-Dderby.drda.host=127.0.0.1", "-cp", os.pathsep.join(map(str, classpath)),
                   "org.apache.derby.drda.NetworkServerControl", "start", "-h", "127.0.0.1", "-p", str(port),
                   "-noSecurityManager"]
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
        log.info("metastore: Derby network server started (pid %d) on 127.0.0.1:%d, database in %s", process.pid,
                 port, folder / "db")
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
    port = start()
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
