"""`ingest sql-server`: Spark's Thrift JDBC/ODBC server on 127.0.0.1 over the persistent catalog, so beeline,
PyHive, JDBC and ODBC clients (BI tools) query bronze by name, `VERSION AS OF` included (docs/catalog.md).
`ingest connect-server`: Spark Connect's server the same way, for `pyspark-client` and notebooks that reach Spark
with `builder.remote("sc://127.0.0.1:PORT")`.

Each runs in a background process of its own (`ingest sql-server serve`, `ingest connect-server serve`), started
and stopped by its pid as the local broker is. Its folder (`<state>/sql-server/`, `<state>/connect-server/`) holds
`server.pid`, `port` and `server.log`.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from ingestion.config import PipelineConfig
from ingestion.errors import IngestionError
from ingestion.ops import catalog
from ingestion.paths import state_dir
from ingestion.processes import PidFile, free_port, port_open, wait_for_port
from ingestion.runtime import connectserver, thriftserver
from ingestion.runtime.session import get_session

log = logging.getLogger(__name__)

DEFAULT_PORT = 10000  # HiveServer2's usual port, when free
CONNECT_PORT = 15002  # Spark Connect's usual port, when free


@dataclass(frozen=True)
class SqlServer:
    home: Path
    command: str = "sql-server"  # the `ingest` command that serves it
    default_port: int = DEFAULT_PORT

    @classmethod
    def default(cls) -> SqlServer:
        return cls(state_dir() / "sql-server")

    @classmethod
    def connect(cls, home: Path | None = None) -> SqlServer:
        """Spark Connect's server."""
        return cls(home or state_dir() / "connect-server", "connect-server", CONNECT_PORT)

    @property
    def what(self) -> str:
        return "the Spark Connect server" if self.command == "connect-server" else "the SQL server"

    @property
    def pid_file(self) -> PidFile:
        return PidFile(self.home / "server.pid", marker=f"--home {self.home}")

    @property
    def log_file(self) -> Path:
        return self.home / "server.log"

    def port(self) -> int | None:
        port = self.home / "port"
        return int(port.read_text().strip()) if port.is_file() else None

    def running(self) -> tuple[int, int] | None:
        """(pid, port) when the server runs, else None."""
        pid, port = self.pid_file.pid(), self.port()
        return (pid, port) if pid is not None and port is not None else None

    def start(self, port: int | None = None, timeout: float = 600.0) -> tuple[int, int]:
        """Start the server in the background (or find it running); (pid, port) once it accepts connections."""
        found = self.running()
        if found is not None:
            return found
        port = port or self.port() or (self.default_port if not port_open(self.default_port) else free_port())
        if port_open(port):
            raise IngestionError(f"port {port} on 127.0.0.1 is already in use; pass another with --port")
        self.home.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "ingestion.cli", self.command, "serve", "--port", str(port),
                   "--home", str(self.home)]
        with open(self.log_file, "ab") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True)
        self.pid_file.write(process.pid)
        (self.home / "port").write_text(str(port))
        try:
            wait_for_port(port, process, timeout, self.what, self.log_file)
        except IngestionError:
            self.stop()
            raise
        log.info("%s started (pid %d) on 127.0.0.1:%d; log in %s", self.what, process.pid, port, self.log_file)
        return process.pid, port

    def stop(self, timeout: float = 60.0) -> int | None:
        """Stop the server by its pid; the pid, or None when it was not running."""
        return self.pid_file.stop(timeout)


def serve(configs: list[PipelineConfig], port: int, connect: bool = False) -> None:
    """Run the server in this process until SIGTERM or SIGINT: a session over the persistent catalog with every
    pipeline's tables registered, and HiveThriftServer2 (`connect`: Spark Connect's server) in its JVM."""
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    locations = [location for c in configs for location in c.locations]
    conf = {k: v for c in configs for k, v in c.spark.items()}
    conf |= connectserver.settings(port) if connect else thriftserver.settings(port)
    # Both serve each client on threads of their own, whose class loader is the JVM's (thriftserver.classpath).
    conf |= thriftserver.classpath(locations, conf)
    spark = get_session("ingest-connect-server" if connect else "ingest-sql-server", conf=conf, locations=locations,
                        catalog=True)
    names = catalog.register(spark, configs)
    what = "Spark Connect server" if connect else "SQL server"
    if connect:
        connectserver.start(spark)
    else:
        server = thriftserver.start(spark)
    log.info("%s on 127.0.0.1:%d over the catalog (%d pipeline tables: %s)", what, port, len(names),
             ", ".join(sorted(names)) or "none")
    stopping.wait()
    log.info("%s stopping", what)
    if connect:
        connectserver.stop(spark)
    else:
        thriftserver.stop(server)
    spark.stop()
