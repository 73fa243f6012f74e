"""`ingest run --all --available-now` over many small pipelines, timed from the shell prompt back to it.

A project folder of its own gets `--pipelines` pipeline files (conf/pipelines/p<i>.yaml), each reading its own
3-partition topic of `--records` sample orders (the first topic holds ten times as many), all in one application
on one local master. The run is a fresh process (`--code DIR` puts another checkout first on its PYTHONPATH, to
compare). Afterwards every table is read with delta-rs: each must hold exactly its topic's records.

With `--routed` the same topics are read by one pipeline instead, `topicPattern` over them and `routing.by: topic`
(docs/routing.md): one query, a table per topic, run with `ingest run <file> --available-now`.

    .venv/bin/python benchmarks/many_pipelines.py --home /tmp/many [--pipelines 100] [--records 300] [--routed]
        [--code DIR]

Prints one JSON line: pipelines, records, wall seconds, rows found, whether every table is exact. The broker (in
<home>/kafka) is left running for the next run: `ingest kafka stop` with INGEST_HOME=<home>/kafka's parent, or
kill the pid in <home>/kafka/broker.pid.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--home", type=Path, required=True, help="the project folder (state, conf, tables)")
    p.add_argument("--pipelines", type=int, default=100, help="pipelines (100)")
    p.add_argument("--records", type=int, default=300, help="records of each topic; the first has 10x (300)")
    p.add_argument("--routed", action="store_true",
                   help="one pipeline over all the topics (topicPattern, routing.by: topic) instead of one each")
    p.add_argument("--code", type=Path, help="the checkout to run (default: this one)")
    p.add_argument("--log", type=Path, help="write the run's log here, with -v (Spark's phases of every batch)")
    p.add_argument("--profile", type=Path, help="run the command under cProfile, its statistics written here")
    p.add_argument("--spark", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting of every pipeline (`spark:` section), e.g. a Flight Recording for "
                        "jfr_breakdown.py; repeatable")
    args = p.parse_args()
    sys.path.insert(0, str(REPO))
    from confluent_kafka.admin import AdminClient, NewTopic
    from deltalake import DeltaTable

    from ingestion.dev import broker
    from ingestion.dev.samples import produce_orders

    home = args.home.absolute()
    env = {**os.environ, "INGEST_HOME": str(home / "state"), "INGEST_CONF_DIR": str(home / "conf"),
           "INGEST_SCHEMAS_DIR": str(REPO / "schemas"),
           "INGEST_JAR_CACHE": os.environ.get("INGEST_JAR_CACHE", str(REPO / ".ingest" / "jars"))}
    os.environ.update(env)
    local = broker.Broker(home / "kafka")
    servers = local.bootstrap_servers() if local.pid() else local.start()  # left running for the next run
    assert servers
    schema = json.loads((REPO / "schemas" / "orders-value" / "1.avsc").read_text())
    run = f"r{int(time.time())}"
    topics = [f"many-{run}-{i}" for i in range(args.pipelines)]
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics([NewTopic(t, 3, 1) for t in topics]).values():
        future.result(60)
    expected = {}
    for i, topic in enumerate(topics):
        count = args.records * (10 if i == 0 else 1)
        expected[topic] = len(produce_orders(servers, topic, count, schema_id=1, schema=schema))
    conf = home / "conf" / "pipelines"
    conf.mkdir(parents=True, exist_ok=True)
    for old in conf.glob("*.yaml"):
        old.unlink()
    spark = "".join(f"  {json.dumps(key)}: {json.dumps(value)}\n"
                    for key, value in (setting.split("=", 1) for setting in args.spark))
    spark = f"spark:\n{spark}" if spark else ""
    common = (f"kafka:\n  bootstrap.servers: \"{servers}\"\nsource:\n  startingOffsets: earliest\nvalue:\n"
              f"  format: confluent\n  subject: orders-value\nkey:\n  format: string\n")
    tables = {topic: home / "tables" / run / f"p{i}" for i, topic in enumerate(topics)}
    if args.routed:  # each topic's table at <root>/tables/<topic, normalised> (docs/routing.md)
        tables = {topic: home / "tables" / run / "tables" / topic.replace("-", "_") for topic in topics}
        (conf / "routed.yaml").write_text(
            f"name: routed\ntopicPattern: \"many-{run}-.*\"\n{common}routing:\n  by: topic\n"
            f"  table: \"{{route}}\"\nsink:\n  root: {home / 'tables' / run}\n" + spark)
    for i, topic in enumerate([] if args.routed else topics):
        (conf / f"p{i}.yaml").write_text(
            f"name: p{i}\ntopic: {topic}\n{common}sink:\n  table: {tables[topic]}\n"
            f"  checkpointLocation: {home / 'checkpoints' / run / f'p{i}'}\n" + spark)
    code = str((args.code or REPO).absolute())
    child_env = {**env, "PYTHONPATH": code}
    started = time.monotonic()
    verbose = ["-v"] if args.log else []
    which = [str(conf / "routed.yaml")] if args.routed else ["--all"]
    command = [sys.executable, "-m", "ingestion.cli", *verbose, "run", *which, "--available-now"]
    if args.profile:  # `ingest` ends by os._exit, before cProfile's own -o would write: the statistics first
        command[1:3] = ["-c", _PROFILED, str(args.profile.absolute())]
    done = subprocess.run(command, cwd=code, env=child_env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    if args.log:
        args.log.write_text(done.stdout + done.stderr)
    found = {}
    for topic in topics:
        found[topic] = DeltaTable(str(tables[topic])).to_pyarrow_table(columns=["_kafka_offset"]).num_rows
    print(json.dumps({"pipelines": args.pipelines, "routed": args.routed, "records": sum(expected.values()),
                      "wall_s": round(wall, 1),
                      "exit": done.returncode, "rows": sum(found.values()), "exact": found == expected,
                      "code": code}))
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
    return 0 if done.returncode == 0 and found == expected else 1


_PROFILED = """import cProfile, os, sys
from ingestion.cli import exit_now, main
profile = cProfile.Profile()
code = profile.runcall(main, sys.argv[2:])
profile.dump_stats(sys.argv[1])
exit_now(code)
"""

if __name__ == "__main__":
    raise SystemExit(main())
