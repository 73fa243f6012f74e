"""Silver from a real Debezium source: Debian's PostgreSQL → Debezium's Postgres connector (pgoutput) in Kafka
Connect standalone, Kafka's own JsonConverter with embedded schemas → a 3-partition topic → `value.format:
connect-json` pipelines with `silver: {key: [id], envelope: debezium}` (tests/debezium.py starts the source, once
for the module).

Random statements (multi-row transactions, a rollback, updates, deletes and re-inserts of the same ids, primary-key
changes) arrive while a streaming `ingest run` keeps bronze and silver; it is SIGKILLed once and restarted; the
table gains a column mid-stream (`ALTER TABLE ... ADD COLUMN points`) and more changes use it. Every expectation is
PostgreSQL's own answer to `SELECT * FROM customers`: bronze holds each Kafka offset once, nothing is quarantined,
silver equals the table in every column (the time columns as timestamps and dates), a history pipeline started
after the column was added has one current row per live key equal to it, `verify` exits 0. Then `TRUNCATE` and new
rows: silver holds only the new rows.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from tests.debezium import DebeziumConnect, Postgres, postgres_bin
from tests.helpers import ingest_here, wait_while_running

pytestmark = [pytest.mark.e2e, pytest.mark.debian]

INGEST = str(Path(sys.executable).parent / "ingest")
PARTITIONS = 3

TABLE = """CREATE TABLE customers (
  id int PRIMARY KEY, name text NOT NULL, email text, balance numeric(12, 2), seen_at timestamptz,
  local_at timestamp, born date, active boolean, tags text[], doc jsonb, rate numeric, opens time, ref uuid);
