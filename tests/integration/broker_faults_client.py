"""The Kafka client work of a streaming run that meets broker faults, in a process of its own (run by
test_clients_under_broker_faults.py, which kills and restarts the brokers meanwhile):

- the group commits of several pipelines (`PipelineMonitor._commit`, each monitor on a thread of its own, as a
  `run --all` has them: one per batch and pipeline), closed at the end as `pipeline.stop` closes them;
- a pipeline's checks of its group and of a group it takes over from (`check_group`, `group_state`).

Arguments: the ingestion source root, bootstrap servers, topic, seconds, monitors. Prints one JSON line of counts;
a librdkafka assertion aborts the process instead (exit -6 with the assertion on stderr).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from types import SimpleNamespace

sys.path.insert(0, sys.argv[1])

from ingestion.kafka import clients, groups
from ingestion.stream.monitor import PipelineMonitor

servers, topic, seconds, monitors = sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
settings = {"bootstrap.servers": servers, "log_level": 0}
stop = time.monotonic() + seconds
counts = {"commits": 0, "not_committed": 0, "checks": 0, "checks_failed": 0}
lock = threading.Lock()
last: dict[str, list[int]] = {}  # per group: the last commit answered, the last one sent


def count(key: str) -> None:
    with lock:
        counts[key] += 1


def commits(n: int) -> None:
    config = SimpleNamespace(name=f"faults-{n}", consumer_group=f"faults-group-{n}")
    monitor = PipelineMonitor(config, settings, None)  # type: ignore[arg-type]
    offset = 0
    while time.monotonic() < stop:
        offset += 1
        monitor._commit(offset, {topic: {"0": offset, "1": offset, "2": offset}})
        count("not_committed" if monitor._pending is not None else "commits")
        answered = last.setdefault(config.consumer_group, [0, 0])
        answered[:] = [answered[0] if monitor._pending is not None else offset, offset]
        time.sleep(0.02)
    monitor.close()


def checks() -> None:
    while time.monotonic() < stop:
        try:
            clients.check_group(settings, "faults-group-0", 5.0)
            groups.group_state(settings, "faults-group-1", {topic: [0, 1, 2]}, 5.0)
            count("checks")
        except Exception:  # noqa: BLE001 - a broker away: the check fails as an error, which is all it may do
            count("checks_failed")
        time.sleep(0.1)


threads = [threading.Thread(target=commits, args=(n,)) for n in range(monitors)]
threads.append(threading.Thread(target=checks))
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps({**counts, "last": last}), flush=True)
