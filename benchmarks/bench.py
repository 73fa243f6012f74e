"""Throughput, freshness and memory of `ingest run` against a hand-written Spark job and the raw limits.

One run, one machine, one topic (produced once per size and reused), a broker of our own on 127.0.0.1:

  limit      the confluent-kafka consumer reading the topic and discarding it; Spark's Kafka source into noop
  baseline   Spark Kafka source, strip the 5-byte header, Spark's from_avro, Delta append with a checkpoint
  ours       `ingest run <pipeline> --available-now` with every promise on
  freshness  ours streaming (short trigger) while a producer writes at half of ours' rate: latency p50/p99
             once the stream is warm (--fresh-warmup)
  memory     ours on a topic and on one 10x larger, same maxOffsetsPerTrigger: peak RSS should stay flat
  fixed      ours and the delta-rs peer on topics of two sizes (--fixed-sizes), alternating: each run's wall time
             (process start to exit) fitted as F + N / r by least squares, F the run's fixed cost, r its rate
  dirty      ours on the same events with every --bad-every-th body cut short (quarantined), beside ours on the
             clean topic, alternating: a bad record should cost a record (records/s dirty/clean >= 0.8)
  rules      ours with five data-quality expectations that every row passes, beside ours without, alternating
             (records/s with/without >= 0.9)

Every measured thing runs in its own process, sampled for peak RSS (JVM, Python workers, driver). The
throughput kinds repeat `--repeat` times, alternating, and medians are reported. Results go to
<output>/results.json and <output>/results.md. Local state (broker, topics, tables, logs) lives in --home.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_report
import bench_runs
import datagen

REPO = Path(__file__).resolve().parents[1]
STAGES = ("limit", "baseline", "ours", "peer", "freshness", "memory", "admin", "maintain", "fairness", "prometheus",
          "dirty", "fixed", "rules")
# Batches of the memory stage's smaller run (the larger has 10 times as many): enough for the JVM to reach the
# heap it keeps for that batch size. With 2 or 3 batches the smaller run ends while the JVM is still warming up
# (measured: 895 against 1,457 MiB at 3 against 21 batches; 1,370 against 1,346 MiB at 21 against 201).
MEMORY_BATCHES = 20


def log(message: str) -> None:
    print(f"{dt.datetime.now():%H:%M:%S} {message}", flush=True)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=3_000_000, help="records in the benchmark topic (3000000)")
    p.add_argument("--repeat", type=int, default=3, help="repetitions of each throughput measurement (3)")
    p.add_argument("--max-offsets", type=int, default=500_000, help="maxOffsetsPerTrigger of baseline and ours")
    p.add_argument("--fixed-sizes", type=lambda t: [int(x) for x in t.split(",")], default=[200_000, 1_000_000],
                   help="the fixed stage's topic sizes, comma-separated (200000,1000000)")
    p.add_argument("--fixed-kinds", default="ours,peer", help="the fixed stage's kinds (ours,peer)")
    p.add_argument("--bad-every", type=int, default=1000,
                   help="the dirty stage's topic: every Nth record's body cut short (1000)")
    p.add_argument("--only", default=",".join(STAGES), help=f"comma-separated stages ({','.join(STAGES)})")
    p.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results", help="results folder")
    p.add_argument("--home", type=Path, default=Path(os.environ.get("BENCH_HOME", "/tmp/bench-home")),
                   help="state folder: broker, topic markers, runs, logs (default /tmp/bench-home)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds before a measured process is killed")
    p.add_argument("--fresh-rate", type=_rates, default=[],
                   help="records/s of the freshness producer, or several, comma-separated, each a run of its own "
                        "(default: half of ours)")
    p.add_argument("--fresh-seconds", type=float, default=90, help="measured production time (90)")
    p.add_argument("--fresh-warmup", type=float, default=150,
                   help="production seconds not counted (150): under load on 2 cores the JVM compiles for ~4 "
                        "minutes, and batches are slower until it is done; 30 measures that start instead")
    p.add_argument("--fresh-trigger", default="1 second", help="pipeline trigger for freshness ('1 second')")
    p.add_argument("--fresh-s3", action="store_true",
                   help="freshness with the tables and checkpoint in a bucket of a local S3 server (moto, as the "
                        "tests use) instead of local folders")
    p.add_argument("--ours-verbose", action="store_true",
                   help="run ours, freshness and fairness with `ingest -v`: per-batch decode, write and Spark phase "
                        "times in the logs (debug logging; not the default)")
    p.add_argument("--admin-commits", type=int, default=2000, help="commits of the admin stage's table (2000)")
    p.add_argument("--admin-quarantined", type=int, default=120, help="quarantined rows of that table (120)")
    p.add_argument("--maintain-commits", type=int, default=2000,
                   help="commits of the maintain stage's table before maintenance (2000; built as the admin one)")
    p.add_argument("--maintain-runs", type=int, default=5, help="runs of the query before and after (5; median)")
    p.add_argument("--admin-runs", type=int, default=5, help="runs of each admin command (5); median reported")
    p.add_argument("--admin-spark-runs", type=int, default=3,
                   help="runs of each admin command with --reader spark beside them (3; 0: none)")
    p.add_argument("--fair-pipelines", type=int, default=20, help="pipelines of the fairness stage (20)")
    p.add_argument("--fair-rate", type=float, default=200, help="records/s of each quiet pipeline's topic (200)")
    p.add_argument("--fair-busy", type=float, default=10, help="the busy topic's rate, times the quiet rate (10)")
    p.add_argument("--fair-backlog", type=int, default=200_000, help="the busy topic's backlog at start (200000)")
    p.add_argument("--fair-seconds", type=float, default=90, help="measured production time (90)")
    p.add_argument("--fair-warmup", type=float, default=60, help="production seconds not counted (60)")
    p.add_argument("--fair-trigger", default="5 seconds", help="trigger of every pipeline ('5 seconds')")
    p.add_argument("--memory-records", type=int, help="smaller memory topic; the larger is 10x (default records/10)")
    p.add_argument("--memory-max-offsets", type=int,
                   help=f"maxOffsetsPerTrigger of both memory runs (default min(max-offsets, "
                        f"memory-records/{MEMORY_BATCHES}): {MEMORY_BATCHES} batches in the smaller run)")
    p.add_argument("--ours-spark", metavar="KEY=VALUE", action="append", type=_setting, default=[],
                   help="a Spark setting of every run of ours (throughput, freshness, memory; their spark: section), "
                        "repeatable")
    p.add_argument("--ours-sink", metavar="KEY=VALUE", action="append", type=_prefixed("sink."), default=[],
                   help="a sink: setting of every pipeline of ours (throughput, freshness, fairness, memory), "
                        "repeatable: sink.directWriteMaxOffsets=0 writes every batch with Spark")
    p.add_argument("--memory-spark", metavar="KEY=VALUE", action="append", type=_setting, default=[],
                   help="a Spark setting of both memory runs' pipelines (their spark: section), repeatable: "
                        "spark.driver.memory=1g caps the heap (ingest's default: 2g)")
    return p


def environment(home: Path) -> dict[str, str]:
    """Settings for us and every measured process: our own state folder, never the project's `.ingest/`."""
    settings = {
        "INGEST_HOME": str(home),
        "INGEST_JAR_CACHE": os.environ.get("INGEST_JAR_CACHE", str(REPO / ".ingest" / "jars")),
        "INGEST_SCHEMAS_DIR": str(datagen.SCHEMAS_DIR),
        "MLFLOW_TRACKING_URI": f"sqlite:///{home / 'mlflow' / 'mlflow.db'}",
        "PYTHONUNBUFFERED": "1",
    }
    os.environ.update(settings)
    (home / "mlflow").mkdir(parents=True, exist_ok=True)
    return dict(os.environ)


