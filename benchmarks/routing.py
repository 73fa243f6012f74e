"""Routing's cost: `--records` records of three Avro types routed to three tables (`routing.by: recordName`) against
as many records of one type in one table, each an `ingest run --available-now` of its own, timed from the shell
prompt back to it.

A project folder of its own holds the schemas (`schemas/<topic>-com.bench.<Type>/<id>.avsc`, TopicRecordNameStrategy
subjects) and the two pipeline files; the records are Confluent-framed Avro of similar size. Afterwards every table
is read with delta-rs: each must hold exactly its records.

    .venv/bin/python benchmarks/routing.py --home /tmp/routing [--records 1000000]

Prints one JSON line: records, the wall seconds and records/s of each run, their ratio, whether the tables are
exact. The broker (in <home>/kafka) is left running: kill the pid in <home>/kafka/broker.pid.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TYPES = {"Created": 1, "Paid": 2, "Cancelled": 3}


def schema(kind: str) -> dict[str, object]:
    return {"type": "record", "name": kind, "namespace": "com.bench", "fields": [
        {"name": "id", "type": "long"}, {"name": "customer", "type": "string"}, {"name": "amount", "type": "double"},
        {"name": f"{kind.lower()}_at", "type": "long"}, {"name": "note", "type": "string"}]}


def produce(servers: str, topic: str, kinds: list[str], count: int) -> None:
    from confluent_kafka import Producer
    from fastavro import parse_schema, schemaless_writer

    parsed = {k: parse_schema(schema(k)) for k in kinds}
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 50, "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 500000})
    for i in range(count):
        kind = kinds[i % len(kinds)]
        body = io.BytesIO()
        schemaless_writer(body, parsed[kind], {"id": i, "customer": f"customer-{i % 997}", "amount": i * 0.5,
                                               f"{kind.lower()}_at": 1_700_000_000_000 + i, "note": "n" * 40})
        while True:
            try:
                producer.produce(topic, value=b"\x00" + TYPES[kind].to_bytes(4, "big") + body.getvalue(),
                                 partition=i % 3)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(120)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--home", type=Path, required=True, help="the project folder (state, conf, schemas, tables)")
    p.add_argument("--records", type=int, default=1_000_000, help="records of each run (1000000)")
    args = p.parse_args()
    sys.path.insert(0, str(REPO))
    from confluent_kafka.admin import AdminClient, NewTopic
    from deltalake import DeltaTable

    from ingestion.dev import broker

    home = args.home.absolute()
    schemas, conf = home / "schemas", home / "conf" / "pipelines"
    env = {**os.environ, "INGEST_HOME": str(home / "state"), "INGEST_CONF_DIR": str(home / "conf"),
           "INGEST_SCHEMAS_DIR": str(schemas),
           "INGEST_JAR_CACHE": os.environ.get("INGEST_JAR_CACHE", str(REPO / ".ingest" / "jars"))}
    os.environ.update(env)
    local = broker.Broker(home / "kafka")
    servers = local.bootstrap_servers() if local.pid() else local.start()
    assert servers
    run = f"r{int(time.time())}"
    routed, single = f"routed-{run}", f"single-{run}"
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics([NewTopic(t, 3, 1) for t in (routed, single)]).values():
        future.result(60)
    for kind, schema_id in TYPES.items():
        for topic in (routed, single):
            folder = schemas / f"{topic}-com.bench.{kind}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{schema_id}.avsc").write_text(json.dumps(schema(kind)))
    produce(servers, routed, list(TYPES), args.records)
    produce(servers, single, ["Created"], args.records)
    conf.mkdir(parents=True, exist_ok=True)
    common = (f"kafka: {{bootstrap.servers: \"{servers}\"}}\nsource: {{maxOffsetsPerTrigger: 200000}}\n"
              f"sink: {{root: {home / 'lake'}}}\n")
    (conf / f"{routed}.yaml").write_text(f"name: {routed.replace('-', '_')}\ntopic: {routed}\n{common}"
                                         "value: {subjectNameStrategy: TopicRecordNameStrategy}\n"
                                         "routing: {by: recordName}\n")
    (conf / f"{single}.yaml").write_text(f"name: {single.replace('-', '_')}\ntopic: {single}\n{common}"
                                         "value: {subjectNameStrategy: TopicRecordNameStrategy, "
                                         "recordName: com.bench.Created}\n")
    out: dict[str, object] = {"records": args.records}
    for topic in (single, routed):
        started = time.monotonic()
        done = subprocess.run([str(Path(sys.executable).parent / "ingest"), "run", str(conf / f"{topic}.yaml"),
                               "--available-now"], env=env, capture_output=True, text=True)
        wall = time.monotonic() - started
        assert done.returncode == 0, done.stderr[-3000:]
        out[f"{topic.split('-')[0]}_seconds"] = round(wall, 1)
        out[f"{topic.split('-')[0]}_records_per_second"] = round(args.records / wall)
    name = routed.replace("-", "_")
    found = {k: DeltaTable(str(home / "lake" / "tables" / f"{name}_{k.lower()}")).to_pyarrow_table(
        columns=["_kafka_offset"]).num_rows for k in TYPES}
    one = DeltaTable(str(home / "lake" / "tables" / single.replace("-", "_"))).to_pyarrow_table(
        columns=["_kafka_offset"]).num_rows
    share = {k: args.records // 3 + (i < args.records % 3) for i, k in enumerate(TYPES)}
    out["exact"] = found == share and one == args.records
    out["ratio"] = round(float(out["routed_records_per_second"]) / float(out["single_records_per_second"]), 2)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
