"""The non-Spark peer: what a team without Spark would write to land a topic in a Delta table exactly once.

A confluent-kafka consumer (read_committed), fastavro, pyarrow and delta-rs `write_deltalake`; one Delta commit per
batch of at most --max-offsets records, carrying an app transaction (txnAppId = the worker's id, txnVersion = its
batch number) and the batch's offsets in the commit's userMetadata, so a restarted worker resumes after its last
commit and a repeated commit is recognisable. The columns are the payload's fields plus the Kafka coordinates. No
quarantine, no schema registry, no metrics: the minimum a careful team would ship.

--workers N runs N processes, each on its share of the partitions (round robin) with its own app id, all appending
to one table (delta-rs retries a commit that lost a race). Run by bench.py; prints one `BENCH_RESULT {json}` line.
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing
import time
import uuid
from typing import Any

SOURCE = ("_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_kafka_key")


def arrow_type(avro: Any) -> Any:
    """The Arrow type of an Avro type, for the types the benchmark's schema uses."""
    import pyarrow as pa

    if isinstance(avro, list):  # ["null", X]: a nullable X
        return arrow_type(next(t for t in avro if t != "null"))
    if isinstance(avro, dict):
        logical = avro.get("logicalType")
        if logical == "timestamp-millis":
            return pa.timestamp("ms", tz="UTC")
        if logical == "timestamp-micros":
            return pa.timestamp("us", tz="UTC")
        if avro["type"] == "enum":
            return pa.string()
        if avro["type"] == "map":
            return pa.map_(pa.string(), arrow_type(avro["values"]))
        if avro["type"] == "array":
            return pa.list_(arrow_type(avro["items"]))
        return arrow_type(avro["type"])
    return {"string": pa.string(), "long": pa.int64(), "int": pa.int32(), "double": pa.float64(),
            "float": pa.float32(), "boolean": pa.bool_(), "bytes": pa.binary()}[avro]


def table_schema(schema: dict[str, Any]) -> Any:
    import pyarrow as pa

    fields = [pa.field(f["name"], arrow_type(f["type"])) for f in schema["fields"]]
    return pa.schema([*fields, pa.field("_kafka_topic", pa.string()), pa.field("_kafka_partition", pa.int32()),
                      pa.field("_kafka_offset", pa.int64()), pa.field("_kafka_timestamp", pa.timestamp("ms", tz="UTC")),
                      pa.field("_kafka_key", pa.binary())])


def _resume_point(table: str, app_id: str) -> tuple[int, dict[int, int]]:
    """(next batch number, partition -> next offset) of this worker, from its last commit in the table."""
    from deltalake import DeltaTable

    dt = DeltaTable(table)
    version = dt.transaction_version(app_id)
    if version is None:
        return 0, {}
    for commit in dt.history():
        meta = json.loads(commit.get("userMetadata") or "{}").get("peer", {})
        if meta.get("app_id") == app_id and meta.get("batch") == version:
            return version + 1, {int(p): int(o) for p, o in meta["next_offsets"].items()}
    return version + 1, {}


def worker(index: int, workers: int, args: argparse.Namespace) -> dict[str, Any]:
    import pyarrow as pa
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    from deltalake import CommitProperties, Transaction, write_deltalake
    from fastavro import parse_schema, schemaless_reader

    with open(args.schema) as f:
        raw_schema = json.load(f)
    parsed = parse_schema(raw_schema)
    schema = table_schema(raw_schema)
    names = [f["name"] for f in raw_schema["fields"]]
    app_id = f"peer-{index}"
    batch_no, resume = _resume_point(args.table, app_id)
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": f"bench-peer-{index}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "fetch.max.bytes": 52_428_800})
    batches: list[dict[str, Any]] = []
    try:
        meta = consumer.list_topics(args.topic, timeout=30).topics[args.topic]
        mine = [p for p in sorted(meta.partitions) if p % workers == index]
        ends = {p: consumer.get_watermark_offsets(TopicPartition(args.topic, p), timeout=30)[1] for p in mine}
        consumer.assign([TopicPartition(args.topic, p, resume.get(p, OFFSET_BEGINNING)) for p in mine])
        remaining = {p: end for p, end in ends.items() if end > resume.get(p, 0)}
        while remaining:
            started = time.time()
            columns: dict[str, list[Any]] = {name: [] for name in (*names, *SOURCE)}
            next_offsets: dict[int, int] = {}
            while remaining and len(columns["_kafka_offset"]) < args.max_offsets:
                wanted = min(10_000, args.max_offsets - len(columns["_kafka_offset"]))
                for msg in consumer.consume(wanted, timeout=1.0):
                    if msg.error():
                        raise RuntimeError(str(msg.error()))
                    value = msg.value()
                    if value is None or len(value) < 5 or value[0] != 0:
                        raise RuntimeError(f"not the Confluent wire format at {msg.partition()}@{msg.offset()}")
                    record = schemaless_reader(io.BytesIO(value[5:]), parsed, None)
                    for name in names:
                        v = record[name]
                        # fastavro gives uuid logical types as UUID objects; the table holds their text
                        columns[name].append(list(v.items()) if isinstance(v, dict) else
                                             str(v) if isinstance(v, uuid.UUID) else v)
                    partition, offset = msg.partition(), msg.offset()
                    columns["_kafka_topic"].append(msg.topic())
                    columns["_kafka_partition"].append(partition)
                    columns["_kafka_offset"].append(offset)
                    columns["_kafka_timestamp"].append(msg.timestamp()[1])
                    columns["_kafka_key"].append(msg.key())
                    next_offsets[partition] = offset + 1
                    if partition in remaining and offset + 1 >= remaining[partition]:
                        del remaining[partition]
            rows = len(columns["_kafka_offset"])
            if not rows:
                continue
            data = pa.Table.from_pydict(columns, schema=schema)
            note = {"peer": {"app_id": app_id, "batch": batch_no, "next_offsets": next_offsets}}
            write_deltalake(args.table, data, mode="append", commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id, batch_no)], custom_metadata={"userMetadata": json.dumps(note)},
                max_commit_retries=100))
            batches.append({"start": started, "seconds": time.time() - started, "rows": rows})
            batch_no += 1
    finally:
        consumer.close()
    return {"worker": index, "batches": batches}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--schema", required=True, help="the topic's Avro schema (.avsc)")
    parser.add_argument("--table", required=True)
    parser.add_argument("--max-offsets", type=int, default=500_000, help="records per batch (one Delta commit)")
    parser.add_argument("--workers", type=int, default=1, help="processes, each on its share of the partitions")
    args = parser.parse_args()

    from deltalake import DeltaTable

    with open(args.schema) as f:
        schema = table_schema(json.load(f))
    DeltaTable.create(args.table, schema=schema, mode="ignore")
    started = time.time()
    if args.workers == 1:
        results = [worker(0, 1, args)]
    else:
        with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
            results = pool.starmap(worker, [(i, args.workers, args) for i in range(args.workers)])
    batches = [b for r in results for b in r["batches"]]
    first = min((b["start"] for b in batches), default=started)
    last = max((b["start"] + b["seconds"] for b in batches), default=started)
    print("BENCH_RESULT " + json.dumps({"processing_s": last - first, "batches": [
        {**b, "start": b["start"] - started} for b in sorted(batches, key=lambda b: b["start"])]}), flush=True)


if __name__ == "__main__":
    main()
