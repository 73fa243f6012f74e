"""One measured run of each kind, each in its own process: limits, baseline, ours, freshness, memory."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datagen
import deltastats
import gclog
from procmon import Line, Measured

HERE = Path(__file__).resolve().parent
# `<pipeline> batch N: R rows, Q quarantined in S s (...)`, logged by the writer once a batch is committed.
# Batch -4 is the start batch, written before the JVM (docs/architecture.md, "The start batch").
BATCH_LINE = re.compile(r"\s(?P<name>\S+) batch (?P<id>-?\d+): (?P<rows>\d+) rows, (?P<q>\d+) quarantined in "
                        r"(?P<s>[\d.]+)s")
DEBUG_DECODED = re.compile(r"batch (?P<id>\d+): decoded and summarized in (?P<s>[\d.]+)s")
DEBUG_WRITTEN = re.compile(r"batch (?P<id>\d+): written in (?P<s>[\d.]+)s")
# Each measured kind and the stage (--only) that runs it. `_1core`: Spark on local[1], the peer in one process.
KINDS = {"limit_consumer": "limit", "limit_spark": "limit", "baseline": "baseline", "ours": "ours", "peer": "peer",
         "ours_1core": "peer", "peer_1core": "peer", "ours_metrics": "prometheus", "ours_dirty": "dirty",
         "ours_rules": "rules"}
# The rules stage's five expectations (docs/expectations.md) on the payments topic: every row passes them (the cost
# is evaluating them; rows that break a rule would change what is written), two quarantine rules among them so the
# Spark path also keeps the raw value beside the decoder's rows.
RULES = [
    {"name": "positive_amount", "expect": "amount >= 0", "onViolation": "quarantine"},
    {"name": "has_currency", "expect": "length(currency) > 0", "onViolation": "quarantine"},
    {"name": "risk_in_range", "expect": "risk_score BETWEEN 0 AND 1"},
    {"name": "installments_set", "expect": "installments > 0"},
    {"name": "recent", "expect": "event_time > TIMESTAMP '2000-01-01 00:00:00'"},
]
# Seconds between the prometheus stage's scrapes of `ingest run`'s endpoint (Prometheus's default is 60 s, 15 s is
# common: every second is a harsh case).
SCRAPE_EVERY = 1.0


@dataclass
class Context:
    home: Path
    servers: str
    env: dict[str, str]
    max_offsets: int
    timeout: float
    log: Callable[[str], None]
    verbose_ours: bool = False  # `ingest -v`: per-batch decode / write timings (debug logging; not the default)
    ours_spark: dict[str, str] = field(default_factory=dict)  # the spark: section of every pipeline of ours
    ours_sink: dict[str, str] = field(default_factory=dict)  # sink: settings of every pipeline of ours

    @property
    def python(self) -> str:
        return sys.executable

    @property
    def ingest(self) -> str:
        script = Path(sys.executable).parent / "ingest"
        return str(script) if script.exists() else shutil.which("ingest") or "ingest"


def _loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def _result_line(proc: Measured) -> dict[str, Any]:
    for line in reversed(proc.lines):
        if line.text.startswith("BENCH_RESULT "):
            return dict(json.loads(line.text[len("BENCH_RESULT "):]))
    return {}


def _fresh_dir(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def _finish(kind: str, rep: int, topic: datagen.TopicData, proc: Measured, code: int, *, processing_s: float,
            steady_rate: float | None, rows: int, problems: list[str], extra: dict[str, Any]) -> dict[str, Any]:
    if code != 0:
        problems.append(f"exit code {code}; last lines:\n{proc.tail()}")
    if rows != topic.records:
        problems.append(f"{rows} rows, expected {topic.records}")
    rate = topic.records / processing_s if processing_s > 0 else 0.0
    return {
        "kind": kind, "rep": rep, "topic": topic.topic, "records": topic.records, "rows": rows,
        "ok": not problems, "problems": problems,
        "wall_s": round(proc.wall_seconds, 2), "processing_s": round(processing_s, 2),
        "records_per_s": round(rate, 1),
        "mb_per_s": round(topic.value_bytes / 1e6 / processing_s, 2) if processing_s > 0 else 0.0,
        "steady_records_per_s": round(steady_rate, 1) if steady_rate else None,
        "wall_records_per_s": round(topic.records / proc.wall_seconds, 1),
        **proc.peaks.as_dict(), **extra,
    }


def run_limit_consumer(ctx: Context, topic: datagen.TopicData, rep: int) -> dict[str, Any]:
    load = _loadavg()
    proc = Measured([ctx.python, str(HERE / "limit_consumer.py"), "--bootstrap", ctx.servers, "--topic", topic.topic],
                    env=ctx.env, cwd=ctx.home, log_file=ctx.home / "logs" / f"limit_consumer-{rep}.log")
    code = proc.wait(ctx.timeout)
    out = _result_line(proc)
    return _finish("limit_consumer", rep, topic, proc, code, processing_s=float(out.get("processing_s", 0.0)),
                   steady_rate=None, rows=int(out.get("records", -1)), problems=[], extra={"loadavg": load})


def _steady(batches: list[tuple[float, float, int]]) -> float | None:
    """Records per second after the first batch: (rows of batches 2..n) / (end of batch n - end of batch 1).
    `batches` holds (start, seconds, rows) with start relative to any fixed origin."""
    if len(batches) < 2:
        return None
    ordered = sorted(batches)
    first_end = ordered[0][0] + ordered[0][1]
    last_end = max(s + d for s, d, _ in ordered)
    rows = sum(n for _, _, n in ordered[1:])
    return rows / (last_end - first_end) if last_end > first_end else None


def run_spark_job(ctx: Context, mode: str, topic: datagen.TopicData, rep: int) -> dict[str, Any]:
    """`baseline` (from_avro into Delta) or `noop` (limit b), via baseline_job.py."""
    kind = "baseline" if mode == "baseline" else "limit_spark"
    work = _fresh_dir(ctx.home / "runs" / f"{kind}-{rep}")
    cmd = [ctx.python, str(HERE / "baseline_job.py"), mode, "--bootstrap", ctx.servers, "--topic", topic.topic,
           "--checkpoint", str(work / "checkpoint"), "--max-offsets", str(ctx.max_offsets)]
    if mode == "baseline":
        cmd += ["--schema", str(datagen.SCHEMA_FILE), "--table", str(work / "table")]
    load = _loadavg()
    # A job written by hand has no class archive of ingest's making (docs/performance.md#the-jvms-class-archive).
    env = {**ctx.env, "INGEST_CLASS_ARCHIVE": "off"}
    proc = Measured(cmd, env=env, cwd=work, log_file=ctx.home / "logs" / f"{kind}-{rep}.log")
    code = proc.wait(ctx.timeout)
    out = _result_line(proc)
    batches = [(b["start"], b["seconds"], b["rows"]) for b in out.get("batches", [])]
    rows = deltastats.row_count(work / "table") if mode == "baseline" else int(out.get("rows_read", -1))
    result = _finish(kind, rep, topic, proc, code, processing_s=float(out.get("processing_s", 0.0)),
                     steady_rate=_steady(batches), rows=rows, problems=[],
                     extra={"loadavg": load, "batches": len(batches), "session_s": out.get("session_s")})
    shutil.rmtree(work, ignore_errors=True)
    return result


def write_pipeline(ctx: Context, work: Path, topic: str, max_offsets: int, trigger: str = "10 seconds",
                   spark: dict[str, str] | None = None, name: str = "bench", path: Path | None = None,
                   root: str | None = None, expectations: list[dict[str, str]] | None = None) -> Path:
    """A pipeline YAML with every promise on: metadata columns, txn ids, recorded offsets, quarantine, metrics;
    `spark`: the pipeline's spark: section (session settings), if any; `root`: where its tables and checkpoint
    live (an `s3a://bucket` say) instead of `work`."""
    place = root.rstrip("/") if root else str(work)
    config = {
        "name": name, "topic": topic,
        "kafka": {"bootstrap.servers": ctx.servers, "client.id": "ingest-bench"},
        "source": {"startingOffsets": "earliest", "maxOffsetsPerTrigger": max_offsets},
        "value": {"format": "confluent", "subject": datagen.SUBJECT},
        "key": {"format": "string"},
        "sink": {"table": f"{place}/table", "checkpointLocation": f"{place}/checkpoint",
                 "quarantineTable": f"{place}/quarantine", "trigger": trigger, "onError": "quarantine"},
        "metrics": {"experiment": f"bench/{work.name}", "consumerGroup": f"bench-{work.name}",
                    "commitOffsets": True},
    }
    config["sink"].update({key.removeprefix("sink."): int(value) if value.lstrip("-").isdigit() else value
                           for key, value in ctx.ours_sink.items()})
    if spark or ctx.ours_spark:
        config["spark"] = {**ctx.ours_spark, **(spark or {})}
    if expectations:
        config["expectations"] = expectations
    path = path or work / "pipeline.yaml"
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML
    return path


def parse_batches(lines: list[Line]) -> list[tuple[float, float, int]]:
    """(start, seconds, records) per committed batch from the writer's log lines, start from arrival - seconds."""
    out = []
    for line in lines:
        m = BATCH_LINE.search(line.text)
        if m and int(m["id"]) >= 0:  # the processing window is the query's: the start batch is in the wall time
            seconds = float(m["s"])
            out.append((line.at - seconds, seconds, int(m["rows"]) + int(m["q"])))
    return out


def run_ours(ctx: Context, topic: datagen.TopicData, rep: int, *, max_offsets: int | None = None,
             label: str = "ours", gc_log: bool = False, spark: dict[str, str] | None = None,
             master: str | None = None, metrics_port: int | None = None,
             expectations: list[dict[str, str]] | None = None) -> dict[str, Any]:
    work = _fresh_dir(ctx.home / "runs" / f"{label}-{rep}")
    yaml_path = write_pipeline(ctx, work, topic.topic, max_offsets or ctx.max_offsets, spark=spark,
                               expectations=expectations)
    load = _loadavg()
    verbose = ["-v"] if ctx.verbose_ours else []
    env, gc_logs = dict(ctx.env), ctx.home / "logs" / f"{label}-{rep}-gc"
    if master:
        env["INGEST_SPARK_MASTER"] = master
    if gc_log:  # every JVM of the run logs its collections to a file of its own (%p: its pid)
        shutil.rmtree(gc_logs, ignore_errors=True)
        gc_logs.mkdir(parents=True)
        env["JAVA_TOOL_OPTIONS"] = f"{env.get('JAVA_TOOL_OPTIONS', '')} -Xlog:gc:file={gc_logs}/gc-%p.log".strip()
    serve = ["--metrics-port", str(metrics_port)] if metrics_port else []
    proc = Measured([ctx.ingest, *verbose, "run", str(yaml_path), "--available-now", *serve], env=env, cwd=work,
                    log_file=ctx.home / "logs" / f"{label}-{rep}.log")
    scraper = _Scraper(metrics_port) if metrics_port else None
    try:
        code = proc.wait(ctx.timeout)
    finally:
        scrapes = scraper.stop() if scraper is not None else None
    batches = parse_batches(proc.lines)
    processing_s = (max(s + d for s, d, _ in batches) - min(s for s, _, _ in batches)) if batches else 0.0
    rows = deltastats.row_count(work / "table")
    quarantined = max(deltastats.row_count(work / "quarantine"), 0)
    problems = [f"{quarantined} records quarantined, expected {topic.bad}"] if quarantined != topic.bad else []
    seconds = [d for _, d, _ in batches]
    result = _finish(label, rep, topic, proc, code, processing_s=processing_s, steady_rate=_steady(batches),
                     rows=rows + quarantined, problems=problems,
                     extra={"loadavg": load, "batches": len(batches), "quarantined": quarantined,
                            "max_offsets_per_trigger": max_offsets or ctx.max_offsets,
                            "median_batch_s": round(statistics.median(seconds), 2) if seconds else None,
                            "first_batch_s": round(seconds[0], 2) if seconds else None,
                            "startup_s": round(min(s for s, _, _ in batches) - proc.started, 2) if batches else None,
                            **({"scrapes": scrapes} if scrapes is not None else {}),
                            **_breakdown(proc.lines), **_growth(proc, batches),
                            **(gclog.summary(sorted(gc_logs.glob("gc-*.log"))) if gc_log else {})})
    shutil.rmtree(work, ignore_errors=True)
    return result


class _Scraper:
    """Scrapes http://127.0.0.1:<port>/metrics every SCRAPE_EVERY seconds on a thread, as Prometheus would."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.done = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(SCRAPE_EVERY):
            try:
                with urllib.request.urlopen(self.url, timeout=5) as answer:
                    answer.read()
                self.done += 1
            except OSError:  # not listening yet, or gone
                continue

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(10)
        return self.done


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _growth(proc: Measured, batches: list[tuple[float, float, int]]) -> dict[str, Any]:
    """Peak JVM RSS until the first tenth of the records was committed, against the run's peak: memory that stops
    growing early is bounded by the batch, not by the topic."""
    total = sum(n for _, _, n in batches)
    done, tenth_at = 0, None
    for start, seconds, rows in sorted(batches):
        done += rows
        if done * 10 >= total:
            tenth_at = start + seconds
            break
    early = [mb for at, mb in proc.peaks.jvm_series if tenth_at is not None and at <= tenth_at]
    return {"peak_jvm_rss_first_tenth_mb": round(max(early), 1)} if early else {}


def _breakdown(lines: list[Line]) -> dict[str, Any]:
    """With `ingest -v`: median seconds per batch spent decoding + summarizing, and writing (Delta commits)."""
    decoded = {m["id"]: float(m["s"]) for x in lines if (m := DEBUG_DECODED.search(x.text))}
    written = {m["id"]: float(m["s"]) for x in lines if (m := DEBUG_WRITTEN.search(x.text))}
    both = [(decoded[i], written[i] - decoded[i]) for i in written if i in decoded]
    if not both:
        return {}
    return {"median_decode_summarize_s": round(statistics.median(d for d, _ in both), 2),
            "median_write_s": round(statistics.median(w for _, w in both), 2)}


def run_peer(ctx: Context, topic: datagen.TopicData, rep: int, workers: int, kind: str) -> dict[str, Any]:
    """The non-Spark peer (peer_job.py): confluent-kafka, fastavro, pyarrow, delta-rs; `workers` processes."""
    work = _fresh_dir(ctx.home / "runs" / f"{kind}-{rep}")
    cmd = [ctx.python, str(HERE / "peer_job.py"), "--bootstrap", ctx.servers, "--topic", topic.topic,
           "--schema", str(datagen.SCHEMA_FILE), "--table", str(work / "table"), "--max-offsets", str(ctx.max_offsets),
           "--workers", str(workers)]
    load = _loadavg()
    # A job written by hand has no class archive of ingest's making (docs/performance.md#the-jvms-class-archive).
    env = {**ctx.env, "INGEST_CLASS_ARCHIVE": "off"}
    proc = Measured(cmd, env=env, cwd=work, log_file=ctx.home / "logs" / f"{kind}-{rep}.log")
    code = proc.wait(ctx.timeout)
    out = _result_line(proc)
    batches = [(b["start"], b["seconds"], b["rows"]) for b in out.get("batches", [])]
    result = _finish(kind, rep, topic, proc, code, processing_s=float(out.get("processing_s", 0.0)),
                     steady_rate=_steady(batches) if workers == 1 else None,
                     rows=deltastats.row_count(work / "table"), problems=[],
                     extra={"loadavg": load, "batches": len(batches), "workers": workers})
    shutil.rmtree(work, ignore_errors=True)
    return result


def first_run(ctx: Context, topic: datagen.TopicData, wait_s: float = 300.0) -> dict[str, Any]:
    """Ours once, unmeasured, as a machine's first run: it records the local JVM's class archive
    (ingestion/runtime/class_archive.py), written after it exits; wait for that, so that no measured run starts
    without the archive or beside its writing. What it took."""
    run = run_ours(ctx, topic, 0, label="first")
    folder = Path(ctx.env.get("INGEST_JAR_CACHE", "")) / "class-archive"
    t0 = time.monotonic()
    while list(folder.glob("*.claim")) and time.monotonic() - t0 < wait_s:
        time.sleep(1)
    archives = sorted(folder.glob("*.jsa"), key=lambda p: p.stat().st_mtime)
    return {"wall_s": run["wall_s"], "archive_wait_s": round(time.monotonic() - t0, 1),
            "archive": archives[-1].name if archives else None}


def run_kind(ctx: Context, kind: str, topic: datagen.TopicData, rep: int) -> dict[str, Any]:
    if kind == "limit_consumer":
        return run_limit_consumer(ctx, topic, rep)
    if kind == "limit_spark":
        return run_spark_job(ctx, "noop", topic, rep)
    if kind == "baseline":
        return run_spark_job(ctx, "baseline", topic, rep)
    if kind == "peer":
        return run_peer(ctx, topic, rep, os.cpu_count() or 1, kind)
    if kind == "peer_1core":
        return run_peer(ctx, topic, rep, 1, kind)
    if kind == "ours_1core":
        return run_ours(ctx, topic, rep, label=kind, master="local[1]")
    if kind == "ours_metrics":
        return run_ours(ctx, topic, rep, label=kind, metrics_port=free_port())
    if kind == "ours_dirty":
        return run_ours(ctx, topic, rep, label=kind)
    if kind == "ours_rules":
        return run_ours(ctx, topic, rep, label=kind, expectations=RULES)
    return run_ours(ctx, topic, rep)


def run_freshness(ctx: Context, rate: float, seconds: float, warmup: float, trigger: str,
                  s3: Any = None) -> dict[str, Any]:
    """Ours streaming with a short trigger while a producer writes at a fixed rate; produce -> visible latency.
    `s3`: a local S3 server (tests/s3_server.py) to keep the tables and checkpoint in, instead of local folders."""
    from ingestion.kafka.clients import create_topic

    topic = f"bench-fresh-{int(time.time())}"
    create_topic({"bootstrap.servers": ctx.servers}, topic, datagen.PARTITIONS)
    work = _fresh_dir(ctx.home / "runs" / "freshness")
    store = _Store(work, s3)
    yaml_path = write_pipeline(ctx, work, topic, ctx.max_offsets, trigger=trigger, root=store.root,
                               spark=s3.spark_settings() if s3 is not None else None)
    verbose = ["-v"] if ctx.verbose_ours else []
    proc = Measured([ctx.ingest, *verbose, "run", str(yaml_path)], env=ctx.env, cwd=work,
                    log_file=ctx.home / "logs" / f"freshness-{rate:.0f}.log")
    problems: list[str] = []
    produced: dict[str, Any] = {}
    drained: dict[str, Any] = {}
    since = time.time()
    try:
        # Trickle records until the first batch is committed: the query is then up and warm.
        deadline = time.monotonic() + 300
        while not parse_batches(proc.lines):
            if proc.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the streaming pipeline did not commit a first batch:\n{proc.tail()}")
            datagen.produce_at_rate(ctx.servers, topic, 100, 1.0, pool_size=100)
        ctx.log(f"freshness: pipeline is up; producing {rate:,.0f} records/s for {warmup + seconds:.0f}s")
        produced = datagen.produce_at_rate(ctx.servers, topic, rate, warmup + seconds)
        since = float(produced["started_at"]) + warmup
        in_table = store.row_count()
        from ingestion.kafka.clients import watermarks

        total = sum(high for _, high in watermarks({"bootstrap.servers": ctx.servers}, topic).values())
        behind = total - in_table
        drain_started = time.monotonic()
        deadline = drain_started + 600
        while (in_table := store.row_count()) < total and time.monotonic() < deadline:
            time.sleep(0.5)
        drained = {"rows_behind_when_production_stopped": behind,
                   "drain_s": round(time.monotonic() - drain_started, 1)}
        if in_table < total:
            problems.append(f"table holds {in_table} rows of {total} produced after waiting 600 s")
    finally:
        proc.signal(signal.SIGINT)
        code = proc.wait(120)
    if code != 0:
        problems.append(f"exit code {code} after SIGINT; last lines:\n{proc.tail()}")
    lat = deltastats.latencies(store.local_table(), since)
    batches = parse_batches(proc.lines)
    window = [d for _, d, _ in batches]
    result = {"topic": topic, "trigger": trigger, "target_rate": round(rate, 1), "produced": produced,
              "store": "s3 (local moto server)" if s3 is not None else "local disk",
              "measured_from_epoch_s": since, "warmup_s": warmup, "latency": lat, "batches": len(batches), **drained,
              "median_batch_s": round(statistics.median(window), 2) if window else None,
              "ok": not problems, "problems": problems, **proc.peaks.as_dict()}
    shutil.rmtree(work, ignore_errors=True)
    _delete_topic(ctx, topic)
    return result


class _Store:
    """Where a measured pipeline's tables live: `work`'s folders, or a fresh bucket of a local S3 server (its table
    then copied to `work` for the latency read)."""

    def __init__(self, work: Path, s3: Any) -> None:
        self.work, self.s3 = work, s3
        self.bucket = None
        if s3 is not None:
            self.bucket = f"bench-fresh-{int(time.time())}"
            s3.client().create_bucket(Bucket=self.bucket)

    @property
    def root(self) -> str | None:
        return f"s3a://{self.bucket}" if self.bucket else None

    def row_count(self) -> int:
        if self.bucket is None:
            return deltastats.row_count(self.work / "table")
        import pyarrow as pa
        from deltalake import DeltaTable

        try:
            table = DeltaTable(f"s3://{self.bucket}/table", storage_options=self.s3.storage_options())
        except Exception:  # noqa: BLE001 - not created yet
            return 0
        counts = pa.table(table.get_add_actions(flatten=True)).column("num_records").to_pylist()
        return -1 if None in counts else sum(counts)

    def local_table(self) -> Path:
        """The table's files here; a commit file dated by the commit's own clock (`commitInfo.timestamp`, in
        milliseconds): the store's LastModified has one-second steps."""
        if self.bucket is None:
            return self.work / "table"
        target = self.work / "table-copy"
        client = self.s3.client()
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix="table/"):
            for item in page.get("Contents", []):
                path = target / item["Key"].removeprefix("table/")
                path.parent.mkdir(parents=True, exist_ok=True)
                client.download_file(self.bucket, item["Key"], str(path))
                if path.parent.name == "_delta_log" and path.suffix == ".json" and path.stem.isdigit():
                    info = next((json.loads(line)["commitInfo"] for line in path.read_text().splitlines()
                                 if line.startswith('{"commitInfo"')), {})
                    stamp = int(info.get("timestamp", item["LastModified"].timestamp() * 1000)) / 1000
                    os.utime(path, (stamp, stamp))
        return target


def run_fairness(ctx: Context, pipelines: int, quiet_rate: float, busy_factor: float, backlog: int,
                 seconds: float, warmup: float, trigger: str) -> dict[str, Any]:
    """`ingest run --all` streaming `pipelines` pipelines, one of them busy (`busy_factor` times the quiet rate,
    and a backlog of `backlog` records when it starts): freshness of the quiet ones while the busy one catches up,
    the busy one's throughput, and the application's peak RSS."""
    from ingestion.kafka.clients import create_topic, watermarks

    stamp = int(time.time())
    topics = [f"bench-fair-{stamp}-{i:02d}" for i in range(pipelines)]
    busy = topics[0]
    for topic in topics:
        create_topic({"bootstrap.servers": ctx.servers}, topic, datagen.PARTITIONS if topic == busy else 1)
    work = _fresh_dir(ctx.home / "runs" / "fairness")
    (work / "conf" / "pipelines").mkdir(parents=True)
    for topic in topics:
        name = topic.rsplit("-", 1)[-1]
        (work / name).mkdir()
        write_pipeline(ctx, work / name, topic, ctx.max_offsets, trigger=trigger, name=f"p{name}",
                       path=work / "conf" / "pipelines" / f"p{name}.yaml")
    if backlog:
        datagen.produce_at_rate(ctx.servers, busy, backlog / 10, 10)  # the busy topic's backlog, before the start
    # A few records in every quiet topic, so that every pipeline commits a first batch before production starts:
    # the measured window then holds no pipeline's start, however many there are.
    datagen.produce_many_at_rate(ctx.servers, {t: 5 for t in topics if t != busy}, 1)
    verbose = ["-v"] if ctx.verbose_ours else []  # the writers' phases per batch (--ours-verbose)
    proc = Measured([ctx.ingest, *verbose, "run", "--all"], env={**ctx.env, "INGEST_CONF_DIR": str(work / "conf")},
                    cwd=work,
                    log_file=ctx.home / "logs" / "fairness.log")
    problems: list[str] = []
    produced: dict[str, Any] = {}
    since = time.time()
    names = {f"p{t.rsplit('-', 1)[-1]}" for t in topics}
    try:
        deadline = time.monotonic() + 900
        while not names <= {m["name"] for line in proc.lines if (m := BATCH_LINE.search(line.text))}:
            if proc.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ingest run --all did not commit a first batch of every pipeline:\n"
                                   f"{proc.tail()}")
            time.sleep(1)
        ctx.log(f"fairness: every pipeline committed a batch {time.time() - since:.0f}s after the start")
        rates = {t: quiet_rate * (busy_factor if t == busy else 1) for t in topics}
        ctx.log(f"fairness: {pipelines} pipelines up; {quiet_rate:,.0f} records/s each, the busy one "
                f"{rates[busy]:,.0f} with a backlog of {backlog:,}, for {warmup + seconds:.0f}s")
        produced = datagen.produce_many_at_rate(ctx.servers, rates, warmup + seconds)
        since = float(produced["started_at"]) + warmup
        settings = {"bootstrap.servers": ctx.servers}
        totals = {t: sum(high for _, high in watermarks(settings, t).values()) for t in topics}
        deadline = time.monotonic() + 900
        drain_started = time.monotonic()
        while any(deltastats.row_count(work / t.rsplit("-", 1)[-1] / "table") < totals[t] for t in topics):
            if time.monotonic() > deadline:
                problems.append("the tables did not catch up within 900 s of the end of production")
                break
            time.sleep(1)
        drain_s = round(time.monotonic() - drain_started, 1)
    finally:
        proc.signal(signal.SIGINT)
        code = proc.wait(180)
    if code != 0:
        problems.append(f"exit code {code} after SIGINT; last lines:\n{proc.tail()}")
    per_pipeline = {}
    for topic in topics:
        table = work / topic.rsplit("-", 1)[-1] / "table"
        per_pipeline[topic] = {"rows": deltastats.row_count(table), "latency": deltastats.latencies(table, since)}
    quiet_p99 = [p["latency"].get("to_commit_visible", {}).get("p99_ms") for t, p in per_pipeline.items()
                 if t != busy]
    busy_batches = [line for line in proc.lines if (m := BATCH_LINE.search(line.text)) and m["name"] == "p00"]
    result = {"pipelines": pipelines, "trigger": trigger, "quiet_rate": quiet_rate, "busy_factor": busy_factor,
              "backlog": backlog, "warmup_s": warmup, "measured_s": seconds, "drain_s": drain_s,
              "quiet_p99_ms_max": max((p for p in quiet_p99 if p is not None), default=None),
              "quiet_p99_ms_median": statistics.median([p for p in quiet_p99 if p is not None] or [0]),
              "busy_latency": per_pipeline[busy]["latency"], "batches": len(busy_batches),
              "per_pipeline": per_pipeline, "ok": not problems, "problems": problems, **proc.peaks.as_dict()}
    shutil.rmtree(work, ignore_errors=True)
    for topic in topics:
        _delete_topic(ctx, topic)
    return result


def _delete_topic(ctx: Context, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": ctx.servers})  # referenced until the future resolves
    try:
        admin.delete_topics([topic])[topic].result(30)
    except Exception as exc:  # noqa: BLE001 - leaving a small topic behind is harmless
        ctx.log(f"could not delete topic {topic}: {exc}")


def run_memory(ctx: Context, small: datagen.TopicData, large: datagen.TopicData, max_offsets: int,
               spark: dict[str, str] | None = None) -> dict[str, Any]:
    """Ours on a topic and on one 10x larger, same maxOffsetsPerTrigger and pipeline `spark` settings (e.g. the
    heap cap, spark.driver.memory): peak memory should not grow 10x."""
    runs = [run_ours(ctx, t, 0, max_offsets=max_offsets, label=f"memory-{t.records}", gc_log=True, spark=spark)
            for t in (small, large)]
    keys = ("peak_jvm_rss_mb", "peak_workers_rss_mb", "peak_workers_pss_mb", "peak_driver_rss_mb",
            "peak_total_rss_mb", "heap_after_gc_max_mb", "heap_after_gc_max_second_half_mb")
    ratios = {k: round(runs[1][k] / runs[0][k], 2) if runs[0].get(k) and runs[1].get(k) else None for k in keys}
    return {"max_offsets_per_trigger": max_offsets, "spark": spark or {}, "runs": runs,
            "ratio_large_to_small": ratios,
            "ok": all(r["ok"] for r in runs)}


ADMIN_COMMANDS = (("status",), ("history",), ("quarantine", "list"), ("verify",))


def run_admin(ctx: Context, commits: int, quarantined: int, runs: int, spark_runs: int) -> dict[str, Any]:
    """The read-only commands, each `runs` times as a user runs them, on a table of at least `commits` commits and
    `quarantined` quarantined rows (built once per benchmark home, see admin_table.py); with `--reader spark`
    `spark_runs` times beside them."""
    admin_yaml = _admin_table(ctx, commits, quarantined)
    out: dict[str, Any] = {"runs": runs, "spark_runs": spark_runs, "commits": commits, "quarantined": quarantined,
                           "commands": {}}
    for command in ADMIN_COMMANDS:
        name = " ".join(command)
        out["commands"][name] = {}
        for reader, count in (("delta-rs", runs), ("spark", spark_runs)):
            seconds = []
            for _ in range(count):
                t0 = time.monotonic()
                done = subprocess.run([ctx.ingest, *command, str(admin_yaml), "--reader", reader], env=ctx.env,
                                      capture_output=True, text=True, timeout=ctx.timeout, check=False)
                seconds.append(time.monotonic() - t0)
                if done.returncode != 0:
                    raise RuntimeError(f"ingest {name} --reader {reader} failed:\n{done.stderr[-2000:]}")
            if seconds:
                out["commands"][name][reader] = {"median_s": round(statistics.median(seconds), 3),
                                                 "max_s": round(max(seconds), 3),
                                                 "all_s": [round(s, 3) for s in seconds]}
            ctx.log(f"admin: ingest {name} --reader {reader}: {out['commands'][name].get(reader)}")
    return out


def _admin_table(ctx: Context, commits: int, quarantined: int) -> Path:
    """The admin pipeline's YAML, its tables built when the benchmark home does not hold them yet."""
    from confluent_kafka import Producer

    from ingestion.kafka.clients import create_topic

    base = ctx.home / "admin" / f"{commits}-{quarantined}"
    marker = base / "ready"
    admin_yaml = base / "admin" / "pipeline.yaml"
    if marker.is_file():
        return admin_yaml
    shutil.rmtree(base, ignore_errors=True)
    topic = f"bench-admin-{commits}-{int(time.time())}"
    create_topic({"bootstrap.servers": ctx.servers}, topic, datagen.PARTITIONS)
    producer = Producer(datagen.producer_settings(ctx.servers))
    good = (commits + 50) * datagen.PARTITIONS
    for i, (key, value) in enumerate(datagen.encoded_events(0, good)):
        producer.produce(topic, key=key, value=value, partition=i % datagen.PARTITIONS)
        if i % 10_000 == 0:
            producer.poll(0)
        if i % (good // quarantined) == 0 and quarantined:
            producer.produce(topic, key=b"bad", value=[b"\x07garbage", b"\x00\x00\x00\x00\x01\xff\xff\xff"][i % 2],
                             partition=i % datagen.PARTITIONS)
            quarantined -= 1
    producer.flush(120)
    stage_yaml = write_pipeline(ctx, _fresh_dir(base / "stage"), topic, 100_000)
    write_pipeline(ctx, _fresh_dir(base / "admin"), topic, 100_000)
    ctx.log(f"admin: staging table from {topic} ({good:,} records and the bad ones)")
    for command in ([ctx.ingest, "run", str(stage_yaml), "--available-now"], [ctx.ingest, "onboard", str(admin_yaml)],
                    [ctx.python, str(HERE / "admin_table.py"), "--stage", str(stage_yaml), "--admin", str(admin_yaml),
                     "--commits", str(commits)]):
        t0 = time.monotonic()
        done = subprocess.run(command, env=ctx.env, capture_output=True, text=True, timeout=ctx.timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        ctx.log(f"admin: {Path(command[1]).name} {command[2]}: {time.monotonic() - t0:.0f}s")
    marker.write_text(topic)
    return admin_yaml


def run_maintain(ctx: Context, commits: int, runs: int) -> dict[str, Any]:
    """The analyst query before and after `ingest maintain`, in one process, on a copy of the admin stage's table
    of `commits` small commits (see maintain_query.py)."""
    admin_yaml = _admin_table(ctx, commits, 20)
    source = load_pipeline_paths(admin_yaml)
    work = _fresh_dir(ctx.home / "maintain" / f"{commits}")
    topic = (admin_yaml.parent.parent / "ready").read_text().strip()
    maintain_yaml = write_pipeline(ctx, work, topic, 100_000)
    target = load_pipeline_paths(maintain_yaml)
    for src, dst in zip(source, target, strict=True):
        if Path(src).exists():
            shutil.copytree(src, dst)
    t0 = time.monotonic()
    done = subprocess.run([ctx.python, str(HERE / "maintain_query.py"), "--pipeline", str(maintain_yaml), "--runs",
                           str(runs)], env=ctx.env, capture_output=True, text=True, timeout=ctx.timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"maintain_query.py failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1]) | {"commits": commits, "loadavg": _loadavg(),
                                                                "wall_s": round(time.monotonic() - t0, 1)}
    ctx.log(f"maintain: {json.dumps(out)}")
    return out


def load_pipeline_paths(path: Path) -> tuple[str, str]:
    """The bronze and quarantine locations of a pipeline YAML."""
    from ingestion.config import load_pipeline

    config = load_pipeline(path)
    return config.table_path, config.quarantine_path
