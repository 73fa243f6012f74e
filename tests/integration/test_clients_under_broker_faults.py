"""The run's Kafka clients through broker faults (issue 72): on a three-node cluster, a partition leader's and the
controller's SIGKILL and a rolling restart, while several pipelines commit offsets to their groups every few
milliseconds and a pipeline checks its group and the group it takes over from. The client work runs in a process of
its own (`broker_faults_client.py`), which must end on its own with exit 0: librdkafka's
`rd_kafka_enq_once_del_source_return: Assertion 'eonce->refcnt > 0' failed` aborts it (exit -6).

Before the fix the group commits were the admin client's alter_consumer_group_offsets, a coordinator-targeted admin
request that librdkafka 2.16 cannot fail cleanly when its coordinator has just gone away: this process aborted within
the first two or three kills, whether or not its futures were awaited and its client kept (see
`kafka.clients.GroupCommitter`).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.kafka_cluster import Cluster

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CLIENT = Path(__file__).with_name("broker_faults_client.py")


def test_group_commits_and_checks_live_through_kills_of_leaders_the_controller_and_a_rolling_restart(
        tmp_path: Path) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = Cluster(tmp_path / "cluster")
    try:
        servers = cluster.start_all()
        admin = AdminClient({"bootstrap.servers": servers, "log_level": 0})
        admin.create_topics([NewTopic("faults", 3, 3)])["faults"].result(30)
        leader = -1
        while leader < 0:  # the new topic's metadata reaches every broker a moment later
            found = admin.list_topics("faults", timeout=10).topics["faults"].partitions
            leader = found[0].leader if 0 in found else -1
            time.sleep(0.1)

        seconds = 40.0
        client = subprocess.Popen([sys.executable, str(CLIENT), str(REPO), servers, "faults", str(seconds), "6"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
        try:
            time.sleep(3)
            cluster.kill(leader, signal.SIGKILL)  # a partition leader's SIGKILL, then the controller's
            time.sleep(3)
            cluster.start(leader)
            time.sleep(4)
            controller = _controller(admin)
            cluster.kill(controller, signal.SIGKILL)
            time.sleep(3)
            cluster.start(controller)
            time.sleep(4)
            for node in cluster.ids:  # a rolling restart: one node after the other, each stopped cleanly
                cluster.kill(node, signal.SIGTERM)
                cluster.start(node)
                time.sleep(3)
            out, err = client.communicate(timeout=seconds + 120)
        finally:
            if client.poll() is None:
                client.kill()
                client.wait()
        assert "Assertion" not in err, err[-2000:]
        assert client.returncode == 0, f"the client process ended with {client.returncode}: {err[-2000:]}"
        counts = json.loads(out.strip().splitlines()[-1])
        # Commits are monitoring (a failed one is retried with the next batch): some must land, each group's
        # offsets must be one of its commits. (How many land while coordinators move is librdkafka's consumer's:
        # far fewer than the admin client's, see the report of issue 72.)
        assert counts["commits"] > 0, counts

        # Each group holds its last commit answered, or a later one whose answer was lost with a broker.
        for group, (answered, sent) in counts["last"].items():
            reader = Consumer({"bootstrap.servers": servers, "group.id": group, "log_level": 0})
            try:
                held = reader.committed([TopicPartition("faults", p) for p in range(3)], timeout=30)
            finally:
                reader.close()
            offsets = {tp.offset for tp in held}
            assert len(offsets) == 1, (group, held)
            assert answered <= held[0].offset <= sent or (answered == 0 and held[0].offset < 0), (group, held)
    finally:
        cluster.stop_all()


def _controller(admin: object, timeout: float = 30.0) -> int:
    """The controller's node id, asked again while the cluster settles after a restart."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return int(admin.describe_cluster(request_timeout=5).result(10).controller.id)  # type: ignore[attr-defined]
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
