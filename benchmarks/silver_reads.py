"""The read-only commands of a silver pipeline, timed as a user runs them: `verify`, `silver status`, `status`,
`history` and `sql` on a Debezium topic of --changes changes folded into a silver table (upsert by id), and
`onboard --dry-run` of a new pipeline (catalog names and a silver section, as the issue's user had). Targets: a
median of at most 2 s each, 5 s for the dry run, on 2 cores.

Setup, not timed: a broker of our own on 127.0.0.1 (stopped by its pid at the end), the topic, and one
`ingest run --available-now` that lands bronze and silver (a JVM). Then every command runs --runs times, a new
process each time, the commands alternating, with JAVA_HOME pointing nowhere: a command that tried to start a JVM
would fail, and the script with it. Reported: median and max wall seconds, and the median CPU seconds of the
process (user + system). State lives in --home.

    .venv/bin/python benchmarks/silver_reads.py --changes 20000 --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TARGETS = {"onboard --dry-run": 5.0}  # seconds; 2 for the others


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--changes", type=int, default=20_000, help="Debezium changes in the topic (20000)")
    p.add_argument("--keys", type=int, default=2_000, help="distinct ids they change (2000)")
    p.add_argument("--runs", type=int, default=5, help="runs of each command (5); the median is reported")
    p.add_argument("--home", type=Path, default=Path("/tmp/bench-silver-reads"), help="state folder (made anew)")
    p.add_argument("--output", type=Path, help="also write the results as JSON to this file")
    args = p.parse_args()
    home = args.home.absolute()
    shutil.rmtree(home, ignore_errors=True)
    (home / "mlflow").mkdir(parents=True)
    os.environ.update({"INGEST_HOME": str(home), "INGEST_CONF_DIR": str(home / "conf"),
                       "INGEST_SCHEMAS_DIR": str(REPO / "schemas"),
                       "INGEST_JAR_CACHE": os.environ.get("INGEST_JAR_CACHE", str(REPO / ".ingest" / "jars")),
                       "MLFLOW_TRACKING_URI": f"sqlite:///{home / 'mlflow' / 'mlflow.db'}"})
    from ingestion.dev.broker import Broker

    broker = Broker(home / "kafka")
    servers = broker.start()
    try:
        commands = _setup(home, servers, args.changes, args.keys)
        results = _measure(commands, args.runs)
    finally:
        broker.stop()
    results = {"changes": args.changes, "keys": args.keys, "runs": args.runs, "commands": results}
    print(_table(results))
    if args.output:
        args.output.write_text(json.dumps(results, indent=2))
    return 0 if all(r["median_s"] <= TARGETS.get(name, 2.0) for name, r in results["commands"].items()) else 1


def _log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def _ingest() -> str:
    return str(Path(sys.executable).parent / "ingest")


def _setup(home: Path, servers: str, changes: int, keys: int) -> dict[str, list[str]]:
    """The topic, bronze and silver landed by one run; the commands to time."""
    from ingestion.dev import cdc
    from ingestion.kafka.clients import create_topic

    topic = "shop.public.customers"
    create_topic({"bootstrap.servers": servers}, topic, 3)
    model = cdc.history(changes - keys // 2, keys, seed=7)  # a snapshot of keys // 2 rows, then the rest
    written = cdc.produce(servers, topic, model.changes)
    _log(f"{len(model.changes):,} changes ({written:,} records with the tombstones) in {topic}")
    silver = "  key: [id]\n  envelope: debezium\n  sequenceBy: source.lsn\n"
    setup = cdc.pipeline_yaml(home / "customers.yaml", name="customers", topic=topic, servers=servers,
                              root=home / "lake", silver=silver)
    t0 = time.monotonic()
    _run([_ingest(), "run", str(setup), "--available-now"], jvm=True)
    _log(f"bronze and silver landed in {time.monotonic() - t0:.0f}s")
    # The pipeline files a user has: catalog names (the run above had none, so nothing registered them).
    conf = home / "conf" / "pipelines"
    conf.mkdir(parents=True)
    (conf / "customers.yaml").write_text(setup.read_text().replace("silver:\n", "silver:\n  catalogTable: "
                                                                    "silver.customers\n"))
    create_topic({"bootstrap.servers": servers}, "shop.public.orders", 3)
    new = cdc.pipeline_yaml(home / "new.yaml", name="orders", topic="shop.public.orders", servers=servers,
                            root=home / "lake", silver=silver + "  catalogTable: silver.orders\n")
    new.write_text(new.read_text().replace("sink:\n", "sink:\n  catalogTable: bronze.orders\n"))
    sql = ("SELECT tier, count(*) AS customers, sum(balance_cents) AS balance FROM silver.customers "
           "GROUP BY 1 ORDER BY 1")
    return {"verify": ["verify", "customers"], "silver status": ["silver", "status", "customers"],
            "status": ["status", "customers"], "history": ["history", "customers"], "sql": ["sql", sql],
            "onboard --dry-run": ["onboard", str(new), "--dry-run"]}


def _run(command: list[str], *, jvm: bool = False) -> tuple[float, float]:
    """Run a command; (wall seconds, CPU seconds of the process). Without `jvm`, JAVA_HOME points nowhere."""
    env = dict(os.environ) if jvm else {**os.environ, "JAVA_HOME": "/nonexistent-java"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=3600, check=False)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[1:3])} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _measure(commands: dict[str, list[str]], runs: int) -> dict[str, Any]:
    walls: dict[str, list[float]] = {name: [] for name in commands}
    cpus: dict[str, list[float]] = {name: [] for name in commands}
    for i in range(runs):
        for name, command in commands.items():
            wall, cpu = _run([_ingest(), *command])
            walls[name].append(wall)
            cpus[name].append(cpu)
        _log(f"run {i + 1} of {runs}: " + ", ".join(f"{n} {w[-1]:.2f}s" for n, w in walls.items()))
    return {name: {"median_s": round(statistics.median(w), 2), "max_s": round(max(w), 2),
                   "cpu_median_s": round(statistics.median(cpus[name]), 2), "all_s": [round(x, 2) for x in w]}
            for name, w in walls.items()}


def _table(results: dict[str, Any]) -> str:
    lines = [f"{results['changes']:,} changes on {results['keys']:,} keys, {results['runs']} runs each, no JVM",
             "| command | median s | max s | CPU s (median) | target s |", "| --- | ---: | ---: | ---: | ---: |"]
    for name, r in results["commands"].items():
        lines.append(f"| `ingest {name}` | {r['median_s']:.2f} | {r['max_s']:.2f} | {r['cpu_median_s']:.2f} | "
                     f"{TARGETS.get(name, 2.0):g} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
