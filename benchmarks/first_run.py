"""A fresh checkout's first `ingest run` against its second: what a new user's first minute costs.

Each round clones this repository's HEAD into a new folder (no `__pycache__`, no state: a fresh INGEST_HOME, so
no MLflow store, no checkpoint) and runs `ingest run <pipeline> --available-now` over the same topic of `--records`
sample orders twice, each into a table of its own: the first run, then the second, timed from the shell prompt back
to it. The jar cache is the one `make setup` filled (a checkout's setup resolves it before any run). Afterwards every
table is read with delta-rs: each must hold exactly the topic's records.

    .venv/bin/python benchmarks/first_run.py --home /tmp/first [--records 1000000] [--rounds 2]

Prints one JSON line per round (first and second wall seconds, their ratio, whether the tables are exact) and one of
the medians. The broker (in <home>/kafka) is left running for the next run: kill the pid in <home>/kafka/broker.pid.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--home", type=Path, required=True, help="the benchmark's folder (broker, clones, state)")
    p.add_argument("--records", type=int, default=1_000_000, help="records of the topic (1000000)")
    p.add_argument("--rounds", type=int, default=2, help="fresh checkouts, each run twice (2)")
    args = p.parse_args()
    sys.path.insert(0, str(REPO))
    from confluent_kafka.admin import AdminClient, NewTopic
    from deltalake import DeltaTable

    from ingestion.dev import broker
    from ingestion.dev.samples import produce_orders

    home = args.home.absolute()
    local = broker.Broker(home / "kafka")
    servers = local.bootstrap_servers() if local.pid() else local.start()
    assert servers
    schema = json.loads((REPO / "schemas" / "orders-value" / "1.avsc").read_text())
    topic = f"first-{int(time.time())}"
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics([NewTopic(topic, 3, 1)]).values():
        future.result(60)
    produced = len(produce_orders(servers, topic, args.records, schema_id=1, schema=schema))
    rounds = []
    for i in range(args.rounds):
        clone = home / f"checkout-{topic}-{i}"
        shutil.rmtree(clone, ignore_errors=True)
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        env = {**os.environ, "INGEST_HOME": str(clone / ".ingest" / "state"), "INGEST_CONF_DIR": str(clone / "conf"),
               "INGEST_SCHEMAS_DIR": str(clone / "schemas"),
               "INGEST_JAR_CACHE": os.environ.get("INGEST_JAR_CACHE", str(REPO / ".ingest" / "jars")),
               "PYTHONPATH": str(clone)}
        env.pop("MLFLOW_TRACKING_URI", None)
        walls, exact = [], True
        for run in ("first", "second"):
            pipeline = clone / f"{run}.yaml"
            table = clone / "tables" / run
            pipeline.write_text(
                f"name: {run}\ntopic: {topic}\nkafka:\n  bootstrap.servers: \"{servers}\"\n"
                f"source:\n  startingOffsets: earliest\nvalue:\n  format: confluent\n  subject: orders-value\n"
                f"key:\n  format: string\nsink:\n  table: {table}\n"
                f"  checkpointLocation: {clone / 'checkpoints' / run}\n")
            started = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "ingestion.cli", "run", str(pipeline), "--available-now"],
                                  cwd=clone, env=env, capture_output=True, text=True, check=False)
            walls.append(time.monotonic() - started)
            if done.returncode != 0:
                print(done.stderr[-3000:], file=sys.stderr)
                return 1
            exact = exact and DeltaTable(str(table)).to_pyarrow_table(columns=["_kafka_offset"]).num_rows == produced
        rounds.append({"round": i, "first_s": round(walls[0], 1), "second_s": round(walls[1], 1),
                       "first_over_second": round(walls[0] / walls[1], 2), "exact": exact,
                       "load": os.getloadavg()[0]})
        print(json.dumps(rounds[-1]))
        shutil.rmtree(clone, ignore_errors=True)
    print(json.dumps({"records": produced, "rounds": len(rounds),
                      "first_s": statistics.median(r["first_s"] for r in rounds),
                      "second_s": statistics.median(r["second_s"] for r in rounds),
                      "first_over_second": statistics.median(r["first_over_second"] for r in rounds),
                      "exact": all(r["exact"] for r in rounds)}))
    return 0 if all(r["exact"] for r in rounds) else 1


if __name__ == "__main__":
    raise SystemExit(main())
