"""The Kafka client work of a streaming run that meets broker faults, in a process of its own (run by
test_clients_under_broker_faults.py, which kills and restarts the brokers meanwhile):

- the group commits of several pipelines (`PipelineMonitor._commit`, each monitor on a thread of its own, as a
  `run --all` has them: one per batch and pipeline), closed at the end as `pipeline.stop` closes them;
- a pipeline's checks of its group and of a group it takes over from (`check_group`, `group_state`).

Arguments: the ingestion source root, bootstrap servers, topic, and the seconds the commits may take to land again
once the cluster is whole. Talks with the test by lines. It reads the groups (comma-separated: the process starts
before the test knows them, as its imports take seconds) and prints `{"ready": ...}` once every group has a commit.
It reads `whole` once the cluster is whole after the test's last fault (end of input before it: the test gave up).
Then each monitor commits until one commit sent after `whole` has landed and stops there, and the checks run until
one round after `whole` has passed, within the seconds given. It prints one JSON line of what happened: every
commit's start, duration and outcome on the clock the test's own times are on (time.monotonic, system-wide). A
librdkafka assertion aborts the process instead (exit -6 with the assertion on stderr).

FAULTS_DEBUG=cgrp (any librdkafka debug context) logs the committers' librdkafka debug lines to stderr.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, sys.argv[1])

from ingestion.kafka import clients, groups
from ingestion.stream.monitor import PipelineMonitor

servers, topic, recovery = sys.argv[2], sys.argv[3], float(sys.argv[4])
names = sys.stdin.readline().strip().split(",")
settings: dict[str, Any] = {"bootstrap.servers": servers, "log_level": 0}
if os.environ.get("FAULTS_DEBUG"):
    settings = {"bootstrap.servers": servers, "debug": os.environ["FAULTS_DEBUG"], "log_level": 7}
    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG, format="%(relativeCreated)d %(threadName)s %(message)s")

LANDED, TIMED_OUT, FAILED = 0, 1, 2
lock = threading.Lock()
whole = threading.Event()  # the test says the cluster is whole after its last fault
over = threading.Event()  # the test's input ended: stop
whole_at: list[float] = []
ready: set[str] = set()
results: dict[str, Any] = {}
checks = {"passed": 0, "failed": 0, "passed_after_whole": 0, "errors": []}
failures: dict[int, str] = {}  # thread -> the last commit warning of the monitor on it


class Warnings(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        failures[record.thread or 0] = record.getMessage()


logging.getLogger("ingestion.stream.monitor").addHandler(Warnings(logging.WARNING))


def deadline_passed() -> bool:
    return over.is_set() or (whole.is_set() and time.monotonic() > whole_at[0] + recovery)


def commits(group: str) -> None:
    monitor = PipelineMonitor(SimpleNamespace(name=group, consumer_group=group), settings, None)  # type: ignore[arg-type]
    events: list[tuple[float, float, int]] = []  # (start, seconds, outcome) of every commit
    last_landed, recovered = 0, None
    offset = 0
    while not deadline_passed():
        offset += 1
        failures.pop(threading.get_ident(), None)
        started = time.monotonic()
        monitor._commit(offset, {topic: {"0": offset, "1": offset, "2": offset}})
        seconds = time.monotonic() - started
        landed = monitor._pending is None
        why = failures.get(threading.get_ident(), "")
        events.append((round(started, 3), round(seconds, 3),
                       LANDED if landed else TIMED_OUT if "no answer" in why else FAILED))
        if landed:
            last_landed = offset
            with lock:
                if group not in ready:
                    ready.add(group)
                    if len(ready) == len(names):
                        print(json.dumps({"ready": sorted(ready)}), flush=True)
            if whole.is_set() and started >= whole_at[0]:
                recovered = round(time.monotonic() - whole_at[0], 3)
                break
        time.sleep(0.02)
    started = time.monotonic()
    monitor.close()
    results[group] = {"events": events, "last_landed": last_landed, "last_sent": offset, "recovered": recovered,
                      "close_seconds": round(time.monotonic() - started, 3), "replaced": monitor._commits.replaced}


def check() -> None:
    # The group the check commits to and the group it takes over from: the test's first two groups.
    mine, theirs = names[0], names[1 % len(names)]
    while not deadline_passed():
        started = time.monotonic()
        try:
            clients.check_group(settings, mine, 5.0)
            groups.group_state(settings, theirs, {topic: [0, 1, 2]}, 5.0)
        except Exception as exc:  # noqa: BLE001 - a broker away: the check fails as an error, which is all it may do
            checks["failed"] += 1
            checks["errors"] = [*checks["errors"][-4:], f"{type(exc).__name__}: {exc}"[:300]]
        else:
            checks["passed"] += 1
            if whole.is_set() and started >= whole_at[0]:
                checks["passed_after_whole"] += 1
                break
        time.sleep(0.1)


def listen() -> None:
    for line in sys.stdin:
        if line.strip() == "whole" and not whole.is_set():
            whole_at.append(time.monotonic())
            whole.set()
    if not whole.is_set():
        over.set()  # end of input before the cluster was whole: the test gave up


threads = [threading.Thread(target=commits, args=(name,), name=name) for name in names]
threads.append(threading.Thread(target=check, name="checks"))
for thread in threads:
    thread.start()
threading.Thread(target=listen, daemon=True).start()
for thread in threads:
    thread.join()
print(json.dumps({"groups": results, "checks": checks, "whole_at": whole_at[0] if whole_at else None}), flush=True)
