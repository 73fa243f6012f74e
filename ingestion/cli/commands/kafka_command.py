"""ingest kafka start, stop and status: the local development broker."""

from __future__ import annotations

import argparse
import logging
from typing import Any

log = logging.getLogger("ingestion")


def kafka_start(args: argparse.Namespace) -> int:
    from ingestion.dev.broker import Broker

    broker = Broker.default(secure=args.secure)
    print(broker.start(port=args.port))
    if args.secure:
        from ingestion.dev.secure import describe

        print(describe(broker.security))
    return 0


def kafka_stop(args: argparse.Namespace) -> int:
    from ingestion.dev.broker import Broker

    print("stopped" if Broker.default(secure=args.secure).stop() else "not running")
    return 0


def kafka_status(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AdminClient

    from ingestion.dev.broker import Broker

    broker = Broker.default(secure=args.secure)
    pid = broker.pid()
    if pid is None:
        print(f"not running (folder {broker.home})")
        return 1
    servers = broker.bootstrap_servers() or ""
    settings: dict[str, Any] = {**broker.admin_settings(), "logger": log}
    topics = AdminClient(settings).list_topics(timeout=10).topics
    print(f"running: pid {pid}, bootstrap {servers}, folder {broker.home}")
    for name, meta in sorted(topics.items()):
        if not name.startswith("__"):
            print(f"  topic {name}: {len(meta.partitions)} partitions")
    return 0
