"""The `ingest` command. Thin: parses arguments, calls the modules, prints. Exit 0 ok, 1 failure, 2 usage."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence

from ingestion.errors import IngestionError

log = logging.getLogger("ingestion")

DESCRIPTION = """Land Avro-encoded Kafka topics in bronze Delta tables, exactly once.

Pipelines are YAML files in conf/pipelines/ (name them by file stem or path). Local state (the dev broker,
tables, checkpoints, the MLflow store, the JVM jars) lives in .ingest/ or $INGEST_HOME."""


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    for noisy in ("py4j", "alembic", "mlflow", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        return int(args.func(args) or 0)
    except IngestionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ingest", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    kafka = commands.add_parser("kafka", help="the local development Kafka broker (KRaft, 127.0.0.1)")
    kafka_cmds = kafka.add_subparsers(dest="action", required=True, metavar="ACTION")
    start = kafka_cmds.add_parser("start", help="start it (or find it running); prints the bootstrap address")
    start.add_argument("--port", type=int, help="listener port (default: the previous one, else a free one)")
    start.set_defaults(func=_kafka_start)
    kafka_cmds.add_parser("stop", help="stop it by its pid").set_defaults(func=_kafka_stop)
    kafka_cmds.add_parser("status", help="pid, address and topics; exit 1 when not running"
                          ).set_defaults(func=_kafka_status)

    run = commands.add_parser("run", help="run a pipeline (streams until stopped, or --available-now)")
    run.add_argument("pipeline", help="pipeline name (conf/pipelines/<name>.yaml) or path to a YAML file")
    run.add_argument("--available-now", action="store_true",
                     help="process everything up to the latest offsets, in batches of maxOffsetsPerTrigger, "
                          "then exit 0")
    run.set_defaults(func=_run)

    history = commands.add_parser("history", help="table versions with the Kafka offsets each one holds")
    history.add_argument("pipeline")
    history.add_argument("--json", action="store_true", help="one JSON document for scripts")
    history.set_defaults(func=_history)

    demo = commands.add_parser("demo", help="broker + sample topic + sample records + one ingestion + summary")
    demo.add_argument("--records", type=int, default=10_000, help="sample records to produce (default 10000)")
    demo.add_argument("--keep-broker", action="store_true", help="leave the broker running afterwards")
    demo.set_defaults(func=lambda a: _lazy("ingestion.demo", "run_demo")(records=a.records,
                                                                           keep_broker=a.keep_broker))

    jars = commands.add_parser("jars", help="resolve the JVM jars (Delta, Spark Kafka source, broker) via Maven")
    jars.set_defaults(func=_jars)
    return parser


def _lazy(module: str, name: str) -> object:
    import importlib

    return getattr(importlib.import_module(module), name)


def _kafka_start(args: argparse.Namespace) -> int:
    from ingestion.devstack import Broker

    print(Broker.default().start(port=args.port))
    return 0


def _kafka_stop(args: argparse.Namespace) -> int:
    from ingestion.devstack import Broker

    print("stopped" if Broker.default().stop() else "not running")
    return 0


def _kafka_status(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AdminClient

    from ingestion.devstack import Broker

    broker = Broker.default()
    pid = broker.pid()
    if pid is None:
        print(f"not running (folder {broker.home})")
        return 1
    servers = broker.bootstrap_servers() or ""
    topics = AdminClient({"bootstrap.servers": servers}).list_topics(timeout=10).topics
    print(f"running: pid {pid}, bootstrap {servers}, folder {broker.home}")
    for name, meta in sorted(topics.items()):
        if not name.startswith("__"):
            print(f"  topic {name}: {len(meta.partitions)} partitions")
    return 0


def _run(args: argparse.Namespace) -> int:
    from ingestion import pipeline
    from ingestion.config import load_pipeline
    from ingestion.spark import get_session

    config = load_pipeline(args.pipeline)
    spark = get_session(f"ingest-{config.name}", conf=config.spark)
    running = pipeline.run(spark, config, available_now=args.available_now)
    rows = sum(b.rows for b in running.batches if b.committed)
    log.info("%s: done, %d batches, %d rows written", config.name, len(running.batches), rows)
    return 0


def _history(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from ingestion import ledger
    from ingestion.config import load_pipeline
    from ingestion.spark import get_session

    config = load_pipeline(args.pipeline)
    records = ledger.history(get_session(f"ingest-history-{config.name}", conf=config.spark), config.table_path)
    if args.json:
        print(json.dumps([asdict(r) for r in records], default=str, indent=2))
        return 0
    print(f"{'version':>7}  {'committed at':19}  {'kind':6} {'batch':>5} {'rows':>7}  offsets")
    for r in records:
        spans = ", ".join(f"{x.topic}/{x.partition}:{x.first}-{x.last}" for x in r.ranges)
        when = r.committed_at.strftime("%Y-%m-%d %H:%M:%S") if r.committed_at else "-"
        print(f"{r.version:>7}  {when:19}  {r.kind:6} {r.batch_id:>5} {r.rows:>7}  {spans}")
    return 0


def _jars(args: argparse.Namespace) -> int:
    from ingestion import jvm

    for artifacts in jvm.ALL_SETS:
        print(f"{artifacts.name}: {len(jvm.resolve(artifacts))} jars in {artifacts.folder(jvm.jar_cache())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
