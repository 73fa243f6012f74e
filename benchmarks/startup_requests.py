"""Kafka requests and seconds from process start to the first batch of `ingest run --available-now`.

Two cases on a topic of our own (3 partitions, `--records` sample orders): a new pipeline (no table, no
checkpoint), then the same pipeline caught up (a second run with nothing to do). Each run is a fresh process whose
confluent-kafka clients are wrapped to count what they ask of the brokers (metadata listings, offset look-ups,
group requests, clients made); Spark's own Java client is not counted (it is the same in every version). Run it
against another checkout with `--code DIR` (that folder goes first on the child's PYTHONPATH) to compare:

    .venv/bin/python benchmarks/startup_requests.py --home /tmp/startup
    .venv/bin/python benchmarks/startup_requests.py --home /tmp/startup-old --code ../old-checkout

`--log DIR` runs `ingest -v` and keeps each run's log there (`new pipeline.log`, `caught up.log`): where the
seconds before the first batch go.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# Runs in the child before `ingest` does anything: counts requests, notes when the first batch is written.
_CHILD = textwrap.dedent("""
    import atexit, json, logging, os, re, sys, time
    sys.path.insert(0, os.environ["STARTUP_CODE"])  # the checkout measured, before any installed copy
    import confluent_kafka
    from confluent_kafka.admin import AdminClient
    counts = {}
    def count(kind, n=1):
        counts[kind] = counts.get(kind, 0) + n
    def wrap(cls, name, kind):
        original = getattr(cls, name)
        def counted(self, *args, **kwargs):
            count(kind)
            return original(self, *args, **kwargs)
        setattr(cls, name, counted)
    wrap(AdminClient, "list_topics", "metadata listings")
    wrap(AdminClient, "alter_consumer_group_offsets", "group offset writes")
    original_init = AdminClient.__init__
    def admin_init(self, *args, **kwargs):
        count("admin clients made")
        original_init(self, *args, **kwargs)
    AdminClient.__init__ = admin_init
    class Consumer(confluent_kafka.Consumer):
        def __init__(self, *args, **kwargs):
            count("consumers made")
            super().__init__(*args, **kwargs)
        def list_topics(self, *args, **kwargs):
            count("metadata listings")
            return super().list_topics(*args, **kwargs)
        def get_watermark_offsets(self, *args, **kwargs):
            count("offset look-ups")
            return super().get_watermark_offsets(*args, **kwargs)
        def committed(self, *args, **kwargs):
            count("group offset reads")
            return super().committed(*args, **kwargs)
    confluent_kafka.Consumer = Consumer
    started = float(sys.argv[1])
    first = {}
    class FirstBatch(logging.Handler):
        def emit(self, record):
            if "first" not in first and re.search(r" batch -?\\d+: \\d+ rows", record.getMessage()):
                first["first"] = time.time() - started
                first["requests"] = dict(counts)
    logging.getLogger().addHandler(FirstBatch())
    def report():
        import ingestion
        print("STARTUP " + json.dumps({"code": ingestion.__file__, "first_batch_s": first.get("first"),
                                       "exit_s": time.time() - started,
                                       "before_first_batch": first.get("requests", dict(counts)),
                                       "whole_run": counts}), flush=True)
    atexit.register(report)
    from ingestion.cli import main
    code = main(sys.argv[2:])
    sys.exit(code)
""")


def _pipeline(home: Path, topic: str, servers: str) -> Path:
    path = home / "conf" / "pipelines" / "startup.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"name: startup\ntopic: {topic}\nkafka:\n  bootstrap.servers: {servers}\n"
                    "value:\n  subject: orders-value\nkey:\n  format: string\n"
                    f"sink:\n  root: {home / 'lake'}\n")
    return path


def _run(config: Path, env: dict[str, str], log: Path | None = None) -> dict[str, Any]:
    import time

    started = time.time()
    # From the state folder, so that `-c` (which puts the working folder first on sys.path) imports the
    # ingestion package of --code, not one in the working folder.
    verbose = ["-v"] if log else []
    done = subprocess.run([sys.executable, "-c", _CHILD, str(started), *verbose, "run", str(config),
                           "--available-now"],
                          capture_output=True, text=True, env=env, timeout=600, cwd=config.parent.parent.parent)
    if log:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(done.stdout + done.stderr)
    lines = [line for line in done.stdout.splitlines() if line.startswith("STARTUP ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"run failed ({done.returncode}): {done.stderr[-2000:]}")
    return dict(json.loads(lines[-1][len("STARTUP "):]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, required=True, help="state folder (broker, tables)")
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--code", type=Path, default=REPO, help="the checkout whose ingestion package runs")
    parser.add_argument("--log", type=Path, help="run `ingest -v` and keep each run's log in this folder")
    args = parser.parse_args()
    home = args.home.absolute()
    env = {**os.environ, "INGEST_HOME": str(home), "STARTUP_CODE": str(args.code.absolute()),
           "INGEST_SCHEMAS_DIR": str(REPO / "schemas"), "MLFLOW_TRACKING_URI": f"sqlite:///{home / 'mlflow.db'}"}
    env.setdefault("INGEST_JAR_CACHE", str(REPO / ".ingest" / "jars"))
    os.environ.update(env)
    sys.path.insert(0, str(args.code.absolute()))
    from ingestion.dev.broker import Broker
    from ingestion.dev.samples import produce_orders
    from ingestion.kafka.clients import create_topic
    from ingestion.schema.files import load_subject

    broker = Broker(home / "kafka")
    servers = broker.start()
    try:
        topic = f"startup-{os.getpid()}"
        create_topic({"bootstrap.servers": servers}, topic, 3)
        subject = load_subject(REPO / "schemas", "orders-value")
        produce_orders(servers, topic, args.records, schema_id=subject.latest_id, schema=subject.latest)
        config = _pipeline(home, topic, servers)
        result = {case: _run(config, env, args.log / f"{case}.log" if args.log else None)
                  for case in ("new pipeline", "caught up")}
        print(json.dumps(result, indent=2))
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