def _rates(text: str) -> list[float]:
    try:
        rates = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected records/s, comma-separated, got {text!r}") from None
    if not rates or min(rates) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive records/s, got {text!r}")
    return rates


def _prefixed(prefix: str) -> Callable[[str], tuple[str, str]]:
    def setting(text: str) -> tuple[str, str]:
        key, sep, value = text.partition("=")
        if not sep or not key.strip().startswith(prefix) or not value.strip():
            raise argparse.ArgumentTypeError(f"expected {prefix}<key>=<value>, got {text!r}")
        return key.strip(), value.strip()

    return setting


_setting = _prefixed("spark.")


def _fresh_rates(args: argparse.Namespace, summary: dict[str, Any]) -> list[tuple[float, str]]:
    if args.fresh_rate:
        return [(rate, "--fresh-rate") for rate in args.fresh_rate]
    return [_fresh_rate(args, summary)]


def _fresh_rate(args: argparse.Namespace, summary: dict[str, Any]) -> tuple[float, str]:
    if summary.get("ours", {}).get("records_per_s"):
        return summary["ours"]["records_per_s"] / 2, f"{bench_report.HALF_OF_OURS} in this run"
    previous = args.output / "results.json"
    if previous.is_file():
        rate = json.loads(previous.read_text()).get("summary", {}).get("ours", {}).get("records_per_s")
        if rate:
            return rate / 2, f"{bench_report.HALF_OF_OURS} in {previous}"
    return 2000.0, "default 2000 records/s (ours not measured)"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    stages = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = stages - set(STAGES)
    if unknown:
        print(f"error: unknown stage(s) {sorted(unknown)}; known: {', '.join(STAGES)}", file=sys.stderr)
        return 2
    home = args.home.absolute()
    home.mkdir(parents=True, exist_ok=True)
    env = environment(home)
    from ingestion.dev.broker import Broker

    started = time.monotonic()
    results: dict[str, Any] = {
        "command": shlex.join([Path(sys.executable).name, *sys.argv]) if argv is None else shlex.join(argv),
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": bench_report.machine(REPO),
        "config": {"records": args.records, "repeat": args.repeat, "max_offsets": args.max_offsets,
                   "stages": sorted(stages), "bad_every": args.bad_every,
                   "subject": datagen.SUBJECT, "partitions": datagen.PARTITIONS,
                   "fields": len(datagen.schema()["fields"]), "home": str(home),
                   "ours_verbose": args.ours_verbose, "ours_spark": dict(args.ours_spark),
                   "ours_sink": dict(args.ours_sink)},
        "stages_s": {}, "runs": [],
    }
    broker = Broker(home / "kafka")
    try:
        t0 = time.monotonic()
        servers = broker.start()
        log(f"broker pid {broker.pid()} on {servers}, data in {broker.home / 'data'}")
        env["KAFKA_BOOTSTRAP_SERVERS"] = servers
        ctx = bench_runs.Context(home, servers, env, args.max_offsets, args.timeout, log, args.ours_verbose,
                                 dict(args.ours_spark), dict(args.ours_sink))
        topic = datagen.ensure_topic(servers, home, args.records, log)
        results["topic"] = topic.__dict__ | {"avg_value_bytes": round(topic.avg_value_bytes, 1)}
        results["stages_s"]["broker_and_topic"] = round(time.monotonic() - t0, 1)
        dirty = datagen.ensure_topic(servers, home, args.records, log, bad_every=args.bad_every) \
            if "dirty" in stages else None
        if stages & {"ours", "fixed", "rules", "dirty", "freshness", "memory", "prometheus"}:
            small = datagen.ensure_topic(servers, home, min(args.fixed_sizes), log) if "fixed" in stages else topic
            results["first_run"] = bench_runs.first_run(ctx, small)
            log(f"first run of ours (the class archive): {json.dumps(results['first_run'])}")
        _throughput(args, stages, ctx, topic, results, dirty)
        if "fixed" in stages:
            t0 = time.monotonic()
            results["fixed"] = _fixed(args, ctx)
            results["stages_s"]["fixed"] = round(time.monotonic() - t0, 1)
            _write(args.output, results, started)
        if "prometheus" in stages:
            import prometheus_cost

            results["prometheus_cost"] = [prometheus_cost.endpoint_cost(pipelines=n, partitions=parts,
                                                                        scrape_every=every)
                                          for n, parts, every in ((1, 3, 1.0), (20, 12, 15.0))]
            results["prometheus_cost"].append(prometheus_cost.refresh_cost(servers, topic.topic))
            log(f"prometheus endpoint, in-process: {json.dumps(results['prometheus_cost'])}")
        _write(args.output, results, started)
        if "freshness" in stages:
            t0 = time.monotonic()
            s3 = _s3_server(home) if args.fresh_s3 else None
            if s3 is not None:
                ctx.env.update(s3.environment())
            results["freshness"] = []
            for rate, why in _fresh_rates(args, results.get("summary", {})):
                log(f"freshness: {rate:,.0f} records/s ({why}), trigger {args.fresh_trigger!r}")
                run = bench_runs.run_freshness(ctx, rate, args.fresh_seconds, args.fresh_warmup, args.fresh_trigger,
                                               s3=s3)
                results["freshness"].append(run | {"rate_from": why})
                log(f"freshness at {rate:,.0f} records/s: {json.dumps(run['latency'])}")
                _write(args.output, results, started)
            results["stages_s"]["freshness"] = round(time.monotonic() - t0, 1)
            if s3 is not None:
                s3.stop()
        if "memory" in stages:
            t0 = time.monotonic()
            small_n = args.memory_records or max(args.records // 10, 1000)
            max_offsets = args.memory_max_offsets or max(500, min(args.max_offsets, small_n // MEMORY_BATCHES))
            small = datagen.ensure_topic(servers, home, small_n, log)
            large = datagen.ensure_topic(servers, home, small_n * 10, log)
            log(f"memory: ours on {small_n:,} and {small_n * 10:,} records, maxOffsetsPerTrigger {max_offsets:,}")
            results["memory"] = bench_runs.run_memory(ctx, small, large, max_offsets,
                                                       dict(args.memory_spark))
            log(f"memory: ratio 10x/1x {json.dumps(results['memory']['ratio_large_to_small'])}")
            results["stages_s"]["memory"] = round(time.monotonic() - t0, 1)
            _write(args.output, results, started)
        if "admin" in stages:
            t0 = time.monotonic()
            results["admin"] = bench_runs.run_admin(ctx, args.admin_commits, args.admin_quarantined, args.admin_runs,
                                                    args.admin_spark_runs)
            results["stages_s"]["admin"] = round(time.monotonic() - t0, 1)
        if "maintain" in stages:
            t0 = time.monotonic()
            results["maintain"] = bench_runs.run_maintain(ctx, args.maintain_commits, args.maintain_runs)
            results["stages_s"]["maintain"] = round(time.monotonic() - t0, 1)
            _write(args.output, results, started)
        if "fairness" in stages:
            t0 = time.monotonic()
            results["fairness"] = bench_runs.run_fairness(ctx, args.fair_pipelines, args.fair_rate, args.fair_busy,
                                                          args.fair_backlog, args.fair_seconds, args.fair_warmup,
                                                          args.fair_trigger)
            log(f"fairness: quiet p99 worst {results['fairness']['quiet_p99_ms_max']} ms")
            results["stages_s"]["fairness"] = round(time.monotonic() - t0, 1)
    finally:
        stopped_pid = broker.pid()
        broker.stop()
        log(f"broker pid {stopped_pid} stopped")
    _write(args.output, results, started)
    print(bench_report.markdown(results))
    failed = [r for r in results["runs"] if not r["ok"]]
    failed += [run for run in results.get("freshness", []) if not run["ok"]]
    failed += [results["memory"]] if "memory" in results and not results["memory"]["ok"] else []
    failed += [results["fairness"]] if "fairness" in results and not results["fairness"]["ok"] else []
    if failed:
        log(f"{len(failed)} measurement(s) had problems; see results.json")
    return 1 if failed else 0


def _fixed(args: argparse.Namespace, ctx: bench_runs.Context) -> dict[str, Any]:
    """The fixed stage: each kind on each size, `--repeat` times, alternating; wall = F + N / r fitted per kind."""
    kinds = [k.strip() for k in args.fixed_kinds.split(",") if k.strip()]
    topics = [datagen.ensure_topic(ctx.servers, ctx.home, n, log) for n in args.fixed_sizes]
    runs: list[dict[str, Any]] = []
    for rep in range(args.repeat):
        order = [(kind, topic) for topic in topics for kind in kinds]
        for kind, topic in order if rep % 2 == 0 else list(reversed(order)):
            run = bench_runs.run_kind(ctx, kind, topic, rep)
            runs.append(run)
            log(f"fixed: {kind} on {topic.records:,} records: wall {run['wall_s']:.1f}s, processing "
                f"{run['processing_s']:.1f}s{'' if run['ok'] else ' PROBLEMS: ' + str(run['problems'])}")
    fits = {kind: bench_report.fit_fixed_cost([(r["records"], r["wall_s"]) for r in runs if r["kind"] == kind])
            for kind in kinds}
    log(f"fixed: {json.dumps(fits)}")
    return {"sizes": args.fixed_sizes, "runs": runs, "fits": fits}


def _s3_server(home: Path) -> Any:
    """The tests' local S3 server (moto, tests/s3_server.py), its credentials in this process's environment and
    every measured process's."""
    sys.path.insert(0, str(REPO))
    from tests.s3_server import S3Server

    server = S3Server(home / "moto.log")
    os.environ.update(server.environment())
    log(f"local S3 server pid {server.proc.pid} on {server.endpoint}")
    return server


def _throughput(args: argparse.Namespace, stages: set[str], ctx: bench_runs.Context, topic: datagen.TopicData,
                results: dict[str, Any], dirty: datagen.TopicData | None = None) -> None:
    kinds = [kind for kind, stage in bench_runs.KINDS.items() if stage in stages]
    if ({"prometheus", "dirty", "rules"} & stages) and "ours" not in kinds:  # against ours, interleaved
        kinds.insert(0, "ours")
    if not kinds:
        return
    t0 = time.monotonic()
    for rep in range(args.repeat):
        # Alternate the order so slow drift (page cache, a neighbour's load) does not favour one kind.
        for kind in kinds if rep % 2 == 0 else list(reversed(kinds)):
            t1 = time.monotonic()
            run = bench_runs.run_kind(ctx, kind, dirty if kind == "ours_dirty" and dirty else topic, rep)
            results["runs"].append(run)
            log(f"{kind} #{rep}: {run['records_per_s']:,.0f} records/s over {run['processing_s']:.1f}s "
                f"(wall {run['wall_s']:.1f}s, JVM {run['peak_jvm_rss_mb']:.0f} MiB, workers "
                f"{run['peak_workers_rss_mb']:.0f} MiB){'' if run['ok'] else ' PROBLEMS: ' + str(run['problems'])}"
                f" [{time.monotonic() - t1:.0f}s]")
    results["summary"] = bench_report.summarize(results["runs"])
    results["ratios"] = bench_report.ratios(results["summary"])
    results["stages_s"]["throughput"] = round(time.monotonic() - t0, 1)


def _write(output: Path, results: dict[str, Any], started: float) -> None:
    results["took_s"] = round(time.monotonic() - started, 1)
    results["targets"] = bench_report.targets(results)
    output.mkdir(parents=True, exist_ok=True)
    (output / "results.json").write_text(json.dumps(results, indent=2, default=str))
    (output / "results.md").write_text(bench_report.markdown(results))


if __name__ == "__main__":
    sys.exit(main())
