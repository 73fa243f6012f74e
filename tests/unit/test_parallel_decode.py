"""The driver's decode on every core (`decode.parallel`): the same rows, failures and reasons as one process, the
first failing record named under sink.onError: fail, and no worker left behind by a killed parent."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from ingestion.decode import parallel
from ingestion.decode.arrow_rows import RecordDecoder
from ingestion.decode.spec import DecodeSpec
from ingestion.decode.wire import encode
from ingestion.errors import DecodeError
from tests.unit.test_decode import ORDERS_JSON, body_of, kafka_batch

REPO = Path(__file__).resolve().parents[2]


def _spec(*, fail_fast: bool = False) -> DecodeSpec:
    return DecodeSpec({1: ORDERS_JSON}, ORDERS_JSON, 1 << 20, fail_fast=fail_fast, key_format="string")


def _values(n: int) -> list[bytes | None]:
    bodies = [encode(1, body_of(i)[1]) for i in range(n)]
    values: list[bytes | None] = list(bodies)
    values[5] = bodies[5][:-2]  # a body cut short (first part)
    values[31] = encode(7, bodies[31][5:])  # an unknown schema id (a worker's part)
    values[40] = None  # a tombstone
    values[57] = b"\x01" + bodies[57][1:]  # not the Confluent framing (the last part)
    return values


@pytest.fixture
def two_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parallel.ENV, "2")
    monkeypatch.setattr(parallel, "PARALLEL_MIN", 10)
    parallel._warm()  # as `warm` starts it for a large run, here until its workers are up


def test_parts_decoded_by_workers_equal_one_process(two_workers: None, monkeypatch: pytest.MonkeyPatch) -> None:
    batch = kafka_batch(_values(60))
    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    decoder = RecordDecoder(_spec())
    here: list[int] = []  # rows this process decoded itself: the first part's only
    decode_here = parallel._decode_here
    monkeypatch.setattr(parallel, "_decode_here", lambda d, part: here.append(part.num_rows) or decode_here(d, part))
    spread = decoder.decode(batch, batch_id=3, ingested_at=at)
    assert here == [20]  # the other 40 rows were the workers'
    monkeypatch.setattr(parallel, "_decode_here", decode_here)
    monkeypatch.setenv(parallel.ENV, "0")
    alone = decoder.decode(batch, batch_id=3, ingested_at=at)
    assert spread.bronze.equals(alone.bronze) and spread.quarantine.equals(alone.quarantine)
    assert spread.stats == alone.stats
    assert spread.quarantine.column("_kafka_offset").to_pylist() == [17 + 5, 17 + 31, 17 + 57]
    assert spread.bronze.num_rows == 57 and spread.unknown_ids == {7}


def test_a_batch_begun_ahead_decodes_from_its_workers_parts_and_another_batch_anew(
        two_workers: None, monkeypatch: pytest.MonkeyPatch) -> None:
    batch, other = kafka_batch(_values(60)), kafka_batch(_values(60))
    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    decoder = RecordDecoder(_spec())
    here: list[int] = []
    decode_here = parallel._decode_here
    monkeypatch.setattr(parallel, "_decode_here", lambda d, part: here.append(part.num_rows) or decode_here(d, part))
    decoder.begin(batch)  # as the fetch-ahead thread does with the next batch's records
    begun = decoder.decode(batch, batch_id=3, ingested_at=at)
    driver_part = int(60 * parallel.BEGUN_DRIVER_WEIGHT / (2 + parallel.BEGUN_DRIVER_WEIGHT))
    assert here == [driver_part] and driver_part < 20  # this process's smaller share; the workers' sent ahead
    decoder.begin(batch)
    fresh = decoder.decode(other, batch_id=3, ingested_at=at)  # not the batch begun: cut evenly, decoded now
    assert here == [driver_part, 20]
    monkeypatch.setattr(parallel, "_decode_here", decode_here)
    monkeypatch.setenv(parallel.ENV, "0")
    alone = decoder.decode(batch, batch_id=3, ingested_at=at)
    for spread in (begun, fresh):
        assert spread.bronze.equals(alone.bronze) and spread.quarantine.equals(alone.quarantine)
        assert spread.stats == alone.stats
    assert begun.quarantine.column("_kafka_offset").to_pylist() == [17 + 5, 17 + 31, 17 + 57]


def test_under_on_error_fail_the_first_failing_record_of_the_batch_is_named(two_workers: None) -> None:
    values = _values(60)
    values[5] = encode(1, body_of(5)[1])  # the first part decodes: a worker's part holds the first failure
    with pytest.raises(DecodeError, match=r"record orders/2@48: UnknownSchemaError"):
        RecordDecoder(_spec(fail_fast=True)).decode(kafka_batch(values), batch_id=0,
                                                    ingested_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))


def test_a_killed_parent_leaves_no_worker(tmp_path: Path) -> None:
    script = ("import os, sys, time\n"
              "from ingestion.decode import parallel\n"
              "pool = parallel._the_pool()\n"
              "pool.submit(parallel._ready).result()\n"
              "print(' '.join(str(p) for p in pool._processes), flush=True)\n"
              "time.sleep(600)\n")
    env = {**os.environ, parallel.ENV: "1", "PYTHONPATH": str(REPO)}
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert parent.stdout is not None
        workers = [int(p) for p in parent.stdout.readline().split()]
        assert workers and all(_alive(p) for p in workers)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in workers), f"workers {workers} outlived their killed parent"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_one_core_or_a_small_batch_decodes_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parallel.ENV, "0")
    assert parallel.workers() == 0
    monkeypatch.delenv(parallel.ENV)
    assert parallel.workers() == max(0, len(os.sched_getaffinity(0)) - 1)
    batch = pa.RecordBatch.from_pylist([], schema=kafka_batch([]).schema)
    assert RecordDecoder(_spec()).decode(batch, batch_id=0, ingested_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC)) \
        .bronze.num_rows == 0
