"""A three-node Kafka cluster on 127.0.0.1 for broker-fault tests: KRaft, every node a broker and a controller (so a
node's SIGKILL may be the controller's), the dev broker's jars and logging, replication factor 3 for the internal
topics. Nodes are started, killed (SIGKILL by default) and restarted by their own Popen handles."""
from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from ingestion.dev.broker import _LOG4J, free_port, new_cluster_id, wait_until_ready
from ingestion.runtime import jars


class Cluster:
    """Nodes 1..`nodes` with their folders below `home` (formatted here; started by `start_all`)."""

    def __init__(self, home: Path, nodes: int = 3) -> None:
        self.home = home
        self.ids = list(range(1, nodes + 1))
        self.ports = {i: free_port() for i in self.ids}
        self.cports = {i: free_port() for i in self.ids}
        self.procs: dict[int, subprocess.Popen] = {}
        self.cluster_id = new_cluster_id()
        voters = ",".join(f"{i}@127.0.0.1:{self.cports[i]}" for i in self.ids)
        cp = jars.classpath(jars.BROKER_JARS)
        self.java = ["java", "-Xms128m", "-Xmx512m", "-cp", cp]
        for i in self.ids:
            d = home / f"n{i}"
            d.mkdir(parents=True, exist_ok=True)
            (d / "log4j2.properties").write_text(_LOG4J.format(log=d / "server.log"))
            (d / "server.properties").write_text("\n".join([
                "process.roles=broker,controller", f"node.id={i}", f"controller.quorum.voters={voters}",
                f"listeners=PLAINTEXT://127.0.0.1:{self.ports[i]},CONTROLLER://127.0.0.1:{self.cports[i]}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.ports[i]}",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "controller.listener.names=CONTROLLER", f"log.dirs={d / 'data'}", "num.partitions=3",
                "auto.create.topics.enable=false", "offsets.topic.replication.factor=3",
                "offsets.topic.num.partitions=6", "transaction.state.log.replication.factor=3",
                "transaction.state.log.min.isr=2", "min.insync.replicas=2", "group.initial.rebalance.delay.ms=0",
                "share.coordinator.state.topic.replication.factor=3", "share.coordinator.state.topic.min.isr=2", ""]))
            subprocess.run([*self.java, "kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c",
                            str(d / "server.properties")], check=True, capture_output=True)

    @property
    def servers(self) -> str:
        return ",".join(f"127.0.0.1:{self.ports[i]}" for i in self.ids)

    def start(self, i: int) -> None:
        """Start node `i` (again: its data is kept)."""
        d = self.home / f"n{i}"
        with open(d / "broker.log", "ab") as out:
            self.procs[i] = subprocess.Popen(
                [*self.java, f"-Dlog4j2.configurationFile={d / 'log4j2.properties'}", "kafka.Kafka",
                 str(d / "server.properties")], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)

    def start_all(self, timeout: float = 120) -> str:
        """Start every node; return the bootstrap servers once every node is registered."""
        from confluent_kafka.admin import AdminClient

        for i in self.ids:
            self.start(i)
        wait_until_ready(self.servers, timeout)
        admin = AdminClient({"bootstrap.servers": self.servers, "log_level": 0})
        deadline = time.monotonic() + timeout
        while len(admin.list_topics(timeout=10).brokers) < len(self.ids):
            if time.monotonic() > deadline:
                raise TimeoutError(f"not every node of {self.servers} registered within {timeout:.0f}s")
            time.sleep(0.2)
        return self.servers

    def kill(self, i: int, sig: int = signal.SIGKILL) -> None:
        """Signal node `i` (SIGKILL by default, SIGTERM for a clean stop) and wait until it has exited."""
        proc = self.procs.pop(i, None)
        if proc is not None and proc.poll() is None:
            proc.send_signal(sig)
            proc.wait(60)

    def stop_all(self) -> None:
        for i in list(self.procs):
            self.kill(i, signal.SIGKILL)
