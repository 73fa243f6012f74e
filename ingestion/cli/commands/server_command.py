"""The background servers on 127.0.0.1: ingest sql-server (Spark's Thrift server), ingest connect-server (Spark
Connect's server) and ingest metastore (the local catalog's Derby server); start, stop, status."""

from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ingestion.ops.sql_server import SqlServer

log = logging.getLogger("ingestion")


def manage_sql_server(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ingestion.ops import sql_server

    server = sql_server.SqlServer(Path(args.home)) if args.home else sql_server.SqlServer.default()
    return _manage(args, server, "jdbc:hive2://127.0.0.1:{port}/default")


def manage_connect_server(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ingestion.ops import sql_server

    return _manage(args, sql_server.SqlServer.connect(Path(args.home) if args.home else None), "sc://127.0.0.1:{port}")


def _manage(args: argparse.Namespace, server: SqlServer, address: str) -> int:
    from ingestion.ops import sql_server

    if args.action == "serve":
        from ingestion.config import load_all

        configs, errors = load_all()
        for error in errors:  # a bad file costs its pipeline's names, not the server
            log.warning("not serving: %s", error)
        sql_server.serve(configs, args.port or server.default_port, connect=server.command == "connect-server")
        return 0
    if args.action == "stop":
        pid = server.stop()
        print(f"stopped (pid {pid})" if pid else "not running")
        return 0
    if args.action == "status":
        found = server.running()
        if found is None:
            print(f"not running (folder {server.home})")
            return 1
        print(f"running: pid {found[0]}, {address.format(port=found[1])}, log {server.log_file}")
        return 0
    pid, port = server.start(port=args.port)
    print(f"running: pid {pid}, {address.format(port=port)} (stop: ingest {server.command} stop)")
    return 0


def manage_metastore(args: argparse.Namespace) -> int:
    from ingestion.runtime import metastore

    if args.action == "start":
        port = metastore.start()
        print(f"running: jdbc:derby://127.0.0.1:{port}/metastore_db, folder {metastore.home()}")
    elif args.action == "stop":
        pid = metastore.stop()
        print(f"stopped (pid {pid})" if pid else "not running")
    else:
        found = metastore.running()
        if found is None:
            print(f"not running (folder {metastore.home()})")
            return 1
        print(f"running: pid {found[0]}, jdbc:derby://127.0.0.1:{found[1]}/metastore_db, folder {metastore.home()}")
    return 0
