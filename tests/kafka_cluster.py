"""A three-node Kafka cluster on 127.0.0.1 for broker-fault tests: KRaft, every node a broker and a controller (so a
node's SIGKILL may be the controller's), the dev broker's jars and logging, replication factor 3 for the internal
topics. Nodes are started, killed (SIGKILL by default) and restarted by their own Popen handles.

A fault test waits on the cluster's state, never on the clock: `whole` (every node registered, every partition of
the named topics led and fully in sync), `fenced` (a killed node leads nothing), `controller` (the KRaft quorum's
leader, from the nodes' own quorum-state files: DescribeCluster names a random broker under KRaft). A rolling
restart that stops the next node before the last one is back in sync loses the quorum or the offsets topic's
min.insync.replicas, which no client can be asked to live through in a bounded time."""
from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ingestion.dev.broker import _LOG4J, jvm_options, new_cluster_id, wait_until_ready
from ingestion.processes import free_port
from ingestion.runtime import jars

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_PARTITIONS = 6


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
        # a smaller heap than the local broker's; KAFKA_OPTS after it, as for every broker of the suite (conftest.py)
        self.java = ["java", *jvm_options(heap=("-Xms128m", "-Xmx512m")), "-cp", cp]
        self._admin: Any = None
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
                f"offsets.topic.num.partitions={OFFSETS_PARTITIONS}", "transaction.state.log.replication.factor=3",
                "transaction.state.log.min.isr=2", "min.insync.replicas=2", "group.initial.rebalance.delay.ms=0",
                "share.coordinator.state.topic.replication.factor=3", "share.coordinator.state.topic.min.isr=2",
                # A killed node is fenced (its partitions led elsewhere) 3 s after its last heartbeat, not 9 s:
                # the same path, a shorter test.
                "broker.session.timeout.ms=3000", "broker.heartbeat.interval.ms=500",
                # Leadership goes back to the preferred replicas only when the test asks (never: leaders stay
                # where the faults left them), not on a 5-minute timer in the middle of a phase.
                "auto.leader.rebalance.enable=false", ""]))
        formats = [subprocess.Popen([*self.java, "kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c",
                                     str(home / f"n{i}" / "server.properties")], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT) for i in self.ids]  # the nodes' folders at once
        for proc in formats:
            out, _ = proc.communicate(timeout=120)
            if proc.returncode != 0:
                raise RuntimeError(f"kafka-storage format exited with {proc.returncode}: {out.decode()[-2000:]}")

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
        for i in self.ids:
            self.start(i)
        wait_until_ready(self.servers, timeout)
        self.whole((), timeout)
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

    # The cluster's state, from metadata (any live node answers) and the nodes' files.

    def metadata(self, timeout: float = 5.0, via: int | None = None) -> Any:
        """Cluster metadata, asked again while no node answers (one restarting), for `timeout` seconds at most;
        `via` a node: as that node sees it (a new client's first request goes to its one bootstrap server)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.servers, "log_level": 0})
        deadline = time.monotonic() + timeout
        while True:
            admin = self._admin if via is None else AdminClient(
                {"bootstrap.servers": f"127.0.0.1:{self.ports[via]}", "log_level": 0,
                 "socket.connection.setup.timeout.ms": 1000})
            try:
                return admin.list_topics(timeout=max(0.5, min(2.0, deadline - time.monotonic())))
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def whole(self, topics: Iterable[str], timeout: float = 90, via: int | None = None) -> float:
        """Wait until every node is registered and every partition of `topics` has a leader and all its replicas
        in sync; return the seconds waited. `via` a node just started: as that node sees it, so that the metadata
        is not the cluster's view from before the node went away (right after a SIGKILL every node still lists it,
        in sync, until the controller fences it). A node's process that exited meanwhile fails at once."""
        topics = list(topics)
        started = time.monotonic()
        last = ""
        while True:
            self._alive()
            meta = self.metadata(timeout=max(5.0, timeout), via=via)
            missing = [t for t in topics if t not in meta.topics or meta.topics[t].error is not None]
            behind = [f"{t}/{p.id} leader {p.leader} isr {sorted(p.isrs)} of {sorted(p.replicas)}"
                      for t in topics if t in meta.topics for p in meta.topics[t].partitions.values()
                      if p.leader not in self.ids or sorted(p.isrs) != sorted(p.replicas) or
                      len(p.replicas) != len(self.ids)]
            if sorted(meta.brokers) == self.ids and not missing and not behind:
                return time.monotonic() - started
            last = f"brokers {sorted(meta.brokers)}, missing {missing}, {behind[:3]}"
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"the cluster was not whole within {timeout:.0f}s: {last}")
            time.sleep(0.1)

    def fenced(self, node: int, topics: Iterable[str], timeout: float = 60) -> float:
        """Wait until killed `node` is out of the metadata and leads no partition of `topics`; the seconds
        waited."""
        topics = list(topics)
        started = time.monotonic()
        while True:
            meta = self.metadata()
            led = [f"{t}/{p.id}" for t in topics if t in meta.topics
                   for p in meta.topics[t].partitions.values() if p.leader == node]
            if node not in meta.brokers and not led:
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"node {node} still leads {led} after {timeout:.0f}s")
            time.sleep(0.1)

    def leader(self, topic: str, partition: int) -> int:
        return int(self.metadata().topics[topic].partitions[partition].leader)

    def coordinator(self, group: str) -> int:
        """The node that coordinates `group` now: the leader of its partition of the offsets topic."""
        return self.leader(OFFSETS_TOPIC, offsets_partition(group))

    def controller(self, timeout: float = 30) -> int:
        """The KRaft quorum's leader (the active controller) as the running nodes last recorded it: the newest
        epoch's leader among their quorum-state files, once the running nodes agree on it."""
        deadline = time.monotonic() + timeout
        while True:
            states = []
            for i in self.ids:
                if i not in self.procs or self.procs[i].poll() is not None:
                    continue
                try:
                    state = json.loads((self.home / f"n{i}" / "data" / "__cluster_metadata-0" /
                                        "quorum-state").read_text())
                except (OSError, ValueError):  # not written yet, or being replaced
                    continue
                states.append((int(state.get("leaderEpoch", -1)), int(state.get("leaderId", -1))))
            if states and len(set(states)) == 1 and states[0][1] in self.procs:
                return states[0][1]
            if time.monotonic() > deadline:
                raise TimeoutError(f"the nodes do not agree on a controller: {states}")
            time.sleep(0.1)

    def _alive(self) -> None:
        for i, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"node {i} exited with {proc.returncode}: see {self.home / f'n{i}'}")


def java_hash(text: str) -> int:
    """Java's String.hashCode of `text` (UTF-16 code units), as a signed 32-bit integer."""
    h = 0
    data = text.encode("utf-16-be")
    for k in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[k:k + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition(group: str, partitions: int = OFFSETS_PARTITIONS) -> int:
    """The offsets topic's partition of `group`, as Kafka picks it (Utils.abs(groupId.hashCode) % partitions)."""
    h = java_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions
