"""A shadow and its promote against a rewind and re-run of the same range (issue 77's acceptance measurements).

The data is the benchmark's payment events (datagen.py, Confluent-framed Avro, schema id 1). The *wrong* config
decodes them with the subject `payments-wrong`, whose newest version (id 2) names the field `amount_eur`
`amount_euro` (a nullable field with a default): Avro's resolution by name then lands every record with a null
`amount_euro` and no `amount_eur`. The *corrected* config is the same pipeline with the subject `payments-fixed`,
whose newest version (id 3) is the producers' schema plus that nullable `amount_euro` (why: FIXED_SUBJECT below;
`--plain-fix` corrects with `payments-value`, the producers' schema alone). The subjects live in a schemas folder
of this run (<home>/schemas).

Default (one pass over `--records` records, 1,000,000):

  land      `ingest run --available-now` with the wrong config (table A)
  copy      table A, its quarantine and checkpoint copied to B (same pipeline name, other folders)
  shadow    on A: `ingest shadow start --from <first> --to <last>` over every version that holds records, with
            the corrected config; `ingest shadow diff --json` (must name `amount_eur` with exactly N changed
            values); `ingest shadow promote`
  rewind    on B: `ingest rewind --to-version <first - 1>`, then `ingest run --available-now` with the corrected
            config
  checks    A and B: N rows, every (partition, offset) once, `amount_eur` equal to the produced value of every
            row (by payment_id), nothing quarantined; `ingest verify` exits 0; on A, `ingest run --available-now`
            under the switched file starts again (nothing new to read)

`--streaming` (issue 77's 20,000-record acceptance; `--records 20000`): the records are produced to a new topic,
`ingest run` streams them with the wrong config (a trigger of `--trigger` seconds, `--records / 8` records a batch)
while a producer thread adds `--rate` records/s; once they are landed, `shadow start` and `diff` run over a range of
the older versions (the second to the middle one) while the stream goes on; `promote` is tried while it runs (the
writer lock refuses it in one line), the stream is stopped, `promote` run, the stream started again (now with the
corrected file) for `--after` seconds, the producer stopped and the stream drained and stopped. Checks: every offset
once across bronze and quarantine, each txn action once, `ingest verify` exits 0, the rows of the range and those
landed after the promote carry `amount_eur`, the others the old null, and the version before the promote reads
exactly the rows the table held before it.

    .venv/bin/python benchmarks/shadow.py --records 1000000 --home /tmp/bench-shadow
    .venv/bin/python benchmarks/shadow.py --streaming --records 20000 --home /tmp/bench-shadow

Results: a table on stdout, <output>/results.json and results.md (default benchmarks/results/shadow-<N>/, with
`-streaming` for --streaming). The broker (in <home>/kafka) is stopped at the end unless --keep-broker.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import bench
import bench_report
import bench_runs
import datagen
import deltastats
from procmon import Measured

REPO = Path(__file__).resolve().parents[1]
WRONG_SUBJECT = "payments-wrong"
# The corrected config's subject. Its newest version keeps the wrong config's column (`amount_euro`, nullable) beside
# `amount_eur`: an Avro pipeline starts only when a version of its subject has every column of the table
# (decode/resolver.py `_reader`), and the table keeps `amount_euro` after a promote (which merges the shadow's
# columns into it) and after a rewind (which restores the version the wrong config made). `--plain-fix` corrects
# with `payments-value` itself (the producers' schema only): the promote and the rewind then leave tables that no
# `ingest run` under the corrected config starts on.
FIXED_SUBJECT = "payments-fixed"
COLUMN, WRONG_COLUMN = "amount_eur", "amount_euro"


def log(message: str) -> None:
    print(f"{dt.datetime.now():%H:%M:%S} {message}", flush=True)


# --- set-up ------------------------------------------------------------------------------------------------------

def write_schemas(folder: Path) -> Path:
    """<folder>/payments-value/1.avsc (the producers' schema); payments-wrong/{1,2}.avsc: the same id 1 and a
    newest version 2 whose `amount_eur` is called `amount_euro` (nullable, default null); payments-fixed/{1,3}.avsc:
    id 1 and a newest version 3, the producers' schema plus `amount_euro` (nullable, default null), kept so that a
    table that has that column can follow it (see FIXED_SUBJECT)."""
    right = datagen.schema()
    wrong, fixed = json.loads(json.dumps(right)), json.loads(json.dumps(right))
    at = next(i for i, item in enumerate(right["fields"]) if item["name"] == COLUMN)
    kept = {"name": WRONG_COLUMN, "type": ["null", "double"], "default": None}
    wrong["fields"][at] = kept
    fixed["fields"].insert(at + 1, kept)
    for subject, versions in ((datagen.SUBJECT, {1: right}), (WRONG_SUBJECT, {1: right, 2: wrong}),
                              (FIXED_SUBJECT, {1: right, 3: fixed})):
        (folder / subject).mkdir(parents=True, exist_ok=True)
        for schema_id, body in versions.items():
            (folder / subject / f"{schema_id}.avsc").write_text(json.dumps(body, indent=2))
    return folder


def pipelines(ctx: bench_runs.Context, work: Path, topic: str, max_offsets: int, trigger: str = "10 seconds",
              fixed_subject: str = "payments-fixed") -> tuple[Path, Path]:
    """The live pipeline's file (subject payments-wrong) and the corrected config's (`fixed_subject`) over `work`'s
    tables: one pipeline (`bench`), two files."""
    live = bench_runs.write_pipeline(ctx, work, topic, max_offsets, trigger=trigger, path=work / "pipeline.yaml")
    config = json.loads(live.read_text())
    config["value"]["subject"] = WRONG_SUBJECT
    live.write_text(json.dumps(config, indent=2))
    config["value"]["subject"] = fixed_subject
    fixed = work / "pipeline-fixed.yaml"
    fixed.write_text(json.dumps(config, indent=2))
    return live, fixed


def expected_amounts(first_seq: int, count: int, seed: int) -> dict[str, float]:
    """payment_id -> amount_eur of the events datagen.encoded_events(first_seq, count, seed) encodes (the same
    draws; only event_time depends on the clock)."""
    rng = random.Random(seed + first_seq)
    out = {}
    for seq in range(first_seq, first_seq + count):
        event = datagen.event(seq, rng, 0)
        out[event["payment_id"]] = event["amount_eur"]
    return out


# --- commands ----------------------------------------------------------------------------------------------------

class Steps:
    """`ingest` commands run one after another, each timed from its start to its exit, logged to <home>/logs."""

    def __init__(self, ctx: bench_runs.Context) -> None:
        self.ctx = ctx
        self.walls: dict[str, float] = {}
        self.commands: dict[str, str] = {}

    def run(self, label: str, *args: str, ok: Iterable[int] = (0,),
            timed: bool = True) -> subprocess.CompletedProcess[str]:
        command = [self.ctx.ingest, *args]
        started = time.monotonic()
        done = subprocess.run(command, env=self.ctx.env, capture_output=True, text=True, timeout=self.ctx.timeout,
                              check=False, cwd=self.ctx.home)
        took = time.monotonic() - started
        logs = self.ctx.home / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        (logs / f"{label}.log").write_text(f"$ {shlex.join(command)}\nexit {done.returncode}, {took:.1f}s\n"
                                           f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}")
        if done.returncode not in set(ok):
            raise RuntimeError(f"{label}: `{shlex.join(command)}` exited {done.returncode} after {took:.0f}s:\n"
                               f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        if timed:
            self.walls[label] = round(took, 2)
            self.commands[label] = shlex.join(["ingest", *args])
        log(f"{label}: {shlex.join(['ingest', *args])} -> exit {done.returncode} in {took:.1f}s")
        return done


def history(steps: Steps, pipeline: Path) -> list[dict[str, Any]]:
    done = steps.run("history", "history", str(pipeline), "--json", timed=False)
    return list(json.loads(done.stdout))


def batches_with_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stream batches' ledger records that hold offsets, oldest first."""
    return sorted((r for r in records if r["kind"] == "stream" and r["ranges"]), key=lambda r: r["version"])


def diff_column(diff: dict[str, Any], column: str) -> int | None:
    entry = diff.get("columns", {}).get(column)
    if isinstance(entry, dict):
        return int(entry["count"])
    return int(entry) if entry is not None else None


# --- reading the tables (delta-rs, no JVM) -------------------------------------------------------------------------

def read_rows(table: Path, version: int | None = None) -> list[dict[str, Any]]:
    """(partition, offset, payment_id, amount_eur, amount_euro) of every row; absent columns as None."""
    from deltalake import DeltaTable

    if not (table / "_delta_log").is_dir():
        return []
    delta = DeltaTable(str(table), version=version)
    names = {f.name for f in delta.schema().fields}
    wanted = [c for c in ("_kafka_partition", "_kafka_offset", "payment_id", COLUMN, WRONG_COLUMN) if c in names]
    data = delta.to_pyarrow_table(columns=wanted).to_pydict()
    count = len(data["_kafka_offset"])
    return [{c: data[c][i] if c in data else None
             for c in ("_kafka_partition", "_kafka_offset", "payment_id", COLUMN, WRONG_COLUMN)}
            for i in range(count)]


def offsets_once(rows: list[dict[str, Any]], failed: list[dict[str, Any]], ends: dict[int, int]) -> list[str]:
    """Problems with every offset 0 .. end-1 of each partition held once across bronze and quarantine."""
    seen = [(r["_kafka_partition"], r["_kafka_offset"]) for r in [*rows, *failed]]
    problems = []
    if len(seen) != len(set(seen)):
        problems.append(f"{len(seen) - len(set(seen))} offsets held more than once")
    expected = {(p, o) for p, end in ends.items() for o in range(end)}
    if set(seen) != expected:
        missing, extra = expected - set(seen), set(seen) - expected
        problems.append(f"{len(missing)} offsets missing (e.g. {sorted(missing)[:3]}), {len(extra)} unexpected "
                        f"(e.g. {sorted(extra)[:3]})")
    return problems


def txns_once(table: Path) -> list[str]:
    sys.path.insert(0, str(REPO))
    from tests.helpers import commits_without_txn, delta_txns

    if not (table / "_delta_log").is_dir():
        return []
    txns = delta_txns(table)
    pairs = [(app, version) for _, app, version in txns]
    problems = [f"{table.name}: {len(pairs) - len(set(pairs))} txn actions repeated"] if len(pairs) != len(
        set(pairs)) else []
    # A rewind's RESTORE carries no txn action (its ledger record says what it restored; repeating it is harmless).
    bare = [(version, op) for version, op in commits_without_txn(table) if op != "RESTORE"]
    if bare:
        problems.append(f"{table.name}: commits without a txn action: {bare[:5]}")
    return problems


def watermarks(servers: str, topic: str) -> dict[int, int]:
    from ingestion.kafka.clients import watermarks as marks

    return {int(p): int(high) for p, (_, high) in marks({"bootstrap.servers": servers}, topic).items()}


# --- the default pass: shadow + promote against rewind + re-run ----------------------------------------------------

def one_pass(ctx: bench_runs.Context, args: argparse.Namespace) -> dict[str, Any]:
    topic = datagen.ensure_topic(ctx.servers, ctx.home, args.records, log)
    n = topic.records
    steps = Steps(ctx)
    work_a = bench_runs._fresh_dir(ctx.home / "runs" / "shadow-a")
    live_a, fixed_a = pipelines(ctx, work_a, topic.topic, args.max_offsets, fixed_subject=args.fixed_subject)
    steps.run("land", "run", str(live_a), "--available-now")
    landed = batches_with_records(history(steps, live_a))
    first, last = landed[0]["version"], landed[-1]["version"]
    log(f"landed {n:,} records in versions {first}-{last} ({len(landed)} batches)")
    if first < 1:
        raise RuntimeError(f"the first batch is version {first}: no version before the range to rewind to")

    # B: a copy of A as landed (its own folders, the same pipeline name), for the rewind and re-run.
    work_b = bench_runs._fresh_dir(ctx.home / "runs" / "shadow-b")
    live_b, fixed_b = pipelines(ctx, work_b, topic.topic, args.max_offsets, fixed_subject=args.fixed_subject)
    started = time.monotonic()
    for part in ("table", "quarantine", "checkpoint"):
        if (work_a / part).exists():
            shutil.copytree(work_a / part, work_b / part)
    copy_s = round(time.monotonic() - started, 1)

    steps.run("shadow start", "shadow", "start", str(live_a), "--config", str(fixed_a), "--from", str(first),
              "--to", str(last))
    diff = json.loads(steps.run("shadow diff", "shadow", "diff", str(live_a), "--json").stdout)
    steps.run("shadow promote", "shadow", "promote", str(live_a))
    steps.run("rewind", "rewind", str(live_b), "--to-version", str(first - 1))
    steps.run("re-run", "run", str(fixed_b), "--available-now")

    problems: list[str] = []
    # The stream continues after the promote, under the switched file (nothing new to read: its start is checked).
    again = steps.run("run after promote", "run", str(live_a), "--available-now", ok=(0, 1), timed=False)
    if again.returncode != 0:
        problems.append(f"ingest run after the promote exited {again.returncode}: {again.stderr.strip()[-500:]}")
    changed = diff_column(diff, COLUMN)
    if changed != n:
        problems.append(f"diff: {COLUMN} changed in {changed} records, expected {n}")
    expected = expected_amounts(0, n, 11)
    ends = {p: high for p, high in watermarks(ctx.servers, topic.topic).items()}
    states = {}
    for side, work, pipeline in (("shadow+promote", work_a, live_a), ("rewind+rerun", work_b, fixed_b)):
        rows, failed = read_rows(work / "table"), read_rows(work / "quarantine")
        wrong = sum(1 for r in rows if r[COLUMN] != expected.get(r["payment_id"]) or r[WRONG_COLUMN] is not None)
        found = [f"{side}: {p}" for p in offsets_once(rows, failed, ends)]
        if len(rows) != n or failed:
            found.append(f"{side}: {len(rows)} rows and {len(failed)} quarantined, expected {n} and 0")
        if wrong:
            found.append(f"{side}: {wrong} rows whose {COLUMN} is not the produced value")
        verify = steps.run(f"verify {side}", "verify", str(pipeline), ok=(0, 1), timed=False)
        if verify.returncode != 0:
            found.append(f"{side}: ingest verify exited {verify.returncode}: {verify.stdout[-500:]}")
        found += [f"{side}: {p}" for p in txns_once(work / "table") + txns_once(work / "quarantine")]
        states[side] = {"rows": len(rows), "quarantined": len(failed),
                        "rows_with_" + COLUMN: sum(1 for r in rows if r[COLUMN] is not None),
                        "verify_exit": verify.returncode, "ok": not found}
        problems += found
    shadow_s = steps.walls["shadow start"] + steps.walls["shadow diff"] + steps.walls["shadow promote"]
    shadow_promote_s = steps.walls["shadow start"] + steps.walls["shadow promote"]
    rewind_s = steps.walls["rewind"] + steps.walls["re-run"]
    return {"kind": "one pass", "records": n, "corrected_subject": args.fixed_subject,
            "topic": topic.topic, "partitions": topic.partitions,
            "max_offsets_per_trigger": args.max_offsets, "range_versions": [first, last], "batches": len(landed),
            "walls_s": steps.walls, "commands": steps.commands, "copy_s": copy_s,
            "records_per_s": {k: round(n / v) for k, v in steps.walls.items() if v > 0},
            "shadow_start_promote_s": round(shadow_promote_s, 2), "shadow_start_diff_promote_s": round(shadow_s, 2),
            "rewind_rerun_s": round(rewind_s, 2),
            "ratio_shadow_promote_to_rewind_rerun": round(shadow_promote_s / rewind_s, 2),
            "ratio_with_diff_to_rewind_rerun": round(shadow_s / rewind_s, 2),
            "diff": {"columns": diff.get("columns"), "added_columns": diff.get("added_columns"),
                     "removed_columns": diff.get("removed_columns"), "changed_" + COLUMN: changed},
            "end_states": states, "ok": not problems, "problems": problems}


# --- --streaming: the acceptance while the live pipeline streams --------------------------------------------------

class Trickle:
    """A producer thread: `rate` records/s to `topic` (datagen's pool, seed 23) until stopped."""

    POOL = 2000

    def __init__(self, servers: str, topic: str, rate: float) -> None:
        self.servers, self.topic, self.rate = servers, topic, rate
        self.sent = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                self.sent += int(datagen.produce_at_rate(self.servers, self.topic, self.rate, 2.0,
                                                         pool_size=self.POOL)["records"])
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(60)
        if self.error is not None:
            raise RuntimeError(f"the producer thread failed: {self.error}")
        return self.sent


def wait_for(what: str, condition: Any, proc: Measured | None, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.proc.poll() is not None:
            raise RuntimeError(f"ingest run exited while waiting for {what}:\n{proc.tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not reached after {timeout:.0f}s")
        time.sleep(1)


def streaming(ctx: bench_runs.Context, args: argparse.Namespace) -> dict[str, Any]:
    from ingestion.kafka.clients import create_topic

    n = args.records
    topic = f"bench-shadow-stream-{int(time.time())}"
    create_topic({"bootstrap.servers": ctx.servers}, topic, datagen.PARTITIONS)
    datagen._produce_all(ctx.servers, topic, n, log)
    work = bench_runs._fresh_dir(ctx.home / "runs" / "shadow-stream")
    max_offsets = max(n // 8, 100)
    live, fixed = pipelines(ctx, work, topic, max_offsets, trigger=f"{args.trigger:g} seconds",
                        fixed_subject=args.fixed_subject)
    steps = Steps(ctx)
    table, quarantine = work / "table", work / "quarantine"

    def stream(label: str) -> Measured:
        return Measured([ctx.ingest, "run", str(live)], env=ctx.env, cwd=ctx.home,
                        log_file=ctx.home / "logs" / f"{label}.log")

    def stop(proc: Measured, label: str) -> None:
        proc.signal(signal.SIGINT)
        code = proc.wait(180)
        if code != 0:
            raise RuntimeError(f"{label}: ingest run exited {code} after SIGINT:\n{proc.tail()}")

    started = time.monotonic()
    proc = stream("stream-before")
    trickle = Trickle(ctx.servers, topic, args.rate)
    try:
        wait_for(f"the first {n:,} records landed", lambda: deltastats.row_count(table) >= n, proc, 900)
        landed_s = round(time.monotonic() - started, 1)
        landed = batches_with_records(history(steps, live))
        low, high = landed[1]["version"], landed[max(1, len(landed) // 2)]["version"]
        in_range = [r for r in landed if low <= r["version"] <= high]
        range_rows = sum(r["rows"] for r in in_range)
        log(f"{len(landed)} batches so far; the shadow's range: versions {low}-{high}, {range_rows:,} rows")
        steps.run("shadow start", "shadow", "start", str(live), "--config", str(fixed), "--from", str(low),
                  "--to", str(high))
        diff = json.loads(steps.run("shadow diff", "shadow", "diff", str(live), "--json").stdout)
        refused = steps.run("promote while running", "shadow", "promote", str(live), ok=(1, 2), timed=False)
        stream_rows_during = deltastats.row_count(table)
    finally:
        stop(proc, "stream-before")
    old_rows = read_rows(table)
    old_failed = read_rows(quarantine)
    steps.run("shadow promote", "shadow", "promote", str(live))
    promoted_config = json.loads(live.read_text())
    proc = stream("stream-after")
    try:
        time.sleep(args.after)
        produced_extra = trickle.stop()
        ends = watermarks(ctx.servers, topic)
        total = sum(ends.values())
        wait_for("the stream drained", lambda: deltastats.row_count(table) + max(deltastats.row_count(quarantine),
                                                                                 0) >= total, proc, 600)
    finally:
        trickle.stop()
        stop(proc, "stream-after")

    problems: list[str] = []
    if promoted_config["value"]["subject"] != args.fixed_subject:
        problems.append(f"the pipeline's file was not switched: subject {promoted_config['value']['subject']}")
    changed = diff_column(diff, COLUMN)
    if changed != range_rows:
        problems.append(f"diff: {COLUMN} changed in {changed} records, expected {range_rows}")
    message = (refused.stderr.strip() or refused.stdout.strip())
    if "\n" in message:
        problems.append(f"promote while running: refused in {len(message.splitlines())} lines")
    rows, failed = read_rows(table), read_rows(quarantine)
    problems += offsets_once(rows, failed, ends)
    problems += txns_once(table) + txns_once(quarantine)
    verify = steps.run("verify", "verify", str(live), ok=(0, 1), timed=False)
    if verify.returncode != 0:
        problems.append(f"ingest verify exited {verify.returncode}: {verify.stdout[-500:]}")

    # The range's offsets (from its ledger records), and what each row should hold now.
    spans = {}
    for record in in_range:
        for r in record["ranges"]:
            p, lo, hi = int(r["partition"]), int(r["first"]), int(r["last"])
            spans[p] = (min(lo, spans.get(p, (lo, hi))[0]), max(hi, spans.get(p, (lo, hi))[1]))
    before = {(r["_kafka_partition"], r["_kafka_offset"]) for r in old_rows}
    expected = expected_amounts(0, n, 11) | expected_amounts(10**9, Trickle.POOL, 23)

    def in_spans(row: dict[str, Any]) -> bool:
        span = spans.get(row["_kafka_partition"])
        return span is not None and span[0] <= row["_kafka_offset"] <= span[1]

    wrong = {"range": 0, "outside": 0, "after": 0}
    counts = {"range": 0, "outside": 0, "after": 0}
    for row in rows:
        part = "range" if in_spans(row) else "outside" if (row["_kafka_partition"], row["_kafka_offset"]) in before \
            else "after"
        counts[part] += 1
        value = row[COLUMN]
        if (part == "outside" and value is not None) or (part != "outside" and value != expected[row["payment_id"]]):
            wrong[part] += 1
    if counts["range"] != range_rows or any(wrong.values()):
        problems.append(f"rows by part {counts} (range expected {range_rows}), wrong values {wrong}")

    from deltalake import DeltaTable

    promote_versions = sorted(v for v, app, _ in _txns(table) if app.startswith("promote."))
    if len(promote_versions) != 1:
        problems.append(f"promote commits in bronze: {promote_versions}")
    else:
        previous = read_rows(table, promote_versions[0] - 1)
        key = lambda r: (r["_kafka_partition"], r["_kafka_offset"])  # noqa: E731
        if sorted(previous, key=key) != sorted(old_rows, key=key):
            problems.append(f"version {promote_versions[0] - 1} (before the promote) does not read the old rows")
        names = {f.name for f in DeltaTable(str(table), version=promote_versions[0] - 1).schema().fields}
        if COLUMN in names:
            problems.append(f"version {promote_versions[0] - 1} has the column {COLUMN} already")
    return {"kind": "streaming", "records": n, "corrected_subject": args.fixed_subject,
            "topic": topic, "partitions": datagen.PARTITIONS,
            "trigger_s": args.trigger, "max_offsets_per_trigger": max_offsets, "rate": args.rate,
            "landed_s": landed_s, "batches_before_shadow": len(landed), "range_versions": [low, high],
            "range_rows": range_rows, "rows_in_table_while_shadowing": stream_rows_during,
            "produced_meanwhile": produced_extra, "offsets_total": total, "walls_s": steps.walls,
            "commands": steps.commands,
            "records_per_s": {k: round(range_rows / v) for k, v in steps.walls.items() if v > 0},
            "diff": {"columns": diff.get("columns"), "changed_" + COLUMN: changed},
            "promote_while_running": {"exit": refused.returncode, "message": message},
            "promote_versions": promote_versions, "rows_now": counts, "quarantined": len(failed),
            "quarantined_before": len(old_failed), "verify_exit": verify.returncode,
            "ok": not problems, "problems": problems}


def _txns(table: Path) -> list[tuple[int, str, int]]:
    sys.path.insert(0, str(REPO))
    from tests.helpers import delta_txns

    return delta_txns(table)


# --- report ------------------------------------------------------------------------------------------------------

def markdown(results: dict[str, Any]) -> str:
    r = results["result"]
    lines = [f"# Shadow reprocessing: {r['kind']}, {r['records']:,} records", "",
             f"`{results['command']}`  ", f"started {results['started_at']}, took {results['took_s']} s; "
             f"{results['machine'].get('nproc', '?')} CPUs; commit {results['machine'].get('commit', '?')}", "",
             "| step | command | wall s | records/s |", "| --- | --- | ---: | ---: |"]
    for label, wall in r["walls_s"].items():
        lines.append(f"| {label} | `{r['commands'][label]}` | {wall:.1f} | {r['records_per_s'].get(label, 0):,} |")
    lines.append("")
    if r["kind"] == "one pass":
        lines += [f"- shadow start + promote: {r['shadow_start_promote_s']:.1f} s (with diff "
                  f"{r['shadow_start_diff_promote_s']:.1f} s); rewind + re-run: {r['rewind_rerun_s']:.1f} s; ratio "
                  f"{r['ratio_shadow_promote_to_rewind_rerun']} ({r['ratio_with_diff_to_rewind_rerun']} with diff)",
                  f"- range: versions {r['range_versions'][0]}-{r['range_versions'][1]} ({r['batches']} batches of "
                  f"at most {r['max_offsets_per_trigger']:,}); diff: `{COLUMN}` changed in "
                  f"{r['diff']['changed_' + COLUMN]:,} records",
                  *(f"- {side}: {json.dumps(state)}" for side, state in r["end_states"].items())]
    else:
        lines += [f"- stream: trigger {r['trigger_s']:g} s, {r['max_offsets_per_trigger']:,} records a batch, "
                  f"{r['rate']:g} records/s added meanwhile ({r['produced_meanwhile']:,} in all)",
                  f"- range: versions {r['range_versions'][0]}-{r['range_versions'][1]}, {r['range_rows']:,} rows; "
                  f"diff: `{COLUMN}` changed in {r['diff']['changed_' + COLUMN]} records",
                  f"- promote while running: exit {r['promote_while_running']['exit']}: "
                  f"`{r['promote_while_running']['message']}`",
                  f"- rows now: {json.dumps(r['rows_now'])}; quarantined {r['quarantined']}; offsets "
                  f"{r['offsets_total']:,}; verify exit {r['verify_exit']}"]
    lines += ["", f"**{'OK' if r['ok'] else 'PROBLEMS'}**" + ("" if r["ok"] else ": " + "; ".join(r["problems"])),
              ""]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=1_000_000, help="records of the topic (1000000)")
    p.add_argument("--streaming", action="store_true", help="the acceptance while the live pipeline streams")
    p.add_argument("--max-offsets", type=int, default=500_000, help="maxOffsetsPerTrigger of the one pass (500000)")
    p.add_argument("--trigger", type=float, default=3.0, help="--streaming: the stream's trigger in seconds (3)")
    p.add_argument("--rate", type=float, default=200.0, help="--streaming: records/s added meanwhile (200)")
    p.add_argument("--after", type=float, default=20.0,
                   help="--streaming: seconds the stream runs after the promote before production stops (20)")
    p.add_argument("--plain-fix", dest="fixed_subject", action="store_const", const=datagen.SUBJECT,
                   default=FIXED_SUBJECT, help=f"correct with the subject {datagen.SUBJECT} (the producers' schema "
                   f"only) instead of {FIXED_SUBJECT} (see FIXED_SUBJECT in the source)")
    p.add_argument("--home", type=Path, default=Path("/tmp/bench-shadow"), help="state folder (/tmp/bench-shadow)")
    p.add_argument("--output", type=Path, help="results folder (benchmarks/results/shadow-<N>[-streaming])")
    p.add_argument("--timeout", type=float, default=3600, help="seconds before a command is given up")
    p.add_argument("--keep-broker", action="store_true", help="leave the broker running")
    args = p.parse_args()
    home = args.home.absolute()
    home.mkdir(parents=True, exist_ok=True)
    output = args.output or REPO / "benchmarks" / "results" / (
        f"shadow-{args.records}" + ("-streaming" if args.streaming else ""))
    env = bench.environment(home)
    env["INGEST_SCHEMAS_DIR"] = str(write_schemas(home / "schemas"))
    bench.os.environ["INGEST_SCHEMAS_DIR"] = env["INGEST_SCHEMAS_DIR"]
    from ingestion.dev.broker import Broker

    started = time.monotonic()
    results: dict[str, Any] = {"command": shlex.join([Path(sys.executable).name, *sys.argv]),
                               "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                               "machine": bench_report.machine(REPO)}
    broker = Broker(home / "kafka")
    try:
        servers = broker.bootstrap_servers() if broker.pid() else broker.start()
        assert servers
        log(f"broker pid {broker.pid()} on {servers}")
        env["KAFKA_BOOTSTRAP_SERVERS"] = servers
        ctx = bench_runs.Context(home, servers, env, args.max_offsets, args.timeout, log)
        results["result"] = streaming(ctx, args) if args.streaming else one_pass(ctx, args)
    finally:
        if not args.keep_broker:
            broker.stop()
    results["took_s"] = round(time.monotonic() - started, 1)
    output.mkdir(parents=True, exist_ok=True)
    (output / "results.json").write_text(json.dumps(results, indent=2, default=str))
    text = markdown(results)
    (output / "results.md").write_text(text)
    print(text)
    return 0 if results["result"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
