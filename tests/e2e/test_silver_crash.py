"""`ingest run` keeping bronze and silver from a Debezium topic, SIGKILLed while changes arrive (at a random moment
after a silver step, then exactly between silver's delete-marker commit and its rows' commit), then drained:
silver equals the model's final state, each silver step committed once, its ledger a gapless chain of bronze
versions. (Two kills keep the suite's time; the moments that matter are both here.)"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from ingestion.dev import cdc
from ingestion.silver import ledger
from tests.helpers import delta_txns, table_rows

pytestmark = pytest.mark.e2e

INGEST = str(Path(sys.executable).parent / "ingest")


def _start(config: Path, log: Path, *args: str, fault: str | None = None) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    if fault:
        env.update({"INGEST_TEST_FAULT": fault, "INGEST_TEST_FAULT_FILE": str(log.with_suffix(".fault"))})
    with open(log, "wb") as out:
        return subprocess.Popen([INGEST, "run", str(config), *args], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)  # the group we started: the driver and its JVM
    proc.wait(30)


def _wait(proc: subprocess.Popen[bytes], log: Path, done: object, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not done():  # type: ignore[operator]
        if proc.poll() is not None or time.monotonic() > deadline:
            _kill(proc)
            raise AssertionError(f"run ended or timed out (rc {proc.returncode}):\n"
                                 f"{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)


def test_silver_is_exact_after_sigkills_during_a_streaming_run(spark, kafka_servers, make_topic,
                                                              tmp_path: Path) -> None:
    topic = make_topic(partitions=3)
    # `make test` kills twice; INGEST_SILVER_ACCEPTANCE=1 five times, on 20,000 changes of 2,000 keys
    kills = 5 if os.environ.get("INGEST_SILVER_ACCEPTANCE") == "1" else 2
    model = cdc.history(20_000, 2_000, seed=17) if kills == 5 else cdc.history(600, 100, seed=17)
    chunks = [model.changes[i::kills + 1] for i in range(kills + 1)]  # interleaved: each updates and deletes
    chunks = [sorted(c, key=lambda x: x.lsn) for c in chunks]
    ordered = [change for chunk in chunks for change in chunk]  # the order Kafka gets them in
    config = cdc.pipeline_yaml(tmp_path / "cdc.yaml", name=f"crash-{uuid.uuid4().hex[:6]}", topic=topic,
                               servers=kafka_servers, root=tmp_path,
                               silver="  key: [id]\n  envelope: debezium\n  sequenceBy: source.lsn\n"
                                      "  trigger: 1 second\n")
    with open(config, "a") as f:
        f.write("source:\n  maxOffsetsPerTrigger: 150\n")
    config.write_text(config.read_text().replace("sink:\n", "sink:\n  trigger: 1 second\n"))
    rng = random.Random(4)
    procs = []
    try:
        for i, chunk in enumerate(chunks[:-1]):
            cdc.produce(kafka_servers, topic, chunk)
            log = tmp_path / f"run{i}.log"
            if i == 1:  # killed exactly between the delete markers' commit and the rows' commit
                proc = _start(config, log, fault="silver_between_commits:*")
                procs.append(proc)
                _wait(proc, log, log.with_suffix(".fault").exists)
            else:  # killed at a random moment after silver's first step of the run
                proc = _start(config, log)
                procs.append(proc)
                _wait(proc, log, lambda log=log: "silver step" in log.read_text(errors="replace"))
                time.sleep(rng.uniform(0, 3))
            _kill(proc)
    finally:
        for proc in procs:
            _kill(proc)

    # The last changes, and a run that drains both layers (in this process: the kills are behind us, and a third
    # JVM start would only cost the suite time).
    from ingestion.config import load_pipeline
    from ingestion.stream import pipeline

    cdc.produce(kafka_servers, topic, chunks[-1])
    loaded = load_pipeline(config)
    pipeline.run(spark, loaded, available_now=True)
    assert loaded.silver_path is not None
    silver_path = Path(loaded.silver_path)
    rows = {r["id"]: r.asDict(recursive=True) for r in table_rows(str(silver_path))}
    expected = cdc.History(ordered).state()
    assert sorted(rows) == sorted(expected)
    assert all({c: rows[k][c] for c in expected[k]} == expected[k] for k in expected)

    # Every (txnAppId, txnVersion) of silver and of its markers committed once; the ledger is a chain.
    for table in (silver_path, Path(f"{silver_path}_deletes")):
        txns = [(app, version) for _, app, version in delta_txns(table)]
        assert len(txns) == len(set(txns)), f"{table}: a silver step was committed twice: {txns}"
    steps = sorted((r for _, r in ledger.records(spark, str(silver_path)) if r.kind != ledger.StepKind.EVOLVE),
                   key=lambda r: r.bronze_version)
    for before, after in itertools.pairwise(steps):
        if after.kind == ledger.StepKind.MERGE:
            assert after.bronze_from == before.bronze_version, steps
    assert "silver_between_commits" in (tmp_path / "run1.fault").read_text()  # the fault point was reached
