"""Assertions shared by integration and e2e tests."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

from ingestion.dev.samples import Produced


def as_produced(row: dict[str, Any]) -> dict[str, Any]:
    """A bronze row's payload in the shape the producer wrote it (Spark Rows -> plain values, UTC datetimes)."""
    placed = row["placed_at"]
    return {
        "order_id": row["order_id"], "customer_id": row["customer_id"], "status": row["status"],
        "amount": Decimal(row["amount"]), "currency": row["currency"],
        "items": [dict(i.asDict()) for i in row["items"]],
        "placed_at": placed.replace(tzinfo=dt.UTC) if placed.tzinfo is None else placed,
        "note": row["note"],
    }


def assert_exactly_produced(rows: list[Any], produced: list[Produced]) -> None:
    """The bronze rows are exactly the produced records: same (partition, offset) set, no duplicates, and each
    payload equal field by field to what was produced."""
    keys = Counter((r["_kafka_partition"], r["_kafka_offset"]) for r in rows)
    duplicates = {k: n for k, n in keys.items() if n > 1}
    assert not duplicates, f"duplicated (partition, offset): {sorted(duplicates)[:10]}"
    expected = {(p.partition, p.offset): p for p in produced}
    missing = sorted(set(expected) - set(keys))
    extra = sorted(set(keys) - set(expected))
    assert not missing and not extra, f"missing {missing[:10]}, unexpected {extra[:10]}"
    for row in rows:
        want = expected[(row["_kafka_partition"], row["_kafka_offset"])]
        assert as_produced(row.asDict(recursive=False)) == want.record, (row["_kafka_partition"], row["_kafka_offset"])
        assert row["_kafka_key"] == want.key


def delta_txns(table: Path) -> list[tuple[int, str, int]]:
    """(commit version, txn appId, txn version) of every SetTransaction action in the table's JSON log."""
    found = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "txn" in action:
                found.append((int(commit.stem), action["txn"]["appId"], int(action["txn"]["version"])))
    return found


def commits_without_txn(table: Path) -> list[tuple[int, str]]:
    """(version, operation) of every commit in the table's JSON log that adds or removes data (dataChange) without
    a SetTransaction action: what Delta could not skip if it were repeated."""
    found = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in commit.read_text().splitlines()]
        data = any(a.get(kind, {}).get("dataChange") for a in actions for kind in ("add", "remove"))
        if data and not any("txn" in a for a in actions):
            found.append((int(commit.stem), next(a["commitInfo"]["operation"] for a in actions if "commitInfo" in a)))
    return found


@contextmanager
def py4j_commands(counted: Callable[[], bool] = lambda: True) -> Iterator[list[str]]:
    """The py4j commands this process sends to the JVM inside the block, other than py4j's own garbage collection,
    sent while `counted()` is true in the sending thread: their kind (`c` call, `r` reflection, ...)."""
    import py4j.clientserver
    import py4j.java_gateway

    commands: list[str] = []
    lock = threading.Lock()
    originals = {cls: cls.send_command for cls in (py4j.clientserver.ClientServerConnection,
                                                    py4j.java_gateway.GatewayConnection)}

    def counting(send: Any) -> Any:
        def send_command(self: Any, command: str, *args: Any, **kwargs: Any) -> Any:
            if not command.startswith("m\n") and counted():
                with lock:
                    commands.append(command.split("\n", 1)[0])
            return send(self, command, *args, **kwargs)
        return send_command

    try:
        for cls, send in originals.items():
            cls.send_command = counting(send)  # type: ignore[method-assign]
        yield commands
    finally:
        for cls, send in originals.items():
            cls.send_command = send  # type: ignore[method-assign]


def java_command_line(ancestor: int) -> list[str]:
    """The command line of the java process started (through spark-submit's scripts) below process `ancestor`."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after its last ')'
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    for pid in parents:
        up = pid
        while up in parents and up != ancestor:
            up = parents[up]
        if up != ancestor or pid == ancestor:
            continue
        try:
            args = (Path("/proc") / str(pid) / "cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        if Path(args[0]).name == "java":
            return args
    raise AssertionError(f"no java process below pid {ancestor}")


def append_in_commits(source: str, target: str, commits: int, *, pipeline: str, app_id: str, min_offset: int = 0,
                      first_batch: int = 0) -> int:
    """Append the rows of the bronze table at `source` to the (existing) bronze table at `target` in `commits`
    commits of consecutive offsets, each as a batch of `ingest run` leaves it (txnAppId/txnVersion and the ledger
    record), written with delta-rs: hundreds of small commits in seconds instead of as many micro-batches. The
    table's version after the last one."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import CommitProperties, DeltaTable, QueryBuilder, Transaction, write_deltalake

    from ingestion.delta.ledger import BatchKind, BatchRecord, PartitionRange

    schema = DeltaTable(source).schema().to_arrow()
    rows = pa.table(QueryBuilder().register("t", DeltaTable(source)).execute(
        f'SELECT * FROM t WHERE "_kafka_offset" >= {min_offset} ORDER BY "_kafka_offset", "_kafka_partition"'))
    rows = rows.select(pa.schema(schema).names).cast(pa.schema(schema))
    table = DeltaTable(target)
    step = -(-rows.num_rows // commits)
    for batch in range(commits):
        part = rows.slice(batch * step, step)
        if not part.num_rows:
            break
        spans = []
        for p in sorted(set(part["_kafka_partition"].to_pylist())):
            offsets = pc.filter(part["_kafka_offset"], pc.equal(part["_kafka_partition"], p))
            spans.append(PartitionRange(part["_kafka_topic"][0].as_py(), p, pc.min(offsets).as_py(),
                                        pc.max(offsets).as_py(), len(offsets)))
        record = BatchRecord(pipeline=pipeline, app_id=app_id, batch_id=first_batch + batch, kind=BatchKind.STREAM,
                             rows=part.num_rows, schema_ids=(1,), ranges=tuple(spans))
        write_deltalake(table, part, mode="append", commit_properties=CommitProperties(
            custom_metadata={"userMetadata": record.to_user_metadata()},
            app_transactions=[Transaction(app_id, first_batch + batch)]))
    return int(table.version())
def group_offsets(settings: dict[str, Any], group: str, topic: str) -> dict[int, int]:
    """`kafka.committed_offsets` asked from a child process: tests poll it while brokers stop and restart, and a
    crash of the native Kafka client must fail one poll (retried), not the whole test session."""
    code = ("import json, sys; from ingestion.kafka import committed_offsets; "
            "a = json.loads(sys.argv[1]); print(json.dumps(committed_offsets(a[0], a[1], a[2], timeout=10)))")
    done = subprocess.run([sys.executable, "-c", code, json.dumps([settings, group, topic])], capture_output=True,
                          text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"committed_offsets exited with {done.returncode}: {done.stderr[-500:]}")
    return {int(p): o for p, o in json.loads(done.stdout).items()}


# A line of the JVM's at WARN or ERROR (log4j's `HH:MM:SS LEVEL Class:`, runtime/data/log4j2.properties) or of a
# Java stack trace: what a command's output should not show a user when nothing went wrong.
_JVM_NOISE = re.compile(r"\d\d:\d\d:\d\d (WARN|ERROR) |\s+at [\w$.]+\(")


def jvm_noise(*outputs: str) -> list[str]:
    """The lines of `outputs` that are the JVM's warnings, errors or stack traces."""
    return [line for output in outputs for line in output.splitlines() if _JVM_NOISE.match(line)]


def processes_of(folder: Path) -> dict[int, str]:
    """pid -> command line of every process (but this one) that names `folder` on its command line or works in it:
    the servers the project starts name their state folder, a command's JVM inherits its working folder."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
            if "\nState:\tZ" in (entry / "status").read_text():
                continue  # ended, not yet reaped by its parent
        except OSError:
            continue
        if str(folder) in cmdline or Path(cwd).is_relative_to(folder):
            found[int(entry.name)] = cmdline
    return found


def processes_left(folder: Path, timeout: float = 60.0) -> dict[int, str]:
    """`processes_of(folder)` once they had up to `timeout` seconds to end."""
    deadline = time.monotonic() + timeout
    while (found := processes_of(folder)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return found


def wait_while_running(predicate: Callable[[], object], proc: subprocess.Popen[bytes], log: Path, what: str,
                       timeout: float = 120) -> None:
    """Wait until `predicate()` holds; fail with the end of `log` when the `ingest` process `proc` exits first or
    `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            raise AssertionError(f"ingest exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; log:\n{log.read_text()[-3000:]}")


def table_rows(path: str | Path, version: int | None = None) -> list[Any]:
    """Every row of the Delta table at `path` (as of `version`, else its latest), read by delta-rs and shaped as
    Spark's `collect()` gives them in the suite's sessions (pyspark Rows, structs as Rows, maps as dicts, timestamps
    naive in UTC), so a test asserts on what a writer committed without planning a Spark query: about 0.7 CPU s of
    the session's JVM per read of a new table version against 0.006 s here
    (docs/performance.md#the-suites-cpu-process-by-process). Spark's own reads keep their tests
    (test_time_travel.py, test_downstream.py, test_jvm_free_reads.py, the catalog's)."""
    import pyarrow as pa
    from pyspark.sql import Row

    from ingestion.delta import rs_reads
    from ingestion.delta.reads import naive_utc

    found = rs_reads.read_rows(str(path), version)
    assert found is not None, f"no Delta table at {path}"
    table = found[0]

    def shaped(kind: pa.DataType, value: Any) -> Any:
        if value is None:
            return None
        if pa.types.is_struct(kind):
            return Row(**{field.name: shaped(field.type, value[field.name]) for field in kind})
        if pa.types.is_map(kind):
            return {shaped(kind.key_type, k): shaped(kind.item_type, v) for k, v in value}
        if pa.types.is_list(kind) or pa.types.is_large_list(kind):
            return [shaped(kind.value_type, item) for item in value]
        if pa.types.is_timestamp(kind) and kind.tz is not None:
            return naive_utc(value)
        return value

    fields = list(table.schema)
    return [Row(**{f.name: shaped(f.type, row[f.name]) for f in fields}) for row in table.to_pylist()]


def wait_rows(path: str, count: int, timeout: float = 120.0, spark: Any = None) -> None:
    """Wait until the Delta table at `path` holds at least `count` rows (it may not exist yet), read by delta-rs;
    with `spark`, a table delta-rs cannot read (a feature it lacks: type widening) is counted by Spark."""
    from ingestion.delta.reader import JvmFreeReadError
    from ingestion.delta.rs_reads import DeltaRsReader

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            rows = DeltaRsReader().rows(path) or 0
        except JvmFreeReadError:
            if spark is None:
                raise
            try:
                rows = spark.read.format("delta").load(path).count()
            except Exception:  # noqa: BLE001 - its schema widened between the read's plan and its run: again
                rows = 0
        if rows >= count:
            return
        time.sleep(0.5)
    raise AssertionError(f"{path} did not reach {count} rows in {timeout}s")


def decode_both_ways(spark: Any, decoding: Any, values: list[bytes | None]) -> tuple[list[Any], list[Any], set[int]]:
    """Values decoded by the JVM path (settled in Python) and by the Python path alone, in one Spark job each:
    (JVM rows, Python rows, both sorted by offset; the offsets the JVM did not vouch for). Offsets are positions."""
    from ingestion.columns import KAFKA_SOURCE_SCHEMA
    from ingestion.decode import jvm_decoder
    from ingestion.decode.python_decoder import decode_in_python

    at = dt.datetime(2026, 1, 1)
    kafka_rows = spark.createDataFrame([(b"k", v, "t", 0, i, at, 0, []) for i, v in enumerate(values)],
                                       KAFKA_SOURCE_SCHEMA).repartition(2)
    assert jvm_decoder.unusable(spark, decoding) is None
    fast = jvm_decoder.decode_in_jvm(kafka_rows, decoding).persist()
    unverified = {r["offset"] for r in fast.where("_error_class IS NOT NULL").select("offset").collect()}
    both, python = jvm_decoder.settle_in_python(fast, decoding, kafka_rows.schema)
    columns = ["offset", "_payload", "_schema_id", "_tombstone", "_error_class", "_error_message", "_raw_value"]
    jvm_rows = sorted(both.select(*columns).collect())
    python_rows = sorted(decode_in_python(kafka_rows, decoding).select(*columns).collect())
    python.unpersist()
    fast.unpersist()
    assert len(jvm_rows) == len(python_rows) == len(values)
    return jvm_rows, python_rows, unverified


def pipeline_head(name: str, topic: str, servers: str | None) -> str:
    """The first lines of a test's pipeline file: its name, topic and broker (none: the file has a kafka: section
    of its own)."""
    return f"name: {name}\ntopic: {topic}\n" + (f'kafka:\n  bootstrap.servers: "{servers}"\n' if servers else "")


def routed_by_field(folder: Path, name: str, topic: str, servers: str, schema: Path, *, source: str = "",
                    sink: str = "", routing: str = "", extra: str = "") -> Path:
    """A pipeline file routing a JSON topic (`schema` its JSON Schema file) by its `kind` field into tables under
    `<folder>/lake` (docs/routing.md); `source`, `sink`, `routing`: more lines of those sections (indented),
    `extra`: more top-level sections."""
    path = folder / f"{name}.yaml"
    path.write_text(pipeline_head(name, topic, servers) + f"""source:
  startingOffsets: earliest
{source}value:
  format: json
  schemaFile: {schema}
sink:
  root: {folder / 'lake'}
{sink}routing:
  by: field
  field: kind
{routing}{extra}""")
    return path


def killed_at(fault: str, log: Path, *args: str) -> None:
    """Run `ingest <args>` until it reaches the test fault point `fault` (`<point>:<batch id>`, ingestion/faults.py),
    then SIGKILL it and the JVM it started; an AssertionError with its log when it ends or times out first."""
    marker = log.with_suffix(".fault")
    env = dict(os.environ, INGEST_TEST_FAULT=fault, INGEST_TEST_FAULT_FILE=str(marker))
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "ingest"), *args], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    deadline = time.monotonic() + 240
    try:
        while not marker.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"ingest {args[:2]} ended or timed out before {fault} (rc {proc.returncode}):\n"
                                     f"{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL



def ingest_here(capsys: Any, *args: str) -> tuple[int, str, str]:
    """`ingest <args>` in this process, as its console script runs it (`ingestion.cli.main`: the parser, the
    command, its output and exit code), on the session's JVM where the command needs Spark (its session is the one
    already running, the `spark` fixture's): exit code, stdout, stderr. For a command after the last kill of a test,
    where a process of its own would only add a JVM start. What the command changes of this process beyond its
    work is put back after it: the root logger's handlers and level, and the settings its session builder applied
    to the running session (its `spark.sql.shuffle.partitions`, say), which the later tests of this process keep."""
    import logging

    from pyspark.sql import SparkSession

    from ingestion.cli import main

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    session = SparkSession.getActiveSession()
    settings = dict(session.conf.getAll) if session is not None else {}
    capsys.readouterr()
    try:
        code = main(list(args))
    finally:
        for handler in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(handler)
        root.setLevel(level)
        if session is not None:
            for key, value in dict(session.conf.getAll).items():
                if settings.get(key) != value and session.conf.isModifiable(key):
                    if key in settings:
                        session.conf.set(key, settings[key])
                    else:
                        session.conf.unset(key)
    out, err = capsys.readouterr()
    return code, out, err
