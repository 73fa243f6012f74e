"""The run's Kafka clients through broker faults (issue 72): on a three-node cluster, the controller's SIGKILL (a
group coordinator and a partition leader too) and a rolling restart, while several pipelines commit offsets to their
groups every few milliseconds and a pipeline checks its group and the group it takes over from. The client work runs
in a process of its own (`broker_faults_client.py`), which must end on its own with exit 0: librdkafka's
`rd_kafka_enq_once_del_source_return: Assertion 'eonce->refcnt > 0' failed` aborts it (exit -6).

Before the fix the group commits were the admin client's alter_consumer_group_offsets, a coordinator-targeted admin
request that librdkafka 2.16 cannot fail cleanly when its coordinator has just gone away: this process aborted within
the first two or three kills, whether or not its futures were awaited and its client kept (see
`kafka.clients.GroupCommitter`).

Every step waits on the cluster's state, not on the clock (`tests.kafka_cluster`): a node is killed once the cluster
is whole and started again at once (its JVM's start outlasts its fencing), and the next fault waits until the node
answers and sees every partition back in sync. The groups are named so that each node coordinates one of them at the
start: the controller's SIGKILL is a coordinator's, whichever node it is. Once the cluster is whole after the last
fault, each group's next commit must land within `RECOVERY` seconds, and the group must hold exactly the last offset
its monitor committed (one commit at a time: an older commit held by librdkafka never lands after a newer one).
"""

from __future__ import annotations

import itertools
import json
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ingestion.kafka import clients
from tests.kafka_cluster import OFFSETS_TOPIC, Cluster, offsets_partition

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CLIENT = Path(__file__).with_name("broker_faults_client.py")
TOPIC = "faults"
RECOVERY = 30.0  # seconds a group's commit may take to land again once the cluster is whole after the last fault


def test_group_commits_and_checks_live_through_the_controllers_kill_and_a_rolling_restart(
        tmp_path: Path) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    began = time.monotonic()
    cluster = Cluster(tmp_path / "cluster")
    client: subprocess.Popen[str] | None = None
    timeline: list[tuple[float, str]] = []
    try:
        servers = cluster.start_all()
        with open(tmp_path / "client.stderr", "w") as stderr:  # started now: its imports take seconds
            client = subprocess.Popen([sys.executable, str(CLIENT), str(REPO), servers, TOPIC, str(RECOVERY)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                      cwd=tmp_path)
        lines = _lines(client)
        admin = AdminClient({"bootstrap.servers": servers, "log_level": 0})
        admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(30)
        # The offsets topic exists from the first group commit on; its partitions' leaders name the groups.
        clients.commit_group_offsets({"bootstrap.servers": servers, "log_level": 0}, "faults-warm-up",
                                     {TOPIC: {0: 0}})
        cluster.whole([TOPIC, OFFSETS_TOPIC])
        names = _one_group_per_coordinator(cluster)
        print(f"cluster whole {time.monotonic() - began:.1f}s after the test began")
        _say(client, ",".join(names))
        assert "ready" in json.loads(lines.get(timeout=60)), "not every group had a commit before the faults"
        topics = [TOPIC, OFFSETS_TOPIC]

        def fault(node: int, sig: int, what: str) -> None:
            timeline.append((time.monotonic(), f"{what}: node {node} {signal.Signals(sig).name}"))
            cluster.kill(node, sig)
            timeline.append((time.monotonic(), "exited"))
            # Started again at once: a JVM's start takes longer than the controller takes to fence a killed node
            # (broker.session.timeout.ms) and move its partitions, which the cluster's being whole waits for.
            cluster.start(node)
            cluster.whole(topics, via=node)
            timeline.append((time.monotonic(), f"whole after node {node}"))

        # The controller's SIGKILL is a group coordinator's and a partition leader's too: each node coordinates a
        # group and leads partitions of both topics.
        controller = cluster.controller()
        assert controller in {cluster.coordinator(group) for group in names}
        fault(controller, signal.SIGKILL, "controller")
        for node in cluster.ids:  # a rolling restart: one node after the other, each stopped cleanly
            fault(node, signal.SIGTERM, "rolling restart")
        _say(client, "whole")
        assert client.stdin is not None
        client.stdin.close()
        result = json.loads(lines.get(timeout=RECOVERY + 60))
        client.wait(30)
        err = (tmp_path / "client.stderr").read_text()
        assert "Assertion" not in err, err[-2000:]
        assert client.returncode == 0, f"the client process ended with {client.returncode}: {err[-2000:]}"
        print(_summary(result, timeline))

        for group in names:
            found = result["groups"][group]
            # Commits land again once the cluster is whole: the first one sent after it, within RECOVERY.
            assert found["recovered"] is not None, (group, _summary(result, timeline))
            reader = Consumer({"bootstrap.servers": servers, "group.id": group, "log_level": 0})
            try:
                held = reader.committed([TopicPartition(TOPIC, p) for p in range(3)], timeout=30)
            finally:
                reader.close()
            # ... and the group holds the last offset its monitor committed, no earlier commit landing after it.
            assert [tp.offset for tp in held] == [found["last_landed"]] * 3, (group, held, found["last_landed"])
        assert result["checks"]["passed_after_whole"] == 1, result["checks"]
    finally:
        if client is not None and client.poll() is None:
            client.kill()
            client.wait()
        cluster.stop_all()


def _one_group_per_coordinator(cluster: Cluster) -> list[str]:
    """A group name per node, each coordinated by its node now (the leader of its offsets-topic partition)."""
    leaders = {p: cluster.leader(OFFSETS_TOPIC, p) for p in range(6)}
    names: dict[int, str] = {}
    n = 0
    while len(names) < len(cluster.ids):
        name = f"faults-group-{n}"
        names.setdefault(leaders[offsets_partition(name)], name)
        n += 1
    return [names[node] for node in sorted(names)]


def _say(process: subprocess.Popen[str], line: str) -> None:
    assert process.stdin is not None
    process.stdin.write(line + "\n")
    process.stdin.flush()


def _lines(process: subprocess.Popen[str]) -> queue.Queue[str]:
    """The process's stdout lines as they come (a thread reads them): `get(timeout=...)` bounds every wait."""
    found: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            found.put(line)

    threading.Thread(target=read, daemon=True).start()
    return found


def _summary(result: dict[str, Any], timeline: list[tuple[float, str]]) -> str:
    """Per group: commits landed, timed out and failed between the first fault and the cluster whole after the
    last, the longest time without a landing commit then, the seconds to land once whole; the faults' times."""
    first, whole = timeline[0][0], result["whole_at"]
    rows = [", ".join(f"{t - first:.1f}s {what}" for t, what in timeline)]
    for group, found in result["groups"].items():
        during = [e for e in found["events"] if first <= e[0] <= whole]
        ends = [first] + [e[0] + e[1] for e in during if e[2] == 0] + [whole]
        rows.append(f"{group}: {sum(e[2] == 0 for e in during)} landed, {sum(e[2] == 1 for e in during)} timed out, "
                    f"{sum(e[2] == 2 for e in during)} failed in {whole - first:.1f}s of faults; longest without "
                    f"a landing {max(b - a for a, b in itertools.pairwise(ends)):.1f}s; landed "
                    f"{found['recovered']}s after whole; consumer replaced {found['replaced']} times; closed in "
                    f"{found['close_seconds']}s")
    rows.append(f"checks: {result['checks']}")
    return "\n".join(rows)
