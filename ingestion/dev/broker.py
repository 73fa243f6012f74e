"""The local development Kafka broker: one Apache Kafka node in KRaft mode on 127.0.0.1.

The broker runs from the Maven jars (see `runtime/jars.py`) in its own JVM. Its folder holds `server.properties`,
`broker.pid`, `broker.log`, `bootstrap` (the address clients use) and `data/`. It is ready only once a metadata
request answers. It is stopped by its pid, which is checked to be this folder's broker before any signal.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shlex
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingestion import processes
from ingestion.dev import secure as secured
from ingestion.errors import BrokerError
from ingestion.paths import jvm_error_file, local_broker_dir
from ingestion.runtime import jars

log = logging.getLogger(__name__)

_LOG4J = """status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.org.name = org.apache
logger.org.level = WARN
"""


# The broker JVM's heap; KAFKA_OPTS, the variable Kafka's own start scripts (kafka-run-class.sh) read for more JVM
# options, comes after it and wins (the test suite's brokers: the serial collector and C1 alone, tests/conftest.py).
HEAP = ("-Xms256m", "-Xmx768m")
KAFKA_OPTS = "KAFKA_OPTS"


def jvm_options(heap: tuple[str, ...] = HEAP) -> list[str]:
    """A broker JVM's options: its `heap`, then KAFKA_OPTS split as a shell would."""
    return [*heap, *shlex.split(os.environ.get(KAFKA_OPTS, ""))]


def new_cluster_id() -> str:
    """A KRaft cluster id as Kafka makes one (16 random bytes, URL-safe base64), never starting with '-': the
    storage tool would read such an id as an option ('argument --cluster-id/-t: expected one argument'), one
    start in 64."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


@dataclass(frozen=True)
class Broker:
    """One local broker, described by its folder. `secure`: SASL_SSL, SASL_PLAINTEXT and SSL (client
    certificates) listeners with SCRAM and PLAIN users and ACLs instead of one plaintext listener (`dev.secure`)."""

    home: Path
    secure: bool = False

    @classmethod
    def default(cls, secure: bool = False) -> Broker:
        home = local_broker_dir()
        return cls(home.with_name(home.name + "-secure"), secure=True) if secure else cls(home)

    @property
    def security(self) -> secured.SecureSetup:
        """The TLS material, users and listeners of a secured broker."""
        return secured.SecureSetup(self.home)

    def admin_settings(self) -> dict[str, Any]:
        """confluent-kafka settings of a super user (for a plain broker: just its address)."""
        if self.secure:
            return self.security.client_settings(secured.ADMIN)
        return {"bootstrap.servers": self.bootstrap_servers() or ""}

    @property
    def pid_file(self) -> Path:
        return self.home / "broker.pid"

    @property
    def log_file(self) -> Path:
        return self.home / "broker.log"

    @property
    def properties(self) -> Path:
        return self.home / "server.properties"

    @property
    def bootstrap_file(self) -> Path:
        return self.home / "bootstrap"

    def bootstrap_servers(self) -> str | None:
        return self.bootstrap_file.read_text().strip() if self.bootstrap_file.is_file() else None

    def pid(self) -> int | None:
        """The broker's pid when it runs (and is really this folder's broker), else None."""
        if not self.pid_file.is_file():
            return None
        pid = int(self.pid_file.read_text().strip())
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            return None
        return pid if str(self.properties) in cmdline else None

    def start(self, port: int | None = None, timeout: float = 90.0) -> str:
        """Start the broker (or find it running) and return its bootstrap address once it answers."""
        running = self.pid()
        if running is not None:
            servers = self.bootstrap_servers() or ""
            wait_until_ready(servers, timeout, settings=self.admin_settings())
            log.info("kafka broker already running (pid %d) on %s", running, servers)
            return servers
        self.home.mkdir(parents=True, exist_ok=True)
        port = port or self._previous_port() or processes.free_port()
        controller_port = processes.free_port()
        servers = f"127.0.0.1:{port}"
        if self.secure:
            self.security.prepare()
        self._write_config(port, controller_port)
        classpath = jars.classpath(jars.BROKER_JARS)
        java = ["java", *jvm_options(), jvm_error_file(),
                f"-Dlog4j2.configurationFile={self.home / 'log4j2.properties'}",
                "-cp", classpath]
        if not (self.home / "data" / "meta.properties").is_file():
            cluster_id = new_cluster_id()
            users = self.security.format_arguments() if self.secure else []
            fmt = subprocess.run(
                [*java, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(self.properties), *users],
                capture_output=True, text=True, check=False,
            )
            if fmt.returncode != 0:
                output = (fmt.stdout + fmt.stderr).replace(self.security.password(secured.ADMIN), "***") \
                    if self.secure else fmt.stdout + fmt.stderr
                raise BrokerError(f"formatting {self.home / 'data'} failed: {output}")
        with open(self.log_file, "ab") as out:
            proc = subprocess.Popen(
                [*java, "kafka.Kafka", str(self.properties)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )
        self.pid_file.write_text(str(proc.pid))
        self.bootstrap_file.write_text(servers)
        try:
            wait_until_ready(servers, timeout, process=proc, settings=self.admin_settings())
            if self.secure:
                from confluent_kafka.admin import AdminClient

                secured.default_acls(AdminClient(self.admin_settings()))
        except BrokerError as exc:
            self.stop()
            raise BrokerError(f"{exc}; see {self.log_file}:\n{self._tail()}") from None
        except Exception as exc:  # noqa: BLE001 - the ACLs of a secured broker: a KafkaException
            self.stop()
            raise BrokerError(f"the secured broker's ACLs could not be made ({exc}); see {self.log_file}") from None
        log.info("kafka broker started (pid %d) on %s, data in %s", proc.pid, servers, self.home / "data")
        return servers

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the broker by its pid; True when one was running."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        processes.terminate(pid, timeout)
        self.pid_file.unlink(missing_ok=True)
        log.info("kafka broker (pid %d) stopped", pid)
        return True

    def _previous_port(self) -> int | None:
        servers = self.bootstrap_servers()
        return int(servers.rsplit(":", 1)[1]) if servers else None

    def _write_config(self, port: int, controller_port: int) -> None:
        data = self.home / "data"
        if self.secure:
            previous = self.security.listeners()
            ports = {name: port if name == secured.LISTENERS[0] else
                     int(previous[name].rsplit(":", 1)[1]) if name in previous else processes.free_port()
                     for name in secured.LISTENERS}
            self.security.listeners_file.write_text(json.dumps({n: f"127.0.0.1:{p}" for n, p in ports.items()}))
            listeners = self.security.properties(ports, controller_port)
        else:
            listeners = [f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
                         f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
                         "inter.broker.listener.name=PLAINTEXT",
                         "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"]
        self.properties.write_text("\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{controller_port}",
            *listeners,
            "controller.listener.names=CONTROLLER",
            f"log.dirs={data}",
            "num.partitions=1",
            "auto.create.topics.enable=false",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=4",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "",
        ]))
        (self.home / "log4j2.properties").write_text(_LOG4J.format(log=self.home / "server.log"))

    def _tail(self, lines: int = 20) -> str:
        if not self.log_file.is_file():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])


def wait_until_ready(servers: str, timeout: float, process: subprocess.Popen[bytes] | None = None,
                     settings: Mapping[str, Any] | None = None) -> None:
    """Return once a metadata request to `servers` succeeds (with the client `settings` of a secured broker);
    raise BrokerError after `timeout` seconds or as soon as `process` (the broker being started) exits."""
    from confluent_kafka.admin import AdminClient

    # log_level 0: connection refusals while the broker boots are expected, not worth printing.
    admin = AdminClient({**(settings or {}), "bootstrap.servers": servers, "socket.connection.setup.timeout.ms": 1000,
                         "log_level": 0})
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise BrokerError(f"kafka broker exited with {process.returncode}")
        try:
            admin.list_topics(timeout=min(2.0, max(0.1, deadline - time.monotonic())))
            return
        except Exception as exc:  # noqa: BLE001 - KafkaException while the broker boots
            last = exc
            time.sleep(0.2)
    raise BrokerError(f"no metadata answer from {servers} within {timeout:.0f}s: {last}")