CREATE TABLE sentinel (id int PRIMARY KEY, n int NOT NULL);
INSERT INTO sentinel VALUES (1, 0);
"""
# Columns whose values PostgreSQL's to_json renders as text that silver holds typed (Debezium's semantic types):
# timestamptz (ZonedTimestamp) and timestamp (MicroTimestamp) as timestamps, date (Date) as a date, time (MicroTime)
# as HH:MM:SS.ffffff text, jsonb (Json) as its text.
TIMESTAMPTZ, TIMESTAMP, DATE, TIME, JSON = ("seen_at",), ("local_at",), ("born",), ("opens",), ("doc",)


@dataclass
class Source:
    """The running source: PostgreSQL, Connect with Debezium, the customers topic and the sentinel's topic."""

    pg: Postgres
    connect: DebeziumConnect
    servers: str
    topic: str
    sentinel_topic: str
    sentinel: int = 0
    timings: dict[str, float] = field(default_factory=dict)

    def caught_up(self, timeout: float = 60) -> dict[int, int]:
        """Bump the sentinel row and wait until Debezium wrote it: every change committed before it is in Kafka
        (one WAL, read in commit order). The customers topic's end offsets then."""
        from confluent_kafka import Consumer, TopicPartition

        self.sentinel += 1
        self.pg.execute(f"UPDATE sentinel SET n = {self.sentinel}")
        consumer = Consumer({"bootstrap.servers": self.servers, "group.id": f"sentinel-{uuid.uuid4().hex[:6]}",
                             "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition(self.sentinel_topic, 0, 0)])
            deadline = time.monotonic() + timeout
            seen = -1
            while seen < self.sentinel:
                if time.monotonic() > deadline:
                    raise AssertionError(f"Debezium did not write sentinel {self.sentinel}:\n{self.connect.tail()}")
                message = consumer.poll(0.5)
                if message is None or message.error() or message.value() is None:
                    continue
                after = json.loads(message.value())["payload"]["after"]
                seen = max(seen, after["n"]) if after else seen
            return {p: consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)[1]
                    for p in range(PARTITIONS)}
        finally:
            consumer.close()


@pytest.fixture(scope="module")
def debezium(kafka_servers: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Source]:
    from ingestion.kafka.clients import create_topic

    if postgres_bin() is None:
        pytest.fail("PostgreSQL is missing: `make postgresql` installs Debian's postgresql package")
    folder = tmp_path_factory.mktemp("debezium")
    started = time.monotonic()
    pg = Postgres()
    connect = None
    try:
        pg.execute(TABLE)
        pg.execute(Workload(seed=60).snapshot(150))  # read by the connector's initial snapshot (op r)
        prefix = f"shop{uuid.uuid4().hex[:6]}"
        create_topic({"bootstrap.servers": kafka_servers}, f"{prefix}.public.customers", PARTITIONS)
        create_topic({"bootstrap.servers": kafka_servers}, f"{prefix}.public.sentinel", 1)
        postgres_seconds = time.monotonic() - started
        connect = DebeziumConnect(folder / "connect", servers=kafka_servers, postgres=pg, prefix=prefix,
                                  tables=["customers", "sentinel"])
        yield Source(pg, connect, kafka_servers, f"{prefix}.public.customers", f"{prefix}.public.sentinel",
                     timings={"postgres": postgres_seconds, "connect": connect.start_seconds})
    finally:
        if connect is not None:
            connect.stop()
        pg.stop()


class Workload:
    """Random statements on `customers`: which ids exist is tracked only to write valid statements; what the
    table holds afterwards is always asked from PostgreSQL."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.live: set[int] = set()
        self.gone: list[int] = []  # deleted ids, to be inserted again
        self.next_id = 1
        self.points = False  # the column added mid-stream

    def _value(self, key: int) -> str:
        rng = self.rng
        name = rng.choice(["Ann", "O'Brien", "Zoë", "李", "a b c", "x" * 40])
        email = "NULL" if rng.random() < 0.2 else f"'c{key}.{rng.randint(0, 99)}@example.com'"
        balance = "NULL" if rng.random() < 0.1 else f"{rng.randint(-10**9, 10**9) / 100:.2f}"
        seen = (dt.datetime(2020, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=rng.randint(0, 2 * 10**14)))
        offset = rng.choice(["+00", "+02", "-05:30", "+09"])
        local = dt.datetime(2021, 6, 1) + dt.timedelta(microseconds=rng.randint(0, 10**14))
        born = dt.date(1950, 1, 1) + dt.timedelta(days=rng.randint(0, 22_000))
        active = rng.choice(["true", "false", "NULL"])
        tags = rng.choice(["NULL", "'{}'", "ARRAY['vip']", "ARRAY['a','b''c']"])
        doc = rng.choice(["NULL", """'{"tier": "gold", "n": 3}'""", f"""'{{"k": {key}, "x": [1, 2]}}'"""])
        rate = rng.choice(["NULL", "0", f"{rng.randint(-10**9, 10**9)}.{rng.randint(0, 999999):06d}",
                           str(rng.randint(0, 10**12))])  # numeric without a scale: VariableScaleDecimal
        opens = dt.time(rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59),
                        rng.choice([0, rng.randint(0, 999_999)]))
        columns = [str(key), "'" + name.replace("'", "''") + "'", email, balance,
                   f"'{seen.strftime('%Y-%m-%d %H:%M:%S.%f')}{offset}'", f"'{local.isoformat(sep=' ')}'",
                   f"'{born.isoformat()}'", active, tags, doc, rate, f"'{opens.isoformat()}'",
                   "NULL" if rng.random() < 0.1 else f"'{uuid.UUID(int=rng.getrandbits(128))}'"]
        if self.points:
            columns.append("NULL" if rng.random() < 0.2 else str(rng.randint(-1000, 10**6)))
        return "(" + ", ".join(columns) + ")"

    def snapshot(self, rows: int) -> str:
        keys = [self._new_id() for _ in range(rows)]
        return "INSERT INTO customers VALUES " + ", ".join(self._value(k) for k in keys) + ";\n"

    def _new_id(self) -> int:
        if self.gone and self.rng.random() < 0.5:
            key = self.gone.pop(self.rng.randrange(len(self.gone)))
        else:
            key, self.next_id = self.next_id, self.next_id + 1
        self.live.add(key)
        return key

    def _some(self, n: int) -> list[int]:
        return self.rng.sample(sorted(self.live), min(n, len(self.live)))

    def _delete(self, keys: list[int]) -> str:
        for key in keys:
            self.live.discard(key)
            self.gone.append(key)
        return f"DELETE FROM customers WHERE id IN ({', '.join(map(str, keys))});"

    def _update(self, key: int) -> str:
        rng = self.rng
        sets = rng.sample([f"name = 'n{rng.randint(0, 999)}'", f"balance = {rng.randint(-10**6, 10**6) / 100:.2f}",
                           f"seen_at = now() - interval '{rng.randint(0, 10**6)} seconds'",
                           "local_at = local_at + interval '1.5 seconds'", "born = born + 1",
                           "active = NOT active", "tags = array_append(tags, 't')", "email = NULL"],
                          rng.randint(1, 3))
        if self.points and rng.random() < 0.6:
            sets.append(f"points = coalesce(points, 0) + {rng.randint(1, 50)}")
        return f"UPDATE customers SET {', '.join(sets)} WHERE id = {key};"

    def _statement(self) -> str:
        rng = self.rng
        roll = rng.random()
        if roll < 0.25 or len(self.live) < 20:
            keys = [self._new_id() for _ in range(rng.randint(1, 4))]
            return "INSERT INTO customers VALUES " + ", ".join(self._value(k) for k in keys) + ";"
        if roll < 0.55:
            return self._update(self._some(1)[0])
        if roll < 0.62:  # a multi-row update
            low = rng.choice(sorted(self.live))
            return f"UPDATE customers SET balance = balance + 1.25, active = NOT active WHERE id BETWEEN {low} " \
                   f"AND {low + rng.randint(2, 8)};"
        if roll < 0.77:
            return self._delete(self._some(rng.randint(1, 3)))
        if roll < 0.87:  # deleted and inserted again in one transaction
            key = self._some(1)[0]
            self._delete([key])
            self.gone.remove(key)
            self.live.add(key)
            return f"DELETE FROM customers WHERE id = {key}; INSERT INTO customers VALUES {self._value(key)};"
        # the primary key changes: Debezium writes a delete of the old key and a create of the new one
        old, new = self._some(1)[0], self.next_id + 10_000
        self.next_id += 1
        self.live.discard(old)
        self.gone.append(old)
        self.live.add(new)
        return f"UPDATE customers SET id = {new} WHERE id = {old};"

    def script(self, transactions: int, *, rollback: bool = True) -> str:
        """`transactions` transactions of 1-6 statements (some single autocommit statements), one rolled back."""
        parts = []
        undone = self.rng.randrange(transactions) if rollback else -1
        for i in range(transactions):
            if i == undone:  # its statements change nothing: the generator's view is put back afterwards
                saved = (set(self.live), list(self.gone), self.next_id)
                parts.append("BEGIN;\n" + "\n".join(self._statement() for _ in range(4)) + "\nROLLBACK;")
                self.live, self.gone, self.next_id = saved
            elif self.rng.random() < 0.3:
                parts.append(self._statement())
            else:
                parts.append("BEGIN;\n" + "\n".join(self._statement() for _ in range(self.rng.randint(2, 6)))
                             + "\nCOMMIT;")
        return "\n".join(parts) + "\n"


def _expected(source: Source) -> dict[int, dict[str, Any]]:
    """`SELECT * FROM customers`, each value as silver should hold it."""
    rows = {}
    for row in source.pg.query("SELECT * FROM customers ORDER BY id"):
        for column in TIMESTAMPTZ:
            row[column] = row[column] and dt.datetime.fromisoformat(row[column]).astimezone(dt.UTC)
        for column in TIMESTAMP:  # a wall time without zone: Debezium's MicroTimestamp, read as UTC
            row[column] = row[column] and dt.datetime.fromisoformat(row[column]).replace(tzinfo=dt.UTC)
        for column in DATE:
            row[column] = row[column] and dt.date.fromisoformat(row[column])
        for column in TIME:
            row[column] = row[column] and dt.time.fromisoformat(row[column])
        rows[row["id"]] = row
    return rows


def _silver_value(column: str, value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    if column in JSON and isinstance(value, str):
        return json.loads(value)
    if column in TIME and isinstance(value, str):
        return dt.time.fromisoformat(value)
    return value


def _assert_table_equals(rows: list[dict[str, Any]], expected: dict[int, dict[str, Any]], what: str) -> None:
    found = {r["id"]: r for r in rows}
    assert len(found) == len(rows), f"{what}: duplicated keys"
    assert sorted(found) == sorted(expected), (
        f"{what}: missing {sorted(set(expected) - set(found))[:10]}, extra {sorted(set(found) - set(expected))[:10]}")
    wrong = {key: {c: (_silver_value(c, found[key].get(c)), v) for c, v in row.items()
                   if _silver_value(c, found[key].get(c)) != v}
             for key, row in expected.items()}
    wrong = {k: v for k, v in wrong.items() if v}
    assert not wrong, f"{what}: {len(wrong)} rows differ from PostgreSQL, e.g. {list(wrong.items())[:3]}"


def _assert_typed(path: Path) -> None:
    """Debezium's time types are timestamps and dates in the table, not its epoch numbers and text."""
    import pyarrow as pa
    from deltalake import DeltaTable

    schema = pa.schema(DeltaTable(str(path)).schema().to_arrow())
    found = {c: str(schema.field(c).type) for c in (*TIMESTAMPTZ, *TIMESTAMP, *DATE, "rate")}
    assert all(pa.types.is_timestamp(schema.field(c).type) for c in (*TIMESTAMPTZ, *TIMESTAMP)), found
    assert all(pa.types.is_date32(schema.field(c).type) for c in DATE), found
    assert pa.types.is_decimal(schema.field("rate").type), found


def _read(path: Path, columns: list[str] | None = None) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    return list(DeltaTable(str(path)).to_pyarrow_table(columns=columns).to_pylist())


def _offsets_landed(config: Any) -> int:
    """Bronze rows plus quarantined records (each a Kafka offset); 0 before the tables exist."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    total = 0
    for path in (config.table_path, config.quarantine_path):
        try:
            total += len(DeltaTable(str(path)).to_pyarrow_table(columns=["_kafka_offset"]))
        except TableNotFoundError:
            pass
    return total


def _caught_up(config: Any, ends: dict[int, int]) -> bool:
    """Every offset below `ends` is in bronze or quarantine, and silver holds every bronze version."""
    from ingestion.silver import ledger

    return _offsets_landed(config) >= sum(ends.values()) and ledger.rs_caught_up(str(config.silver_path),
                                                                                  str(config.table_path))


def _pipeline(tmp_path: Path, name: str, source: Source, schema_file: Path, silver: str,
              starting: dict[int, int] | None = None) -> Path:
    """A connect-json pipeline of the customers topic, from its start or from `starting` (partition -> offset)."""
    path = tmp_path / f"{name}.yaml"
    positions = json.dumps({source.topic: {str(p): o for p, o in (starting or {}).items()}})
    path.write_text(f"""name: {name}
topic: {source.topic}
kafka:
  bootstrap.servers: "{source.servers}"
source:
  maxOffsetsPerTrigger: 400
  startingOffsets: '{positions if starting else "earliest"}'
value:
  format: connect-json
  schemaFile: {schema_file}
key:
  format: string
sink:
  root: {tmp_path / 'lake'}
  trigger: 1 second
silver:
  key: [id]
  envelope: debezium
  trigger: 1 second
{silver}""")
    return path


def _start(config: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen([INGEST, "run", str(config)], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)  # the group we started: the driver and its JVM
    proc.wait(30)


def _first_value(source: Source, path: Path) -> Path:
    """The customers topic's first record, whose embedded schema is the table's schema file today."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": source.servers, "group.id": f"schema-{uuid.uuid4().hex[:6]}"})
    try:
        consumer.assign([TopicPartition(source.topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error() and message.value():
                path.write_bytes(message.value())
                return path
    finally:
        consumer.close()
    raise AssertionError("no record on the customers topic")


def _workload(source: Source, seed: int) -> Workload:
    work = Workload(seed)
    work.live = {r["id"] for r in source.pg.query("SELECT id FROM customers")}
    work.next_id = max(work.live, default=0) + 1
    work.points = bool(source.pg.query("SELECT 1 FROM information_schema.columns WHERE table_name = 'customers' "
                                       "AND column_name = 'points'"))
    return work


def _verify(capsys: pytest.CaptureFixture[str], *configs: Path) -> None:
    """`ingest verify` of each pipeline, in this process through ingest's own main (it needs no JVM: a process each
    would only add its start)."""
    for config in configs:
        code, out, err = ingest_here(capsys, "verify", str(config))
        assert code == 0, f"verify {config.name}: {code}\n{out}\n{err}"


def test_silver_equals_postgres_through_debezium(debezium: Source, spark: Any, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from ingestion.config import load_pipeline
    from ingestion.stream import pipeline

    source = debezium
    work = _workload(source, seed=61)
    t0 = time.monotonic()
    source.pg.execute(work.script(120))
    source.caught_up()
    schema_file = _first_value(source, tmp_path / "customers.connect.json")
    upsert_file = _pipeline(tmp_path, "dbz_upsert", source, schema_file, "")
    upsert = load_pipeline(upsert_file)
    assert upsert.silver_path is not None
    upsert_silver = Path(upsert.silver_path)

    # A streaming run, SIGKILLed while changes arrive (once bronze has committed two batches, at a random moment of
    # silver's first steps), then started again.
    first = _start(upsert_file, tmp_path / "run1.log")
    try:
        wait_while_running(lambda: " batch 1: " in (tmp_path / "run1.log").read_text(errors="replace"), first,
                           tmp_path / "run1.log", "bronze's second batch", timeout=600)
        source.pg.execute(work.script(120))
        time.sleep(random.Random(3).uniform(0.5, 2.0))
    finally:
        _kill(first)
    second = _start(upsert_file, tmp_path / "run2.log")
    try:
        # The source gains a column; more changes use it.
        source.pg.execute("ALTER TABLE customers ADD COLUMN points int;\n")
        work.points = True
        source.pg.execute(work.script(120))
        ends = source.caught_up()
        wait_while_running(lambda: _caught_up(upsert, ends), second, tmp_path / "run2.log",
                           "bronze and silver to catch up", timeout=600)
    finally:
        _kill(second)
    expected = _expected(source)
    assert "points" in next(iter(expected.values()))

    # Bronze: each offset once; nothing quarantined.
    bronze = _read(Path(upsert.table_path), ["_kafka_partition", "_kafka_offset"])
    counts = Counter((r["_kafka_partition"], r["_kafka_offset"]) for r in bronze)
    assert counts == Counter({(p, o): 1 for p, end in ends.items() for o in range(end)})
    assert _offsets_landed(upsert) == len(bronze), "records were quarantined"

    _assert_typed(upsert_silver)
    _assert_table_equals(_read(upsert_silver), expected, "upsert silver")

    # A history pipeline started after the column was added, over the whole topic.
    history_file = _pipeline(tmp_path, "dbz_history", source, schema_file, "  mode: history\n")
    history = load_pipeline(history_file)
    assert history.silver_path is not None
    pipeline.run(spark, history, available_now=True)
    assert _offsets_landed(history) == len(_read(Path(history.table_path), ["_kafka_offset"])) == sum(ends.values())
    current = [r for r in _read(Path(history.silver_path)) if r["_is_current"]]
    _assert_table_equals(current, expected, "history silver's current rows")
    _verify(capsys, upsert_file, history_file)
    print(f"debezium: postgres {source.timings['postgres']:.1f}s, connect {source.timings['connect']:.1f}s, "
          f"scenario {time.monotonic() - t0:.1f}s")


def test_truncate_leaves_only_the_new_rows(debezium: Source, spark: Any, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`TRUNCATE customers` (Debezium's `op: t`) empties the upsert table and closes every current row of history,
    then the rows inserted after it are all silver holds."""
    from ingestion.config import load_pipeline
    from ingestion.stream import pipeline

    source = debezium
    t0 = time.monotonic()
    work = _workload(source, seed=62)
    starting = source.caught_up()  # new pipelines: from here on (the earlier test's changes are not theirs)
    source.pg.execute(work.script(20))
    source.caught_up()
    schema_file = _first_value(source, tmp_path / "customers.connect.json")
    configs = [_pipeline(tmp_path, f"dbz_truncate_{mode}", source, schema_file, f"  mode: {mode}\n", starting)
               for mode in ("upsert", "history")]
    loaded = [load_pipeline(config) for config in configs]
    for config in loaded:
        pipeline.run(spark, config, available_now=True)
    assert _read(Path(loaded[0].silver_path or "")), "silver should hold rows before the truncate"

    source.pg.execute("TRUNCATE customers;\n")
    work.live, work.gone = set(), []
    source.pg.execute(work.script(15, rollback=False))
    source.caught_up()
    expected = _expected(source)
    assert expected, "rows were inserted after the truncate"
    for config in loaded:
        pipeline.run(spark, config, available_now=True)
    upsert, history = (Path(config.silver_path or "") for config in loaded)
    _assert_table_equals(_read(upsert), expected, "upsert silver after the truncate")
    current = [r for r in _read(history) if r["_is_current"]]
    _assert_table_equals(current, expected, "history silver's current rows after the truncate")
    # Changes after it, merged by the driver's step (`rs_step`): ordered by the connector's position (a record),
    # past the truncate the ledger records.
    source.pg.execute(work.script(10))
    source.caught_up()
    expected = _expected(source)
    pipeline.run(spark, loaded[0], available_now=True)
    _assert_table_equals(_read(upsert), expected, "upsert silver after changes after the truncate")
    newest = DeltaTable(str(upsert)).history(1)[0]
    assert newest["operation"] == "MERGE" and newest["engineInfo"].startswith("delta-rs"), newest
    assert json.loads(newest["userMetadata"])["ingest_silver"]["truncates"], newest
    _verify(capsys, *configs)
    print(f"debezium truncate: {time.monotonic() - t0:.1f}s")
